"""The one small interface every context source implements.

A layer looks at the session's state and yields :class:`Item` s. Each item says where it goes
(``slot``), how stable it is (``phase``), how important (``priority``: higher survives longer),
whether it may be dropped (``required``), where it came from (``provenance``) and how it may shrink
(``shrink``: a callable that returns a shorter version within a token cap, or None if it cannot).

The assembler knows nothing about particular layers: it allocates a budget per layer name, fits
items by priority, renders slots in cache order (tools → system → session → history → tail) and
records every action in the manifest. Adding a source means writing a layer, nothing else.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, overload

from ..model import Message, ToolSpec
from ..request import Lineage
from ..text import elide

if TYPE_CHECKING:
    from ..state import SessionState
    from ..tokens import TokenCounter
    from .shrink import PlannedStub, Shrink

Phase = Literal["stable", "session", "dynamic"]
Slot = Literal["system", "tools", "session", "history", "tail"]
PHASES: tuple[str, ...] = ("stable", "session", "dynamic")
SLOTS: tuple[str, ...] = ("tools", "system", "session", "history", "tail")

#: Standard tail section headers, in the order they are rendered.
TAIL_HEADERS: tuple[str, ...] = ("TASK", "STEP", "TOOLS", "ACCEPTANCE", "INSTRUCTIONS", "EVIDENCE", "MEMORY", "KNOWLEDGE",
                                 "RECALL", "CODEMAP", "FAILURES", "NOTE", "FOCUS")


@dataclass(frozen=True)
class HistoryFit:
    """What fitting the history did: the first unit kept, what was dropped or clipped, and the per-unit raw
    counts it worked from (the build reuses them for compaction and persists a drop as a ``truncate`` record)."""

    first_unit: int
    counts: Sequence[int]  # raw tokens of each unit of the session (grows incrementally: do not mutate)
    prefix: Sequence[int]  # their prefix sums
    summary_raw: int  # raw tokens of the summary message (0 without one)
    keep_from_seq: int | None = None  # the log seq the kept history starts at, when units were dropped
    dropped_units: int = 0
    dropped_tokens: int = 0
    clipped: tuple[str, ...] = ()  # tool-call ids whose results were cut head + tail (the overflow guard)
    shrinks: tuple[Shrink, ...] = ()  # messages too large for their share, shrunk to a view (layers/shrink.py)
    image_stubs: tuple[PlannedStub, ...] = ()  # images of messages that must stay, over the share: their stubs
    carry_left_out: bool = False  # a cut's summary message did not fit beside what must stay: not in this request
    #: raw tokens of the item's messages that are sent but not billed (thinking the provider strips), already
    #: left out of the item's ``raw_tokens``: the history is fitted on what is billed
    unbilled: int = 0
    #: prefix sums of each unit's thinking tokens (as ``prefix``), and how many leading units the provider strips
    #: the thinking of (0: none): what :meth:`billed` leaves out
    thinking_prefix: Sequence[int] = ()
    stripped: int = 0

    def billed(self) -> tuple[Sequence[int], Sequence[int]]:
        """``counts`` and ``prefix`` as the provider bills them (the stripped thinking left out), for compaction:
        folding or cutting a unit whose thinking is stripped saves only the rest of it."""
        if not self.stripped:
            return self.counts, self.prefix
        return BilledCounts(self.counts, self.thinking_prefix, self.stripped), \
            BilledPrefix(self.prefix, self.thinking_prefix, self.stripped)


class _BilledView(Sequence[int]):
    """A per-unit list (``base``) less the thinking the provider strips (``thinking_prefix``, units before
    ``stripped``), read element by element: nothing is copied."""

    def __init__(self, base: Sequence[int], thinking_prefix: Sequence[int], stripped: int) -> None:
        self._base, self._t, self._stripped = base, thinking_prefix, stripped

    def __len__(self) -> int:
        return len(self._base)

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [self._at(k) for k in range(*i.indices(len(self)))]
        return self._at(i + len(self._base) if i < 0 else i)

    def _at(self, i: int) -> int:
        raise NotImplementedError


class BilledCounts(_BilledView):
    """Per-unit raw counts less the thinking of the units before ``stripped``."""

    def _at(self, i: int) -> int:
        c = self._base[i]
        return c - (self._t[i + 1] - self._t[i]) if i < self._stripped else c


class BilledPrefix(_BilledView):
    """Prefix sums of :class:`BilledCounts`."""

    def _at(self, i: int) -> int:
        return self._base[i] - self._t[min(i, self._stripped)]


@dataclass(frozen=True)
class Item:
    layer: str
    slot: Slot
    phase: Phase
    content: str | ToolSpec | Sequence[Message]  # history: a tuple or a Snapshot of the view
    priority: int = 0
    required: bool = False
    provenance: str = ""
    header: str | None = None  # tail section header (TASK, EVIDENCE, ...)
    order: int = 0  # position within its slot (stable sort key, before priority)
    shrink: Callable[[Item, int, TokenCounter], Item | None] | None = field(default=None, compare=False)
    meta: dict[str, Any] = field(default_factory=dict, compare=False)  # free for custom layers
    raw_tokens: int | None = None  # already counted (unscaled) by the layer: the assembler scales it
    ref: str | None = None  # the artifact:// reference the item carries (listed in the manifest)
    fit: HistoryFit | None = field(default=None, compare=False)  # set by the history layer
    #: the history layer's proof that ``content`` extends the previous build's history (request.Lineage); the
    #: assembler passes it on only while ``lineage.messages is content`` (a shrunk history carries none)
    lineage: Lineage | None = field(default=None, compare=False, repr=False)


@dataclass
class BuildContext:
    """What a layer sees when it is asked for items."""

    state: SessionState
    counter: TokenCounter
    window: int
    available: int


class Layer(ABC):
    """A source of context items."""

    #: the budget component this layer's items count against (system, tools, task, memory, ...)
    name: str = ""

    @abstractmethod
    def items(self, ctx: BuildContext) -> Iterable[Item]:
        """Yield this layer's items for the next request."""

    def report(self) -> dict[str, Any] | None:
        """What the last ``items`` call decided, for the manifest's ``guidance`` (None: nothing to say)."""
        return None

    def tail_style(self) -> Any:
        """A ``TailStyle`` (header and bullet format) for the tail of this request, or None (the default)."""
        return None


def shrink_text(item: Item, cap: int, counter: TokenCounter) -> Item | None:
    """Shrink a text item to ``cap`` tokens by head + tail elision, or None if nothing useful fits."""
    assert isinstance(item.content, str)
    if cap < 32:
        return None
    text = item.content
    keep = len(text)
    while keep > 64:
        keep = int(keep * min(0.9, cap / max(1, counter.text(text[:keep] if keep < len(text) else text))))
        candidate = elide(item.content, keep)
        if counter.text(candidate) <= cap:
            return replace(item, content=candidate)
        text = candidate
    return None


__all__ = ["PHASES", "SLOTS", "TAIL_HEADERS", "BuildContext", "HistoryFit", "Item", "Layer", "Phase", "Slot", "shrink_text"]
