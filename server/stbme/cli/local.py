"""A command with no server running opens the data directory itself and serves it, for as long as the
command runs, on a loopback port under a one-time token only the command knows. The command then speaks
the same HTTP API to it as to `stbme serve` (cli/client.py): one definition of every command, whichever
way it runs. Imported only on this path: it loads the whole server."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from aiohttp import web

from ..api import create_app
from ..services import Services
from .client import Sidecar

MAX_IMPORT_BYTES = 4 * 1024**3   # the command's own files: any size an import can hold


# A stored setting set aside is logged when the directory opens; a command prints it itself from the API's
# answer (`degraded`), once, as a warning line.
SETTINGS_LOG = logging.getLogger("stbme.settings")


class PrivateSidecar:
    """The data directory opened here (Services.open for a command: no background work but the job worker
    when asked for, a recall that waits for the vector index), served until close()."""

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir).expanduser()
        self.services: Services | None = None
        self.runner: web.AppRunner | None = None
        self._log_level = SETTINGS_LOG.level

    async def start(self) -> Sidecar:
        SETTINGS_LOG.setLevel(logging.ERROR)
        self.services = Services.open(self.data_dir, for_command=True)
        token = secrets.token_urlsafe(32)
        try:
            app = create_app(services=self.services, token=token, max_body_bytes=MAX_IMPORT_BYTES)
            self.runner = web.AppRunner(app, handle_signals=False, access_log=None)
            await self.runner.setup()   # the app's lifecycle starts the services (closes them on cleanup)
            await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        except BaseException:
            await self.close()
            raise
        port = self.runner.addresses[0][1]
        return Sidecar(f"http://127.0.0.1:{port}", token, f"the sidecar opened on {self.data_dir}")

    async def start_worker(self) -> None:
        """Process the jobs the command queues (nobody else has the directory open)."""
        await self.services.start_worker()

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        if self.services is not None:
            await self.services.close()   # idempotent: the app's cleanup closed it already
            self.services = None
        SETTINGS_LOG.setLevel(self._log_level)
