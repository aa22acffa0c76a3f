"""Goal recitation with drift detection.

The task layer states the goal, step and checklist at the *start* of the tail every turn. Long sessions
still wander: the model attends most to the end of the context. :class:`RecitationLayer` re-states the
goal, the current step and the *open* acceptance items as the very last section of the tail (``FOCUS``):

* periodically, more often as the session grows: every ``base_period`` assistant turns at first, halving
  every time the session doubles past ``grow_every`` turns (8 → 4 → 2 → every turn);
* at once when the recent actions *drift*: the identifiers and keywords of the last ``window`` actions
  (tool names, arguments, the assistant's words and what their results say) stop overlapping with those of the
  goal, step and open items (overlap below ``drift_below``; terms match by stem and containment, :func:`related`).

Each build reports what it decided in the manifest (``guidance["recitation"]``: turn, period, overlap,
drift, recited and why), whether or not it recited.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..layers.base import BuildContext, Item, Layer
from ..model import Message, Text
from ..text import leaf_values
from .variation import FOCUS_PHRASES

if TYPE_CHECKING:
    from ..state import SessionState

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}|\d{3,}")
_SPLIT = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
STOPWORDS = frozenset(["the", "and", "for", "with", "that", "this", "from", "have", "has", "had", "was", "were", "are", "will", "would", "should", "could", "into", "onto", "then", "than", "them", "they", "their", "there", "here", "what", "when", "where", "which", "while", "who", "why", "how", "not", "but", "all", "any", "each", "every", "some", "such", "only", "also", "just", "very", "can", "may", "might", "must", "shall", "been", "being", "its", "it's", "our", "you", "your", "yours", "she", "him", "her", "his", "hers", "use", "used", "using", "make", "made", "need", "needs", "needed", "get", "got", "let", "lets", "please", "thank", "thanks", "okay", "yes", "now", "one", "two", "new", "old", "same", "other", "more", "most", "less", "few", "many", "much", "like", "well", "see", "look", "check", "find", "run", "try", "call", "done", "sure", "want", "know", "think", "going", "able", "first", "last", "next", "before", "after", "about", "above", "below", "over", "under", "again", "further", "once", "true", "false", "none", "null", "self", "return", "import", "def", "class", "function", "value", "values", "data", "item", "items", "file", "files", "line", "lines", "text", "string", "type", "list", "dict", "output", "input", "result", "results", "error", "errors", "tool", "tools", "command", "args", "arguments", "name", "names", "time", "step", "task", "goal", "user", "assistant"])


def terms(text: str) -> set[str]:
    """Identifiers and keywords of a text: words of 3+ characters (and their snake/camel parts) minus stopwords."""
    out: set[str] = set()
    for w in _WORD.findall(text):
        lw = w.lower()
        if lw not in STOPWORDS:
            out.add(lw)
        if "_" in w or any(c.isupper() for c in w[1:]):
            for part in _SPLIT.findall(w):
                p = part.lower()
                if len(p) >= 3 and p not in STOPWORDS:
                    out.add(p)
    return out


_SUFFIXES = ("ing", "ed", "es", "s")


def stem(term: str) -> str:
    """``term`` without one common English suffix (failing, failed, fails → fail; tests → test), kept at 3+ letters."""
    for suf in _SUFFIXES:
        if term.endswith(suf) and len(term) - len(suf) >= 3:
            return term[: -len(suf)]
    return term


def related(goal_term: str, action_term: str) -> bool:
    """Whether an action's term is about a goal's term: the same stem, or (4+ letters) one inside the other
    (``pytest`` runs a ``test``, ``parser`` is read as ``test_parser``): exact matching alone flagged on-task sessions
    (running ``pytest tests/`` to fix a failing test) as drifting."""
    if goal_term == action_term:
        return True
    g, a = stem(goal_term), stem(action_term)
    if g == a:
        return True
    return len(g) >= 4 and len(a) >= 4 and (g in a or a in g)


#: characters of each tool result an action's terms are read from
RESULT_CHARS = 2000


def result_text(m: Message) -> str:
    """The text of a message's tool results (each cut at :data:`RESULT_CHARS`): an action that looks up a reservation
    to cancel a flight shares no word with its goal, but what it finds names the flight. Counting them took the
    drift flag rate on the shared traces' successful runs from 3.7% to 1.0% (actions alone, stem-matched)."""
    return "\n".join(b.text[:RESULT_CHARS] for r in m.tool_results for b in r.content if isinstance(b, Text))


