"""The emergency stage, no model: keep the pinned request, the summary, a work log of one line per dropped
exchange, an index of the identifiers the dropped span named and the kept request lost (``keys.py``, within
``index_ratio`` of the budget) and the last ``emergency_keep`` messages (fewer when they would leave the request
above ``summary_target``; the newest unit always)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..assemble import Action
from ..records import EmergencyRecord
from ..stand_ins import LOG_LINE_CHARS, flat_text
from ..text import action_line, identifiers
from .economics import cut_mark, fixed_raw
from .fold_lines import fold_line
from .keys import fit_index, mention, message_text, rank_lost
from .mask import TurnNumbers, is_exchange, logged_results
from .port import Pass, carry_caps
from .transcript import store_transcript

if TYPE_CHECKING:
    from ..state import SessionState
    from ..tokens import TokenCounter


def run_emergency(p: Pass, turns: TurnNumbers, size: int, *, failed: bool, summarized_before: bool) -> int:
    """Truncate if the summary failed, the provider still refused after a summary, or the request does not
    fit; returns the request's new size."""
    cfg = p.config
    avail = p.available
    scale = p.scale
    due = (
        (failed and not p.summary_declined and size >= p.summarize_at * avail)  # the summary failed: the next stage
        # no summary placed (its call does not pay): cut in one batch at the high-water mark, down to the low one
        # or no summary span was worth one: the free cut, if it removes enough to wait for the next one (else the
        # history layer's fit took the span at the block threshold, without a work log)
        # (the size first: cut_saves sums the compactable history, which under the mark may be the whole session)
        # (cut_mark is at least summarize_at: below it, no need to price the mark)
        or (size >= p.summarize_at * avail and size >= cut_mark(p, size) * avail
            and (p.summary_declined or ("summary" not in p.result.stages and cut_saves(p))))
        or (p.harder and summarized_before)  # the provider still refused after a summary
        or size > avail  # still does not fit
    )
    if "emergency" in p.breaker or not due:
        return size
    # what the kept messages may take so the request lands at summary_target (hence under every
    # trigger: a rebuild with no new events must not truncate again)
    fixed, pinned = fixed_raw(p.state, p.counter, size, scale)
    log_cap, index_cap = carry_caps(p)
    keep_raw = cfg.summary_target * (0.7 if p.harder else 1.0) * avail / scale - fixed - pinned - log_cap - index_cap
    n = len(p.state.units)
    keep_raw -= p.state.carried_tokens(n - 1, n, p.counter.raw_message)  # what a cut would carry (the newest unit stays)
    r = emergency(p, turns, p.why if not failed else f"{p.why}; no summary (it failed, or its model call does not pay for itself)", keep_raw=max(0.0, keep_raw))
    p.breaker.trip("emergency")
    if r is None:
        return size
    removed, added, rec = r
    before = size
    size = max(0, size - int((removed - added) * scale))
    p.result.stages.append("emergency")
    p.result.actions.append(Action("emergency", "history", rec.reason, before, size,
                                   {"keep_from_seq": rec.keep_from_seq, "first_seq": rec.first_seq,
                                    "last_seq": rec.last_seq, "work_log_lines": len(rec.work_log),
                                    "index": list(rec.index), "record_seq": p.state.seq}))
    return size


WORK_LOG_KEYS = 8  # identifiers a work-log line keeps from the message it stands for
#: identifiers a work-log line for an exchange (a fold line) keeps from its result: 8, as for other lines, was
#: neutral on the yardstick but lost 2 points of strict recall on the dev tau-bench runs with large tool-call
#: arguments at 8K (86.2% -> 84.2%) and 0.6 with screenshots (benchmarks/bench_stress.py)
WORK_LOG_FOLD_KEYS = 12


def cut_saves(p: Pass) -> bool:
    """Whether a free cut would remove at least ``min_saving`` tokens (all but the newest unit of the compactable
    history): a request whose floor (tools, system, pinned request, carry, newest unit) is near the high-water mark
    would otherwise be cut again at every call."""
    lo = p.state.first_compactable_unit()
    n = min(len(p.counts), len(p.state.units))
    return sum(p.counts[lo:n - 1]) * p.scale >= p.config.min_saving(p.available)


def index_budget(p: Pass) -> int:
    """Raw tokens the identifier index may take (:func:`carry_caps`; 0: no index)."""
    return carry_caps(p)[1]


