"""Evidence: offloaded tool results of the current step, as summary + reference in the dynamic tail.

A *step* is the span since the last user text message or the last change of the task's current step.
Each offloaded result leaves an evidence note carrying the step key it was recorded in; this layer
shows only the notes of the current step, newest first when the layer must drop some.

The tail is never cached (it is sent at full price on every call), so a note is shown once per
reference (the newest of duplicates) and only while the history does not already hold its reference:
the result's own compressed view (its footer names the artifact), its fold line or its work-log line all
carry ``artifact://<sha>``, so the note would repeat what the model sees. A note comes back when its
reference leaves the view (cut from the work log, a shrunk message), but only for the newest ``recent`` (4)
offloaded results of the step: an autonomous agent's step (no user message after the first) lasts the whole
run, and without that bound every result compaction took away came back to the uncached tail for good
(measured on the dev traces: OpenHands at 8K, a tail of 340 tokens a call; bounded: cost -8%, strict recall
+1.3 points; the older results stay reachable through the work log and the transcript reference).

A note whose result a compaction took out of the view (logged before the view's ``keep_from_seq``) does not come
back at all (``skip_compacted``): the summary message, in the cached prefix, references the span's transcript, from
which the result's artifact is reachable, and the cut's work log and identifier index carry what it lost. Measured
on every family of the shared traces at 8K, 16K and 32K, such notes added no identifier to strict or recoverable
recall, while on OpenHands at 8K they were 240 tokens of every call at the full input price (-11% cost without them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ..refs import message_refs
from .base import BuildContext, Item, Layer, shrink_text

_ROLE = attrgetter("role")
_IS_USER = "user".__eq__

if TYPE_CHECKING:
    from ..model import Message
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
        new = msgs[self._seen:]
        # the user messages picked at C level (a resumed session's first build passes every message here)
        for m in compress(new, map(_IS_USER, map(_ROLE, new))):
            if m.plain or not m.tool_results:  # (plain first: a lazy message is not built)
                self._users += 1
        self._seen = len(msgs)
        return f"{self._users}:{state.task.step or ''}"


class ViewRefs:
    """The artifact references in the session's current history view, kept incrementally: while the view
    only grows (same lineage), only its new messages are scanned (per-message refs are cached by digest)."""

    def __init__(self) -> None:
        self._lineage: Any = None
        self._seen = 0
        self._refs: dict[str, int] = {}

    def refs(self, state: SessionState) -> dict[str, int]:
        msgs: Sequence[Message]
        msgs, lineage = state.history_view(state.first_visible_unit())
        if lineage is not self._lineage or len(msgs) < self._seen:
            self._lineage, self._seen, self._refs = lineage, 0, {}
        for m in msgs[self._seen:]:
            for r in message_refs(m)[0]:
                self._refs[r] = self._refs.get(r, 0) + 1
        self._seen = len(msgs)
        return self._refs


class EvidenceLayer(Layer):
    name = "evidence"

    def __init__(self, *, skip_visible: bool = True, recent: int | None = 4, skip_compacted: bool = True) -> None:
        self.steps = StepTracker()
        #: only the newest ``recent`` offloaded results of the step are candidates (``None``: all of them)
        self.recent = recent
        #: leave out a note whose reference the history view already holds (see the module docstring)
        self.skip_visible = skip_visible
        #: leave out a note whose result a compaction took out of the view (see the module docstring)
        self.skip_compacted = skip_compacted
        self._view = ViewRefs()

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        step = self.steps.key(ctx.state)
        state = ctx.state
        notes = [n for n in state.notes_for(self.name) if n.get("step", step) == step]
        if self.skip_compacted and state.transcript:
            # a compaction took the result out of the view: its transcript is referenced by the summary message (in the
            # cached prefix) and its cut recorded what it lost (work log, identifier index); the tail would repeat it
            notes = [n for n in notes if n.get("seq", state.keep_from_seq) >= state.keep_from_seq]
        visible: dict[str, int] = self._view.refs(ctx.state) if self.skip_visible and notes else {}
        seen: set[str] = set()
        shown = []
        for note in reversed(notes[-self.recent:] if self.recent else notes):  # newest first: of duplicates, the newest stays
            ref = note.get("ref") or None
            if ref is not None and (ref in seen or ref in visible):
                continue
            if ref is not None:
                seen.add(ref)
            shown.append(note)
        shown.reverse()
        for i, note in enumerate(shown):
            yield Item(self.name, "tail", "dynamic", note["text"], priority=i, provenance=note.get("source", self.name),
                       header="EVIDENCE", order=i, shrink=shrink_text, ref=note.get("ref") or None)
