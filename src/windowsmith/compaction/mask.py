"""The mask stage: exchanges older than the last ``keep_turns`` fold into one line each, aged images
become text stubs, in one batch when it pays.

``[turn 12] run_tests(path=tests/) → 3 failed: … (artifact://<sha256>)``: the full result is put in the
blob store first (a result offloaded at ingest already is: its footer names the artifact). A text-protocol
agent's observation (the user message that answers a reply without tool calls, ``SessionState.observation_units``)
folds the same way into a user message, ``[turn 12] output → <preview> [keys: …] (artifact://<sha256>)``
(``CompactionConfig.fold_observations``). Every image
that ``image_keep_turns`` assistant turns have followed becomes
``[image: <caption> (<media type>, <bytes>) (artifact://<sha256>)]``, its bytes stored first. The batch is
applied only when it saves at least ``mask_min_tokens`` (hysteresis) and holds ``mask_batch`` exchanges, or
images saving that much on their own (or the request is at the summary threshold), and only when the cost model
says the cache-read tokens it saves over ``expected_turns`` outweigh the one-time cache rewrite it causes (not the
part the call re-writes anyway: where a user message strips the thinking of earlier replies,
``economics.forced_rewrite_from``), at any fill (at the summary threshold a batch is the alternative to the free cut and runs unless the cut makes that room for
less cache rewrite per token, ``economics.cut_makes_room_cheaper``; with ``cost_aware=False``, ``mask_at`` triggers
instead).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..assemble import Action
from ..model import Message, Text, ToolResult
from ..records import Fold, ImageStubEntry, MaskRecord
from ..text import acts
from ..units import stub_images
from .config import CompactionConfig
from .economics import cut_makes_room_cheaper, forced_rewrite_from
from .fold_lines import Folded, fold_line, observation_line
from .port import Pass
from .working_set import WorkingSet

if TYPE_CHECKING:
    from ..registry import ModelSpec
    from ..state import SessionState
    from ..tokens import TokenCounter
    from ..units import Unit


@dataclass(frozen=True)
class PlannedFold:
    unit: int
    first_seq: int
    last_seq: int
    text: str
    saving: int  # raw tokens
    blobs: tuple[tuple[str, bytes], ...]  # (sha, bytes) to store before the record is written
    calls: Mapping[str, str] = field(default_factory=dict)  # call id → artifact sha of its full result
    artifacts: tuple[str, ...] = ()  # every artifact the line links
    lazy: bool = False  # planned from a persisted fold count: text, blobs, calls and artifacts come with materialize()
    role: str = "assistant"  # "user": a text-protocol agent's observation (observation_line)


@dataclass(frozen=True)
class UnitImages:
    """The image stubs planned for one unit."""

    unit: int
    first_seq: int
    last_seq: int
    saving: int  # raw tokens
    stubs: tuple[ImageStubEntry, ...]
    blobs: tuple[tuple[str, bytes], ...]


def has_images(u: Unit) -> bool:
    for m in u.messages:  # noqa: SIM110  (a loop, not a generator: this runs for every unit of a resumed session)
        if not m.image_free:  # (a message replayed lazily is not built to answer)
            return True
    return False


def is_exchange(u: Unit) -> bool:
    if not u.messages:
        return False
    m = u.messages[0]
    return m.role == "assistant" and bool(m.call_pairs)  # (a message replayed lazily is not built to answer)


class TurnNumbers:
    """The turn number of each unit of a state (how many units up to it open with an assistant message or are folds;
    ``SessionState.turn_units``), found by bisection: no list of every unit's is built."""

    def __init__(self, state: SessionState) -> None:
        self._at = state.turn_units
        self._n = len(state.units)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> int:
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return bisect.bisect_right(self._at, i % self._n)


