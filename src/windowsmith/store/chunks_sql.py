"""Chunk look-ups the retrieval layer needs beyond the store's search and listing: one chunk by its key
(what ``memory.add`` reads back instead of listing the scope) and the chunks next to hits (the turn
before and after a matching turn: a question's answer, a tool call's result).

Functions over a :class:`~windowsmith.store.Store` rather than methods, so the shared SQL module stays
small; they read through the store's own tenant filter and dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .chunks import Chunk, check_namespace, check_scope, check_scopes

if TYPE_CHECKING:
    from .sql import Store

_COLS = "c.id, c.namespace, c.scope, c.key, c.doc, c.source, c.text, c.meta, c.created_at, c.used_at, c.uses, c.vector"


def chunk_by_key(store: Store, namespace: str, scope: str, key: str) -> Chunk | None:
    """The chunk with ``key`` under (namespace, scope), or None (an index lookup)."""
    check_namespace(namespace)
    check_scope(scope)
    p = store._params(namespace=namespace, scope=scope, key=key)
    rows = store._rows(f"SELECT {_COLS} FROM chunks c WHERE c.tenant = :tenant AND c.namespace = :namespace "
                       "AND c.scope = :scope AND c.key = :key", p)
    return store._chunk(rows[0]) if rows else None


def neighbour_chunks(store: Store, namespace: str, scopes: Sequence[str], hits: Sequence[Chunk], *,
                     radius: int = 1) -> dict[int, Chunk]:
    """The chunks added right before and after each of ``hits`` in the same scope (ids within ``radius``),
    by id; the hits themselves are left out."""
    check_namespace(namespace)
    scopes = check_scopes(scopes)
    have = {c.id for c in hits}
    want = sorted({c.id + d for c in hits for d in range(-radius, radius + 1) if d} - have)
    if not want:
        return {}
    p = store._params(namespace=namespace)
    ids = store.dialect.in_list("c.id", "nid", want, p)
    sql = (f"SELECT {_COLS} FROM chunks c WHERE c.tenant = :tenant AND c.namespace = :namespace AND {ids} "
           f"AND {store.dialect.in_list('c.scope', 'scope', scopes, p)}")
    scope_of = {c.id: c.scope for c in hits}
    out: dict[int, Chunk] = {}
    for row in store._rows(sql, p):
        c = store._chunk(row)
        if any(scope_of.get(c.id + d) == c.scope for d in range(-radius, radius + 1) if d):
            out[c.id] = c
    return out


__all__ = ["chunk_by_key", "neighbour_chunks"]
