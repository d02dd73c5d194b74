"""What every command shares: the data directory option, running a use case against it, progress bars."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Awaitable, Callable, TypeVar

import click
import orjson

from ..errors import StbmeError
from ..services import DATABASE, Services
from .owner import Owned, ServerLock, find_owner
from .remote import RemoteServices

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


def token_from_env() -> str | None:
    return os.environ.get("STBME_TOKEN") or None


def owner_of(data_dir: Path) -> ServerLock | None:
    """The running server that owns the data directory, or None (a clear error when it is unusable)."""
    try:
        return find_owner(data_dir, Path(data_dir).expanduser() / DATABASE, token_from_env())
    except Owned as exc:
        raise click.ClickException(str(exc)) from None


def run(data_dir: Path, fn: Callable[[Services | RemoteServices], Awaitable[T]], *, create: bool | None = None,
        local_only: str | None = None) -> T:
    """Run `await fn(services)` against the data directory: through the server that owns it (its HTTP API),
    else by opening the directory here (without background tasks). The directory must hold a database
    unless `create` (None: this command cannot create one). `local_only`: why this command needs the
    directory to itself, refused while a server owns it."""
    owner = owner_of(data_dir)
    if owner is not None and local_only:
        raise click.ClickException(f"{owner.describe()} owns {data_dir}; {local_only}: stop the server first")
    if owner is None and not (Path(data_dir).expanduser() / DATABASE).exists() and not create:
        hint = ("add --create to start a new one there" if create is not None
                else "`stbme serve` (or `stbme ingest --create`) starts one")
        raise click.ClickException(f"no sidecar data in {data_dir} (no {DATABASE}): check --data-dir or "
                                   f"STBME_DATA_DIR, or {hint}")

    async def main():
        if owner is not None:
            services = RemoteServices(owner, token_from_env())
            await services.open()
        else:
            services = Services.open(data_dir)
            await services.dna_assets.install_builtins()
        try:
            return await fn(services)
        finally:
            await services.close()

    try:
        return asyncio.run(main())
    except StbmeError as exc:
        raise click.ClickException(exc.message) from None


async def require_chat(svc: Services | RemoteServices, chat_id: str, data_dir: Path) -> dict:
    """The chat's status, or a clear error when the sidecar does not know the chat."""
    try:
        return await svc.chats.status(chat_id)
    except StbmeError as exc:
        if exc.status != 404:
            raise
        raise click.ClickException(f"no chat {chat_id!r} in {data_dir}; `stbme stats` lists the chats") from None


def echo_json(data) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


class ProgressBar:
    """A click progress bar on stderr that learns its length from the first report."""

    def __init__(self, label: str):
        self.label = label
        self.bar = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=max(total, 1), label=self.label, file=sys.stderr,
                                         show_percent=True, show_eta=True)
            self.bar.__enter__()
        self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