class MaskPlanner:
    """Plans folds and image stubs for one session, incrementally, so a build costs O(new units)."""

    def __init__(self, config: CompactionConfig) -> None:
        self.config = config
        self._image_next = 0  # entries of SessionState.image_units looked at
        self._image_units: set[int] = set()  # units that may still hold an image
        # (first visible unit, compaction records, counter, observations folded)
        self._plan_key: tuple[int, int, int, bool] | None = None
        self._planned: list[PlannedFold] = []  # folds planned for the units before _planned_upto
        self._planned_upto = 0
        self.planned_saving = 0  # raw tokens the planned folds save (kept with the list: no pass over it per build)
        self.fold_raw: dict[int, int] = {}  # raw tokens of the fold message of each unit planned (by first seq), this key
        # fold counts persisted by an earlier process, per counter scheme: (first visible unit, compaction records, counts)
        self._seeds: dict[str, tuple[int, int, dict[int, int]]] = {}
        self.limit: int | None = None  # the first exchange the last plan keeps (None: nothing to fold)
        self.keep_room = 0.0  # raw tokens of the verbatim share (keep_raw) the kept exchanges leave
        self.working_set = WorkingSet()
        self._observed = 0  # entries of SessionState.observation_units looked at
        self._acted: list[int] = []  # those whose reply acts in its text (acts()): the observations folded by default

    def seed(self, scheme: str, lo: int, compactions: int, fold_raw: dict[int, int]) -> None:
        """Take the raw counts of fold messages planned by an earlier process (a counter of ``scheme``, the view
        starting at unit ``lo`` after ``compactions`` compaction records), so resuming does not write every fold
        line again to decide whether folding pays: a unit whose count is known is planned *lazily* (its line is
        written by :meth:`materialize` if the batch is applied). Ignored unless the view is the same."""
        self._seeds[scheme] = (lo, compactions, fold_raw)

    def fold_counts(self, counter: TokenCounter) -> tuple[int, int, dict[int, int], int] | None:
        """What the current plan knows for ``counter``: (first visible unit, compaction records, fold message
        counts by first seq, first unit not planned yet), or None if the plan is another counter's."""
        key = self._plan_key
        if key is None or key[2] != id(counter):
            return None
        return key[0], key[1], self.fold_raw, self._planned_upto

    def materialize(self, state: SessionState, folds: Sequence[PlannedFold]) -> list[PlannedFold]:
        """``folds`` with every lazy one written out (its line, blobs, calls and artifacts)."""
        turns = self.turn_numbers(state)
        out = []
        for f in folds:
            if f.lazy:
                fl = self._line(state, turns, f.unit)
                f = PlannedFold(f.unit, f.first_seq, f.last_seq, fl.text, f.saving, tuple(fl.blobs), fl.calls,
                                tuple(fl.artifacts), role=f.role)
            out.append(f)
        return out

    def _line(self, state: SessionState, turns: TurnNumbers, i: int) -> Folded:
        """The fold of unit ``i``: an exchange's :func:`fold_line`, an observation's :func:`observation_line`."""
        u = state.units[i]
        cfg = self.config
        if u.messages[0].role == "user":
            logged = next((m for _, m in state.span_messages(u.first_seq, u.first_seq)), None)
            return observation_line(turns[i], u, chars=cfg.fold_chars, keys=cfg.fold_keys, original=logged)
        return fold_line(turns[i], u, chars=cfg.fold_chars, keys=cfg.fold_keys, originals=logged_results(state, u))

    def observations(self, state: SessionState) -> Sequence[int]:
        """The observation units a batch may fold: every one of ``SessionState.observation_units`` with
        ``fold_observations=True``; by default those whose reply before acts in its text (:func:`acts`: a command
        block, an ``Action:`` line, an action tag), so a customer's answer to a question is never folded (tau-bench
        runs without tool definitions talk before the first call). Kept incrementally: each reply is read once."""
        units = state.observation_units
        if self.config.fold_observations:
            return units
        for i in units[self._observed:]:
            if acts(state.units[i - 1].messages[0]):
                self._acted.append(i)
        self._observed = len(units)
        return self._acted

    def turn_numbers(self, state: SessionState) -> TurnNumbers:
        return TurnNumbers(state)

    def plan_mask(self, state: SessionState, counter: TokenCounter, counts: Sequence[int],
                  keep_raw: float | None = None, *, copy: bool = True) -> list[PlannedFold]:
        """Folds for every unfolded exchange older than the last ``keep_turns`` exchanges (or, in a small
        window, older than the newest ``keep_raw`` tokens of exchanges; at least two stay) that gets shorter.
        A text-protocol agent's observations count as exchanges (``CompactionConfig.folds_observations``).
        ``copy=False`` returns the planner's own list (read it, never change it; :attr:`planned_saving` is
        its total saving when it is not empty), so a build that folds nothing does not copy it."""
        units = state.units
        turns = self.turn_numbers(state)
        exchanges = state.exchange_units  # (the state keeps them, folds included)
        observations = self.observations(state) \
            if self.config.folds_observations(bool(state.tools or state.exchange_units)) else []
        kept = 0
        limit = None
        newest = heapq.merge(reversed(exchanges), reversed(observations), reverse=True) if observations \
            else reversed(exchanges)
        for seen, i in enumerate(newest, 1):  # the newest exchanges only, not every unit
            kept += counts[i] if i < len(counts) else 0
            if seen >= self.config.keep_turns or (keep_raw is not None and seen >= 2 and kept > keep_raw):
                limit = i
                break
        self.limit = limit
        # what the kept exchanges leave of the verbatim share: room for the working set (working_set.py)
        self.keep_room = max(0.0, keep_raw - kept) if keep_raw is not None else 0.0
        if limit is None:
            return []
        lo = state.first_visible_unit()
        # incremental: closed units never change and the view changes only with a compaction record, so the
        # folds planned for units [lo, upto) stay valid until then; a build plans only the units that aged
        key = (lo, len(state.compactions), id(counter), bool(observations))
        if key != self._plan_key:
            self._plan_key, self._planned, self._planned_upto, self.planned_saving = key, [], lo, 0
            self.fold_raw = {}
        seed = self._seeds.get(counter.scheme)
        known = seed[2] if seed is not None and seed[0] == lo and seed[1] == len(state.compactions) else None
        if limit < self._planned_upto:
            self._planned = [f for f in self._planned if f.unit < limit]
            self._planned_upto = limit
            self.planned_saving = sum(f.saving for f in self._planned)
        end = min(limit, len(counts))  # a unit the history layer did not count yet is planned next time
        # only the exchanges (and observations) among units [start, end) (every other unit is skipped below): a
        # resumed session's first plan walks a third of its units, not all of them
        start = max(self._planned_upto, lo)  # never a unit before the view
        ex = exchanges[bisect.bisect_left(exchanges, start):bisect.bisect_left(exchanges, end)]
        aged = heapq.merge(ex, observations[bisect.bisect_left(observations, start):
                                            bisect.bisect_left(observations, end)]) if observations else ex
        for i in aged:
            u = units[i]
            if u.folded or u.pinned or u.open_calls:  # (every other unit listed is an exchange or an observation)
                continue
            role = u.messages[0].role
            new = known.get(u.first_seq) if known is not None else None
            if new is not None:  # counted by an earlier process: the line is written only if the fold is applied
                self.fold_raw[u.first_seq] = new
                saving = counts[i] - new
                if saving > 0:
                    self._planned.append(PlannedFold(i, u.first_seq, u.last_seq, "", saving, (), {}, (), lazy=True,
                                                     role=role))
                    self.planned_saving += saving
                continue
            fl = self._line(state, turns, i)
            new = counter.raw_message(Message(role, (Text(fl.text),)))
            self.fold_raw[u.first_seq] = new
            saving = counts[i] - new
            if saving > 0:
                self._planned.append(PlannedFold(i, u.first_seq, u.last_seq, fl.text, saving, tuple(fl.blobs), fl.calls,
                                                 tuple(fl.artifacts), role=role))
                self.planned_saving += saving
        self._planned_upto = max(self._planned_upto, end)
        return list(self._planned) if copy else self._planned

    def plan_images(self, state: SessionState, counter: TokenCounter, counts: Sequence[int], *,
                    skip: Container[int] = ()) -> list[UnitImages]:
        """Text stubs for the images of every visible unit that ``image_keep_turns`` assistant turns (or more)
        have followed; units in ``skip`` (folded by the same batch) are left to their fold."""
        keep = self.config.image_keep_turns
        if keep is None:
            return []
        units = state.units
        turns = self.turn_numbers(state)
        added = state.image_units  # (the state keeps the units an image was added to)
        for i in added[max(0, self._image_next - 1):]:  # the last one may have grown since
            if has_images(units[i]):
                self._image_units.add(i)
        self._image_next = len(added)
        lo = state.first_visible_unit()
        now = turns[-1] if len(turns) else 0
        out = []
        for i in sorted(self._image_units):
            u = units[i]
            if u.folded or (i < lo and not u.pinned) or not has_images(u):
                self._image_units.discard(i)  # folded, compacted away or already stubbed: for good
                continue
            if now - turns[i] < keep:
                break  # turn numbers only grow: every later unit is younger
            if i in skip or u.is_open:
                continue
            msgs = list(u.messages)
            stubs: list[ImageStubEntry] = []
            blobs: list[tuple[str, bytes]] = []
            paths: dict[int, dict[tuple[int | str, ...], str]] = {}
            for k, entry, raw in state.image_stubs(u):
                paths.setdefault(k, {})[entry.at] = entry.text
                stubs.append(entry)
                blobs.append((entry.artifact, raw))
            for k, texts in paths.items():
                msgs[k] = stub_images(msgs[k], texts)
            old = counts[i] if i < len(counts) else sum(counter.raw_message(m) for m in u.messages)
            saving = old - sum(counter.raw_message(m) for m in msgs)
            if stubs and saving > 0:
                out.append(UnitImages(i, u.first_seq, u.last_seq, saving, tuple(stubs), tuple(blobs)))
        return out

