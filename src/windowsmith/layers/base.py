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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..model import Message, ToolSpec

if TYPE_CHECKING:
    from ..state import SessionState
    from ..tokens import TokenCounter

Phase = Literal["stable", "session", "dynamic"]
Slot = Literal["system", "tools", "session", "history", "tail"]
PHASES: tuple[str, ...] = ("stable", "session", "dynamic")
SLOTS: tuple[str, ...] = ("tools", "system", "session", "history", "tail")

#: Standard tail section headers, in the order they are rendered.
TAIL_HEADERS: tuple[str, ...] = ("TASK", "STEP", "ACCEPTANCE", "EVIDENCE", "MEMORY", "KNOWLEDGE", "NOTE")


@dataclass(frozen=True)
class Item:
    layer: str
    slot: Slot
    phase: Phase
    content: str | ToolSpec | tuple[Message, ...]
    priority: int = 0
    required: bool = False
    provenance: str = ""
    header: str | None = None  # tail section header (TASK, EVIDENCE, ...)
    order: int = 0  # position within its slot (stable sort key, before priority)
    shrink: Callable[[Item, int, TokenCounter], Item | None] | None = field(default=None, compare=False)
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


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
