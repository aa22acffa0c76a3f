"""The summary stage: the oldest visible span (after the pinned first request) becomes a structured summary
that absorbs the previous one. Lessons become ``lesson`` records with provenance. Bad output (exception,
timeout, empty, echo, error text, not shorter) is detected: a ``failed`` record is written and the next
stage runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..assemble import Action
from ..model import Message, Text
from ..records import FailedRecord, LessonRecord, SummaryRecord, last_of
from ..stand_ins import summary_stand_in
from .base import Summarizer, Summary
from .economics import fixed_raw, turns_to_cut
from .mask import fold_artifacts
from .port import Pass, carry_caps
from .references import extract_refs, merge_refs
from .summarizer import check_summary, render_transcript
from .transcript import store_transcript

if TYPE_CHECKING:
    from ..registry import ModelSpec
    from ..state import SessionState
    from ..tokens import TokenCounter


def run_summary(p: Pass, summarizer: Summarizer, size: int) -> tuple[int, bool]:
    """Summarize the oldest span if due; returns the request's new size and whether the summary failed."""
    cfg = p.config
    avail = p.available
    scale = p.scale
    state = p.state
    if "summary" in p.breaker or not (p.urgent or size >= p.summarize_at * avail):
        return size, False
    sbudget = min(cfg.summary_tokens, max(256, int(0.12 * avail)))
    fixed, pinned = fixed_raw(state, p.counter, size, scale)
    target = int(cfg.summary_target * (0.7 if p.harder else 1.0) * avail / scale - fixed - pinned - sbudget)
    span = summary_span(state, p.counter, max(0, target), force=p.urgent, keep_turns=cfg.keep_turns)
    if span is not None and not p.urgent:
        # hysteresis: a summary rewrites the cache from the pinned request on; make it count
        span_raw = sum(p.counts[span[0]:span[1]]) - (0 if state.summary else sbudget)
        if span_raw * scale < cfg.min_saving(avail):
            span = None
    if span is not None and not p.urgent and cfg.summary_pays:
        # a summary is a model call: place it only where it pays for itself, else the free next stage
        # (emergency truncation: a work log line per exchange, the transcript by reference) takes the span
        span_raw = sum(p.counts[span[0]:span[1]])
        pays, _econ = summary_pays(span_raw * scale, min(sbudget, span_raw * scale / 4), p.spec, cfg.expected_turns,
                                   carry=sum(carry_caps(p)) * scale, turns_to_cut=turns_to_cut(p, size))
        if not pays:
            p.summary_declined = True
            return size, True
    if span is None:
        return size, False
    p.breaker.trip("summary")
    lo, cut = span
    before = size
    outcome = summarize(p, summarizer, lo, cut, sbudget)
    name = getattr(summarizer, "name", "?")
    if isinstance(outcome, NoGain):
        # asked for (compact(), the compact_context tool): a summary no shorter than what it replaces is not written
        p.result.reason = str(outcome)
        p.result.actions.append(Action("noop", "history", str(outcome), before, before,
                                       {"summarizer": name, "record_seq": state.seq}))
        return size, False
    if isinstance(outcome, str):
        p.result.actions.append(Action("summary_failed", "history", outcome, before, before,
                                       {"summarizer": name, "record_seq": state.seq}))
        return size, True
    removed, added = outcome
    size = max(0, size - int((removed - added) * scale))
    p.result.stages.append("summary")
    rec = last_of(state.records, SummaryRecord)
    p.result.actions.append(Action("summary", "history", rec.reason, before, size,
                                   {"first_seq": state.units[lo].first_seq,
                                    "last_seq": state.units[cut - 1].last_seq,
                                    "keep_from_seq": state.units[cut].first_seq,
                                    "summarizer": name,
                                    "record_seq": state.seq}))
    return size, False


SUMMARY_PROMPT_TOKENS = 500  # the instruction a model summarizer reads besides the span (LangChain's is 491)


def summary_pays(span_tokens: float, summary_tokens: float, spec: ModelSpec, expected_turns: int, *,
                 carry: float | None = None, turns_to_cut: float | None = None) -> tuple[bool, dict[str, float | int]]:
    """Whether a summary's model call (reading the span and the prompt, writing the summary) costs less than
    what it saves over ``expected_turns`` turns, against what happens without it.

    Without it the span stays and is read from cache every turn until the free cut (emergency truncation, no
    model call) takes it, ``turns_to_cut`` turns from now; from then on each request carries the cut's work log
    and index (``carry`` tokens) where it would carry the summary. So the summary saves the span less the
    summary for those turns, and ``carry`` less the summary (often negative: a summary is longer than a work log)
    for the rest. ``turns_to_cut=None``: no cut to wait for, the span stays for all of them (the older model,
    which a cache read at half the input price, as OpenAI's, made pay on every due summary: a model call per
    cut, where the free cut came a turn later anyway). With a cache read at a tenth of the input price it
    rarely holds (a summary is then kept for the moment the provider refuses, or asked for)."""
    pr = spec.prices
    read = pr.cache_read or pr.input
    price = ((span_tokens + SUMMARY_PROMPT_TOKENS) * pr.input + summary_tokens * pr.output) / 1e6
    turns = float(expected_turns) if turns_to_cut is None else min(float(expected_turns), max(0.0, turns_to_cut))
    after = (carry - summary_tokens) * (expected_turns - turns) if carry is not None else 0.0
    saving = (max(0.0, span_tokens - summary_tokens) * turns + after) * read / 1e6
    econ: dict[str, float | int] = {"summary_usd": round(price, 6), "saving_usd": round(saving, 6),
                                    "expected_turns": expected_turns}
    if turns_to_cut is not None:
        econ["turns_to_cut"] = round(turns, 1)
    return saving > price, econ