class _FoldedUnits:
    """The units of planned folds (in unit order) as a container a lookup bisects: no set of every planned
    fold is built per build."""

    def __init__(self, folds: Sequence[PlannedFold]) -> None:
        self.folds = folds

    def __contains__(self, unit: object) -> bool:
        if not isinstance(unit, int):
            return False
        j = bisect.bisect_left(self.folds, unit, key=lambda f: f.unit)
        return j < len(self.folds) and self.folds[j].unit == unit


def rewrite_from(edits: Sequence[PlannedFold | UnitImages], spec: ModelSpec, cached_upto: int) -> int:
    """The first unit a batch re-writes the cache from: its first edit, or, with explicit cache breakpoints
    (Anthropic), ``cached_upto`` if that is earlier (the first unit after the newest fold, else after the carry,
    else after the pinned head): the cache holds only the prefixes the last request marked (head, carry, folds,
    end), so an edit after the folds re-writes everything from the folds on."""
    first = min(f.unit for f in edits)
    return min(first, cached_upto) if spec.max_breakpoints > 0 else first


def mask_pays(edits: Sequence[PlannedFold | UnitImages], counts: Sequence[int], scale: float, spec: ModelSpec,
              expected_turns: float, *, saved_raw: int | None = None, after_raw: int | None = None,
              cached_upto: int | None = None) -> tuple[bool, dict[str, float | int]]:
    """Whether folding (and stubbing images) now saves money over ``expected_turns``: the saved tokens would
    otherwise be read from cache every turn; the batch rewrites the cache once, from :func:`rewrite_from` on
    (``cached_upto``: the session's first compactable unit; None: from the first edit).

    ``edits`` are in unit order. ``saved_raw`` (their total saving) and ``after_raw`` (the raw tokens of the
    units the batch re-writes) may be passed when the caller keeps them; else they are summed here."""
    if not edits:
        return False, {}
    p = spec.prices
    read = p.cache_read or p.input
    write = p.cache_write or p.input
    if saved_raw is None:
        saved_raw = sum(f.saving for f in edits)
    if after_raw is None:
        first = min(f.unit for f in edits) if cached_upto is None else rewrite_from(edits, spec, cached_upto)
        after_raw = sum(counts[first:])
    saved = saved_raw * scale
    after = after_raw * scale - saved
    per_turn = saved * read / 1e6
    rewrite = max(0.0, after) * max(0.0, write - read) / 1e6
    gain = per_turn * expected_turns - rewrite
    return gain > 0, {"saving_usd_per_turn": round(per_turn, 6), "rewrite_usd": round(rewrite, 6),
                      "net_usd": round(gain, 6), "expected_turns": expected_turns}


