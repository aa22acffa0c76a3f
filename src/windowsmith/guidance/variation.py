"""Structural variation of the dynamic tail, and the most compact JSON for data the model only reads.

An agent that sees the same tail sections in the same words every turn can lock onto the pattern (repeat its
last action, skim the section). :class:`VariationLayer` rotates the tail's *format* (header and bullet style,
:data:`TAIL_STYLES`) every ``every`` assistant turns, and the guidance layers rotate their *phrasing* when built
with ``vary=True``. Everything it changes is in the dynamic tail, after the last cache breakpoint; the choice
is a function of the log (the number of assistant turns), so the same log still builds the same request.

:func:`compact_json` is the other half: JSON that the model only reads (tool results) goes in with no
insignificant whitespace (``IngestConfig(compact_json=True)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..layers.base import BuildContext, Item, Layer
from ..text import compact_json

if TYPE_CHECKING:
    from ..state import SessionState


@dataclass(frozen=True)
class TailStyle:
    """How tail sections are written: ``header`` formats the section name, ``bullet`` starts list items."""

    header: str = "## {}"
    bullet: str = "- "

    def __post_init__(self) -> None:
        if "{}" not in self.header:
            raise ConfigError(f"TailStyle.header must contain '{{}}' where the section name goes (e.g. '## {{}}'), "
                              f"got {self.header!r}")


DEFAULT_STYLE = TailStyle()
TAIL_STYLES: tuple[TailStyle, ...] = (DEFAULT_STYLE, TailStyle("[{}]", "* "), TailStyle("{}:", "• "),
                                      TailStyle("### {}", "+ "))


def assistant_turns(state: SessionState) -> int:
    return sum(1 for m in state.messages if m.role == "assistant")


class VariationLayer(Layer):
    """Rotates the tail format (no items of its own). ``guidance["variation"]``: the style index and the turn."""

    name = "variation"

    def __init__(self, every: int = 1, styles: Sequence[TailStyle] = TAIL_STYLES) -> None:
        if every < 1 or not styles:
            raise ConfigError(f"VariationLayer needs every >= 1 and at least one style, got every={every} and "
                              f"{len(styles)} style(s); the defaults are every=1 and TAIL_STYLES")
        self.every = every
        self.styles = tuple(styles)
        self._seen = 0
        self._turns = 0
        self._state_id = 0
        self._style: TailStyle | None = None
        self._report: dict[str, Any] | None = None

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        msgs = ctx.state.messages
        if id(ctx.state) != self._state_id or len(msgs) < self._seen:
            self._seen, self._turns, self._state_id = 0, 0, id(ctx.state)
        self._turns += sum(1 for m in msgs[self._seen:] if m.role == "assistant")
        self._seen = len(msgs)
        k = (self._turns // self.every) % len(self.styles)
        self._style = self.styles[k]
        self._report = {"style": k, "turn": self._turns}
        return ()

    def tail_style(self) -> TailStyle | None:
        return self._style

    def report(self) -> dict[str, Any] | None:
        return self._report


#: Phrasings the guidance layers rotate through with ``vary=True`` (index = assistant turn % len).
REPEATED_PHRASES: tuple[str, ...] = (
    "REPEATED {n} times: {action} → {category}: {signature} (turns {turns}); it will fail again unchanged, change the approach",
    "{action} already failed {n} times the same way ({category}: {signature}; turns {turns}): do not send it again as is",
    "Tried {n} times without success (turns {turns}): {action} → {category}: {signature}. Take a different route",
)
FOCUS_PHRASES: tuple[tuple[str, str, str], ...] = (
    ("Goal: {}", "Current step: {}", "Still open: {}"),
    ("The task is still: {}", "Right now: {}", "Not done yet: {}"),
    ("Objective — {}", "Working on — {}", "Remaining — {}"),
)


__all__ = ["DEFAULT_STYLE", "FOCUS_PHRASES", "REPEATED_PHRASES", "TAIL_STYLES", "TailStyle", "VariationLayer",
           "assistant_turns", "compact_json"]
