"""Recall over the whole history: index what left the view, and find it again.

What is indexed, per session (scope ``session:<id>``, namespace ``history``, deleted with the session):

* every compacted-span **transcript** (summary, emergency and truncate records), verbatim;
* every **offloaded** tool result (the evidence notes' ``artifact://`` refs);
* every **folded** result (mask records' fold artifacts).

Each artifact is split into chunks on message boundaries (a transcript line starting ``USER:``,
``ASSISTANT``, ``TOOL RESULT``), long blocks into windows of whole lines; a chunk's source is
``artifact://<sha>`` and its meta holds the line range, so ``read_result(ref, offset, limit)`` reads it.
Indexing is idempotent (one doc per artifact) and incremental (only records and notes not seen yet);
an artifact is indexed up to :data:`MAX_INDEX_BYTES` (a 100 MB log is indexed by its first megabyte).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..records import MaskRecord
from ..store.chunks import NewChunk
from .search import Embedder, with_vectors

if TYPE_CHECKING:
    from ..artifacts import ArtifactStore
    from ..state import SessionState
    from ..store import Store

_BLOCK_START = re.compile(r"^(?:USER|ASSISTANT|SYSTEM|TOOL RESULT|TOOL)\b")
CHUNK_CHARS = 1200
#: an artifact is indexed up to this many bytes (its head; the rest stays readable with read_result)
MAX_INDEX_BYTES = 1 << 20


def chunk_lines(text: str, *, max_chars: int = CHUNK_CHARS, blocks: bool = True) -> Iterator[tuple[int, int, str]]:
    """``(first_line, end_line, text)`` windows of whole lines (0-based, end exclusive), a new window at
    each message boundary (``blocks``) or when ``max_chars`` would be passed; a single longer line is
    cut into pieces of ``max_chars``."""
    lines = text.split("\n")
    start = 0
    buf: list[str] = []
    size = 0
    for i, line in enumerate(lines):
        boundary = blocks and bool(_BLOCK_START.match(line))
        if buf and (boundary or size + len(line) + 1 > max_chars):
            body = "\n".join(buf).strip()
            if body:
                yield start, i, body
            buf, size, start = [], 0, i
        if len(line) > max_chars:
            for k in range(0, len(line), max_chars):
                piece = line[k:k + max_chars].strip()
                if piece:
                    yield i, i + 1, piece
            start = i + 1
            continue
        buf.append(line)
        size += len(line) + 1
    body = "\n".join(buf).strip()
    if body:
        yield start, len(lines), body


def history_docs(state: SessionState) -> list[tuple[str, str]]:
    """``(sha, kind)`` of every artifact of the session worth recalling, in log order."""
    out: dict[str, str] = {}
    for rec in state.records:
        t = getattr(rec, "transcript", None)
        if t:
            out.setdefault(t, "transcript")
        if isinstance(rec, MaskRecord):
            for f in rec.folds:
                for a in f.artifacts:
                    out.setdefault(a, "folded result")
    for note in state.notes_for("evidence"):
        ref = note.get("ref") or ""
        if ref.startswith("artifact://"):
            out.setdefault(ref[len("artifact://"):], "offloaded result")
    return list(out.items())


def scope_of(session_id: str) -> str:
    return f"session:{session_id}"


class HistoryIndex:
    """The recall index of one session, extended incrementally."""

    def __init__(self, store: Store, artifacts: ArtifactStore, session_id: str,
                 embedder: Embedder | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.artifacts = artifacts
        self.session_id = session_id
        self.scope = scope_of(session_id)
        self._done: set[str] | None = None

    def update(self, state: SessionState) -> int:
        """Index the session's artifacts not indexed yet; returns the number of new chunks."""
        if self._done is None:
            self._done = self.store.indexed_docs("history", self.scope)
        added = 0
        for sha, kind in history_docs(state):
            if sha in self._done:
                continue
            self._done.add(sha)
            data = self.artifacts.get(sha)
            if data is None:
                continue
            text = data[:MAX_INDEX_BYTES].decode("utf-8", errors="ignore")
            chunks = [
                NewChunk(key=f"{sha}#{a}", text=body, doc=sha, source=f"artifact://{sha}",
                         meta={"kind": kind, "lines": [a, b]})
                for a, b, body in chunk_lines(text, blocks=kind == "transcript")
            ]
            added += self.store.add_chunks("history", self.scope, with_vectors(chunks, self.embedder),
                                           session_id=self.session_id)
        return added


__all__ = ["CHUNK_CHARS", "MAX_INDEX_BYTES", "HistoryIndex", "chunk_lines", "history_docs", "scope_of"]