def run_mask(p: Pass, planner: MaskPlanner, size: int) -> int:
    """Fold old exchanges and stub aged images in one batch if due; returns the request's new size."""
    cfg = p.config
    avail = p.available
    scale = p.scale
    state = p.state
    if "mask" in p.breaker or not (p.urgent or size >= cfg.mask_at * avail or cfg.cost_aware):
        return size
    # low water: a batch due because a summary is near folds deeper, so the next one is turns away
    # instead of one small batch (one more cache rewrite) every turn or two at the ceiling
    near_summary = size >= p.summarize_at * avail
    folds, fold_raw, keep = _plan_folds(p, planner, near_summary)
    images = planner.plan_images(state, p.counter, p.counts, skip=_FoldedUnits(folds))
    edits: Sequence[PlannedFold | UnitImages] = sorted([*folds, *images], key=lambda x: x.unit) if images else folds
    image_raw = sum(x.saving for x in images)
    image_saved = image_raw * scale
    saved = int(fold_raw * scale + image_saved)
    pays, economics, after_raw = _batch_economics(p, edits, fold_raw + image_raw)
    due = _batch_due(p, size, near_summary, pays, saved=saved, n_folds=len(folds), image_saved=image_saved,
                     after_raw=after_raw)
    if not edits or not due:
        return size
    trigger = ("on demand" if p.force else "cost model: pays back" if cfg.cost_aware and pays
               else "the summary threshold" if cfg.cost_aware and near_summary else "window pressure")
    return _write_mask(p, planner, size, folds, images, keep, saved=saved, trigger=trigger, economics=economics)


