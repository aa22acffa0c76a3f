"""Views of a long text by its lines: kept line ranges rendered in order with a marker for every gap
(``render_pieces``), and the view of a message the history must shrink (``message_view``: the pinned request, a
user message, a text-protocol agent's observation).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable

from .text import (
    EXACT_COUNT_LIMIT,
    CountTokens,
    chars_per_token,
    fits_cheaply,
    head_tail,
    identifier_mentions,
    kind_weight,
)

LINE_CAP = 1_000  # chars kept of any single line

MESSAGE_HEAD_SHARE = 0.5  # of a message view's budget: its first lines (what the message is)
MESSAGE_TAIL_SHARE = 0.15  # its last lines (the ask a task often ends with)
_MARKER_TOKENS = 8  # an elision marker between two kept pieces, roughly
_MESSAGE_SCAN_LINES = 20_000  # lines of a message weighed for its view (the rest can only be head or tail)


def cap_line(line: str, limit: int = LINE_CAP) -> str:
    return line if len(line) <= limit else f"{line[:limit]}…[+{len(line) - limit:,} chars]"


def _lines_elided(n: int) -> str:
    return f"[… {n:,} lines elided …]"


def render_pieces(text: str, pieces: list[tuple[int, int]]) -> str:
    """Kept ``[start, end)`` line ranges in order, with an elision marker for every gap."""
    out: list[str] = []
    prev = 0
    merged: list[list[int]] = []
    for a, b in sorted(pieces):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    for a, b in merged:
        if a > prev:
            out.append(_lines_elided(text.count("\n", prev, a)))
        out.extend(cap_line(ln) for ln in text[a:b].splitlines())
        prev = b
    if prev < len(text):
        out.append(_lines_elided(text.count("\n", prev, len(text)) + (0 if text.endswith("\n") else 1)))
    return "\n".join(out)


def _line_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    start = 0
    for _ in range(_MESSAGE_SCAN_LINES + 1):
        k = text.find("\n", start)
        if k < 0:
            break
        spans.append((start, k + 1))
        start = k + 1
    if start < len(text):
        spans.append((start, len(text)))
    return spans


class _Lines:
    """A message's lines (``[start, end)`` spans) and what keeping one costs, in tokens: its characters (up to
    :data:`LINE_CAP`, what a view keeps of it) at the text's characters per token, plus one for its newline."""

    def __init__(self, text: str, spans: list[tuple[int, int]], chars_per_token: float) -> None:
        self.text = text
        self.spans = spans
        self.cpt = chars_per_token

    def cost(self, i: int) -> float:
        a, b = self.spans[i]
        return min(b - a, LINE_CAP) / self.cpt + 1

    def take(self, order: range, share: float, room: float) -> tuple[int, float]:
        """How many lines from one end (in ``order``) fit ``share`` of the room: at least the first non-blank one;
        and their cost."""
        n, got, seen = 0, 0.0, False
        for i in order:
            c = self.cost(i)
            if seen and got + c > share * room:
                break
            seen = seen or bool(self.text[self.spans[i][0]:self.spans[i][1]].strip())
            n, got = n + 1, got + c
        return n, got


def _middle_names(lines: _Lines, h: int, t: int) -> tuple[dict[str, int], set[str], dict[int, set[str]]]:
    """One pass over the identifiers of the text: each one's weight (by kind, a failure line's more), those the head
    (lines before ``h``) and tail (from ``t``) already keep, and those each middle line names (within the part of
    it a view keeps) that they do not."""
    starts = [a for a, _ in lines.spans]
    weight: dict[str, int] = {}
    covered: set[str] = set()
    names: dict[int, set[str]] = {}
    for k, kind, on_fail, at in identifier_mentions(lines.text):
        w = 1 + kind_weight(kind, on_fail)
        if w > weight.get(k, 0):
            weight[k] = w
        i = bisect.bisect_right(starts, at) - 1
        if i < h or i >= t:
            covered.add(k)
        elif at < starts[i] + LINE_CAP:
            names.setdefault(i, set()).add(k)
    return weight, covered, {i: ks for i, ks in names.items() if not ks <= covered}


