"""What every command shares: the data directory option, reaching the sidecar that serves it (the running
server, or one the command opens for itself), one-line errors, progress bars.

Kept light: `stbme --help`, `--version` and a command that goes through a running server import neither
the server nor its models."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import click

from .. import __version__
from ..wire_limits import check_chat_id
from ..account_names import ACCOUNTS_DIR, DEFAULT_ACCOUNT, account_dir_name, account_dirs, check_account
from ..data_dir import DATABASE
from ..errors import StbmeError
from .client import Sidecar, chat_path
from .owner import Owned, ServerLock, find_owner

T = TypeVar("T")


def default_data_dir() -> Path:
    return Path(click.get_app_dir("stbme"))


data_dir_option = click.option(
    "--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="STBME_DATA_DIR",
    default=default_data_dir, show_default="per-user dir, e.g. ~/.config/stbme",
    help="Where the database and indexes live (env STBME_DATA_DIR).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
create_option = click.option("--create", is_flag=True,
                             help="Start a new data directory if --data-dir holds none (a typo otherwise errs).")


def chat_arg(ctx, param, value):
    """A CHAT_ID argument checked like the API checks it."""
    if value is None:
        return value
    try:
        return check_chat_id(value)
    except StbmeError as exc:
        raise click.BadParameter(exc.message) from None


def token_from_env() -> str | None:
    return os.environ.get("STBME_TOKEN") or None


def owner_of(data_dir: Path) -> ServerLock | None:
    """The running server that owns the data directory, proven, or None (a clear error when it is unusable)."""
    try:
        return find_owner(data_dir)
    except Owned as exc:
        raise click.ClickException(str(exc)) from None


def chosen_account(data_dir: Path, create: bool | None) -> str | None:
    """`stbme --account`: the SillyTavern account whose memory the command reaches (None: the default
    namespace). An account the data directory has no memory for is a typo unless the command may create."""
    ctx = click.get_current_context(silent=True)
    account = (ctx.find_root().obj or {}).get("account") if ctx is not None else None
    if account is None or account == DEFAULT_ACCOUNT:
        return None
    try:
        check_account(account, field="--account")
    except StbmeError as exc:
        raise click.BadParameter(exc.message, param_hint="--account") from None
    accounts = Path(data_dir).expanduser() / ACCOUNTS_DIR
    if not create and not (accounts / account_dir_name(account)).is_dir():
        hint = "add --create to start its memory" if create is not None else "check the name (ST's user handle)"
        raise click.ClickException(f"no memory of SillyTavern account {account!r} in {accounts} "
                                   f"({len(account_dirs(Path(data_dir).expanduser()))} accounts there): {hint}")
    return account


def has_data(data_dir: Path) -> bool:
    return (Path(data_dir).expanduser() / DATABASE).exists()


def run(data_dir: Path, fn: Callable[[Sidecar], Awaitable[T]], *, create: bool | None = None,
        worker: bool = False, show: Callable[[T], Any] | None = None) -> T:
    """Run `await fn(sidecar)` against the sidecar of the data directory: the server that owns it, else
    one opened here for this command (cli/local.py), over the same HTTP API. The directory must hold a
    database unless `create` (None: this command cannot create one). `worker`: the command queues work
    it waits for (without a server, the job worker runs here meanwhile). `show(result)`: prints the
    answer; an answer it cannot read is one line, like any other error."""
    owner = owner_of(data_dir)
    if owner is None and not has_data(data_dir) and not create:
        hint = ("add --create to start a new one there" if create is not None
                else "`stbme serve` (or `stbme ingest --create`) starts one")
        raise click.ClickException(f"no sidecar data in {data_dir} (no {DATABASE}): check --data-dir or "
                                   f"STBME_DATA_DIR, or {hint}")
    account = chosen_account(data_dir, create)

    async def main():
        if owner is not None:
            return await fn(Sidecar(owner.url, token_from_env(), owner.describe(), account=account))
        from .local import PrivateSidecar  # noqa: PLC0415 - the whole server, only when none runs

        local = PrivateSidecar(data_dir)
        try:
            sidecar = await local.start()
            sidecar.account = account
            if worker:
                await local.start_worker()
            return await fn(sidecar)
        finally:
            await local.close()

    import asyncio  # noqa: PLC0415 - `stbme --help` needs none of it

    try:
        result = asyncio.run(main())
        if show is not None:
            show(result)
        return result
    except StbmeError as exc:
        raise click.ClickException(exc.message) from None
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
        if owner is None:
            raise  # our own sidecar answered: a bug to report with its traceback
        # A proven server of another version may answer in other shapes: one line, not a traceback.
        raise click.ClickException(f"{owner.describe()} answered in a shape stbme {__version__} does not read "
                                   f"({type(exc).__name__}: {exc}); is it the same version?") from None


async def require_chat(api: Sidecar, chat_id: str, data_dir: Path) -> dict:
    """The chat's status, or a clear error when the sidecar does not know the chat."""
    try:
        return await api.get(chat_path(chat_id, "/status"))
    except StbmeError as exc:
        if exc.status != 404:
            raise
        raise click.ClickException(f"no chat {chat_id!r} in {data_dir}; `stbme stats` lists the chats") from None


def echo_json(data) -> None:
    import orjson  # noqa: PLC0415

    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def warn_degraded(degraded) -> None:
    """Stored settings the sidecar sets aside (GET /v1/settings `degraded`), one line each on stderr."""
    for item in degraded or []:
        if isinstance(item, dict):
            click.echo(f"warning: setting {item.get('field')}: {item.get('message')}", err=True)


class ProgressBar:
    """A click progress bar on stderr that learns its length from the reports (it may grow)."""

    def __init__(self, label: str):
        self.label = label
        self.bar = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=max(total, 1), label=self.label, file=sys.stderr,
                                         show_percent=True, show_eta=True)
            self.bar.__enter__()
        self.bar.length = max(total, done, 1)
        self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