def _plan_folds(p: Pass, planner: MaskPlanner, near_summary: bool
                ) -> tuple[Sequence[PlannedFold], int, frozenset[int]]:
    """The folds of the batch (deeper when a summary is near), their raw saving, and the units of the working set
    left out of it."""
    cfg = p.config
    state = p.state
    deep = cfg.mask_low_water if near_summary else 1.0
    # the planner's own list, not a copy: a build that folds nothing costs O(new units), not O(planned folds)
    folds: Sequence[PlannedFold] = planner.plan_mask(state, p.counter, p.counts,
                                                     keep_raw=p.keep_ratio * deep * p.available / p.scale, copy=False)
    # (no fold due leaves the planner's list for later builds: its saving is not this batch's)
    fold_raw = planner.planned_saving if folds else 0
    keep: frozenset[int] = frozenset()
    if folds and planner.limit is not None and cfg.working_set:
        # the files the agent is still working on: their old reads stay out of the batch, in the room the
        # verbatim share leaves beside the kept exchanges
        keep = planner.working_set.protected(state.units, planner.limit, state.first_visible_unit(), p.counts,
                                             planner.keep_room)
        if keep:
            folds = [f for f in folds if f.unit not in keep]
            fold_raw = sum(f.saving for f in folds)
    if near_summary and not p.urgent and any(f.role == "user" for f in folds):
        # observations fold under the summary threshold (where the batch pays back), never at it: there the cut
        # (a work log, an index, the newest turns) makes deeper room for the same rewrite, and a batch of
        # observations folded instead kept twice the tokens for the rest of the run (mini-swe-agent, dev: +1.9% at
        # 32K with Claude's prices, +1.7% at 16K with gpt-4o's, where the batch paid against keeping the span)
        folds = [f for f in folds if f.role != "user"]
        fold_raw = sum(f.saving for f in folds)
    return folds, fold_raw, keep


def _batch_economics(p: Pass, edits: Sequence[PlannedFold | UnitImages], saved_raw: int
                     ) -> tuple[bool, dict[str, float | int], int]:
    """Whether the batch pays back (:func:`mask_pays`), its economics, and the raw tokens it re-writes."""
    state = p.state
    cached_upto = max(state.first_compactable_unit(), state.fold_end() or 0)  # (the fold breakpoint: plan_cache)
    first = rewrite_from(edits, p.spec, cached_upto) if edits else 0
    # the raw tokens the batch re-writes, from ``first`` to the end (the mask cost model's and the cut comparison's)
    after_raw = p.raw_from(first) if edits else 0
    # what the call re-writes anyway (the thinking a user message strips, economics.forced_rewrite_from) is not the
    # batch's to pay: from there on the cache holds nothing whether the batch runs or not
    forced = forced_rewrite_from(state, p.counter) if edits else None
    if forced is not None and forced < len(p.counts):
        after_raw -= p.raw_from(max(first, forced))
    pays, economics = mask_pays(edits, p.counts, p.scale, p.spec, p.config.remaining_turns(len(state.turn_units)),
                                saved_raw=saved_raw, after_raw=after_raw)
    return pays, economics, after_raw


def _batch_due(p: Pass, size: int, near_summary: bool, pays: bool, *, saved: int, n_folds: int, image_saved: float,
               after_raw: int) -> bool:
    """Whether the batch (saving ``saved`` tokens) runs now: on demand, or when it is big enough and due."""
    cfg = p.config
    avail = p.available
    pressure = size >= cfg.mask_at * avail
    # hysteresis: a batch of at least mask_batch exchanges (or images) saving min_saving tokens (any batch
    # when the alternative is a summary), so the cache prefix breaks every few turns at most
    floor = cfg.min_saving(avail)
    big_enough = saved >= floor and (n_folds >= cfg.mask_batch or near_summary or image_saved >= floor)
    if near_summary and not p.urgent and size - saved >= cfg.mask_at * avail:
        big_enough = False  # folding cannot make real room any more: let the summary do it, once
    # near the threshold the alternative is the free cut (or a summary that pays better than it): a batch that
    # re-writes much to save little waits for it (economics.cut_makes_room_cheaper)
    if (big_enough and near_summary and not p.urgent and cfg.cost_aware and cfg.summary_pays
            and cut_makes_room_cheaper(p, size, saved, after_raw * p.scale - saved)):
        big_enough = False
    # with the cost model, a batch has to pay back over expected_turns (the cache reads it saves against the
    # rewrite it causes) whatever the fill, unless a summary is near (there it is weighed against the free cut,
    # above): under the summary threshold the request can still grow, and the summary or the free cut decides there.
    # Screenshots showed why: the newest turns' images cannot fold, so a batch at mask_at bought two or three turns
    # and rewrote the cache each time (a browser run at 32K: +31% against sticky). Without it, mask_at triggers
    due = near_summary or (pays if cfg.cost_aware else pressure)
    return p.urgent or (big_enough and due)


