"""The blobs an artifact store put for a session that no appended event names yet.

An artifact store remembers them (oldest first, at most :data:`UNNAMED_BYTES`) so that the append naming one
writes it again together with the event (see :mod:`windowsmith.artifacts`): a gc that ran between the put and
the append cannot lose it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

#: The most bytes of blobs put and not yet named by an appended event that a store keeps in memory (all its
#: sessions together) to write again with the event naming them; the oldest beyond it are left to the grace period.
UNNAMED_BYTES = 64 * 1024 * 1024


class UnnamedBlobs:
    """The blobs a store put per session that no appended event named yet, oldest first, bounded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_session: dict[str, dict[str, bytes]] = {}
        self.total = 0

    def add(self, session_id: str, sha: str, data: bytes) -> None:
        with self.lock:
            blobs = self.by_session.pop(session_id, {})
            self.by_session[session_id] = blobs  # the session moves to the newest end
            self.total -= len(blobs.pop(sha, b""))
            blobs[sha] = data
            self.total += len(data)
            while self.total > UNNAMED_BYTES and (len(self.by_session) > 1 or len(blobs) > 1):
                oldest_sid = next(iter(self.by_session))
                oldest = self.by_session[oldest_sid]
                self.total -= len(oldest.pop(next(iter(oldest))))
                if not oldest:
                    del self.by_session[oldest_sid]

    def named_by(self, session_id: str, items: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, bytes]:
        """The blobs of ``session_id`` that ``items`` name, taken out of the set."""
        with self.lock:
            blobs = self.by_session.get(session_id)
            if not blobs:
                return {}
            text = json.dumps([d for _, d in items], default=str)
            named = {sha: blobs.pop(sha) for sha in [sha for sha in blobs if sha in text]}
            self.total -= sum(map(len, named.values()))
            if not blobs:
                del self.by_session[session_id]
            return named


__all__ = ["UNNAMED_BYTES", "UnnamedBlobs"]
