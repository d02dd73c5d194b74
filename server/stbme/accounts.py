"""One memory per SillyTavern account (ST's multi-user mode, `enableUserAccounts`). The ST server plugin
names the account of each request (`req.user.profile.handle`); each account other than ST's own
`default-user` gets its own data directory under <data dir>/accounts/ (its own database, indexes, settings,
Authority files, job worker), opened on its first request and closed with the server. They share the one
embedding model of the default namespace, whose embedding and server settings they follow.
docs/security.md says who may name an account and what the direct route does."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from . import config
from .account_names import ACCOUNTS_DIR, DEFAULT_ACCOUNT, account_dir_name, account_dirs, check_account
from .data_dir import private_dir
from .embed.shared import SharedEmbedder
from .errors import BadRequest, Forbidden, Unavailable
from .services import Services

log = logging.getLogger("stbme")

# Machine-wide settings: the shared model and the one HTTP server read the default namespace's values.
OPERATOR_PREFIXES = ("embed.", "server.")


class AccountSpaces:
    """The accounts' Services beside the default one (`root`), opened lazily, closed by `close()`."""

    def __init__(self, root: Services, cli_settings: dict[str, Any] | None = None):
        self.root = root
        self.cli_settings = dict(cli_settings or {})
        self.dir = root.data_dir / ACCOUNTS_DIR
        self._open: dict[str, Services] = {}
        self._lock = asyncio.Lock()
        self._closed = False
        # Accounts that used the sidecar before (on disk) mean ST runs with accounts: the direct route
        # is refused from then on (api/accounts.py).
        self._seen = bool(account_dirs(root.data_dir))

    @property
    def in_use(self) -> bool:
        """Whether ST has (had) accounts other than its default one on this sidecar."""
        return self._seen

    async def get(self, handle: str) -> Services:
        """The account's Services (the default namespace for ST's default account)."""
        handle = check_account(handle)
        if handle == DEFAULT_ACCOUNT:
            return self.root
        svc = self._open.get(handle)
        if svc is not None:
            return svc
        async with self._lock:
            if self._closed:
                raise Unavailable("the sidecar is shutting down", field="X-STBME-Account")
            svc = self._open.get(handle)
            if svc is None:
                svc = await self._open_account(handle)
                self._open[handle] = svc
                self._seen = True
        return svc

    async def _open_account(self, handle: str) -> Services:
        path = self.dir / account_dir_name(handle)
        first = not path.exists()
        limit = self.root.settings.get("server.max_accounts")
        if first and len(account_dirs(self.root.data_dir)) >= limit:
            # Each account is a database, indexes and a job worker: a local program that may name
            # accounts must not be able to make the sidecar open them without end.
            raise Forbidden(f"this sidecar already keeps the memories of {limit} SillyTavern accounts "
                            f"(server.max_accounts): raise it, or remove accounts that are gone from "
                            f"{self.dir}", field="X-STBME-Account")
        path = private_dir(self.dir) / path.name
        # A new account starts from the default namespace's settings (its LLM, its recall tuning): what it
        # used while accounts shared one memory. The embedding and server settings stay the default's.
        root_values = self.root.settings.all(reveal=True)
        defaults = config.defaults()
        seed = {k: v for k, v in root_values.items() if v != defaults[k]} if first else {}
        operator = {k: v for k, v in root_values.items() if k.startswith(OPERATOR_PREFIXES)}
        svc = Services.open(path, embedder=SharedEmbedder(self.root.embeddings.embedder),
                            cli_settings={**seed, **operator, **self.cli_settings})
        svc.settings_service.validators.append(_refuse_operator_settings)
        try:
            await svc.start()
        except BaseException:
            await svc.close()
            raise
        log.info("opened the memory of SillyTavern account %r in %s", handle, path)
        return svc

    def opened(self) -> dict[str, Services]:
        return dict(self._open)

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            spaces, self._open = list(self._open.values()), {}
        for svc in spaces:
            await svc.close()


async def _refuse_operator_settings(applied: dict[str, Any], _candidate: Callable[[str], Any]) -> None:
    names = sorted(k for k in applied if k.startswith(OPERATOR_PREFIXES))
    if names:
        raise BadRequest(f"{names[0]} is the same for every SillyTavern account: set it in the default "
                         "namespace (stbme settings, or ST's default account)", field=names[0])
