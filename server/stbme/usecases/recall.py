"""Recall for a chat: the memory block to inject before a generation."""

from __future__ import annotations

import dataclasses

from .. import config
from ..embed import EmbeddingService
from ..index import ChatIndexes
from ..recall.read_path import INDEX_WAIT_S, ChatStates, RecallQuery, recall
from ..recall.reinforce import Reinforcement
from ..recall.rerank import rerank
from ..store import Store
from ..store.queries import chat_row
from .memory_llm import MemoryLLM

EMPTY = {"text": "", "tokens": 0, "memories": [], "took_ms": 0.0, "language": None}


@dataclasses.dataclass
class RecallRequest:
    query: str
    recent: list[dict] = dataclasses.field(default_factory=list)   # [{role, name, text}], newest last
    budget_tokens: int | None = None    # None: recall.budget_tokens
    max_memories: int | None = None     # None: recall.max_memories
    reinforce: bool = True              # False: only look (the CLI's `stbme recall`): nothing stored changes


class Recall:
    def __init__(self, store: Store, settings: config.Settings, embeddings: EmbeddingService, indexes: ChatIndexes,
                 memory_llm: MemoryLLM, *, index_wait_s: float | None = INDEX_WAIT_S):
        self.index_wait_s = index_wait_s   # None: wait for a chat's vector index (a command, not a generation)
        self.store = store
        self.settings = settings
        self.embeddings = embeddings
        self.indexes = indexes
        self.memory_llm = memory_llm
        self._known_chats: set[str] = set()   # chats known to exist: skips a reader round trip per recall
        self.states = ChatStates(store)
        self.reinforcement = Reinforcement(store)

    def forget_chat(self, chat_id: str) -> None:
        self._known_chats.discard(chat_id)
        self.states.forget(chat_id)

    def close(self) -> None:
        """Write the injections counted since the last write."""
        self.reinforcement.close()

    async def recall(self, chat_id: str, req: RecallRequest) -> dict:
        setting = lambda name: self.settings.get(name, chat_id)  # noqa: E731
        budget = setting("recall.budget_tokens") if req.budget_tokens is None else req.budget_tokens
        limit = setting("recall.max_memories") if req.max_memories is None else req.max_memories
        if chat_id not in self._known_chats and await self.store.read(lambda conn: chat_row(conn, chat_id)):
            self._known_chats.add(chat_id)
        if chat_id not in self._known_chats or not setting("recall.enabled"):
            return dict(EMPTY)
        reranker = None
        if setting("recall.rerank") and self.settings["llm.mode"] != "none":
            client = self.memory_llm.client

            async def reranker(result, text, recent_texts):
                return await rerank(client, result, query=text, recent=recent_texts, max_memories=limit,
                                    setting=setting)
        return await recall(store=self.store, embeddings=self.embeddings, indexes=self.indexes, chat_id=chat_id,
                            q=RecallQuery(req.query, req.recent, budget, limit, req.reinforce), settings=setting,
                            reranker=reranker, states=self.states, reinforcement=self.reinforcement,
                            index_wait_s=self.index_wait_s)