def lost_index(p: Pass, lo: int, cut: int, work_log: Sequence[str], *, budget: int | None = None,
               pending: bool = False) -> tuple[str, ...]:
    """The identifiers the span ``units[lo:cut]`` named that the request keeps nowhere else (pinned request,
    kept units, work log, summary, system, goal), best first, within ``budget`` (default :func:`index_budget`),
    with the previous index's entries after the new ones (``keys.py``). ``pending``: for the pending message of a
    deferred cut: the carried index counts as kept and the previous entries are the pending message's."""
    budget = index_budget(p) if budget is None else budget
    return lost_identifiers(p.state, p.counter, lo, cut, work_log, budget, pending=pending)


def lost_identifiers(state: SessionState, counter: TokenCounter, lo: int, cut: int, work_log: Sequence[str],
                     budget: int, *, pending: bool = False) -> tuple[str, ...]:
    """:func:`lost_index` outside a compaction pass (the history layer's own cut, ``build._persist_truncation``)."""
    if budget <= 0 or not lo < cut:
        return ()
    units = state.units
    dropped = [mention(m) for _seq, m in state.span_messages(units[lo].first_seq, units[cut - 1].last_seq)]
    kept: list[str] = [message_text(m) for u in units[cut:] for m in u.messages]
    if state.pinned:
        kept += [message_text(m) for m in units[0].messages]
    ask = state.carried_ask(cut, len(units), work_log)
    if ask is not None:  # the user's message the cut carries (the work log holds it otherwise)
        kept.append(message_text(state.ask_message(ask)))
    kept += work_log
    if pending:
        kept.append(", ".join(state.index))
    kept += state.system.values()
    if state.summary and state.summary.get("text"):
        kept.append(str(state.summary["text"]))
    goal = " ".join(x for x in (state.task.goal, state.task.step) if x)
    if goal:
        kept.append(goal)
    ranked = rank_lost(dropped, kept=kept, goal=goal, previous=state.pending_index if pending else state.index)
    return fit_index(ranked, budget, counter.raw_text)


def defers(p: Pass) -> bool:
    """Whether a cut leaves the summary message (work log, index, transcript reference) as it is: at most
    ``carry_refresh`` - 1 cuts in a row, and not after a provider refusal. Every request
    after a cut reads that message, and a cut that rewrites it writes it to the cache again (1.25 times the input price,
    against a tenth for a read); where tools and system leave little room, cuts come every few calls and those writes
    are most of what the carry costs. A deferred span's lost identifiers and transcript go to the pending message
    after the summary message (``SessionState.summary_messages``) until the next refresh takes the span into the work
    log and the index."""
    state = p.state
    return (p.config.carry_refresh > 1 and not p.harder
            and state.deferred_cuts + 1 < p.config.carry_refresh
            and state.summary_message is not None and bool(state.work_log or state.index))


def emergency(p: Pass, turns: TurnNumbers, why: str, keep_raw: float | None = None) -> tuple[int, int, EmergencyRecord] | None:
    """Keep the last ``emergency_keep`` messages (whole units, the newest always), and no more than
    ``keep_raw`` raw tokens of them; everything older becomes work-log lines."""
    state = p.state
    counter = p.counter
    units = state.units
    n = len(units)
    lo = state.first_compactable_unit()
    cut = _cut_point(p, lo, keep_raw)
    if cut is None:
        return None
    removed = sum(counter.raw_message(m) for u in units[lo:cut] for m in u.messages)
    removed += sum(counter.raw_message(m) for m in state.summary_messages)
    if defers(p):
        return removed, *_deferred_cut(p, lo, cut, why)
    # the spans earlier cuts deferred join this one's work log and index (their transcripts are already stored)
    span_lo = lo if state.pending_seq is None else \
        min(lo, bisect.bisect_left(units, state.pending_seq, key=lambda u: u.first_seq))
    lines, blobs = _work_log_lines(p, turns, span_lo, cut)
    for _sha, raw in blobs:
        p.port.put_blob(raw)
    transcript = store_transcript(p.port, state.span_messages(units[lo].first_seq, units[cut - 1].last_seq),
                                   units[lo].first_seq, units[cut - 1].last_seq)
    # the record holds the whole new work log (older lines first), trimmed to its budget; where not even the newest
    # line fits it (a tiny room: the cap scaled to a few tokens, a line ~100), the log is empty and the index takes
    # its cap: a few identifiers (ids, names, paths) of the span say more per token than a cut-off line
    log = [*state.work_log, *lines]
    cap = carry_caps(p)[0]
    while log and sum(counter.raw_text(x) + 1 for x in log) > cap:
        log.pop(0)
    lines = log
    index = lost_index(p, span_lo, cut, lines, budget=index_budget(p) + (0 if log else cap))
    ask = state.carried_ask(cut, n, lines)
    rec = EmergencyRecord(
        first_seq=units[lo].first_seq,
        last_seq=units[cut - 1].last_seq,
        keep_from_seq=units[cut].first_seq,
        work_log=tuple(lines),
        transcript=transcript,
        artifacts=tuple(s for s, _ in blobs),
        reason=f"{why}; model-free cut of the oldest history: kept the first request, the summary, a work log"
               f"{f', an index of {len(index)} identifier(s) the cut lost' if index else ''}"
               f"{f', the user message at seq {units[ask].first_seq} (the newest the cut took)' if ask is not None else ''}"
               f" and the last {sum(len(u.messages) for u in units[cut:])} message(s)",
        index=index,
    )
    p.port.append(rec)
    return removed, sum(counter.raw_message(m) for m in state.summary_messages), rec