def _write_mask(p: Pass, planner: MaskPlanner, size: int, folds: Sequence[PlannedFold], images: Sequence[UnitImages],
                keep: frozenset[int], *, saved: int, trigger: str, economics: dict[str, float | int]) -> int:
    """Write the batch: its folds' lines, every blob they and the image stubs link, then the mask record; returns
    the request's new size."""
    state = p.state
    p.breaker.trip("mask")
    folds = planner.materialize(state, folds)  # a copy (the planner's list changes with the view), lines written
    edits: list[PlannedFold | UnitImages] = sorted([*folds, *images], key=lambda x: x.unit)
    # every folded result and image in one write (one transaction in a session store), before the record
    p.port.put_blobs([raw for e in edits for _sha, raw in e.blobs])
    stubs = [st for x in images for st in x.stubs]
    rec = MaskRecord(
        folds=tuple(Fold(f.first_seq, f.last_seq, f.text, f.artifacts, dict(f.calls), f.role) for f in folds),
        saved_tokens=saved,
        reason=f"{p.why}; {trigger}; {'; '.join(_batch_what(p.config, folds, stubs, keep))}",
        images=tuple(stubs),
        economics=economics,
    )
    p.port.append(rec)
    before = size
    size -= saved
    p.result.stages.append("mask")
    p.result.actions.append(Action("mask", "history", rec.reason, before, size,
                                   {"folds": len(folds), **({"images": len(stubs)} if stubs else {}),
                                    **({"working_set": len(keep)} if keep else {}),
                                    "first_seq": edits[0].first_seq, "last_seq": max(x.last_seq for x in edits),
                                    "record_seq": state.seq, **economics}))
    return size


def _batch_what(cfg: CompactionConfig, folds: Sequence[PlannedFold], stubs: Sequence[ImageStubEntry],
                keep: frozenset[int]) -> list[str]:
    """What a batch did, for its record's reason."""
    what = []
    if folds:
        seen = sum(1 for f in folds if f.role == "user")
        kinds = [f"{len(folds) - seen} exchange(s)"] if seen < len(folds) else []
        kinds += [f"{seen} observation(s) (user messages)"] if seen else []
        what.append(f"{' and '.join(kinds)} older than the last {cfg.keep_turns} folded")
    if stubs:
        what.append(f"{len(stubs)} image(s) older than {cfg.image_keep_turns} turn(s) replaced by text stubs")
    if keep:
        what.append(f"{len(keep)} older read(s) of files the kept turns name left verbatim (working set)")
    return what


def logged_results(state: SessionState, u: Unit) -> dict[str, ToolResult]:
    """The tool results of a unit as logged (the view's copy may have been rewritten), by call id."""
    return {r.call_id: r for _, m in state.span_messages(u.first_seq, u.last_seq) for r in m.tool_results}


def fold_artifacts(state: SessionState, first_seq: int) -> dict[str, str]:
    """call id → artifact sha for a folded unit, from its mask record.

    Records carry the mapping (``calls``). Records written before it only list artifacts: those are
    paired with the span's results in order, which is right unless the exchange mixed results offloaded
    at ingest with inline ones."""
    for rec in reversed(state.records):
        if not isinstance(rec, MaskRecord):
            continue
        for f in rec.folds:
            if f.first_seq == first_seq:
                if f.calls is not None:
                    return dict(f.calls)
                ids = [b.call_id for _, m in state.span_messages(f.first_seq, f.last_seq)
                       for b in m.content if isinstance(b, ToolResult)]
                return dict(zip(ids, f.artifacts, strict=False))
    return {}


__all__ = ["MaskPlanner", "PlannedFold", "TurnNumbers", "UnitImages", "fold_artifacts", "has_images", "is_exchange",
           "logged_results", "mask_pays", "rewrite_from", "run_mask"]
