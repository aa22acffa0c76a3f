"""The emergency stage, no model: keep the pinned request, the summary, a work log of one line per dropped
exchange and the last ``emergency_keep`` messages (fewer when they would leave the request above
``summary_target``; the newest unit always)."""

from __future__ import annotations

from ..assemble import Action
from ..records import EmergencyRecord
from ..text import identifiers
from .mask import fold_line, is_exchange, logged_results
from .port import Pass
from .summary import fixed_raw
from .transcript import store_transcript


def run_emergency(p: Pass, turns: list[int], size: int, *, failed: bool, summarized_before: bool) -> int:
    """Truncate if the summary failed, the provider still refused after a summary, or the request does not
    fit; returns the request's new size."""
    cfg = p.config
    avail = p.available
    scale = p.scale
    due = (
        (failed and not p.summary_declined and size >= p.summarize_at * avail)  # the summary failed: the next stage
        # no summary placed (its call does not pay): cut in one batch at the high-water mark, down to the low one
        or (p.summary_declined and size >= max(cfg.cut_at, p.summarize_at) * avail)
        or (p.harder and summarized_before)  # the provider still refused after a summary
        or size > avail  # still does not fit
    )
    if "emergency" in p.breaker or not due:
        return size
    # what the kept messages may take so the request lands at summary_target (hence under every
    # trigger: a rebuild with no new events must not truncate again)
    fixed, pinned = fixed_raw(p.state, p.counter, size, scale)
    log_cap = max(200, int(cfg.work_log_ratio * avail / scale))
    keep_raw = cfg.summary_target * (0.7 if p.harder else 1.0) * avail / scale - fixed - pinned - log_cap
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
                                    "record_seq": p.state.seq}))
    return size


WORK_LOG_KEYS = 8  # identifiers a work-log line keeps from the message it stands for


def emergency(p: Pass, turns: list[int], why: str, keep_raw: float | None = None) -> tuple[int, int, EmergencyRecord] | None:
    """Keep the last ``emergency_keep`` messages (whole units, the newest always), and no more than
    ``keep_raw`` raw tokens of them; everything older becomes work-log lines."""
    state = p.state
    counter = p.counter
    units = state.units
    n = len(units)
    lo = state.first_compactable_unit()
    keep_msgs = 0
    kept = 0
    cut = n
    while cut > lo + 1 and keep_msgs < p.config.emergency_keep:
        c = sum(counter.raw_message(m) for m in units[cut - 1].messages)
        if keep_raw is not None and cut < n and kept + c > keep_raw:
            break  # over the room left for verbatim messages (the newest unit stays regardless)
        cut -= 1
        kept += c
        keep_msgs += len(units[cut].messages)
    if keep_msgs > p.config.emergency_keep and cut < n - 1:
        cut += 1  # the last N messages, not more (a unit is never split)
    cut = min(cut, n - 1)  # the newest unit always stays
    if cut <= lo:
        return None
    lines: list[str] = []
    blobs: list[tuple[str, bytes]] = []
    removed = 0
    for i in range(lo, cut):
        u = units[i]
        removed += sum(counter.raw_message(m) for m in u.messages)
        if u.folded:
            lines.append(u.messages[0].text)
        elif is_exchange(u):
            fl = fold_line(turns[i], u, chars=80, originals=logged_results(state, u))
            lines.append(fl.text)
            blobs.extend(fl.blobs)
        else:
            m = u.messages[0]
            t = " ".join(m.text.split())
            shown = t if len(t) <= 120 else t[:119] + "…"
            # like a fold line, the line keeps the identifiers of what it cut (paths, errors, symbols, ids)
            keys = [k for k in identifiers(m.text, ranked=True) if k not in shown][:WORK_LOG_KEYS] \
                if len(t) > 120 else []
            more = f" [keys: {', '.join(keys)}]" if keys else ""
            lines.append(f"[turn {turns[i]}] {m.role}: {shown}{more}")
    for _sha, raw in blobs:
        p.port.put_blob(raw)
    transcript = store_transcript(p.port, state.span_messages(units[lo].first_seq, units[cut - 1].last_seq),
                                   units[lo].first_seq, units[cut - 1].last_seq)
    # the record holds the whole new work log (older lines first), trimmed to its budget
    log = [*state.work_log, *lines]
    cap = max(200, int(p.config.work_log_ratio * p.available / counter.scale))
    while len(log) > 1 and sum(counter.raw_text(x) + 1 for x in log) > cap:
        log.pop(0)
    lines = log
    old = state.summary_message
    if old is not None:
        removed += counter.raw_message(old)
    rec = EmergencyRecord(
        first_seq=units[lo].first_seq,
        last_seq=units[cut - 1].last_seq,
        keep_from_seq=units[cut].first_seq,
        work_log=tuple(lines),
        transcript=transcript,
        artifacts=tuple(s for s, _ in blobs),
        reason=f"{why}; emergency truncation without a model: kept the first request, the summary, a work log "
               f"and the last {sum(len(u.messages) for u in units[cut:])} message(s)",
    )
    p.port.append(rec)
    new = state.summary_message
    return removed, counter.raw_message(new) if new is not None else 0, rec


__all__ = ["emergency", "run_emergency"]