def _cut_point(p: Pass, lo: int, keep_raw: float | None) -> int | None:
    """The first unit an emergency cut keeps: the last ``emergency_keep`` messages (whole units, the newest always),
    no more than ``keep_raw`` raw tokens of them; None if the cut would take nothing after ``lo``."""
    units = p.state.units
    n = len(units)
    keep_msgs = 0
    kept = 0
    cut = n
    while cut > lo + 1 and keep_msgs < p.config.emergency_keep:
        c = sum(p.counter.raw_message(m) for m in units[cut - 1].messages)
        if keep_raw is not None and cut < n and kept + c > keep_raw:
            break  # over the room left for verbatim messages (the newest unit stays regardless)
        cut -= 1
        kept += c
        keep_msgs += len(units[cut].messages)
    if keep_msgs > p.config.emergency_keep and cut < n - 1:
        cut += 1  # the last N messages, not more (a unit is never split)
    cut = min(cut, n - 1)  # the newest unit always stays
    return None if cut <= lo else cut


def _deferred_cut(p: Pass, lo: int, cut: int, why: str) -> tuple[int, EmergencyRecord]:
    """A cut that leaves the summary message as it was (:func:`defers`): the span's transcript and the identifiers
    it lost go to the pending message. The raw tokens of the messages standing for the history after it, and its
    record."""
    state = p.state
    units = state.units
    transcript = store_transcript(p.port, state.span_messages(units[lo].first_seq, units[cut - 1].last_seq),
                                  units[lo].first_seq, units[cut - 1].last_seq)
    index = lost_index(p, lo, cut, state.work_log, budget=index_budget(p) // 2, pending=True)
    rec = EmergencyRecord(
        first_seq=units[lo].first_seq, last_seq=units[cut - 1].last_seq, keep_from_seq=units[cut].first_seq,
        work_log=(), transcript=transcript, artifacts=(),
        reason=f"{why}; model-free cut of the oldest history: kept the first request, the summary message as it "
               f"was (the next cut that rewrites it takes this span into its work log), a pending message"
               f"{f' of {len(index)} identifier(s) the cut lost' if index else ''} with the span's transcript "
               f"and the last {sum(len(u.messages) for u in units[cut:])} message(s)",
        index=index, deferred=True)
    p.port.append(rec)
    return sum(p.counter.raw_message(m) for m in state.summary_messages), rec


def _work_log_lines(p: Pass, turns: TurnNumbers, span_lo: int, cut: int) -> tuple[list[str], list[tuple[str, bytes]]]:
    """One work-log line per unit from ``span_lo`` to ``cut`` (a fold's own line, an exchange's fold line, else the
    message's text cut to :data:`LOG_LINE_CHARS` with the identifiers it cut), and the blobs the lines link."""
    state = p.state
    lines: list[str] = []
    blobs: list[tuple[str, bytes]] = []
    for i in range(span_lo, cut):
        u = state.units[i]
        if u.folded:
            lines.append(u.messages[0].text)
        elif is_exchange(u):
            fl = fold_line(turns[i], u, chars=80, keys=WORK_LOG_FOLD_KEYS, originals=logged_results(state, u))
            lines.append(fl.text)
            blobs.extend(fl.blobs)
        else:
            m = u.messages[0]
            t = flat_text(m)
            shown = t if len(t) <= LOG_LINE_CHARS else (action_line(m, LOG_LINE_CHARS) or t[:LOG_LINE_CHARS - 1] + "…")
            # like a fold line, the line keeps the identifiers of what it cut (paths, errors, symbols, ids)
            keys = [k for k in identifiers(m.text, ranked=True) if k not in shown][:WORK_LOG_KEYS] \
                if len(t) > LOG_LINE_CHARS else []
            more = f" [keys: {', '.join(keys)}]" if keys else ""
            lines.append(f"[turn {turns[i]}] {m.role}: {shown}{more}")
    return lines, blobs


__all__ = ["carry_caps", "cut_saves", "defers", "emergency", "index_budget", "lost_identifiers", "lost_index",
           "run_emergency"]
