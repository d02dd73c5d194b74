"""Per-chat HNSW indexes (hnswlib): a rebuildable cache of the vectors stored in SQLite."""

from .hnsw import ChatIndex
from .manager import IndexManager

__all__ = ["ChatIndex", "IndexManager"]
