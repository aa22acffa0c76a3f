"""Evidence: offloaded tool results of the current step, as summary + reference in the dynamic tail.

A *step* is the span since the last user text message or the last change of the task's current step.
Each offloaded result leaves an evidence note carrying the step key it was recorded in; this layer
shows only the notes of the current step, newest first when the layer must drop some.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .base import BuildContext, Item, Layer, shrink_text

if TYPE_CHECKING:
    from ..state import SessionState


class StepTracker:
    """Counts user text messages incrementally (the transcript is append-only)."""

    def __init__(self) -> None:
        self._seen = 0
        self._users = 0

    def key(self, state: SessionState) -> str:
        msgs = state.messages
        if len(msgs) < self._seen:  # a different state object
            self._seen = self._users = 0
        for m in msgs[self._seen:]:
            if m.role == "user" and not m.tool_results:
                self._users += 1
        self._seen = len(msgs)
        return f"{self._users}:{state.task.step or ''}"


class EvidenceLayer(Layer):
    name = "evidence"

    def __init__(self) -> None:
        self.steps = StepTracker()

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        step = self.steps.key(ctx.state)
        notes = [n for n in ctx.state.notes_for(self.name) if n.get("step", step) == step]
        for i, note in enumerate(notes):
            yield Item(self.name, "tail", "dynamic", note["text"], priority=i, provenance=note.get("source", self.name),
                       header="EVIDENCE", order=i, shrink=shrink_text, ref=note.get("ref") or None)
