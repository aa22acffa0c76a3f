"""The built-in context sources: system, instructions, tools, task, history and notes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from ..errors import TaskRequiredError
from ..text import clip_messages
from .base import BuildContext, HistoryFit, Item, Layer, shrink_text
from .evidence import EvidenceLayer
from .retrieved import KnowledgeLayer, MemoryLayer, RecallLayer

if TYPE_CHECKING:
    from ..state import SessionState
    from ..tokens import TokenCounter


class SystemLayer(Layer):
    """System instructions: stable, required, first after tools."""

    name = "system"

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        for i, (name, text) in enumerate(ctx.state.system.items()):
            if text:
                yield Item(self.name, "system", "stable", text, priority=100, required=True,
                           provenance=f"system:{name}", order=i)


class ContextLayer(Layer):
    """Stable session context (instruction files, project notes): after system, before history."""

    name = "instructions"

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        for i, (name, text) in enumerate(ctx.state.context.items()):
            if text:
                yield Item(self.name, "session", "session", text, priority=80, provenance=f"context:{name}",
                           order=i, shrink=shrink_text)


class ToolsLayer(Layer):
    """Tool definitions, in declared order, canonically formatted (same tools → same bytes)."""

    name = "tools"

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        for i, t in enumerate(ctx.state.tools):
            yield Item(self.name, "tools", "stable", t, priority=100, required=True, provenance=f"tool:{t.name}", order=i)


class TaskLayer(Layer):
    """Goal, current step and acceptance checklist, recited in the dynamic tail every turn."""

    name = "task"

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        task = ctx.state.task
        if task.required and not task.declared:
            raise TaskRequiredError(
                f"session {ctx.state.session_id!r} requires a task but has no goal or acceptance checklist; "
                "call session.task(goal=..., acceptance=[...]) before build()"
            )
        if task.goal:
            yield Item(self.name, "tail", "dynamic", task.goal, priority=100, required=True, provenance="task:goal",
                       header="TASK")
        if task.step:
            yield Item(self.name, "tail", "dynamic", task.step, priority=100, required=True, provenance="task:step",
                       header="STEP")
        if task.acceptance:
            lines = "\n".join(f"- [{'x' if done else ' '}] {item}" for item, done in task.acceptance)
            yield Item(self.name, "tail", "dynamic", lines, priority=100, required=True,
                       provenance="task:acceptance", header="ACCEPTANCE")


class NotesLayer(Layer):
    """Notes added to the session for a tail section (memory, evidence, knowledge).

    Newer notes have higher priority, so the oldest go first when the layer is over budget.
    """

    def __init__(self, name: str, header: str) -> None:
        self.name = name
        self.header = header

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        notes = ctx.state.notes_for(self.name)
        for i, note in enumerate(notes):
            yield Item(self.name, "tail", "dynamic", note["text"], priority=i, provenance=note.get("source", self.name),
                       header=self.header, order=i, shrink=shrink_text, ref=note.get("ref") or None)


class HistoryLayer(Layer):
    """The conversation as the model sees it: the view of the log after compaction records.

    Yields a single item holding the visible messages; it shrinks by dropping whole units (a tool call
    never leaves without its result) from the oldest, down to ``history_low_water`` of the cap so the
    cache prefix breaks rarely. The user's first message is pinned and never dropped. Per-unit token
    counts are kept incrementally, so a build costs O(new messages), not O(session).
    """

    name = "history"

    #: above this share of the available budget, a short usage note goes in the dynamic tail
    note_at = 0.8

    def __init__(self, low_water: float = 0.7) -> None:
        self.low_water = low_water
        self._cache: dict[int, tuple[TokenCounter, list[int], list[int], list[int]]] = {}

    def unit_counts(self, state: SessionState, counter: TokenCounter) -> tuple[list[int], list[int]]:
        """Raw (unscaled) per-unit counts and their prefix sums, extended incrementally.

        Recomputed from scratch when a compaction record rewrote units already counted (rare:
        message counts are cached by digest, so this is a pass of dictionary lookups)."""
        entry = self._cache.get(id(counter))
        if entry is None or entry[0] is not counter or entry[3][0] != state.rewrites:
            entry = (counter, [], [0], [state.rewrites])
            self._cache[id(counter)] = entry
        _, counts, prefix, _epoch = entry
        units = state.units
        start = max(0, len(counts) - 1)  # the last unit may have grown since
        del counts[start:]
        del prefix[start + 1:]
        for u in units[start:]:
            n = sum(counter.raw_message(m) for m in u.messages)
            counts.append(n)
            prefix.append(prefix[-1] + n)
        return counts, prefix

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        state = ctx.state
        if not state.units:
            return
        counter = ctx.counter
        counts, prefix = self.unit_counts(state, counter)
        lo = state.first_visible_unit()
        pinned = lo > 0 and state.pinned
        summary = state.summary_message if lo > 0 and lo < len(counts) else None
        summary_raw = counter.raw_message(summary) if summary is not None else 0
        raw = prefix[-1] - prefix[lo] + (counts[0] if pinned else 0) + summary_raw
        yield Item(
            self.name, "history", "session", state.view_slice(lo), priority=50, provenance="log",
            shrink=partial(self._shrink, state), raw_tokens=raw,
            fit=HistoryFit(first_unit=lo, counts=counts, prefix=prefix, summary_raw=summary_raw),
        )
        note = usage_note(ctx, raw)
        if note is not None:
            yield Item("usage", "tail", "dynamic", note, priority=10, provenance="usage-note", header="NOTE", order=0)

    def _shrink(self, state: SessionState, item: Item, cap: int, counter: TokenCounter) -> Item | None:
        fit = item.fit
        assert fit is not None
        counts = fit.counts
        prefix = fit.prefix
        n = len(counts)
        lo = fit.first_unit
        first_raw = counts[0] if state.pinned else 0
        summary = state.summary_message
        summary_raw = counter.raw_message(summary) if summary is not None else 0

        def head(i: int) -> int:
            """Raw tokens kept before unit ``i``: the pinned request and the summary (never dropped)."""
            return (first_raw + summary_raw) if i > 0 else 0

        scale = counter.scale
        target = cap * self.low_water
        new_lo = lo
        # drop oldest units until under the low-water mark, always keeping the newest unit
        while new_lo < n - 1:
            if (prefix[n] - prefix[new_lo] + head(new_lo)) * scale <= target:
                break
            new_lo += 1
        if new_lo == 0 and state.pinned:
            new_lo = 1 if n > 1 else 0
        if new_lo <= lo and (prefix[n] - prefix[lo] + head(lo)) * scale <= cap:
            return item
        raw = prefix[n] - prefix[new_lo] + head(new_lo)
        messages = state.view_slice(new_lo)
        clipped: list[str] = []
        if raw * scale > cap:
            # even the newest unit(s) do not fit: clip the largest tool results (overflow guard)
            messages, raw, clipped = clip_messages(messages, cap, counter)
        dropped = [i for i in range(lo, new_lo) if not (i == 0 and state.pinned)]
        return replace(item, content=messages, raw_tokens=raw, fit=replace(
            fit,
            first_unit=new_lo,
            keep_from_seq=state.units[new_lo].first_seq if new_lo < n else state.seq + 1,
            dropped_units=len(dropped),
            dropped_tokens=sum(counts[i] for i in dropped),
            clipped=tuple(clipped),
        ))


def usage_note(ctx: BuildContext, history_raw: int) -> str | None:
    """A short note for the dynamic tail when the window is over 80% full (estimated before fitting)."""
    counter = ctx.counter
    state = ctx.state
    raw = counter.overheads.per_request + counter.raw_tools(state.tools) + history_raw
    raw += sum(counter.raw_segment(t) for t in (*state.system.values(), *state.context.values()) if t)
    used = raw * counter.scale
    if ctx.available <= 0 or used < HistoryLayer.note_at * ctx.available:
        return None
    tools = {t.name for t in state.tools}
    how = ("call compact_context to compact it now" if "compact_context" in tools
           else "older tool results are folded and old history summarized automatically")
    reread = "; read_result(ref) reads a folded result back" if "read_result" in tools else ""
    return f"The context window is {used / ctx.available:.0%} full ({int(used):,} of {ctx.available:,} tokens): {how}{reread}."




def default_layers(low_water: float = 0.7) -> list[Layer]:
    from ..instructions import InstructionsLayer

    return [
        ToolsLayer(),
        SystemLayer(),
        ContextLayer(),
        InstructionsLayer(),
        HistoryLayer(low_water),
        TaskLayer(),
        EvidenceLayer(),
        MemoryLayer(),
        KnowledgeLayer(),
        RecallLayer(),
    ]
