"""One session's log as the rest of the package writes it: append an event (or a typed record), fold it
into the state at once, and store blobs. The only writer of a session; compaction reaches it through the
narrow :class:`~windowsmith.compaction.port.CompactionPort` it implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .artifacts import ArtifactStore
from .records import Record
from .resume import replay
from .state import SessionState
from .store import Store


class SessionLog:
    def __init__(self, store: Store, artifacts: ArtifactStore, session_id: str) -> None:
        self.store = store
        self.artifacts = artifacts
        self.session_id = session_id
        self._state = SessionState(session_id)
        #: the chunks whose message digest rows the replays found valid (unit_counts.py need not read them again)
        self.digest_rows: set[int] = set()
        replay(store, session_id, self._state, found=self.digest_rows)

    @property
    def state(self) -> SessionState:
        return self._state

    def refresh(self) -> int:
        """Fold the events other writers appended after this state's seq; returns how many."""
        return replay(self.store, self.session_id, self._state, self._state.seq + 1, self.digest_rows)

    def append_event(self, kind: str, data: Mapping[str, Any]) -> None:
        """Append one event (optimistically, after the state's head) and fold it into the state."""
        # through the artifact store: the blobs this event names are written with it (gc never loses them)
        (ev,) = self.artifacts.append(self.store, self.session_id, [(kind, dict(data))], expected_parent=self._state.head)
        self._state.apply(ev)

    def append_many(self, items: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Append events in one transaction (all or none) and fold them into the state."""
        for ev in self.artifacts.append(self.store, self.session_id, list(items), expected_parent=self._state.head):
            self._state.apply(ev)

    def append(self, record: Record) -> None:
        """Append a typed record (:mod:`windowsmith.records`)."""
        self.append_event(record.event, record.to_dict())

    def put_blob(self, data: bytes) -> str:
        """Store ``data`` as an artifact this session references; returns its sha256."""
        return self.artifacts.put(data, session_id=self.session_id)

    def put_blobs(self, datas: Sequence[bytes]) -> list[str]:
        """Store many artifacts at once (one transaction in a session store); their sha256 in order."""
        return self.artifacts.put_many(datas, session_id=self.session_id)


__all__ = ["SessionLog"]
