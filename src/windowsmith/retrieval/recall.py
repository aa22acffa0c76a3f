"""``search_history``: the agent's (and the CLI's) way to search everything the session has seen,
including what compaction took out of the view."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .history import HistoryIndex
from .search import Hit, Retriever
from .terms import identifiers, words

if TYPE_CHECKING:
    from ..ports import RecallSession

SEARCH_HISTORY_TOOL: dict[str, Any] = {
    "name": "search_history",
    "description": (
        "Search this session's earlier history, including messages and tool results compacted out of the "
        "context. Returns matching snippets with their artifact:// source and line range; read more with "
        "read_result(ref, offset, limit)."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words, identifiers, file paths or ids to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Snippets to return (default 5)."},
        },
        "required": ["query"],
    },
}


def recall(session: RecallSession, query: str, *, limit: int = 5) -> list[Hit]:
    """Hits for ``query`` in the session's history index (indexed first if needed)."""
    eng = session.engine
    index = HistoryIndex(eng.store, eng.artifacts, session.id, eng.embedder)
    index.update(session.state)
    queries = [q for q in (identifiers(query), words(query), query.split()) if q]
    if not queries:
        return []
    return Retriever(eng.store, eng.embedder).search("history", [index.scope], queries, limit=limit, texts=[query])


def search_history(session: RecallSession, query: Any, *, limit: Any = 5) -> str:
    if not isinstance(query, str) or not query.strip():
        return "error: query must be a non-empty string, e.g. search_history(query='models.py IntegrityError')"
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 20:
        return f"error: limit must be an integer from 1 to 20, got {limit!r:.40}"
    hits = recall(session, query[:2000], limit=limit)
    if not hits:
        return f"no earlier history matches {query[:200]!r}"
    out = []
    for h in hits:
        a, b = (h.chunk.meta.get("lines") or [0, 0])[:2]
        out.append(f"[{h.chunk.source} lines {a}-{b} ({h.chunk.meta.get('kind', '')})]\n{h.chunk.text}")
    return "\n\n".join(out)


__all__ = ["SEARCH_HISTORY_TOOL", "recall", "search_history"]