def _pick_lines(lines: _Lines, weight: dict[str, int], covered: set[str], names: dict[int, set[str]],
                left: float) -> list[int]:
    """The middle lines to keep within ``left`` tokens, greedily: the line naming the most weight not yet kept
    (``covered`` grows as lines are picked) per token, re-weighed lazily; in the order they were picked."""
    heap = [(-sum(weight[k] for k in ks - covered) / lines.cost(i), i) for i, ks in names.items()]
    heapq.heapify(heap)
    picked: list[int] = []
    kept: set[int] = set()
    while heap and left > 0:
        _, i = heapq.heappop(heap)
        gain = sum(weight[k] for k in names[i] - covered)
        if gain <= 0:
            continue
        score = gain / lines.cost(i)
        if heap and score < -heap[0][0] - 1e-9:
            heapq.heappush(heap, (-score, i))
            continue
        c = lines.cost(i) + (0 if (i - 1 in kept or i + 1 in kept) else _MARKER_TOKENS)
        if c > left:
            continue
        picked.append(i)
        kept.add(i)
        covered |= names[i]
        left -= c
    return picked


def _most_that_fit(hi: int, fits: Callable[[int], bool]) -> int:
    """The largest ``n`` in ``0..hi`` with ``fits(n)`` (assumed to hold up to some ``n`` and not after; 0 if it
    holds for none)."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _fit_view(lines: _Lines, h: int, t: int, picked: list[int], budget_tokens: int,
              count_tokens: CountTokens) -> str:
    """The view of head (lines before ``h``), the most of the ``picked`` lines that fit and the tail (from ``t``),
    then the longest head the rest of the budget holds; head + tail if not even the head and tail fit."""
    text, spans = lines.text, lines.spans
    tail_piece = (spans[t][0], len(text)) if t < len(spans) else None

    def build(k: int, extra: int) -> str:
        pieces = [(0, spans[min(h + extra, t) - 1][1])]
        pieces += [spans[i] for i in picked[:k]]
        if tail_piece:
            pieces.append(tail_piece)
        return render_pieces(text, pieces)

    n_picked = _most_that_fit(len(picked), lambda k: count_tokens(build(k, 0)) <= budget_tokens)
    if n_picked == 0 and count_tokens(build(0, 0)) > budget_tokens:
        return head_tail(text, budget_tokens, count_tokens)
    extra = _most_that_fit(t - h, lambda k: count_tokens(build(n_picked, k)) <= budget_tokens)
    return build(n_picked, extra)


def message_view(text: str, budget_tokens: int, count_tokens: CountTokens) -> str:
    """A message cut to ``budget_tokens``: its head and its tail, and between them the lines that name the most
    identifiers the kept text does not (``text.identifier_mentions``: paths, error names, symbols, ids, numbers,
    weighted by kind, a failure line's more), chosen greedily by weight per token and kept in their order, each
    gap marked; the rest of the budget extends the head. Head + tail (``head_tail``) when no middle line names
    one, or the text is one line.

    A task's middle is what its first calls need (an issue's code, the error it reports, the names it uses) while
    its head says what it is and its tail often repeats a template; a head + tail cut kept the template and lost the
    issue (an OpenHands task in an 8K window, where tools and system leave 2,500 tokens of history)."""
    if budget_tokens <= 0:
        return ""
    if fits_cheaply(text, budget_tokens) or (len(text) <= EXACT_COUNT_LIMIT and count_tokens(text) <= budget_tokens):
        return text
    spans = _line_spans(text)
    if not 3 <= len(spans) <= _MESSAGE_SCAN_LINES:
        return head_tail(text, budget_tokens, count_tokens)
    lines = _Lines(text, spans, chars_per_token(text, count_tokens))
    room = budget_tokens - 2 * _MARKER_TOKENS
    h, used = lines.take(range(len(spans) - 2), MESSAGE_HEAD_SHARE, room)
    n_tail, tail_used = lines.take(range(len(spans) - 1, h, -1), MESSAGE_TAIL_SHARE, room)
    t = len(spans) - n_tail
    if used + tail_used > room or t <= h:
        return head_tail(text, budget_tokens, count_tokens)
    weight, covered, names = _middle_names(lines, h, t)
    picked = _pick_lines(lines, weight, covered, names, room - used - tail_used) if names else []
    if not picked:
        return head_tail(text, budget_tokens, count_tokens)
    return _fit_view(lines, h, t, picked, budget_tokens, count_tokens)


__all__ = ["LINE_CAP", "MESSAGE_HEAD_SHARE", "MESSAGE_TAIL_SHARE", "cap_line", "message_view", "render_pieces"]
