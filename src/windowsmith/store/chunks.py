"""Retrieval rows kept next to the log: memory items, knowledge chunks and the history index.

A *chunk* belongs to one ``namespace`` (``memory``, ``knowledge``, ``history``) and one ``scope``
(``session:<id>``, ``project:<name>``, ``user:<name>``); a search names the scopes it may read, so
retrieval never crosses sessions or scopes it was not given. Within a (namespace, scope) a chunk has a
unique ``key`` (a content digest, or ``<doc>#<n>``) so indexing the same thing twice adds nothing; the
``doc`` groups the chunks of one source (an artifact sha, a file path) so a source is indexed once.

A chunk tied to a session (``session_id``) is deleted with it. Lexical search is SQLite FTS5 (BM25) on
the embedded store (porter stemming) and an English ``tsvector`` (``ts_rank_cd``) on PostgreSQL; a query is a list of terms, each
matched as a phrase of its word tokens, OR-ed together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import UsageError

NAMESPACES: tuple[str, ...] = ("memory", "knowledge", "history")
_SCOPE_RE = re.compile(r"^(session|project|user):[^\x00-\x1f]{1,200}$")
#: word tokens of a term, as both engines split text (letters and digits; ``_``, ``.``, ``/`` separate)
WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class NewChunk:
    """A chunk to index: its text, where it came from and free metadata (JSON)."""

    key: str
    text: str
    doc: str = ""
    source: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    vector: bytes | None = None  # float32 little-endian, from an embedder (optional)


@dataclass(frozen=True)
class Chunk:
    """A stored chunk, with its lexical score when it came from a search (higher is better)."""

    id: int
    namespace: str
    scope: str
    key: str
    doc: str
    source: str
    text: str
    meta: dict[str, Any]
    created_at: datetime
    used_at: datetime | None
    uses: int
    score: float = 0.0
    vector: bytes | None = None


def check_namespace(namespace: Any) -> str:
    if namespace not in NAMESPACES:
        raise UsageError(f"unknown retrieval namespace {namespace!r}; use one of {', '.join(NAMESPACES)}")
    return str(namespace)


def check_scope(scope: Any) -> str:
    if not isinstance(scope, str) or not _SCOPE_RE.match(scope):
        raise UsageError(
            f"bad retrieval scope {scope!r:.80}: use 'session:<id>', 'project:<name>' or 'user:<name>' "
            "(no control characters, at most 200 after the colon)"
        )
    return scope


def check_scopes(scopes: Any) -> list[str]:
    if isinstance(scopes, str) or not isinstance(scopes, Sequence) or not scopes:
        raise UsageError(f"scopes must be a non-empty list of scope names, got {scopes!r:.80}")
    return [check_scope(s) for s in scopes]


def check_chunks(chunks: Sequence[NewChunk]) -> None:
    for c in chunks:
        if not isinstance(c, NewChunk):
            raise UsageError(f"index NewChunk objects, got {type(c).__name__}")
        if not c.key or "\x00" in c.key or "\x00" in c.text or "\x00" in c.doc or "\x00" in c.source:
            raise UsageError(f"chunk {c.key!r:.60}: a key is required and no field may hold NUL")
        if not c.text.strip():
            raise UsageError(f"chunk {c.key!r:.60} has no text")


def query_terms(terms: Sequence[str], limit: int = 32) -> list[list[str]]:
    """Each term as its word tokens (lower case), empty ones and repeats dropped, at most ``limit``."""
    out: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for t in terms:
        words = [w.lower() for w in WORD_RE.findall(str(t))][:8]
        key = tuple(words)
        if words and key not in seen:
            seen.add(key)
            out.append(words)
        if len(out) >= limit:
            break
    return out


def fts5_query(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: each term a quoted phrase, OR-ed (None when nothing is left)."""
    phrases = ['"' + " ".join(w.replace('"', '""') for w in words) + '"' for words in query_terms(terms)]
    return " OR ".join(phrases) or None


def tsquery(terms: Sequence[str]) -> str | None:
    """A PostgreSQL ``to_tsquery('english', ...)`` expression: phrases (``<->``) OR-ed."""
    parts = []
    for words in query_terms(terms):
        quoted = ["'" + w.replace("'", "''").replace("\\", "\\\\") + "'" for w in words]
        parts.append("(" + " <-> ".join(quoted) + ")")
    return " | ".join(parts) or None


__all__ = ["NAMESPACES", "Chunk", "NewChunk", "check_chunks", "check_namespace", "check_scope", "check_scopes",
           "fts5_query", "query_terms", "tsquery"]
