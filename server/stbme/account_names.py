"""How a SillyTavern account (ST's user handle) is named on disk: one directory under <data dir>/accounts/
per account. Light on purpose: the CLI checks an account's directory without loading the server."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .errors import BadRequest

ACCOUNTS_DIR = "accounts"
# The request header the ST server plugin (and `stbme --account`) names the account in, percent-encoded.
ACCOUNT_HEADER = "X-STBME-Account"
# ST's account when accounts are off, and its first (admin) account when they are on: the memory that
# existed before accounts were separated stays its own.
DEFAULT_ACCOUNT = "default-user"
MAX_ACCOUNT_CHARS = 200


def account_dir_name(handle: str) -> str:
    """A directory name no handle can turn into a path: a readable ASCII slug (ST's handles are already
    lower-case letters, digits and dashes) plus a hash of the exact handle, so two handles never share
    a directory and `..`, `/`, NUL or a 10,000-character name stay one harmless name."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", handle.lower()).strip("-")[:40] or "account"
    return f"{slug}-{hashlib.sha256(handle.encode('utf-8', 'surrogatepass')).hexdigest()[:20]}"


def check_account(handle: str, field: str = "X-STBME-Account") -> str:
    if not handle or len(handle) > MAX_ACCOUNT_CHARS or any(ord(c) < 32 or c == "\x7f" for c in handle):
        raise BadRequest(f"the SillyTavern account name must be 1-{MAX_ACCOUNT_CHARS} printable characters",
                         field=field)
    return handle


def account_dirs(data_dir: Path) -> list[Path]:
    """The accounts' directories that exist in a data directory."""
    root = Path(data_dir) / ACCOUNTS_DIR
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
