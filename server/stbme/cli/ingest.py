"""`stbme ingest`: bring SillyTavern chat files in, with a progress bar and the time left."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from typing import TYPE_CHECKING

from ..errors import StbmeError
from ..wire_limits import check_chat_id
from .client import Sidecar, chat_path
from .common import create_option, data_dir_option, run

if TYPE_CHECKING:
    from ..interop.st_chat import StChat

MAX_REQUEST_BYTES = 4 * 1024 * 1024   # text per sync request (the server's body limit is far above)
NOTES_SHOWN = 10


class StatusBar:
    """A progress bar over the whole work, messages processed and memories embedded (most of the time goes
    to the vectors), with both counts and the sidecar's time left."""

    def __init__(self, label: str, total: int):
        self.info = ""
        self.bar = click.progressbar(length=max(total, 1), label=label, file=sys.stderr, show_percent=True,
                                     show_eta=False, item_show_func=lambda _: self.info)
        self.bar.__enter__()
        self.done = 0

    def update(self, status: dict) -> None:
        from ..usecases.progress import format_duration  # noqa: PLC0415

        progress = status["progress"]
        messages, embedding = progress["messages"], progress["embedding"]
        # The memories still to come: as many per message as so far.
        per_message = embedding["total"] / messages["done"] if messages["done"] else 1.0
        vectors = max(embedding["total"], round(per_message * messages["total"]))
        self.info = (f"{messages['done']}/{messages['total']} messages, embedded {embedding['done']}/{embedding['total']}"
                     + (f", {format_duration(progress['eta_s'])}" if progress["working"] else ""))
        done = messages["done"] + embedding["done"]
        self.bar.length = max(messages["total"] + vectors, done, 1)
        self.bar.current_item = True
        if done > self.done:
            self.bar.update(done - self.done)
        else:  # the line changed (the counts, the time left) but not the total: draw it again
            self.bar.render_progress()
        self.done = max(self.done, done)

    def close(self) -> None:
        self.bar.__exit__(None, None, None)


def _load(files: list[Path], chat_id: str | None, *, one_file: bool) -> list[StChat]:
    from ..interop.st_chat import read_chat  # noqa: PLC0415

    chats, seen = [], {}
    for path in files:
        try:
            chat = read_chat(path, chat_id)
        except OSError as exc:
            raise click.ClickException(f"cannot read {path}: {exc}") from None
        if not chat.looks_like_chat:
            why = (f"{path} is not a SillyTavern chat file: none of its lines is a message (a JSON object with "
                   "'mes') or a chat header")
            if one_file:
                raise click.ClickException(f"{why}; nothing was ingested")
            click.echo(f"skipping {why}", err=True)
            continue
        if chat.chat_id in seen:
            click.echo(f"skipping {path}: {seen[chat.chat_id]} has the same name, so SillyTavern gives both the "
                       f"chat id {chat.chat_id!r}; ingest it alone with --chat-id", err=True)
            continue
        try:
            check_chat_id(chat.chat_id)
        except StbmeError as exc:
            raise click.ClickException(f"{path}: {exc.message}") from None
        seen[chat.chat_id] = path
        chats.append(chat)
    return chats


async def _ingest_one(api: Sidecar, chat: StChat, label: str, wait: bool, limits: dict) -> None:
    from ..interop.st_chat import fit_to_limits  # noqa: PLC0415
    from ..usecases.ingest import follow, push_chat  # noqa: PLC0415

    started = time.monotonic()
    kind = "group chat" if chat.group else "chat"
    if chat.skipped_lines:
        click.echo(f"{chat.path}: {chat.skipped_lines} lines are not chat messages (SillyTavern skips them "
                   "too)", err=True)
    notes = fit_to_limits(chat.messages, limits["server.max_message_chars"])
    for note in notes[:NOTES_SHOWN]:
        click.echo(f"{chat.chat_id}: {note}", err=True)
    if len(notes) > NOTES_SHOWN:
        click.echo(f"{chat.chat_id}: … and {len(notes) - NOTES_SHOWN} more messages like these", err=True)

    async def send(chat_id: str, body: dict) -> dict:
        path = chat_path(chat_id, "/sync")
        answer = await api.post(path, body)
        if not isinstance(answer, dict) or answer.get("status") not in ("synced", "need_more"):
            raise api.unexpected(f"POST {path}", f"no sync status in {str(answer)[:100]!r}")
        return answer

    answer = await push_chat(send, chat, max_messages=limits["server.max_sync_messages"], max_bytes=MAX_REQUEST_BYTES)
    try:
        # The file is the whole chat: its last messages are processed too, without waiting for a reply.
        await api.post(chat_path(chat.chat_id, "/process"))
    except StbmeError as exc:
        if exc.status != 409:  # 409: memory extraction is off for this chat
            raise
    undone = f"; {answer['rolled_back']} memory changes of edited messages undone" if answer["rolled_back"] else ""
    changed = f"; {len(notes)} messages adjusted to the sidecar's limits" if notes else ""
    if not wait:
        click.echo(f"{chat.chat_id}: {len(chat.messages)} messages stored ({kind}){undone}{changed}; the sidecar "
                   "processes them", err=True)
        return
    bar = StatusBar(label, len(chat.messages))
    try:
        status = await follow(lambda chat_id: api.get(chat_path(chat_id, "/status")), chat.chat_id, bar.update)
    finally:
        bar.close()
    messages = status["progress"]["messages"]
    click.echo(f"{chat.chat_id}: {len(chat.messages)} messages ({kind}){undone}{changed}; {messages['done']} processed "
               f"({messages['percent']:g}%), {status['nodes']} memories, "
               f"{status['progress']['embedding']['done']} embedded, in {time.monotonic() - started:.1f} s", err=True)


@click.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--chat-id", default=None,
              help="Store a single file under this chat id (default: the file name without .jsonl, which is "
                   "the id SillyTavern gives the chat).")
@click.option("--no-wait", is_flag=True,
              help="Store the messages and return; the server (or the next `stbme serve`) processes them.")
@data_dir_option
@create_option
def ingest(path, chat_id, no_wait, data_dir, create):
    """Bring SillyTavern chat files in: a .jsonl chat (single or group) or a folder of them.

    \b
    SillyTavern keeps them in data/<user>/chats/<character>/ and data/<user>/group chats/.
    The messages are stored exactly as the extension would sync them, so opening the chat in
    SillyTavern later finds its memories and redoes nothing. With a running server the work
    goes through it.
    """
    from ..interop.st_chat import chat_files  # noqa: PLC0415 - `stbme --help` needs none of it

    files = chat_files(path)
    if not files:
        raise click.ClickException(f"no .jsonl chat files in {path}")
    if chat_id is not None and len(files) > 1:
        raise click.ClickException("--chat-id names one chat: give a single file")
    chats = _load(files, chat_id, one_file=not path.is_dir())
    if not chats:
        raise click.ClickException(f"no SillyTavern chats in {path}; nothing was ingested")

    async def go(api: Sidecar):
        limits = await api.get("/v1/settings", want="settings")
        for number, chat in enumerate(chats, 1):
            label = chat.chat_id[:40] + (f" ({number}/{len(chats)})" if len(chats) > 1 else "")
            await _ingest_one(api, chat, label, not no_wait, limits)

    run(data_dir, go, create=create, worker=not no_wait)
