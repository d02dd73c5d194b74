"""What every command shares: the data directory option, running a use case against it, progress bars."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Awaitable, Callable, TypeVar

import click
import orjson

from ..errors import StbmeError
from ..services import Services

T = TypeVar("T")


def default_data_dir() -> Path:
    return Path(click.get_app_dir("stbme"))


data_dir_option = click.option(
    "--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="STBME_DATA_DIR",
    default=default_data_dir, show_default="per-user dir, e.g. ~/.config/stbme",
    help="Where the database and indexes live (env STBME_DATA_DIR).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def run(data_dir: Path, fn: Callable[[Services], Awaitable[T]]) -> T:
    """Open the data directory (without starting its background tasks), run `await fn(services)`, close."""
    async def main():
        services = Services.open(data_dir)
        try:
            await services.dna_assets.install_builtins()
            return await fn(services)
        finally:
            await services.close()

    try:
        return asyncio.run(main())
    except StbmeError as exc:
        raise click.ClickException(exc.message) from None


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
