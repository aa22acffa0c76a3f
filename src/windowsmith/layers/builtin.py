"""The built-in context sources: system, instructions, tools, task, history and notes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import partial
from itertools import accumulate, islice
from typing import TYPE_CHECKING

from ..budget import room_factor
from ..errors import BudgetBlockedError
from ..model import Message, Thinking
from ..text import clip_messages
from .base import BuildContext, HistoryFit, Item, Layer, shrink_text
from .evidence import EvidenceLayer
from .retrieved import KnowledgeLayer, MemoryLayer, RecallLayer
from .scope import scoped_tools
from .shrink import PlannedStub, Shrink, apply_shrinks, plan_image_stubs, plan_shrinks
from .skills import SkillsLayer
from .task import TaskLayer

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
        return scoped_tools(self.name, ctx)  # honours Session.scope_tools


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


def _head_meta(state: SessionState, summary: bool) -> dict[str, int]:
    """The history item's ``head`` (leading messages no compaction rewrites: the pinned request) and ``carry`` (the
    leading messages through the summary message that follows it, which a cut deferring its refresh keeps)."""
    pinned = state.pinned and len(state.units) > 1
    head = len(state.units[0].messages) if pinned else 0
    out = {"head": head} if pinned else {}
    if summary:
        out["carry"] = head + 1
    return out


def _fold_meta(state: SessionState, messages: Sequence[Message]) -> dict[str, int]:
    """The history item's ``fold``: its leading messages through the newest folded unit (``SessionState.fold_end``;
    the history ``messages`` end where the view ends), or nothing before any visible fold."""
    end = state.fold_end()
    return {} if end is None else {"fold": len(messages) - (len(state.view) - state.unit_start[end])}


#: raw tokens under which the first view of a single pinned message is not cut to its two shares:
#: a view that small is mostly its footer and index beside a few lines of head and tail, and in a small history
#: cap the two shares would leave a message only a little over the cap a third of itself, to save a few hundred
#: tokens a call
ALONE_FLOOR = 512


#: of the pinned request's two shares (several opening messages), the part the messages before the task (instructions,
#: a demonstration) keep: half of the task's. At a full share the dev SWE-agent 0.x run, whose 1,700-token demonstration
#: and issue leave an 8K history a band of about 1,000 tokens between two cuts, was cut every other call ($0.0813,
#: `sticky` $0.0722); at half, $0.0754, strict recall 100% either way (with an 80,000-character demonstration: 8K / 16K /
#: 32K $0.0812 / $0.0942 / $0.1120 -> $0.0763 / $0.0874 / $0.0978)
BEFORE_TASK = 0.5

#: characters each tool result keeps in the last tier before a build is refused (``text.clip_messages``; the overflow
#: guard keeps 128): a dozen parallel results in the newest tool message of a tau2-bench airline run, with a system prompt
#: 3,000 tokens longer, left the history 1,453 raw tokens where the signed thinking, the calls and the results at 128
#: characters took 1,468; the build was refused although the system prompt and tools fit
TIGHT_CLIP_CHARS = 24
#: raw tokens under which that tier leaves a result as it is (the guard: 64)
TIGHT_CLIP_TOKENS = 32


class HistoryLayer(Layer):
    """The conversation as the model sees it: the view of the log after compaction records.

    Yields a single item holding the visible messages; it shrinks by dropping whole units (a tool call
    never leaves without its result) from the oldest, down to ``history_low_water`` of the cap so the
    cache prefix breaks rarely. The request (the user's messages before the first reply) is pinned and never
    dropped. Per-unit token counts are kept incrementally, so a build costs O(new messages), not O(session).
    """

    name = "history"

    #: above this share of the available budget, a short usage note goes in the dynamic tail
    note_at = 0.8
    #: the pinned request's share of the history's budget when the history is full: above it, it is shrunk
    pinned_share = 0.2

    def pinned_share_for(self, cap: int, available: int, *, several: bool = False) -> float:
        """The pinned request's share of a history given ``cap`` of the ``available`` budget: ``pinned_share``,
        scaled down by :func:`~windowsmith.budget.room_factor` where that room is tiny (every call reads the view).
        ``several``: the request is several messages (instructions or a demonstration, then the task): a second
        share for its task, its last message, which a shrink spares until the others are at their floor."""
        return self.pinned_share * (2 if several else 1) * room_factor(cap, available)  # (1 where ``available`` <= 0)

    def pinned_allowance(self, state: SessionState, cap_raw: float, share: float, counter: TokenCounter) -> float:
        """Raw tokens the pinned request may keep in a full history, ``share`` (:meth:`pinned_share_for`) of
        ``cap_raw``: of several messages, the task (the last) has its own share and the messages before it
        (instructions, a demonstration) the other, so a short task does not lend what it leaves of its share to a
        long demonstration that every later call reads (SWE-agent 0.x with an 80,000-character demonstration:
        at 32K, $0.131 -> $0.112 for the run, strict recall 100% either way; ``benchmarks/bench_stress.py``). The
        messages before the task keep :data:`BEFORE_TASK` of their share: an example of the interface, read by every
        call, whose view is also what the free cut has left to wait on in a small room."""
        messages = state.units[0].messages
        if len(messages) < 2:
            return share * cap_raw
        half = share / 2 * cap_raw
        return half * BEFORE_TASK + min(float(counter.raw_message(messages[-1])), half)

    def __init__(self, low_water: float = 0.7) -> None:
        self.low_water = low_water
        self._cache: dict[int, tuple[TokenCounter, list[int], list[int], list[int]]] = {}
        #: per counter: prefix sums of each unit's thinking tokens and the indices of units that open with a user
        #: text message (the provider strips the thinking before the last one), extended like the counts
        self._thinking: dict[int, tuple[list[int], list[int]]] = {}

    def unit_counts(self, state: SessionState, counter: TokenCounter) -> tuple[list[int], list[int]]:
        """Raw (unscaled) per-unit counts and their prefix sums, extended incrementally.

        Recomputed from scratch when a compaction record rewrote units already counted (rare:
        message counts are cached by digest, so this is a pass of dictionary lookups)."""
        entry = self._cache.get(id(counter))
        if entry is None or entry[0] is not counter or entry[3][0] != state.rewrites:
            entry = (counter, [], [0], [state.rewrites])
            self._cache[id(counter)] = entry
            self._thinking[id(counter)] = ([0], [])
        _, counts, prefix, _epoch = entry
        tprefix, users = self._thinking[id(counter)]
        units = state.units
        start = max(0, len(counts) - 1)  # the last unit may have grown since
        del counts[start:]
        del prefix[start + 1:]
        del tprefix[start + 1:]
        while users and users[-1] >= start:
            users.pop()
        raw, thinking = counter.raw_message, counter.raw_thinking
        new = units[start:]
        # (comprehensions and accumulate, not one loop of appends: a resumed session counts every unit here once)
        added = [raw(u.messages[0]) if len(u.messages) == 1 else sum(map(raw, u.messages)) for u in new]
        counts += added
        prefix += islice(accumulate(added, initial=prefix[-1]), 1, None)  # (accumulate yields its initial value first)
        if counter.may_send_thinking:
            tprefix += islice(accumulate((sum(map(thinking, u.messages)) for u in new), initial=tprefix[-1]), 1, None)
        else:
            tprefix += [tprefix[-1]] * len(new)
        users += [k for k, u in enumerate(new, start)
                  if u.messages[0].role == "user" and (u.messages[0].plain or not u.messages[0].tool_results)]
        return counts, prefix

    def unbilled(self, counter: TokenCounter, first_unit: int, pinned: bool) -> int:
        """Raw thinking tokens of the units from ``first_unit`` that the provider strips (those before the
        newest user text message, under the ``current_turn`` rule; see ``TokenCounter.raw_unbilled``). Call
        after :meth:`unit_counts` with the same counter."""
        if counter.thinking != "current_turn":
            return 0
        tprefix, users = self._thinking[id(counter)]
        lo = max(first_unit, 1 if pinned else 0)
        last = users[-1] if users else -1
        return tprefix[last] - tprefix[lo] if last > lo else 0

    def _turn_meta(self, state: SessionState, counter: TokenCounter, n_messages: int, lo: int) -> dict[str, int]:
        """The history item's ``turn``: its leading messages through the newest user message that is not a tool
        result (the first message of the newest unit that opens with one), when the provider strips the thinking of
        the replies before such a message and a reply since carries thinking (``cache.plan_cache``'s turn
        breakpoint); when that message is the newest unit and no reply followed it yet, the user's previous message,
        if a reply between the two carried thinking (where the cache's prefix now ends); nothing when the unit is
        not visible (from ``lo``) or is the first. From the counts
        :meth:`unit_counts` keeps (call it first with the same counter): O(1), no walk of the session."""
        if counter.thinking != "current_turn" or id(counter) not in self._thinking:
            return {}
        tprefix, users = self._thinking[id(counter)]
        last = users[-1] if users else 0
        if last < max(lo, 1):
            return {}
        if tprefix[-1] <= tprefix[last]:
            # the user's message is the newest unit: it strips the thinking of the replies since the user's previous
            # message, so what the cache still holds of the history ends there, at the previous request's turn
            # breakpoint; this request keeps that breakpoint (the message breakpoint is more blocks after it than the
            # provider looks back over, past a few tool calls) and the next one moves it to this message
            prev = users[-2] if len(users) > 1 else 0
            if last != len(state.units) - 1 or prev < max(lo, 1) or tprefix[last] <= tprefix[prev]:
                return {}
            last = prev
        return {"turn": n_messages - (len(state.view) - state.unit_start[last]) + 1}

    def stripped(self, counter: TokenCounter) -> tuple[Sequence[int], int]:
        """The thinking prefix sums and how many leading units the provider strips the thinking of (those before
        the newest unit that opens with a user text message, past the first), for :meth:`HistoryFit.billed`;
        ``((), 0)`` when it strips none. Call after :meth:`unit_counts` with the same counter."""
        if counter.thinking != "current_turn":
            return (), 0
        tprefix, users = self._thinking[id(counter)]
        last = users[-1] if users else 0
        return (tprefix, last) if last > 0 and tprefix[last] else ((), 0)

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        state = ctx.state
        if not state.units:
            return
        counter = ctx.counter
        counts, prefix = self.unit_counts(state, counter)
        lo = state.first_visible_unit()
        pinned = lo > 0 and state.pinned
        summary = state.summary_messages if lo > 0 and lo < len(counts) else ()
        summary_raw = sum(counter.raw_message(m) for m in summary)
        unbilled = self.unbilled(counter, lo, state.pinned)
        raw = prefix[-1] - prefix[lo] + (counts[0] if pinned else 0) + summary_raw - unbilled
        messages, lineage = state.history_view(lo)
        thinking_prefix, stripped = self.stripped(counter)
        yield Item(
            self.name, "history", "session", messages, priority=50, provenance="log",
            shrink=partial(self._shrink, state, available=ctx.available), raw_tokens=raw, lineage=lineage,
            fit=HistoryFit(first_unit=lo, counts=counts, prefix=prefix, summary_raw=summary_raw, unbilled=unbilled,
                           thinking_prefix=thinking_prefix, stripped=stripped),
            # the pinned request leads the history and no compaction rewrites it: a cache breakpoint may end it; the
            # summary message after it (the carry) stays as it is through a cut that defers its refresh: another may
            meta={**_head_meta(state, state.summary_message is not None and bool(summary)),
                  **_fold_meta(state, messages), **self._turn_meta(state, counter, len(messages), lo)},
        )
        note = usage_note(ctx, raw)
        if note is not None:
            yield Item("usage", "tail", "dynamic", note, priority=10, provenance="usage-note", header="NOTE", order=0)

    def _shrink(self, state: SessionState, item: Item, cap: int, counter: TokenCounter, *,
                available: int = 0) -> Item | None:
        return _HistoryFitting(self, state, item, cap, counter, available).run()


class _HistoryFitting:
    """One fit of the history item under ``cap`` (:meth:`HistoryLayer._shrink`): the pinned request shrunk to its
    share, the oldest units dropped down to the low water, what must stay shrunk and its images stubbed, tool results
    clipped in tiers; :meth:`run` returns the fitted item, or None when even the last tier does not fit."""

    def __init__(self, layer: HistoryLayer, state: SessionState, item: Item, cap: int, counter: TokenCounter,
                 available: int) -> None:
        fit = item.fit
        assert fit is not None
        self.layer = layer
        self.state = state
        self.item = item
        self.fit = fit
        self.cap = cap
        self.counter = counter
        self.counts = fit.counts
        self.prefix = fit.prefix
        self.n = len(self.counts)
        self.lo = fit.first_unit
        self.pinned = state.pinned
        self.p = 1 if self.pinned else 0
        self.first_raw = self.counts[0] if self.pinned else 0
        self.summary = state.summary_messages
        self.summary_raw = sum(counter.raw_message(m) for m in self.summary)
        self.cap_raw = cap / counter.scale
        self.target = self.cap_raw * layer.low_water
        self.several = self.pinned and len(state.units[0].messages) > 1
        self.share = layer.pinned_share_for(cap, available, several=self.several)
        self.ask_raw = state.carried_tokens(self.lo, state.cut_units, counter.raw_message)  # (in summary_raw)
        self._carried: dict[int, int] = {}
        self.shrinks: list[Shrink] = []
        self.stubs: list[PlannedStub] = []
        self.clipped: list[str] = []
        self.unbilled = 0

    def carried(self, i: int) -> int:
        """Raw tokens the summary messages gain (or lose) when the history starts at unit ``i``: the user's newest
        message the cut drops is carried after the summary message (``SessionState.carried_ask``)."""
        got = self._carried.get(i)
        if got is None:
            got = self._carried[i] = self.state.carried_tokens(i, len(self.state.units), self.counter.raw_message) \
                - self.ask_raw
        return got

    def total(self, i: int, first: int) -> int:
        """Raw billed tokens of the history kept from unit ``i``: the pinned request and the summary stay."""
        return (first + (self.summary_raw + self.carried(i) if i > 0 else 0) + self.prefix[self.n]
                - self.prefix[max(i, self.p)] - self.layer.unbilled(self.counter, i, self.pinned))

    def run(self) -> Item | None:
        first_now = self.shrink_pinned()
        new_lo = self.first_kept(first_now)
        if new_lo <= self.lo and not self.shrinks and self.total(self.lo, first_now) <= self.cap_raw:
            return self.item
        kept = list(range(max(new_lo, self.p) if self.n > 1 else new_lo, self.n))
        raw = self.total(new_lo, first_now)
        if raw > self.cap_raw:
            self.shrink_kept(kept, raw, new_lo)
        fitted = self.fit_messages(new_lo)
        if fitted is None:
            return None  # the assembler drops it and the build refuses it (history_blocked names the message)
        return self.fitted(new_lo, *fitted)

    def shrink_pinned(self) -> int:
        """Shrink the pinned request when it is larger than its share of a full history (it is never dropped); return
        its raw tokens after.

        One of several messages (instructions or a demonstration, then the task) alone over the whole cap shrinks now,
        straight to its shares, the task last: once, not again (with a rewrite of every cached token after it)
        when the history behind it fills. A single message over the whole cap shrinks below, to the two shares:
        every later call reads its view, in a run that may never fill the history (an 80,000-character paste beside
        the ask in a 16K window: 0.7 of the cap read by each call cost 13% more than dropping it); of several blocks
        (a pasted document beside the ask), the water level cuts the largest first and the others stay whole; of
        one, its view keeps head, tail and the lines between that name identifiers (``message_view``: with head
        and tail alone, a SWE-agent request of demonstration and issue in one block lost 19 points of strict
        recall at two shares, the issue's middle; with the named lines, 3 points, and it costs 9% less than at
        the low water). Its images go first (stubs): no view makes an image smaller, and a view of the task loses
        what the next calls need."""
        state, counter, pinned, first_raw = self.state, self.counter, self.pinned, self.first_raw
        allowed = self.layer.pinned_allowance(state, self.cap_raw, self.share, counter) if pinned else 0.0
        if pinned and first_raw > allowed and (self.total(self.lo, first_raw) > self.cap_raw if self.n > 1 else
                                               self.several and first_raw > self.cap_raw):
            cut = int(first_raw - allowed)
            self.stubs = plan_image_stubs(state, [0], cut, counter)
            self.shrinks = plan_shrinks(state, [0], cut - sum(x.saving for x in self.stubs), counter, spare_last=True)
        return _units_raw(state, [0], self.shrinks, counter, self.stubs) if self.shrinks or self.stubs else first_raw

    def first_kept(self, first_now: int) -> int:
        """The first unit kept: drop oldest units until under the low-water mark, always keeping the newest unit."""
        new_lo = self.lo
        while new_lo < self.n - 1 and self.total(new_lo, first_now) > self.target:
            new_lo += 1
        if new_lo == 0 and self.pinned:
            new_lo = 1 if self.n > 1 else 0
        return new_lo

    def shrink_kept(self, kept: list[int], raw: int, new_lo: int) -> None:
        """Even the newest unit(s) do not fit: shrink their largest messages, then the pinned request's. The newest
        unit is cut to the cap, not to the low water: its newest message is what the next step reads, and the
        next build drops the unit when a newer one needs the room (a view may overshoot its estimate: the low
        water is the fallback). The pinned request stays in every later request: it shrinks to the low water
        (alone, to its two shares: :meth:`shrink_pinned`), leaving room for the turns after it."""
        alone = min(self.target, max(2 * self.layer.pinned_share * self.cap_raw, ALONE_FLOOR)) \
            if self.n == 1 and not self.several else self.target
        more, imgs, raw_more = self.shrink_to(kept, raw, self.stubs, alone)
        if raw_more > self.cap_raw and self.pinned and self.n > 1:
            more, imgs, _ = self.shrink_to([0, *kept], self.total(new_lo, self.first_raw), (), alone)
            self.shrinks, self.stubs = [], []
        self.shrinks = [*self.shrinks, *more]
        self.stubs = [*self.stubs, *imgs]

    def shrink_to(self, units: list[int], before: int, done: Sequence[PlannedStub], alone: float
                  ) -> tuple[list[Shrink], list[PlannedStub], int]:
        """The shrinks and image stubs of ``units`` (beside ``done``) and the history's raw size with them
        (``before`` without): their images first (a message's text is worth more than the tokens of a
        picture no view can shrink, the newest image last), then views of their texts."""
        state, counter, cap_raw = self.state, self.counter, self.cap_raw
        others = before - _units_raw(state, units, (), counter, done)
        out: list[Shrink] = []
        imgs: list[PlannedStub] = []
        after = before
        for goal in ((alone,) if self.pinned and units[0] == 0 else (cap_raw, self.target)):
            imgs = plan_image_stubs(state, units, int(before - goal) + 1, counter, exclude=done)
            left = others + _units_raw(state, units, (), counter, [*done, *imgs])
            out = plan_shrinks(state, units, int(left - goal) + 1, counter) if left > goal else []
            after = others + _units_raw(state, units, out, counter, [*done, *imgs])
            if after <= cap_raw:
                break
        return out, imgs, after

    def compose(self, new_lo: int, with_head: bool, carry: tuple[Message, ...]
                ) -> tuple[tuple[Message, ...], tuple[Message, ...], int]:
        """The kept head and body with the planned views and stubs, and the messages' billed raw tokens (their
        unbilled ones in :attr:`unbilled`)."""
        state, shrinks, stubs = self.state, self.shrinks, self.stubs
        head = _unit_messages(state, 0, shrinks, stubs) if with_head else ()
        body = tuple(m for i in range(new_lo, self.n) for m in _unit_messages(state, i, shrinks, stubs))
        msgs = head + carry + body
        self.unbilled = self.counter.raw_unbilled(msgs)
        return head, body, sum(self.counter.raw_message(m) for m in msgs) - self.unbilled

    def clip(self, msgs: tuple[Message, ...], floor_chars: int = 128, min_tokens: int = 64
             ) -> tuple[tuple[Message, ...], int]:
        """``msgs`` with their largest tool results cut head + tail to fit the cap, naming what the cuts lost (those
        cut added to :attr:`clipped`), and their billed raw tokens (:attr:`unbilled` set to theirs)."""
        out, total, cut = clip_messages(msgs, self.cap, self.counter, floor_chars=floor_chars, min_tokens=min_tokens,
                                        index=True)
        self.clipped.extend(c for c in cut if c not in self.clipped)
        self.unbilled = self.counter.raw_unbilled(out)
        return out, total - self.unbilled

    def fit_messages(self, new_lo: int) -> tuple[tuple[Message, ...], int, bool] | None:
        """The messages kept from ``new_lo``, their billed raw tokens and whether the carried summary message was left
        out; None when even the last tier leaves them over the cap."""
        cap, scale = self.cap, self.counter.scale
        with_head = new_lo > 0 and self.pinned
        carry = tuple(self.summary) if new_lo > 0 else ()
        head, body, raw = self.compose(new_lo, with_head, carry)
        messages = head + carry + body
        if raw * scale > cap and not all(m.image_free for m in messages):
            # images no view can shrink (a computer-use agent's screenshots, several in the newest tool message):
            # their stubs, oldest first, the newest image last (a mask record makes them durable)
            units = ([0] if with_head else []) + list(range(new_lo, self.n))
            extra = plan_image_stubs(self.state, units, int(raw - self.cap_raw) + 1, self.counter, exclude=self.stubs)
            if extra:
                self.stubs = [*self.stubs, *extra]
                head, body, raw = self.compose(new_lo, with_head, carry)
                messages = head + carry + body
        if raw * scale > cap:
            # still over (many small blocks): cut the largest tool results head + tail (the overflow guard)
            messages, raw = self.clip(messages)
        carry_left_out = False
        if raw * scale > cap and carry:
            # the summary message a cut carries (work log, index, transcript reference) does not fit beside what
            # must stay: leave it out of this request (the log keeps it, and the next build that has room sends it)
            # rather than refuse the build
            self.clipped.clear()
            messages, raw = self.clip(head + body)
            carry_left_out = True
        if raw * scale > cap:
            # the last tier before refusing: many results in the newest tool message beside a narrow room (a long
            # system prompt at a small window; a dozen parallel lookups): each down to a few words, head + tail, the
            # marker saying what was cut, rather than no request at all while the system prompt and tools fit. The log
            # keeps them whole (the manifest lists them as clipped)
            messages, raw = self.clip(messages, TIGHT_CLIP_CHARS, TIGHT_CLIP_TOKENS)
        return None if raw * scale > cap else (messages, raw, carry_left_out)

    def fitted(self, new_lo: int, messages: tuple[Message, ...], raw: int, carry_left_out: bool) -> Item:
        """The history item with ``messages`` and the fit's record of what it dropped, shrank, stubbed and clipped."""
        state, lo, n = self.state, self.lo, self.n
        dropped = [i for i in range(lo, new_lo) if not (i == 0 and self.pinned)]
        # the folds' end is a position in the unshrunk view: what this fit cut or shrank may have moved it
        meta = {k: v for k, v in self.item.meta.items()
                if k not in ("fold", "turn") and not (carry_left_out and k == "carry")}
        meta.update(self.layer._turn_meta(state, self.counter, len(messages), new_lo))  # (counted from the end: still true)
        return replace(self.item, content=messages, raw_tokens=raw, lineage=None, meta=meta, fit=replace(
            self.fit,
            carry_left_out=carry_left_out,
            first_unit=new_lo,
            keep_from_seq=state.units[new_lo].first_seq if new_lo > lo and new_lo < n else None,
            dropped_units=len(dropped),
            dropped_tokens=sum(self.counts[i] for i in dropped),
            clipped=tuple(self.clipped),
            shrinks=tuple(self.shrinks),
            image_stubs=tuple(self.stubs),
            unbilled=self.unbilled,
        ))


def _unit_messages(state: SessionState, unit: int, shrinks: Sequence[Shrink],
                   stubs: Sequence[PlannedStub] = ()) -> tuple[Message, ...]:
    if any(s.unit == unit for s in shrinks) or any(s.unit == unit for s in stubs):
        return apply_shrinks(state, unit, shrinks, stubs)
    return state.units[unit].messages


def _units_raw(state: SessionState, units: Sequence[int], shrinks: Sequence[Shrink], counter: TokenCounter,
               stubs: Sequence[PlannedStub] = ()) -> int:
    return sum(counter.raw_message(m) for i in units for m in _unit_messages(state, i, shrinks, stubs))


def history_blocked(state: SessionState, cap: int, counter: TokenCounter) -> BudgetBlockedError:
    """The error for a history that cannot fit its share even with its messages shrunk: it names the largest
    message of those that must stay (the pinned request and the newest unit)."""
    n = len(state.units)
    kept = sorted({0, n - 1} if state.pinned else {n - 1})
    raw = sum(counter.raw_message(m) for i in kept for m in state.units[i].messages)
    best: tuple[int, int, str, int] | None = None
    for i in kept:
        u = state.units[i]
        for k, (seq, m) in enumerate(state.span_messages(u.first_seq, u.last_seq)):
            cur = u.messages[k] if k < len(u.messages) else m
            size = counter.raw_message(cur)
            if best is None or size > best[0]:
                thinking = sum(counter.raw_message(Message(cur.role, (b,))) for b in cur.content
                               if isinstance(b, Thinking))
                best = (size, seq, m.role, thinking)
    what = f"the {best[2]} message at seq {best[1]} ({counter.scaled(best[0]):,} tokens)" if best else "the newest message"
    if best and best[3]:
        # a reply's signed thinking has no smaller form: the provider takes it back whole within a tool loop
        what += (f", {counter.scaled(best[3]):,} of them signed thinking the provider requires back whole within a tool "
                 "loop (a request without thinking enabled may leave it out)")
    needed = counter.scaled(raw)
    return BudgetBlockedError(
        f"the history cannot fit its share of {cap:,} tokens even with its messages shrunk to compressed views and its "
        f"tool results cut to a few words: what must stay needs {needed:,} before shrinking; the largest is {what}, "
        "which must stay (the newest user or tool message is never "
        "dropped). Fix it by sending a shorter message (or offloading it as a tool result), by shrinking the system "
        "prompt, tool definitions or task, or by using a model with a larger window. Nothing was sent and no pack "
        "was stored.",
        layer="history", needed=needed, available=cap, limit=cap, block_at=1.0,
    )


def usage_note(ctx: BuildContext, history_raw: int) -> str | None:
    """A short note for the dynamic tail when the window is over 80% full (estimated before fitting), for an agent
    that can act on it: one with the ``compact_context`` or ``read_result`` tool. The tail is never cached, and the
    note's figures change on every call: without such a tool it is ~40 tokens at the full input price on every call
    of a full window (4% of a call's price on the 8K OpenHands runs) that tell the model nothing it can use."""
    counter = ctx.counter
    state = ctx.state
    tools = {t.name for t in state.tools}
    if "compact_context" not in tools and "read_result" not in tools:
        return None
    raw = counter.overheads.per_request + counter.raw_tools(state.tools) + history_raw
    raw += sum(counter.raw_segment(t) for t in (*state.system.values(), *state.context.values()) if t)
    used = raw * counter.scale
    if ctx.available <= 0 or used < HistoryLayer.note_at * ctx.available:
        return None
    how = ("call compact_context to compact it now" if "compact_context" in tools
           else "older tool results are folded and old history summarized automatically")
    reread = "; read_result(ref) reads a folded result back" if "read_result" in tools else ""
    return f"The context window is {used / ctx.available:.0%} full ({int(used):,} of {ctx.available:,} tokens): {how}{reread}."




def default_layers(low_water: float = 0.7, *, recall: bool = False, recite_after_user: bool = False) -> list[Layer]:
    """The built-in layers. ``recall=True`` adds recall over evicted history (the RECALL section): on the
    bench it raises strict recall a little and costs more (its snippets are new input on every call), so it
    is opt-in: ``Engine(layers=lambda: default_layers(recall=True))``. ``recite_after_user=True``: the task tail
    goes after the user's newest text, with progress counts (:class:`~windowsmith.layers.task.TaskLayer`)."""
    from ..instructions import InstructionsLayer

    layers: list[Layer] = [
        ToolsLayer(),
        SystemLayer(),
        ContextLayer(),
        InstructionsLayer(),
        SkillsLayer(),
        HistoryLayer(low_water),
        TaskLayer(after_user=recite_after_user, progress=recite_after_user),
        EvidenceLayer(),
        MemoryLayer(),
        KnowledgeLayer(),
    ]
    if recall:
        layers.append(RecallLayer())
    return layers
