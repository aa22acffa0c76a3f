"""The cost model of the free cut, which the mask, summary and emergency stages share: how fast the request grows
(:func:`pace`), where the cut waits (:func:`cut_mark`), how many turns away it is (:func:`turns_to_cut`), whether it
makes room for less than a mask batch near the summary threshold (:func:`cut_makes_room_cheaper`), and where the call
re-writes the cache whatever compaction does (:func:`forced_rewrite_from`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .port import Pass

if TYPE_CHECKING:
    from ..state import SessionState
    from ..tokens import TokenCounter


def read_and_premium(p: Pass) -> tuple[float, float]:
    """The model's cache-read price and a rewrite's premium over it (cache write less read), per million tokens."""
    pr = p.spec.prices
    read = pr.cache_read or pr.input
    return read, max(0.0, (pr.cache_write or pr.input) - read)


def pace(p: Pass) -> float:
    """Tokens the request grows by per turn, at the pace of the newest turns: the units since the
    :data:`PACE_UNITS`-th newest assistant message, per assistant message (a turn is one unit where the results
    ride with the calls and two where an observation is a user message)."""
    units = p.state.units
    n = min(len(units), len(p.counts))
    total = 0
    turns = 0
    i = n
    while i > 0 and turns < PACE_UNITS:
        i -= 1
        total += p.counts[i]
        turns += units[i].messages[0].role == "assistant"
    return total / max(1, turns) * p.scale


def cut_mark(p: Pass, size: int, growth: float | None = None) -> float:
    """The free cut's high-water mark (a fraction of the available budget) for these prices.

    Between two cuts each request reads what the last cut kept plus what the turns since added, and each cut
    rewrites what it keeps. Cutting from ``summary_target`` (the low water ``L``, of which ``K`` is what the cut
    rewrites: kept history, work log and index) at ``L + B``, with the request growing ``g`` tokens a turn
    (:func:`pace`), a turn costs ``read * (L + B/2)`` plus the rewrite premium ``(write - read) * K`` spread over
    ``B/g`` turns; the band that minimizes it is ``B = sqrt(2 * (write - read) / read * K * g)``, kept between
    ``summarize_at`` (the floor: the summary stage's threshold) and ``cut_at`` (the ceiling). It is used only
    where a rewrite's premium is at most :data:`REWRITE_READS` reads of the same tokens (OpenAI: no write premium,
    reads at a half (gpt-4o: 1 read) or a quarter (gpt-4.1: 3) of the input price; the band is a few turns and the
    mark comes down toward the floor). Where a rewrite costs more (Gemini 2.5: 9 reads; Anthropic, a write at 1.25
    times the input price and a read at a tenth: 11.5) the cut waits for the ceiling: there the formula brought it
    lower only where the kept history is small (a long system prompt, a tiny room), which saved at most 1.2% pooled
    (up to 3.6% on OpenHands at 16K, Claude prices, validation) and lost up to 1 point (that cell) and 4 points
    (OpenHands at 8K, Gemini prices, dev) of strict recall: a file view cut a few calls before the agent quoted its
    line numbers. Except in a long session (at least :data:`LONG_SESSION_TURNS` assistant turns so far): with
    nothing else known its future is about as long as its past, so cuts recur and the band's saving holds over
    many of them, where waiting for the ceiling reads the fullest history for most of the session (eight dev
    tau-bench runs chained into one session, two sessions of about 125 calls, at 32K: $1.286 -> $1.185, strict
    recall 100% either way; LangChain's summarization $1.252, `sticky` $1.472). ``growth``: :func:`pace`, when the
    caller has it."""
    cfg = p.config
    high = max(cfg.cut_at, p.summarize_at)
    read, premium = read_and_premium(p)
    if read <= 0 or (premium > REWRITE_READS * read and len(p.state.turn_units) < LONG_SESSION_TURNS):
        return high
    fixed, pinned = fixed_raw(p.state, p.counter, size, p.scale)
    low = cfg.summary_target * p.available
    kept = max(0.0, low - (fixed + pinned) * p.scale)
    band = math.sqrt(2 * premium / read * kept * (pace(p) if growth is None else growth))
    return min(high, max(p.summarize_at, (low + band) / p.available))


def turns_to_cut(p: Pass, size: int) -> float:
    """Turns until a request of ``size`` tokens reaches the free cut's high-water mark (:func:`cut_mark`) at the
    request's :func:`pace`."""
    g = pace(p)
    room = cut_mark(p, size, g) * p.available - size
    if room <= 0:
        return 0.0
    return room / g if g > 0 else float(p.config.expected_turns)


PACE_UNITS = 4  # the newest turns whose mean size estimates how fast the request grows
#: a rewrite premium (cache write less read) of at most this many cache reads lets :func:`cut_mark` lower the cut
REWRITE_READS = 4.0
#: assistant turns after which :func:`cut_mark` lowers the cut whatever a rewrite costs (a long session: cuts recur).
#: 30 and 40 saved about as much on chained sessions but moved single runs of the shared traces at 8K, where the band
#: is narrow and cuts come often: validation OpenHands 8K +0.45% (30; against `sticky`'s cost: +0.2%), +0.10% (40)
LONG_SESSION_TURNS = 60


def fixed_raw(state: SessionState, counter: TokenCounter, size: int, scale: float) -> tuple[float, int]:
    """``(fixed, pinned)`` raw tokens of a request of ``size`` tokens: what is not compactable history
    (tools, system, layers, tail) and the pinned original request. Counted on the current view, so a mask
    applied earlier in the same pass is reflected (per-message counts are cached by content)."""
    lo = state.first_visible_unit()
    history = sum(counter.raw_message(m) for u in state.units[lo:] for m in u.messages)
    pinned = sum(counter.raw_message(m) for m in state.units[0].messages) if lo > 0 and state.pinned else 0
    if lo > 0:
        history += sum(counter.raw_message(m) for m in state.summary_messages)
    if lo == 0 and state.pinned:  # the pinned request is the first visible unit
        pinned = sum(counter.raw_message(m) for m in state.units[0].messages)
        history -= pinned
    return max(0.0, size / scale - history - pinned), pinned


def cut_makes_room_cheaper(p: Pass, size: int, saved: float, rewritten: float) -> bool:
    """Whether the free cut makes room at a lower cache-rewrite price per token than a mask batch that would save
    ``saved`` tokens of a request of ``size`` and re-write ``rewritten`` tokens (from its first edit to the request's
    end, after the edit). Both pay the same premium per token re-written; the cut, once the request reaches its
    high-water mark (:func:`cut_mark`), re-writes what it keeps above the fixed part and the pinned request (the low
    water, ``summary_target``, less those) and makes room for the band between the two marks.

    Near the summary threshold a batch whose folds or image stubs are few next to what follows them buys a turn or
    two for a rewrite of most of the history, where the cut buys several for a rewrite of half (dev tau-bench with a
    screenshot in every result at 16K: a batch folding the two oldest exchanges, screenshots and all, re-wrote 4,950
    tokens to save 3,800, every other turn; letting the cut make that room instead took the family from +4.2% to -1.1% against ``sticky``). With the
    batch declined the request grows to the mark and the cut (or a summary that pays better than it) makes room.

    Only where a rewrite's premium is over :data:`REWRITE_READS` reads (Anthropic, Gemini 2.5): a cut keeps fewer
    identifiers than the folds it replaces, and where a rewrite costs little more than a read (OpenAI) the batch's
    rewrite is cheap and :func:`cut_mark` already lowers the cut (dev tau-bench with 6,000 more characters in every
    observation at 16K, gpt-4o's prices: 1.1% cheaper for 2.1 points of strict recall; Claude's: 4.2% for 0.8)."""
    read, premium = read_and_premium(p)
    if saved <= 0 or read <= 0 or premium <= REWRITE_READS * read:
        return False
    fixed, pinned = fixed_raw(p.state, p.counter, size, p.scale)
    low = p.config.summary_target * p.available
    kept = max(1.0, low - (fixed + pinned) * p.scale)
    band = cut_mark(p, size) * p.available - low
    if band <= 0:
        return False
    return rewritten / saved > kept / band


def forced_rewrite_from(state: SessionState, counter: TokenCounter) -> int | None:
    """The first unit this call re-writes to the cache whatever compaction does, or None: under the provider's
    ``current_turn`` thinking rule (Anthropic: the thinking of the assistant messages before the last user message
    that is not a tool result is stripped), a user message since the agent's newest reply strips the thinking of the
    replies the previous request sent after its own last user message, so the cache holds nothing from the first
    of them on (``costs.shared_prefix_tokens`` prices it so). A compaction whose edits start there re-writes nothing
    the call would not have, and one that starts before it only the part before it: the mask stage prices a batch so.

    A conversational agent with thinking (a customer-service agent on Claude) breaks its cache so at every answer of
    the user after a tool call; priced as if the batch broke it, a batch waited and ran a call later, re-writing the
    history again (dev tau2-bench airline runs with a screenshot per result at 32K: -3.4%, from -1.3% to -4.6% against
    ``sticky``; validation -2.4%). The previous request ended before the agent's newest reply (its output)."""
    if counter.thinking != "current_turn" or not counter.saw_thinking or not state.turn_units:
        return None
    units = state.units
    n = len(units)
    last = state.turn_units[-1]  # the newest reply (the previous request ended before it)

    def says(i: int) -> bool:  # a user message that is not a tool result
        m = units[i].messages[0]
        return m.role == "user" and not m.tool_results

    if not any(says(i) for i in range(last + 1, n)):
        return None
    lo = state.first_visible_unit()
    j = last - 1
    while j >= lo and not says(j):
        j -= 1
    for i in range(max(j + 1, lo), last):
        u = units[i]
        if not u.folded and counter.raw_thinking(u.messages[0]):
            return i
    return None


__all__ = ["PACE_UNITS", "REWRITE_READS", "cut_makes_room_cheaper", "cut_mark", "fixed_raw", "forced_rewrite_from", "pace",
           "read_and_premium", "turns_to_cut"]