def action_text(m: Message) -> str:
    """What an assistant message did, as text: its words, and each call's name and argument values."""
    parts = [m.text]
    for c in m.tool_calls:
        parts.append(c.name)
        parts.extend(leaf_values(c.arguments))
    return "\n".join(parts)


class RecitationLayer(Layer):
    """``FOCUS``: the goal, the current step and the open items, re-stated at the end of the tail when due."""

    name = "recitation"

    def __init__(self, base_period: int = 8, grow_every: int = 16, window: int = 4, drift_below: float = 0.05,
                 budget_tokens: int = 400, *, vary: bool = False) -> None:
        if base_period < 1 or grow_every < 1 or window < 1 or not 0 <= drift_below <= 1:
            raise ConfigError(f"RecitationLayer needs base_period, grow_every and window >= 1 and drift_below in [0, 1], "
                              f"got base_period={base_period}, grow_every={grow_every}, window={window}, "
                              f"drift_below={drift_below}; the defaults are 8, 16, 4 and 0.05")
        self.base_period = base_period
        self.grow_every = grow_every
        self.window = window
        self.drift_below = drift_below
        self.budget_tokens = budget_tokens
        self.vary = vary
        self._turns = 0
        self._seen = 0
        self._recent: list[str] = []
        self._state_id = 0
        self._report: dict[str, Any] | None = None

    def period(self, turns: int) -> int:
        """Assistant turns between recitations at session length ``turns`` (halves as the session doubles)."""
        p = self.base_period
        n = self.grow_every
        while turns >= n and p > 1:
            p //= 2
            n *= 2
        return p

    def _update(self, state: SessionState) -> None:
        msgs = state.messages
        if id(state) != self._state_id or len(msgs) < self._seen:
            self._turns, self._seen, self._recent, self._state_id = 0, 0, [], id(state)
        for m in msgs[self._seen:]:
            if m.tool_results and self._recent:  # what the action found is part of it (see ``result_text``)
                self._recent[-1] += "\n" + result_text(m)
            elif m.role == "assistant":
                self._turns += 1
                self._recent = [*self._recent[-(self.window - 1):], action_text(m)] if self.window > 1 else [action_text(m)]
        self._seen = len(msgs)

    def drift(self, state: SessionState) -> tuple[float | None, list[str]]:
        """Overlap of the recent actions' terms with the goal's (None: too early to tell), and the recent terms."""
        task = state.task
        plan = " ".join([task.goal or "", task.step or "", *(a for a, done in task.acceptance if not done)])
        goal = terms(plan)
        if not goal or len(self._recent) < self.window:
            return None, []
        recent = terms("\n".join(self._recent))
        if not recent:
            return None, []
        shared = {g for g in goal if any(related(g, r) for r in recent)}
        return len(shared) / min(len(goal), len(recent)), sorted(r for r in recent if not any(related(g, r) for g in goal))[:6]

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        state = ctx.state
        self._update(state)
        task = state.task
        turns = self._turns
        period = self.period(turns)
        overlap, off = self.drift(state)
        drifting = overlap is not None and overlap < self.drift_below
        due = turns > 0 and turns % period == 0
        reason = "drift" if drifting else "period" if due else None
        report: dict[str, Any] = {"turn": turns, "period": period, "overlap": None if overlap is None else round(overlap, 3),
                                  "drift": drifting, "recited": False, "reason": reason}
        self._report = report
        if reason is None or not task.declared:
            return
        lines = []
        goal_p, step_p, open_p = FOCUS_PHRASES[turns % len(FOCUS_PHRASES) if self.vary else 0]
        if task.goal:
            lines.append(goal_p.format(task.goal))
        if task.step:
            lines.append(step_p.format(task.step))
        open_items = [a for a, done in task.acceptance if not done]
        if open_items:
            lines.append(open_p.format("; ".join(open_items)))
        if drifting:
            lines.append(f"Drift: the last {self.window} actions ({', '.join(off) or 'no shared terms'}) share "
                         f"{overlap:.0%} of their terms with the goal and plan; return to the current step.")
        text = "\n".join(lines)
        if ctx.counter.text(text) > self.budget_tokens:
            text = text[: self.budget_tokens * 3]
        report["recited"] = True
        yield Item(self.name, "tail", "dynamic", text, priority=90, provenance=f"recitation:{reason}", header="FOCUS")

    def report(self) -> dict[str, Any] | None:
        return self._report


__all__ = ["STOPWORDS", "RecitationLayer", "action_text", "related", "result_text", "stem", "terms"]
