"""Rank fusion and diversification: reciprocal rank fusion (RRF) over several ranked lists, and maximal
marginal relevance (MMR) to pick a varied set from the fused ranking."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

_TOKEN = re.compile(r"[^\W_]+")


def rrf(rankings: Sequence[Sequence[K]], k: int = 60, weights: Sequence[float] = ()) -> list[tuple[K, float]]:
    """Reciprocal rank fusion (Cormack et al. 2009): ``score(d) = sum w / (k + rank)``, best first (``weights``:
    one per ranking, default 1); ties keep the order in which items were first seen."""
    scores: dict[K, float] = {}
    for n, ranking in enumerate(rankings):
        w = weights[n] if n < len(weights) else 1.0
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + w / (k + rank)
    order = {key: i for i, key in enumerate(scores)}
    return sorted(scores.items(), key=lambda e: (-e[1], order[e[0]]))


def token_set(text: str) -> frozenset[str]:
    return frozenset(t.lower() for t in _TOKEN.findall(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def mmr(candidates: Sequence[K], relevance: Sequence[float], similarity: Callable[[K, K], float], *,
        lam: float = 0.7, limit: int = 10) -> list[K]:
    """Maximal marginal relevance (Carbonell & Goldstein 1998): repeatedly take the candidate maximising
    ``lam * relevance - (1 - lam) * max similarity to those taken``. Relevance is normalised to [0, 1]."""
    if not candidates:
        return []
    top = max(relevance) or 1.0
    rel = [r / top for r in relevance]
    left = list(range(len(candidates)))
    taken: list[int] = []
    sim = [0.0] * len(candidates)  # each candidate's greatest similarity to those taken, kept up to date
    while left and len(taken) < limit:
        best, best_score = left[0], -math.inf
        for i in left:
            score = lam * rel[i] - (1 - lam) * sim[i]
            if score > best_score:
                best, best_score = i, score
        taken.append(best)
        left.remove(best)
        for i in left:
            sim[i] = max(sim[i], similarity(candidates[i], candidates[best]))
    return [candidates[i] for i in taken]


__all__ = ["cosine", "jaccard", "mmr", "rrf", "token_set"]
