"""Long-term memory: items with a scope, provenance and use times, found again by relevance.

An item is a chunk in the ``memory`` namespace of the store. Its **scope** says who may read it:
``session`` (this session only), ``project`` (every session of the engine's project) or ``user``
(every session of the engine's user); a session reads exactly its own three scopes, nothing else.
Its **provenance** (meta) says where it came from: ``source`` (``user``, ``assistant``, ``tool``,
``lesson``), the session and log seq, and ``trusted`` (False for tool output: it is data an attacker
may have written, and is marked so when it is shown).

``add`` redacts the text, then dedupes: an item whose words overlap an existing item of the same scope
by ``merge_at`` (Jaccard) or more is merged into it (the longer text is kept, the sources and the count
are accumulated). Ranking multiplies relevance by a **decay** factor ``0.5 ** (days since last use /
half_life_days)``; ``prune`` deletes items unused for ``stale_days``.
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .errors import UsageError
from .ingest.redact import redact
from .retrieval.fusion import jaccard, token_set
from .retrieval.search import Embedder, Hit, Retriever, with_vectors
from .retrieval.terms import query_terms
from .store import Store
from .store.chunks import Chunk, NewChunk
from .store.chunks_sql import chunk_by_key

SCOPES: tuple[str, ...] = ("session", "project", "user")
SOURCES: tuple[str, ...] = ("user", "assistant", "tool", "lesson")
MAX_MEMORY_CHARS = 2000


@dataclass(frozen=True)
class MemoryConfig:
    """Who this engine's sessions share memory with: ``project`` and ``user`` names (None: that scope is
    off). ``half_life_days``: decay of unused items in ranking; ``merge_at``: near-duplicate threshold."""

    project: str | None = None
    user: str | None = None
    half_life_days: float = 30.0
    merge_at: float = 0.8
    redact: bool = True
    #: retrieval (see ``Retriever.search``): the relevance floor (distinct query terms an item must hold,
    #: or one identifier), the score share lent to the items added next to a hit, the weight of the vector
    #: ranking against the lexical one (0: vectors are stored but not searched; on the shipped dev sets the
    #: offline WordLlama embedder lowered recall at every weight tried), and the word overlap at which a
    #: near-duplicate hit is dropped
    floor: int = 3
    neighbours: float = 0.5
    dense_weight: float = 0.0
    dedupe_at: float = 0.9


@dataclass(frozen=True)
class MemoryItem:
    id: int
    scope: str
    text: str
    source: str
    trusted: bool
    provenance: dict[str, Any]
    created_at: datetime
    used_at: datetime | None
    uses: int
    score: float = 0.0
    why: str = ""

    @classmethod
    def of(cls, c: Chunk, score: float = 0.0, why: str = "") -> MemoryItem:
        m = c.meta
        return cls(c.id, c.scope, c.text, str(m.get("source", "")), bool(m.get("trusted", True)), dict(m),
                   c.created_at, c.used_at, c.uses, score, why)


def _key(text: str) -> str:
    return hashlib.sha256(" ".join(text.lower().split()).encode()).hexdigest()


class Memory:
    """The memory one session may read and write (its session scope, and the engine's project and user)."""

    def __init__(self, store: Store, session_id: str | None, config: MemoryConfig | None = None, *,
                 embedder: Embedder | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.session_id = session_id
        self.config = config or MemoryConfig()
        self.retriever = Retriever(store, embedder)

    def scope(self, name: str) -> str:
        cfg = self.config
        if name == "session":
            if self.session_id is None:
                raise UsageError("session-scoped memory needs a session: use session.remember(...)")
            return f"session:{self.session_id}"
        if name == "project":
            if not cfg.project:
                raise UsageError("project memory is off: pass Engine(memory=MemoryConfig(project='name'))")
            return f"project:{cfg.project}"
        if name == "user":
            if not cfg.user:
                raise UsageError("user memory is off: pass Engine(memory=MemoryConfig(user='name'))")
            return f"user:{cfg.user}"
        raise UsageError(f"unknown memory scope {name!r}; use one of {', '.join(SCOPES)}")

    @property
    def scopes(self) -> list[str]:
        """Every scope this memory reads."""
        cfg = self.config
        out = [f"session:{self.session_id}"] if self.session_id is not None else []
        if cfg.project:
            out.append(f"project:{cfg.project}")
        if cfg.user:
            out.append(f"user:{cfg.user}")
        return out

    def add(self, text: str, *, scope: str = "session", source: str = "user", seq: int | None = None,
            meta: dict[str, Any] | None = None, once: str | None = None, subject: str | None = None,
            expires_days: float | None = None) -> MemoryItem | None:
        """Remember ``text``; a near-duplicate of an item in the same scope is merged into it. ``once``: a
        name for this write (e.g. the lesson's log seq); a second write with the same name adds nothing
        and returns None. ``subject``: what the item is about ("refund confirmation"); a newer item on the
        same subject in the same scope supersedes the older ones (kept, listed with ``history=True``, never
        returned by a search again). ``expires_days``: the item is not returned after that many days and
        ``prune`` deletes it."""
        if subject is not None and (not isinstance(subject, str) or not subject.strip()):
            raise UsageError("a memory subject is a non-empty string, e.g. subject='refund confirmation'")
        if expires_days is not None and not (isinstance(expires_days, int | float) and expires_days > 0):
            raise UsageError(f"expires_days must be a positive number of days, got {expires_days!r:.40}")
        extra = dict(meta or {})
        if subject is not None:
            extra["subject"] = " ".join(subject.lower().split())
        if expires_days is not None:
            extra["expires"] = (datetime.now(UTC) + timedelta(days=float(expires_days))).isoformat()
        item = self._add(text, scope, source, seq, extra, once)
        if item is not None and subject is not None:
            self._supersede(item)
        return item

    def _supersede(self, item: MemoryItem) -> None:
        """Mark the older items of ``item``'s scope on its subject as superseded by it."""
        subject = item.provenance.get("subject")
        for c in self.store.list_chunks("memory", [item.scope]):
            if c.id != item.id and c.meta.get("subject") == subject and "superseded_by" not in c.meta:
                self.store.update_chunk("memory", c.scope, c.id, text=c.text, meta={**c.meta, "superseded_by": item.id})

    def _add(self, text: str, scope: str, source: str, seq: int | None, meta: dict[str, Any],
             once: str | None) -> MemoryItem | None:
        if not isinstance(text, str) or not text.strip():
            raise UsageError("memory text must be a non-empty string")
        if source not in SOURCES:
            raise UsageError(f"unknown memory source {source!r}; use one of {', '.join(SOURCES)}")
        sc = self.scope(scope)
        if once is not None and once in self.store.indexed_docs("memory", sc):
            return None
        text = text.strip()
        if self.config.redact:
            text = redact(text).text
        if len(text) > MAX_MEMORY_CHARS:
            raise UsageError(f"a memory item holds at most {MAX_MEMORY_CHARS:,} characters, got {len(text):,}; "
                             "store long text as knowledge (engine.knowledge.add)")
        prov: dict[str, Any] = {"source": source, "trusted": source in ("user", "assistant"), "session": self.session_id,
                                "seq": seq, "count": 1, **meta}
        near = self._near_duplicate(sc, text)
        if near is not None and once is not None:
            return None  # a named write (a lesson) already said elsewhere: nothing to add
        if near is not None:
            m = dict(near.meta)
            m["count"] = int(m.get("count", 1)) + 1
            srcs = list(m.get("sources", [m.get("source", "")]))
            if source not in srcs:
                srcs.append(source)
            m["sources"] = srcs
            m["trusted"] = bool(m.get("trusted", True)) and source in ("user", "assistant")
            m.update({k: v for k, v in meta.items() if k in ("subject", "expires")})
            m.pop("superseded_by", None)
            keep = text if len(text) > len(near.text) else near.text
            self.store.update_chunk("memory", sc, near.id, text=keep, meta=m)
            return MemoryItem.of(Chunk(near.id, "memory", sc, near.key, near.doc, near.source, keep, m,
                                       near.created_at, near.used_at, near.uses))
        sid = self.session_id if scope == "session" else None
        key = _key(text)
        new = NewChunk(key=key, text=text, doc=once or "memory", source=f"memory:{source}", meta=prov)
        self.store.add_chunks("memory", sc, with_vectors([new], self.embedder), session_id=sid)
        got = chunk_by_key(self.store, "memory", sc, key)
        if got is None:  # pragma: no cover - deleted between the two statements by another writer
            raise UsageError(f"memory item {text[:60]!r} was deleted while it was added; add it again")
        return MemoryItem.of(got)

    def _near_duplicate(self, scope: str, text: str) -> Chunk | None:
        words = token_set(text)
        # a near-duplicate holds most of the text's words: its longest terms find it (few, rare: a fast search)
        terms = sorted(query_terms(text, limit=16), key=lambda t: (-len(t), t))[:6]
        best: tuple[float, Chunk] | None = None
        for c in self.store.search_chunks("memory", [scope], terms, limit=8) if terms else []:
            sim = jaccard(words, token_set(c.text))
            if sim >= self.config.merge_at and (best is None or sim > best[0]):
                best = (sim, c)
        return best[1] if best else None

    def list(self, scope: str | None = None, *, history: bool = False, now: datetime | None = None) -> builtins.list[MemoryItem]:
        """The items of one scope (default: every scope this memory reads), oldest first; superseded and
        expired items only with ``history=True``."""
        scopes = [self.scope(scope)] if scope else self.scopes
        chunks = self.store.list_chunks("memory", scopes) if scopes else []
        now = now or datetime.now(UTC)
        return [MemoryItem.of(c) for c in chunks if history or live(c.meta, now)]

    def search(self, query: str | Sequence[str], *, limit: int = 8, now: datetime | None = None) -> builtins.list[MemoryItem]:
        """Items relevant to ``query`` (text, or a list of texts for multi-query), decayed by disuse."""
        texts = [query] if isinstance(query, str) else list(query)
        scopes = self.scopes
        if not scopes or not self.store.has_chunks("memory", scopes):  # (no terms to find when there is nothing)
            return []
        queries = [q for q in (query_terms(t) for t in texts) if q]
        if not queries:
            return []
        cfg = self.config
        hits = self.retriever.search("memory", self.scopes, queries, limit=limit * 2, texts=texts, floor=cfg.floor,
                                     neighbours=cfg.neighbours, dense_weight=cfg.dense_weight, dedupe_at=cfg.dedupe_at)
        now = now or datetime.now(UTC)
        out = [MemoryItem.of(h.chunk, h.score * self.decay(h.chunk, now), _why(h)) for h in hits if live(h.chunk.meta, now)]
        out.sort(key=lambda m: (-m.score, m.id))
        return out[:limit]

    def decay(self, c: Chunk, now: datetime) -> float:
        last = c.used_at or c.created_at
        if last.tzinfo is None:
            last = last.replace(tzinfo=UTC)
        days = max(0.0, (now - last).total_seconds() / 86400)
        return float(0.5 ** (days / self.config.half_life_days))

    def touch(self, ids: Sequence[int]) -> None:
        self.store.touch_chunks(ids)

    def forget(self, item_id: int) -> bool:
        """Delete one item (only from the scopes this memory reads)."""
        return self.store.delete_chunks("memory", self.scopes, [int(item_id)]) > 0 if self.scopes else False

    def get(self, item_id: int) -> MemoryItem | None:
        """One item of the scopes this memory reads (superseded and expired ones too), or None."""
        got = [c for c in self.store.list_chunks("memory", self.scopes) if c.id == int(item_id)] if self.scopes else []
        return MemoryItem.of(got[0]) if got else None

    def replace(self, item_id: int, text: str, *, meta: dict[str, Any] | None = None) -> MemoryItem | None:
        """Replace an item's text (redacted; its provenance gains ``edited`` and ``meta``); None when this
        memory does not read it."""
        if not isinstance(text, str) or not text.strip():
            raise UsageError("memory text must be a non-empty string")
        item = self.get(item_id)
        if item is None:
            return None
        text = redact(text.strip()).text if self.config.redact else text.strip()
        if len(text) > MAX_MEMORY_CHARS:
            raise UsageError(f"a memory item holds at most {MAX_MEMORY_CHARS:,} characters, got {len(text):,}")
        prov = {**item.provenance, **(meta or {}), "edited": datetime.now(UTC).isoformat()}
        self.store.update_chunk("memory", item.scope, item.id, text=text, meta=prov)
        return self.get(item_id)

    def promote(self, item_id: int, scope: str = "project") -> MemoryItem | None:
        """Move an item to a wider ``scope`` (project or user), keeping its provenance (``promoted_from``
        names the scope it left); None when this memory does not read it."""
        target = self.scope(scope)
        c = self.get(item_id)
        if c is None or c.scope == target:
            return c
        m = dict(c.provenance)
        item = self._add(c.text, scope, str(m.pop("source", "user")), m.pop("seq", None),
                         {**m, "promoted_from": c.scope}, None)
        self.store.delete_chunks("memory", [c.scope], [c.id])
        return item

    def prune(self, *, stale_days: float = 90.0, now: datetime | None = None) -> int:
        """Delete items not used (or created) for ``stale_days``, and expired ones; returns how many went."""
        now = now or datetime.now(UTC)
        stale = [m.id for m in self.list(history=True, now=now)
                 if (now - _aware(m.used_at or m.created_at)).total_seconds() > stale_days * 86400
                 or _expired(m.provenance, now)]
        return self.store.delete_chunks("memory", self.scopes, stale) if stale else 0


def _expired(meta: dict[str, Any], now: datetime) -> bool:
    exp = meta.get("expires")
    return bool(exp) and _aware(datetime.fromisoformat(str(exp))) <= now


def live(meta: dict[str, Any], now: datetime) -> bool:
    """Whether an item with this provenance may be returned: not superseded, not expired."""
    return "superseded_by" not in meta and not _expired(meta, now)


def _aware(d: datetime) -> datetime:
    return d if d.tzinfo is not None else d.replace(tzinfo=UTC)


def _why(h: Hit) -> str:
    if h.matched:
        return "matched " + ", ".join(h.matched[:6])
    return "next to a matching item" if "neighbour" in h.via else "related"


__all__ = ["SCOPES", "SOURCES", "Memory", "MemoryConfig", "MemoryItem"]
