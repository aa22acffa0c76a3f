"""The narrow port compaction stages write through: the session's state, its log and its blob store.

A stage never sees the Session: it reads ``state``, appends typed records (:mod:`windowsmith.records`)
with ``append`` (each is folded into ``state`` at once) and stores bytes with ``put_blob`` (returns the
sha256 the ``artifact://`` reference names).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .config import Breaker, CompactionConfig, CompactionResult

if TYPE_CHECKING:
    from ..records import Record
    from ..registry import ModelSpec
    from ..state import SessionState
    from ..tokens import TokenCounter


class CompactionPort(Protocol):
    @property
    def state(self) -> SessionState: ...

    def append(self, record: Record) -> None: ...

    def put_blob(self, data: bytes) -> str: ...

    def put_blobs(self, datas: Sequence[bytes]) -> list[str]: ...


@dataclass
class Pass:
    """What every stage of one compaction pass reads: the port, the counts and the thresholds."""

    port: CompactionPort
    config: CompactionConfig
    counter: TokenCounter
    counts: Sequence[int]  # raw tokens of each unit, as the history layer counted them
    spec: ModelSpec
    available: int
    summarize_at: float
    keep_ratio: float
    force: bool
    harder: bool
    why: str
    breaker: Breaker
    result: CompactionResult
    prefix: Sequence[int] | None = None  # prefix sums of ``counts`` (len(counts) + 1), when the history layer kept them
    summary_declined: bool = False  # a summary was due but its model call does not pay: the free cut may take it

    @property
    def state(self) -> SessionState:
        return self.port.state

    @property
    def scale(self) -> float:
        return self.counter.scale

    @property
    def urgent(self) -> bool:
        """Compaction was asked for (on demand, or after a provider overflow): thresholds do not apply."""
        return self.force or self.harder


__all__ = ["CompactionPort", "Pass"]
