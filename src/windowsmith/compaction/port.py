"""The narrow port compaction stages write through: the session's state, its log and its blob store.

A stage never sees the Session: it reads ``state``, appends typed records (:mod:`windowsmith.records`)
with ``append`` (each is folded into ``state`` at once) and stores bytes with ``put_blob`` (returns the
sha256 the ``artifact://`` reference names).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..budget import room_factor
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

    def raw_from(self, unit: int) -> int:
        """Raw tokens of the units from ``unit`` to the end (the prefix sums when the history layer kept them)."""
        if self.prefix is not None and unit < len(self.prefix):
            return self.prefix[-1] - self.prefix[unit]
        return sum(self.counts[unit:])

    @property
    def urgent(self) -> bool:
        """Compaction was asked for (on demand, or after a provider overflow): thresholds do not apply."""
        return self.force or self.harder


def room_raw(p: Pass) -> float:
    """Raw tokens the request's fixed part (tools, system, stable context) leaves of the available budget: the room
    the history (pinned request, work log, index, kept messages) and the dynamic tail share."""
    return fixed_room_raw(p.counter, p.state, p.available)


def fixed_room_raw(counter: TokenCounter, state: SessionState, available: int) -> float:
    """:func:`room_raw` outside a compaction pass."""
    fixed = counter.overheads.per_request + counter.raw_tools(state.tools)
    fixed += sum(counter.raw_segment(t) for t in (*state.system.values(), *state.context.values()) if t)
    return max(0.0, available / counter.scale - fixed)


def carry_caps(p: Pass) -> tuple[int, int]:
    """Raw tokens the work log and the identifier index may take: ``work_log_ratio`` (at least 200 tokens) and
    ``index_ratio`` of the available budget, scaled down together to ``carry_share`` of the room the fixed part
    leaves (:func:`room_raw`). Both are carried by every request after a cut, so they count against the room the
    next cut waits on: where tools and system leave little room, full-size caps filled most of it and the free cut
    ran every other call, each one a cache rewrite. Where the room is tiny (under ``TINY_ROOM`` of the budget) the
    share itself scales down with it (:func:`~windowsmith.budget.room_factor`), the index never below
    ``index_floor`` raw tokens (within ``index_ratio`` of the budget and a quarter of the room)."""
    return carry_caps_of(p.config, p.counter, p.state, p.available)


def carry_caps_of(cfg: CompactionConfig, counter: TokenCounter, state: SessionState, available: int) -> tuple[int, int]:
    """:func:`carry_caps` outside a compaction pass (the history layer's own cut writes an index too)."""
    scale = counter.scale
    log_cap = max(200, int(cfg.work_log_ratio * available / scale))
    full_index = index_cap = int(cfg.index_ratio * available / scale) if cfg.index_ratio > 0 else 0
    if cfg.carry_share is not None:
        room = fixed_room_raw(counter, state, available)
        bound = cfg.carry_share * room * room_factor(room * scale, available)
        if log_cap + index_cap > bound:
            f = bound / (log_cap + index_cap)
            log_cap, index_cap = int(log_cap * f), int(index_cap * f)
        # that share is scaled down twice where the room is tiny (a share of the room, times room_factor): an index of
        # two names in a room of a thousand tokens. A dozen identifiers say the most per token of what the cut lost, so
        # the index keeps ``index_floor`` raw tokens, within its own cap and a quarter of the room
        index_cap = max(index_cap, min(full_index, cfg.index_floor, int(room / 4)))
    return log_cap, index_cap


__all__ = ["CompactionPort", "Pass", "carry_caps", "carry_caps_of", "fixed_room_raw", "room_raw"]
