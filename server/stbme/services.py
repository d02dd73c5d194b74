"""The composition root: opens a data directory and builds every service once (store, settings, embeddings,
indexes, memory LLM, live channel, use cases, job worker, schedulers), handing each part only what it
needs. The HTTP layer (api/) and the CLI (cli/) hold one Services and call its use cases."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, Callable

from . import config
from .authority import AuthorityService
from .authority.jobs import KIND_PREFIX as AUTHORITY_JOBS, LANE_SLOTS as AUTHORITY_SLOTS
from .data_dir import DATABASE, tighten
from .dna.hub_client import HubClient
from .embed import Embedder, EmbeddingService
from .embed.factory import make_embedder
from .index import ChatIndexes
from .live import LiveHub
from .llm.relay import RelayChannel
from .store import Store
from .store.jobs import JobKind
from .usecases.chats import Chats
from .usecases.dna import DnaMemory
from .usecases.dna_assets import DnaAssets
from .usecases.embedding import Embedding
from .usecases.health import Health
from .usecases.housekeeping import Housekeeping
from .usecases.memories import Memories
from .usecases.memory_llm import MemoryLLM
from .usecases.processing import ChatProcessor
from .usecases.progress import ProgressTracker
from .usecases.recall import Recall
from .usecases.scheduler import DnaScheduler
from .usecases.settings import SettingsService, open_settings
from .usecases.sync import ChatSync
from .usecases.transfer import Transfer
from .usecases.worker import CHAT_LANE, JobWorker, Lane



class Services:
    """Everything one data directory runs on. `open()` builds it; `start()` starts the background tasks
    (the server does; a CLI command starts only the job worker, and only to process what it brings in);
    `close()` stops them and closes the store."""

    def __init__(self, data_dir: Path, store: Store, settings: config.Settings, embedder: Embedder, *,
                 clock: Callable[[], float] = time.time, for_command: bool = False):
        self.data_dir = Path(data_dir)
        # Opened for one CLI command (cli/local.py): no background work but the job worker it asks for, and
        # a recall waits for the chat's vector index (a person asked, not a generation on a deadline).
        self.for_command = for_command
        self.store = store
        self.settings = settings
        self.live = LiveHub()
        self.relay = RelayChannel()
        self.embeddings = EmbeddingService(store, embedder)
        # An HTTP embedder learns its dimension from its first answer (0 until then).
        self.indexes = ChatIndexes(store, self.data_dir / "indexes", embedder.id, embedder.dim,
                                   m=settings["index.m"], ef_construction=settings["index.ef_construction"],
                                   ef_search=settings["index.ef_search"])
        # Authority jobs have their own lane, round robin between extensions: chat processing never waits
        # behind them (issue 20).
        self.worker = JobWorker(store, self.live, lanes=(
            CHAT_LANE, Lane("authority", prefix=AUTHORITY_JOBS, slots=AUTHORITY_SLOTS, fair=True)))
        self.memory_llm = MemoryLLM(settings, self.relay)
        self.settings_service = SettingsService(store, settings)
        self.embedding = Embedding(store, settings, self.embeddings, self.indexes, self.live)
        self.progress = ProgressTracker(store, self.live, lambda: self.embeddings.id)
        self.processor = ChatProcessor(store, settings, self.embedding, self.memory_llm, self.live, self.worker.wake,
                                       self.progress)
        self.sync = ChatSync(store, settings, self.indexes, self.live, self.worker.wake)
        self.chats = Chats(store, settings, self.embeddings, self.indexes, self.worker.wake, self.progress)
        self.memories = Memories(store, self.indexes, self.embedding)
        self.recall = Recall(store, settings, self.embeddings, self.indexes, self.memory_llm,
                             **({"index_wait_s": None} if for_command else {}))
        self.transfer = Transfer(store, settings, self.indexes, self.embedding, self.live, self.worker.wake)
        self.health = Health(store, self.embedding, self.memory_llm, self.live, self.progress)
        self.dna = DnaMemory(store, settings, self.embeddings, self.embedding.index_changes, clock)
        self.dna_assets = DnaAssets(store)
        self.dna_scheduler = DnaScheduler(store, settings, self.dna)
        self.hub = HubClient(store, settings, self.dna.global_stats)
        self.housekeeping = Housekeeping(store, settings, self.indexes, self.embedding, self.processor)
        # The Authority bridge (issue 13): the original ST-BME's storage protocol, its files under
        # <data dir>/authority/, its jobs on this job queue.
        self.authority = AuthorityService(self.data_dir / "authority", store, self.worker.wake)

        self.worker.register(JobKind.PROCESS, lambda job: self.processor.process_chat(job["chat_id"]))
        self.worker.register(JobKind.REINDEX, lambda job: self.embedding.reindex(job["chat_id"]))
        for kind in self.authority.job_kinds:
            self.worker.register(kind, self.authority.run_job)
        self.settings_service.validators.append(self.memory_llm.validate)
        self.settings_service.listeners += [self.embedding.on_settings, self.processor.on_settings]
        self.embedding.on_embedded.append(self.progress.embedded)
        self.relay.on_connect.append(self.processor.resume_parked)
        self.chats.on_delete += [self.recall.forget_chat, settings.forget_chat, self.progress.forget]
        self._tasks: list[asyncio.Task] = []
        self._closed = False

    @classmethod
    def open(cls, data_dir: Path | str, *, embedder: Embedder | None = None,
             cli_settings: dict[str, Any] | None = None, for_command: bool = False) -> "Services":
        """Open the data directory (creating it, private: data_dir.py), load settings, apply `--setting`
        values."""
        data_dir = Path(data_dir).expanduser()
        tighten(data_dir)
        store = Store.open(data_dir / DATABASE)
        try:
            settings = open_settings(store, cli_settings)
            embedder = embedder or make_embedder(settings.__getitem__, data_dir)
        except BaseException:
            store.close()
            raise
        return cls(data_dir, store, settings, embedder, for_command=for_command)

    def setting(self, chat_id: str | None = None) -> Callable[[str], Any]:
        """A chat's effective settings, as a function of the name."""
        return lambda name: self.settings.get(name, chat_id)

    async def chat_settings(self, chat_id: str | None) -> dict[str, Any]:
        """The effective settings (of a chat), secrets masked."""
        return self.settings.all(chat_id)

    async def start_worker(self) -> None:
        """Run the job worker alone (the CLI, while it brings a chat in: no schedulers, no hub). Nobody
        else has the directory open, so jobs a crash left running are resumed."""
        await self.worker.resume_interrupted()
        self._tasks.append(asyncio.create_task(self.worker.run(), name="stbme-worker"))

    async def start(self) -> None:
        """Resume interrupted jobs; start the worker, housekeeping, warm-up, DNA scheduler and hub heartbeat
        (for a command: only install the built-in genes; it starts the worker itself when it needs one)."""
        await self.dna_assets.install_builtins()
        if self.for_command:
            return
        await self.worker.resume_interrupted()
        for name, coro in (("worker", self.worker.run()), ("housekeeping", self.housekeeping.run()),
                           ("warm-up", self.housekeeping.warm_up()), ("dna-scheduler", self.dna_scheduler.run()),
                           ("hub-heartbeat", self.hub.run()), ("authority-saver", self.authority.run_saver())):
            self._tasks.append(asyncio.create_task(coro, name=f"stbme-{name}"))

    async def close(self) -> None:
        """Stop the background tasks, save the indexes, close clients and the store. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.relay.on_connect.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await self.indexes.save_dirty()
        with contextlib.suppress(Exception):
            await self.hub.close()
        with contextlib.suppress(Exception):
            await self.authority.close()
        await self.embedding.close()
        await self.memory_llm.close()
        self.recall.close()   # the counted injections, queued before the store drains its writes
        self.store.close()
