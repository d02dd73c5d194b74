"""`stbme ingest`: bring SillyTavern chat files in, with a progress bar and the time left."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from ..api.bodies import parse_sync_request
from ..api.requests import check_chat_id
from ..errors import StbmeError
from ..interop.st_chat import StChat, chat_files, read_chat
from ..services import Services
from ..usecases.ingest import follow, push_chat
from ..usecases.progress import format_duration
from .common import create_option, data_dir_option, run
from .remote import RemoteServices

MAX_REQUEST_BYTES = 4 * 1024 * 1024   # text per sync request (the server's body limit is far above)


class StatusBar:
    """A progress bar over the chat's messages, with the sidecar's embedding count and time left."""

    def __init__(self, label: str, total: int):
        self.info = ""
        self.bar = click.progressbar(length=max(total, 1), label=label, file=sys.stderr, show_percent=True,
                                     show_eta=False, item_show_func=lambda _: self.info)
        self.bar.__enter__()
        self.done = 0

    def update(self, status: dict) -> None:
        progress = status["progress"]
        messages, embedding = progress["messages"], progress["embedding"]
        self.info = (f"embedded {embedding['done']}/{embedding['total']}"
                     + (f", {format_duration(progress['eta_s'])}" if progress["working"] else ""))
        steps = max(0, messages["done"] - self.done)
        if steps:
            self.bar.update(steps, current_item=True)
        else:  # the embedding count moved: draw the line again (update draws only when steps are made)
            self.bar.current_item = True
            self.bar.render_progress()
        self.done = max(self.done, messages["done"])

    def close(self) -> None:
        self.bar.__exit__(None, None, None)


def _load(files: list[Path], chat_id: str | None) -> list[StChat]:
    chats, seen = [], {}
    for path in files:
        try:
            chat = read_chat(path, chat_id)
        except OSError as exc:
            raise click.ClickException(f"cannot read {path}: {exc}") from None
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


async def _ingest_one(svc: Services | RemoteServices, chat: StChat, label: str, wait: bool) -> None:
    limits = dict(max_messages=svc.settings["server.max_sync_messages"],
                  max_chars=svc.settings["server.max_message_chars"])

    async def send(chat_id: str, body: dict) -> dict:
        return await svc.sync.sync(chat_id, parse_sync_request(body, **limits))

    started = time.monotonic()
    kind = "group chat" if chat.group else "chat"
    if chat.skipped_lines:
        click.echo(f"{chat.path}: {chat.skipped_lines} lines are not chat messages (SillyTavern skips them "
                   "too)", err=True)
    answer = await push_chat(send, chat, max_messages=limits["max_messages"], max_bytes=MAX_REQUEST_BYTES)
    undone = f"; {answer['rolled_back']} memory changes of edited messages undone" if answer["rolled_back"] else ""
    if not wait:
        click.echo(f"{chat.chat_id}: {len(chat.messages)} messages stored ({kind}){undone}; the sidecar "
                   "processes them", err=True)
        return
    bar = StatusBar(label, len(chat.messages))
    try:
        status = await follow(svc.chats.status, chat.chat_id, bar.update)
    finally:
        bar.close()
    messages = status["progress"]["messages"]
    click.echo(f"{chat.chat_id}: {len(chat.messages)} messages ({kind}){undone}; {messages['done']} processed "
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
    files = chat_files(path)
    if not files:
        raise click.ClickException(f"no .jsonl chat files in {path}")
    if chat_id is not None and len(files) > 1:
        raise click.ClickException("--chat-id names one chat: give a single file")
    chats = _load(files, chat_id)

    async def go(svc: Services | RemoteServices):
        if not no_wait:
            await svc.start_worker()
        for number, chat in enumerate(chats, 1):
            label = chat.chat_id[:40] + (f" ({number}/{len(chats)})" if len(chats) > 1 else "")
            await _ingest_one(svc, chat, label, not no_wait)

    run(data_dir, go, create=create)
