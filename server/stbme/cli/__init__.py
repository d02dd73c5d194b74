"""The `stbme` command line: a click group whose commands speak the sidecar's HTTP API, to a running server
or to one they open for themselves (cli/common.py). A command's module is imported when it runs (or when
the help lists it), so `stbme --version` loads click and little else."""

from __future__ import annotations

import importlib

import click

from .. import __version__
from ..data_dir import set_private_umask

# command name -> (module in this package, attribute)
COMMANDS = {
    "dna": ("dna", "dna_group"), "export": ("commands", "export"), "hub": ("dna", "hub_command"),
    "import": ("commands", "import_cmd"), "ingest": ("ingest", "ingest"), "recall": ("commands", "recall_cmd"),
    "reindex": ("commands", "reindex"), "serve": ("commands", "serve"), "settings": ("commands", "settings"),
    "stats": ("commands", "stats"),
}


class LazyGroup(click.Group):
    """A group that imports a command's module only when the command is asked for (click's own pattern for
    lazily loaded subcommands)."""

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context | None, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stbme")
@click.option("--account", metavar="HANDLE", envvar="STBME_ACCOUNT",
              help="The SillyTavern account (ST's user handle, multi-user mode) whose memory a command reads "
                   "and writes (env STBME_ACCOUNT); default: ST's default-user.")
@click.pass_context
def main(ctx: click.Context, account: str | None):
    """ST-BME Sidecar: long-term memory for SillyTavern roleplay chats.

    \b
    Quick start:
      stbme serve                      # start the sidecar on http://127.0.0.1:8765
      stbme ingest path/to/chats/      # bring SillyTavern chat files (.jsonl) in
      stbme stats                      # what it remembers
      stbme recall CHAT_ID "question"  # what it would inject for a question

    Then install the SillyTavern extension (st_extension/) and point it at the sidecar.
    """
    ctx.obj = {"account": account}


def entry() -> None:
    """The `stbme` program: what it writes is its owner's alone (data_dir.py), then the command line."""
    set_private_umask()
    main(prog_name="stbme")
