"""Hybrid search over the store's chunks: lexical (FTS5 / tsvector) per query, optional vectors, fused
with RRF and diversified with MMR.

``Retriever(store, embedder=None).search(namespace, scopes, queries)``: each query is a list of terms
(see :mod:`.terms`); several queries (multi-query) are each run and fused. With an embedder, the query
texts are embedded and compared with the vectors stored on the chunks of the same scopes (brute force,
numpy when installed), and that ranking is fused too.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from ..store.chunks import Chunk, NewChunk
from ..store.chunks_sql import neighbour_chunks
from .fusion import cosine, jaccard, mmr, rrf, token_set
from .terms import words

if TYPE_CHECKING:
    from ..store import Store


class Embedder(Protocol):
    """Turns texts into vectors (same dimension for every text). ``name`` identifies the model."""

    name: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def pack_vector(v: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(v)}f", *v)


def unpack_vector(b: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(b) // 4}f", b))


def with_vectors(chunks: Sequence[NewChunk], embedder: Embedder | None) -> list[NewChunk]:
    """``chunks`` with their text's vector attached (unchanged without an embedder)."""
    if embedder is None or not chunks:
        return list(chunks)
    vecs = embedder.embed([c.text for c in chunks])
    return [replace(c, vector=pack_vector(v)) for c, v in zip(chunks, vecs, strict=True)]


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float  # fused score (RRF)
    matched: tuple[str, ...] = ()  # the query terms found in the chunk (lower case), for the manifest's "why"
    via: tuple[str, ...] = field(default=())  # "lexical", "vector"


def _identifier(term: str) -> bool:
    return any(ch.isdigit() or ch in "_.@/" for ch in term)


def _passes(text: str, terms: Sequence[str], floor: int) -> bool:
    """The relevance floor: enough distinct query terms in ``text``, an identifier-like one, or two or more
    making up a third of a short text's content words."""
    got = _matched(text, terms)
    distinct = len({t.lower() for t in terms})
    if len(got) >= min(floor, distinct) or any(_identifier(t) for t in got):
        return True
    # a short item (a remembered fact) passes with fewer terms when they are a third of its content words
    return len(got) >= 2 and 3 * len(got) >= len(words(text, limit=64))


def _fragment(text: str) -> bool:
    """A chunk that cannot stand alone (fewer than 4 content words: "It is K7QX2M.", "yes, the second one"):
    what it means is in the chunk next to it."""
    return len(words(text, limit=4)) < 4


def _dedupe(ids: Sequence[int], by_id: dict[int, Chunk], at: float) -> list[int]:
    """``ids`` without a chunk whose word overlap with an earlier one reaches ``at``."""
    if at > 1.0:
        return list(ids)
    kept: list[int] = []
    sets: list[frozenset[str]] = []
    for i in ids:
        words = token_set(by_id[i].text)
        if all(jaccard(words, w) < at for w in sets):
            kept.append(i)
            sets.append(words)
    return kept


def _matched(text: str, terms: Sequence[str]) -> tuple[str, ...]:
    low = text.lower()
    return tuple(t for t in dict.fromkeys(x.lower() for x in terms) if t in low)


