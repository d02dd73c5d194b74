"""The `stbme` command line: a click group whose commands call the same use cases as the HTTP API."""

from __future__ import annotations

import click

from .. import __version__
from ..data_dir import set_private_umask
from .commands import export, import_cmd, recall_cmd, reindex, serve, settings, stats
from .dna import dna_group, hub_command
from .ingest import ingest


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stbme")
def main():
    """ST-BME Sidecar: long-term memory for SillyTavern roleplay chats.

    \b
    Quick start:
      stbme serve                      # start the sidecar on http://127.0.0.1:8765
      stbme ingest path/to/chats/      # bring SillyTavern chat files (.jsonl) in
      stbme stats                      # what it remembers
      stbme recall CHAT_ID "question"  # what it would inject for a question

    Then install the SillyTavern extension (st_extension/) and point it at the sidecar.
    """


for command in (serve, ingest, stats, recall_cmd, export, import_cmd, reindex, settings, dna_group, hub_command):
    main.add_command(command)


def entry() -> None:
    """The `stbme` program: what it writes is its owner's alone (data_dir.py), then the command line."""
    set_private_umask()
    main(prog_name="stbme")
