"""The task layer: goal, current step and acceptance checklist, recited in the dynamic tail every turn.

By default the tail goes before the user's newest text when that is the last message (so the request ends with
the user's words). ``TaskLayer(after_user=True)`` places it after that text instead, where the seed design wants
the recitation (the last thing the model reads), and ``progress=True`` heads the checklist with its count
(``3/5 done``); ``default_layers(recite_after_user=True)`` turns both on.

Acceptance items may need evidence (``Session.task(..., evidence_needed=[...])``): such an item shows
``(evidence needed)`` until ``Session.check(item, evidence=...)`` records some, and the pack's manifest reports
(``guidance["task"]``) which items need evidence and which have none yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import TaskRequiredError
from .base import BuildContext, Item, Layer

#: The notes layer acceptance evidence is logged under (``kind``: ``needed`` or ``evidence``).
ACCEPTANCE_NOTES = "acceptance"


def evidence_needed(notes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The acceptance items that need evidence (the newest declaration wins)."""
    return next((list(n.get("items", ())) for n in reversed(notes) if n.get("kind") == "needed"), [])


def evidence_of(notes: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """The evidence recorded for each acceptance item, oldest first."""
    out: dict[str, list[str]] = {}
    for n in notes:
        if n.get("kind") == "evidence":
            out.setdefault(str(n.get("item")), []).append(str(n.get("text", "")))
    return out


class TaskLayer(Layer):
    """Goal, current step and acceptance checklist in the tail (see the module docstring)."""

    name = "task"

    def __init__(self, *, after_user: bool = False, progress: bool = False) -> None:
        self.after_user = after_user
        self.progress = progress
        self._report: dict[str, Any] | None = None

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        task = ctx.state.task
        self._report = None
        if task.required and not task.declared:
            raise TaskRequiredError(
                f"session {ctx.state.session_id!r} requires a task but has no goal or acceptance checklist; "
                "call session.task(goal=..., acceptance=[...]) before build()"
            )
        meta = {"after_user": True} if self.after_user else {}
        if task.goal:
            yield Item(self.name, "tail", "dynamic", task.goal, priority=100, required=True, provenance="task:goal",
                       header="TASK", meta=meta)
        if task.step:
            yield Item(self.name, "tail", "dynamic", task.step, priority=100, required=True, provenance="task:step",
                       header="STEP", meta=meta)
        if task.acceptance:
            notes = ctx.state.notes_for(ACCEPTANCE_NOTES)
            needed = set(evidence_needed(notes)) if notes else set()
            have = evidence_of(notes) if notes else {}
            missing = [a for a, _ in task.acceptance if a in needed and a not in have]
            lines = "\n".join(f"- [{'x' if done else ' '}] {item}{' (evidence needed)' if item in missing else ''}"
                              for item, done in task.acceptance)
            if self.progress:
                done_n = sum(1 for _, d in task.acceptance if d)
                lines = f"{done_n}/{len(task.acceptance)} done\n{lines}"
            if needed:
                self._report = {"evidence_needed": [a for a, _ in task.acceptance if a in needed],
                                "without_evidence": missing}
            yield Item(self.name, "tail", "dynamic", lines, priority=100, required=True,
                       provenance="task:acceptance", header="ACCEPTANCE", meta=meta)

    def report(self) -> dict[str, Any] | None:
        return self._report


__all__ = ["ACCEPTANCE_NOTES", "TaskLayer", "evidence_needed", "evidence_of"]