class Retriever:
    """Searches one store's chunks; never reads scopes it is not given."""

    def __init__(self, store: Store, embedder: Embedder | None = None, *, candidates: int = 30,
                 mmr_lambda: float = 0.7) -> None:
        self.store = store
        self.embedder = embedder
        self.candidates = candidates
        self.mmr_lambda = mmr_lambda

    def search(self, namespace: str, scopes: Sequence[str], queries: Sequence[Sequence[str]], *,
               limit: int = 8, texts: Sequence[str] = (), diversify: bool = True, floor: int = 0,
               neighbours: float = 0.0, dense_weight: float = 1.0, dedupe_at: float = 1.01) -> list[Hit]:
        """The best ``limit`` chunks for ``queries`` (lists of terms; ``texts``: the same queries as prose
        for the embedder). Lexical and vector rankings are fused with RRF (the vector rankings weighted by
        ``dense_weight``; 0 leaves vectors out), then MMR picks a varied set.

        ``floor``: the relevance floor. Unless one of the best ``floor`` chunks holds ``min(floor, number of
        query terms)`` distinct query terms, an identifier-like one (a digit, ``_``, ``.``, ``@``, ``/``), or
        two that make up a third of its content words, the query has no answer here and nothing is
        returned; a chunk holding no query term (a vector-only hit) is dropped. ``neighbours``: the chunks
        added right before and after a hit in its scope score at least this share of it when they cannot
        stand alone (fewer than 4 content words: the answer "It is K7QX2M." to the question before it).
        ``dedupe_at``: a chunk whose word overlap (Jaccard) with one already picked reaches this is dropped."""
        rankings: list[list[int]] = []
        by_id: dict[int, Chunk] = {}
        via: dict[int, set[str]] = {}
        for q in queries:
            hits = self.store.search_chunks(namespace, scopes, list(q), limit=self.candidates)
            rankings.append([c.id for c in hits])
            for c in hits:
                by_id.setdefault(c.id, c)
                via.setdefault(c.id, set()).add("lexical")
        lexical = len(rankings)
        if self.embedder is not None and texts and dense_weight > 0:
            for c, _ in self._vector_rank(namespace, scopes, texts, rankings):
                by_id.setdefault(c.id, c)
                via.setdefault(c.id, set()).add("vector")
        fused = rrf(rankings, weights=[1.0] * lexical + [dense_weight] * (len(rankings) - lexical))
        all_terms = [t for q in queries for t in q]
        if floor and not any(_passes(by_id[i].text, all_terms, floor) for i, _ in fused[:floor]):
            return []  # nothing near the top holds enough of the query: it has no answer here
        if floor:
            fused = [(i, sc) for i, sc in fused if _matched(by_id[i].text, all_terms)]
        if neighbours and fused:
            fused = self._lend(namespace, scopes, fused, by_id, via, neighbours)
        if not fused:
            return []
        ids = [k for k, _ in fused]
        rel = [s for _, s in fused]
        if diversify and len(ids) > limit:
            sets = {i: token_set(by_id[i].text) for i in ids}
            chosen = mmr(ids, rel, lambda a, b: jaccard(sets[a], sets[b]), lam=self.mmr_lambda, limit=limit * 2)
        else:
            chosen = ids[:limit * 2]
        chosen = _dedupe(chosen, by_id, dedupe_at)[:limit]
        score = dict(fused)
        return [Hit(by_id[i], score[i], _matched(by_id[i].text, all_terms), tuple(sorted(via[i]))) for i in chosen]

    def _lend(self, namespace: str, scopes: Sequence[str], fused: list[tuple[int, float]], by_id: dict[int, Chunk],
              via: dict[int, set[str]], share: float) -> list[tuple[int, float]]:
        """``fused`` with each hit's neighbours credited ``share`` of its score, best first."""
        top = fused[: self.candidates]
        near = neighbour_chunks(self.store, namespace, scopes, [by_id[i] for i, _ in top])
        score = dict(fused)
        for i, sc in top:
            for d in (-1, 1):
                j = i + d
                if (j in near and _fragment(near[j].text)) or (j in score and _fragment(by_id[j].text)):
                    if j in near:
                        by_id.setdefault(j, near[j])
                        via.setdefault(j, set()).add("neighbour")
                    score[j] = max(score.get(j, 0.0), share * sc)
        order = {k: n for n, k in enumerate(score)}
        return sorted(score.items(), key=lambda e: (-e[1], order[e[0]]))

    def _vector_rank(self, namespace: str, scopes: Sequence[str], texts: Sequence[str],
                     rankings: list[list[int]]) -> list[tuple[Chunk, float]]:
        assert self.embedder is not None
        chunks = [c for c in self.store.list_chunks(namespace, scopes) if c.vector]
        if not chunks:
            return []
        qv = self.embedder.embed(list(texts))
        out: list[tuple[Chunk, float]] = []
        np: Any = None
        try:
            import numpy

            np = numpy
        except ImportError:  # pragma: no cover - numpy comes with the vectors extra
            pass
        if np is not None:
            dim = len(chunks[0].vector or b"") // 4
            same = [c for c in chunks if len(c.vector or b"") == dim * 4]
            m = np.frombuffer(b"".join(c.vector or b"" for c in same), dtype="<f4").reshape(len(same), dim)
            norms = np.linalg.norm(m, axis=1) + 1e-9
        for q in qv:
            if np is not None:
                qa = np.asarray(q, dtype=np.float32)
                if qa.shape[0] != m.shape[1]:
                    continue  # vectors of another embedder
                sims = (m @ qa) / (norms * (np.linalg.norm(qa) or 1.0))
                top_i = np.argsort(-sims, kind="stable")[: self.candidates]
                top = [(same[int(i)], float(sims[int(i)])) for i in top_i]
            else:
                scored = [(c, cosine(unpack_vector(c.vector or b""), q)) for c in chunks]
                scored.sort(key=lambda e: (-e[1], e[0].id))
                top = scored[: self.candidates]
            rankings.append([c.id for c, _ in top])
            out.extend(top)
        return out


__all__ = ["Embedder", "Hit", "Retriever", "pack_vector", "unpack_vector", "with_vectors"]
