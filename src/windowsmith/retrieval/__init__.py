"""Retrieval: lexical search in the store (SQLite FTS5 / PostgreSQL tsvector), optional vectors, RRF
fusion and MMR; the history index behind recall."""

from .embedders import OpenAIEmbedder, WordLlamaEmbedder
from .fusion import mmr, rrf
from .history import HistoryIndex, chunk_lines, history_docs
from .search import Embedder, Hit, Retriever
from .terms import identifiers, query_terms

__all__ = ["Embedder", "HistoryIndex", "Hit", "OpenAIEmbedder", "Retriever", "WordLlamaEmbedder", "chunk_lines", "history_docs", "identifiers", "mmr",
           "query_terms", "rrf"]