def summary_span(state: SessionState, counter: TokenCounter, target_raw: int, *, force: bool,
                 keep_turns: int) -> tuple[int, int] | None:
    """Units [lo, cut) to summarize: the oldest visible ones, keeping at most ``target`` tokens verbatim."""
    units = state.units
    n = len(units)
    lo = state.first_compactable_unit()
    if n - lo < 3:
        return None
    kept = 0
    cut = n
    while cut > lo + 1:
        c = sum(counter.raw_message(m) for m in units[cut - 1].messages)
        if kept + c > target_raw:
            break
        kept += c
        cut -= 1
    cut = min(cut, n - 2)  # the two newest units stay verbatim
    if force:
        cut = max(cut, min(n - 2, n - keep_turns))
    if cut <= lo:
        return None
    return lo, cut

class NoGain(str):
    """Why an on-demand summary was not written: it would not make the request smaller."""


def summarize(p: Pass, summarizer: Summarizer, lo: int, cut: int, sbudget: int) -> tuple[int, int] | str:
    """Summarize units [lo, cut) and append the record (or a ``failed`` one): (raw tokens removed, added),
    or why the summary was rejected (a :class:`NoGain` when, asked for on demand, it would not shrink the request:
    nothing is appended)."""
    state = p.state
    counter = p.counter
    why = p.why
    units = state.units[lo:cut]
    removed = sum(counter.raw_message(m) for u in units for m in u.messages)  # what leaves the view
    first_seq, last_seq = units[0].first_seq, units[-1].last_seq
    old_summary = state.summary_messages
    # the summarizer reads the original messages (not their folds), plus the work log it absorbs
    originals = state.span_messages(first_seq, last_seq)
    view_msgs = [m for _, m in originals]
    if state.work_log:
        view_msgs = [Message("user", (Text("[work log]\n" + "\n".join(state.work_log)),)), *view_msgs]
    prev = Summary.from_dict(state.summary) if state.summary else None
    transcript = render_transcript(view_msgs)
    span_in = sum(counter.raw_message(m) for m in view_msgs) + (counter.raw_text(prev.text) if prev else 0)
    name = getattr(summarizer, "name", type(summarizer).__name__)
    problem: str | None
    summary: Any = None
    try:
        summary = summarizer.summarize(view_msgs, goal=state.task.goal, previous=prev,
                                            budget_tokens=sbudget)
        problem = check_summary(summary, transcript, input_tokens=span_in)
    except Exception as e:  # a summarizer failing must never lose history
        problem = f"the summarizer raised {type(e).__name__}: {str(e)[:200]}"
    if problem is None and counter.raw_text(summary.text) > sbudget * 1.5:
        problem = f"the summary is over its budget of {sbudget:,} tokens"
    if problem is not None:
        p.port.append(FailedRecord("summary", name, first_seq, last_seq,
                                   f"{problem}; falling back to the next stage, history kept"))
        return f"summary by {name} rejected: {problem}"
    # references from the original (unmasked) messages, so every compacted span stays reconstructible
    artifacts: dict[str, str] = {}
    for u in units:
        if u.folded:
            artifacts.update(fold_artifacts(state, u.first_seq))
    refs = extract_refs([m for _, m in originals], seqs=[s for s, _ in originals], goal=state.task.goal,
                        artifacts=artifacts)
    summary = Summary(summary.text, tuple(merge_refs(summary.refs, refs)), summary.lessons, summary.summarizer or name,
                      summary.input_tokens, summary.output_tokens, summary.sections)
    keep_from = state.units[cut].first_seq
    transcript = store_transcript(p.port, originals, first_seq, last_seq)
    if p.force and not p.harder:
        gone = removed + sum(counter.raw_message(m) for m in old_summary)
        stand_in = counter.raw_message(summary_stand_in(summary.to_dict(), (), (), transcript))
        if stand_in >= gone:
            return NoGain(f"nothing would shrink: a summary of {cut - lo} unit(s) (log seq {first_seq}-{last_seq}) "
                          f"takes {int(stand_in * counter.scale):,} tokens where they take {int(gone * counter.scale):,}; "
                          "the context is left as it is")
    absorbed = last_of(state.records, SummaryRecord)
    p.port.append(SummaryRecord(
        first_seq=first_seq,
        last_seq=last_seq,
        keep_from_seq=keep_from,
        transcript=transcript,
        summary=summary.to_dict(),
        summarizer=summary.summarizer,
        absorbs=absorbed.seq if absorbed is not None else None,
        reason=f"{why}; {cut - lo} unit(s) (log seq {first_seq}-{last_seq}) summarized by {name}",
    ))
    if p.config.extract_lessons:
        known = {x.get("text") for x in state.lessons}
        for lesson in summary.lessons:
            if lesson not in known:
                p.port.append(LessonRecord(lesson, f"compaction:{name}", {"first_seq": first_seq, "last_seq": last_seq,
                                                                        "summary_seq": state.seq}))
    added = sum(counter.raw_message(m) for m in state.summary_messages)
    removed += sum(counter.raw_message(m) for m in old_summary)
    return removed, added


__all__ = ["SUMMARY_PROMPT_TOKENS", "NoGain", "run_summary", "summarize", "summary_pays", "summary_span"]
