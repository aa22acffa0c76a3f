"""Failure evidence: what already failed and how, so the agent does not do it again.

:class:`FailureTracker` walks the transcript incrementally (it is append-only) and pairs every *action*
with its *outcome*:

* a tool call with its tool result (failed when ``is_error`` is set, or the text says so: a non-zero
  exit code, a traceback, a leading ``Error:``, ``command not found``, ...);
* an assistant message with a fenced shell command and no tool call (mini-swe-agent style) with the next
  user message when that is an observation (``<returncode>N</returncode>``).

Each failure gets a category (:data:`CATEGORIES`, by the first matching rule), a *signature* (the telling
error line with numbers, hex ids and quoted values normalized) and an action key (tool + canonical
arguments). From these it derives repeats (the same action failing again), patterns (one signature across
different actions) and cascades (a run of consecutive failed actions). :class:`FailuresLayer` renders the
newest and most repeated of them as a compact ``FAILURES`` section in the dynamic tail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..layers.base import BuildContext, Item, Layer
from ..model import Message, Text
from .variation import REPEATED_PHRASES

if TYPE_CHECKING:
    from ..state import SessionState

#: Failure categories, in the order their rules are tried.
CATEGORIES: tuple[str, ...] = ("syntax", "import", "test", "permission", "not_found", "timeout", "network", "type",
                               "assertion", "resource", "other")

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((c, re.compile(p, re.I | re.M)) for c, p in (
    ("syntax", r"\b(SyntaxError|IndentationError|TabError|syntax error|invalid syntax|unexpected token|parse error|"
               r"JSONDecodeError|unterminated string|unexpected EOF|expected expression)\b"),
    ("import", r"\b(ModuleNotFoundError|ImportError|No module named|cannot find module|cannot import name|"
               r"unresolved import|package .* is not in GOROOT)\b"),
    ("test", r"(^FAILED\b|\b\d+ failed\b|^FAIL[: ]|\btests? failed\b|^ERROR: test|Ran \d+ tests?[\s\S]{0,200}FAILED|"
             r"\bFAILURES\b)"),
    ("permission", r"\b(Permission denied|PermissionError|EACCES|Operation not permitted|Forbidden|unauthori[sz]ed|"
                   r"access denied|not allowed|read-only file system)\b"),
    ("not_found", r"(No such file or directory|FileNotFoundError|command not found|\bnot found\b|does not exist|"
                  r"\b404\b|NameError|KeyError|unknown (command|option|tool)|no such)"),
    ("timeout", r"\b(timed? ?out|TimeoutError|Timeout|deadline exceeded|took too long)\b"),
    ("network", r"\b(ConnectionError|Connection refused|ECONNREFUSED|ECONNRESET|Name or service not known|"
                r"Temporary failure in name resolution|Network is unreachable|SSLError|\b50[234]\b)"),
    ("type", r"\b(TypeError|AttributeError|type error|is not assignable|has no attribute|mismatched types|"
             r"incompatible types?|ValueError)\b"),
    ("assertion", r"\b(AssertionError|assert(ion)? failed|assertion)\b"),
    ("resource", r"\b(MemoryError|out of memory|OOM|No space left|Too many open files|quota|rate limit|\b429\b|"
                 r"Killed|resource exhausted|disk full)\b"),
))

_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_EXIT = re.compile(r"\b(?:exit(?:ed)?(?: with)?(?: code| status)?|return ?code)[:= ]+(-?\d+)\b", re.I)
_FAILED_TEXT = re.compile(
    r"(\ATraceback \(most recent call last\)|^Traceback \(most recent call last\)|\A\s*(error|fatal|failed)\b[:!]|"
    r"\A\s*\w*(Error|Exception)\b:|command not found|\AExit code [1-9])|^FAILED |^=+ .*\b\d+ failed\b|^\d+ failed\b",
    re.I | re.M)
_FENCE = re.compile(r"```(?:bash|sh|shell|console)?\s*\n(.*?)```", re.S)
_ERROR_LINE = re.compile(r"^.*\b(\w*(Error|Exception)\b|error|failed|FAILED|denied|not found|No such|timed out|"
                         r"refused|fatal)\b.*$", re.M)
_NUM = re.compile(r"\b\d+\b")
_HEX = re.compile(r"\b(0x)?[0-9a-f]{7,}\b", re.I)
_PATH = re.compile(r"(?<![\w/])(?:[\w.-]*/)+[\w.-]+|\b[\w-]+\.(?:py|js|ts|go|rs|java|txt|json|md|cfg|toml|ya?ml|sh|c|h)\b")
_QUOTED = re.compile(r"(['\"])(?:(?!\1).){1,80}\1")


def classify(text: str) -> str:
    """The category of a failure, from its text (first rule that matches; ``other`` if none)."""
    sample = text[:6000] + ("\n" + text[-3000:] if len(text) > 9000 else "")
    for cat, rule in _RULES:
        if rule.search(sample):
            return cat
    return "other"


def failed(text: str, is_error: bool = False) -> bool:
    """Whether an outcome is a failure: flagged by the tool, a non-zero exit code, or an error report."""
    if is_error:
        return True
    m = _RETURNCODE.search(text[:400])
    if m:
        return int(m.group(1)) != 0
    m = _EXIT.search(text[:300]) or _EXIT.search(text[-300:])
    if m:
        return int(m.group(1)) != 0
    head = text[:2000]
    if _FAILED_TEXT.search(head):
        return True
    if re.search(r"^Traceback \(most recent call last\)", text[-4000:], re.M):
        return True
    last = [ln for ln in text[-1500:].splitlines() if ln.strip()][-3:]
    return any(re.match(r"^[\w.]*(Error|Exception)\b(:|$)", ln) for ln in last)


def signature(text: str) -> str:
    """The telling error line, normalized so the same error in another place compares equal."""
    code = _RETURNCODE.search(text[:400])
    text = _RETURNCODE.sub("", text[:8000])
    text = re.sub(r"</?(output|warning)>", "", text)
    lines = [m.group(0).strip() for m in _ERROR_LINE.finditer(text)]
    lines = [ln for ln in lines if len(ln.rstrip(":").split()) > 1] or lines
    # the last exception line of a traceback tells more than the first mention of "error"
    exc = [ln for ln in lines if re.match(r"^\w*(Error|Exception)\b", ln)]
    line = (exc[-1] if exc else lines[0] if lines else next((x.strip() for x in text.splitlines() if x.strip()), ""))
    if line.endswith(":") and len(line.split()) == 1:  # "ERROR:" alone: the message is on the next line
        rest = text.split(line, 1)[1] if line in text else ""
        nxt = next((x.strip() for x in rest.splitlines() if x.strip()), "")
        line = f"{line} {nxt}".strip()
    if not line and code:
        return f"exit code {code.group(1)}, no output"
    line = _QUOTED.sub(r"\1…\1", _HEX.sub("#", _NUM.sub("N", _PATH.sub("<path>", line))))
    return re.sub(r"\s+", " ", line)[:160]


def _short(text: str, n: int = 80) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclass(frozen=True)
class Action:
    """One thing the agent did: a tool call, or a shell command written in the message text."""

    turn: int  # 1-based index of the assistant message
    tool: str
    arguments: str  # canonical JSON of the arguments, or the command text
    call_id: str | None = None

    @property
    def key(self) -> str:
        return self.tool + "|" + " ".join(self.arguments.split())

    def describe(self, n: int = 80) -> str:
        return f"{self.tool}({_short(self.arguments, n)})"


@dataclass(frozen=True)
class Failure:
    action: Action
    category: str
    signature: str
    excerpt: str

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.action.turn, "tool": self.action.tool, "action": self.action.describe(),
                "category": self.category, "signature": self.signature}


@dataclass
class FailureTracker:
    """Incremental pairing of actions with outcomes over a session's transcript."""

    actions: int = 0  # actions seen with an outcome
    failures: list[Failure] = field(default_factory=list)
    streak: list[Failure] = field(default_factory=list)  # the current run of consecutive failures
    longest_cascade: int = 0
    _seen: int = 0
    _turn: int = 0
    _pending: dict[str, Action] = field(default_factory=dict)  # call id → action
    _text_action: Action | None = None
    _state_id: int = 0

    def update(self, state: SessionState) -> None:
        msgs = state.messages
        if id(state) != self._state_id or len(msgs) < self._seen:
            self.__init__()  # type: ignore[misc]
            self._state_id = id(state)
        for m in msgs[self._seen:]:
            self._observe(m)
        self._seen = len(msgs)

    def feed(self, messages: Iterable[Message]) -> FailureTracker:
        """Observe messages in order (for a trace or a list; a session uses :meth:`update`)."""
        for m in messages:
            self._observe(m)
        return self

    @property
    def turns(self) -> int:
        """Assistant messages seen."""
        return self._turn

    def _observe(self, m: Message) -> None:
        if m.role == "assistant":
            self._turn += 1
            self._text_action = None
            for c in m.tool_calls:
                args = json.dumps(dict(c.arguments), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
                self._pending[c.id] = Action(self._turn, c.name, args, c.id)
            if not m.tool_calls:
                fence = _FENCE.search(m.text)
                if fence and fence.group(1).strip():
                    self._text_action = Action(self._turn, "bash", fence.group(1).strip())
            return
        for r in m.tool_results:
            action = self._pending.pop(r.call_id, None)
            if action is not None:
                self._outcome(action, r.text, r.is_error)
        if m.role == "user" and not m.tool_results and self._text_action is not None:
            text = "\n".join(b.text for b in m.content if isinstance(b, Text))
            if _RETURNCODE.search(text[:400]) or _FAILED_TEXT.search(text[:2000]):
                self._outcome(self._text_action, text, False)
            self._text_action = None

    def _outcome(self, action: Action, text: str, is_error: bool) -> None:
        self.actions += 1
        if not failed(text, is_error):
            self.streak = []
            return
        f = Failure(action, classify(text), signature(text), _short(text, 160))
        self.failures.append(f)
        self.streak.append(f)
        self.longest_cascade = max(self.longest_cascade, len(self.streak))

    # ------------------------------------------------------------------ derived views

    def repeats(self) -> dict[str, list[Failure]]:
        """Action key → its failures, for actions that failed more than once."""
        by: dict[str, list[Failure]] = {}
        for f in self.failures:
            by.setdefault(f.action.key, []).append(f)
        return {k: v for k, v in by.items() if len(v) > 1}

    def patterns(self) -> dict[str, list[Failure]]:
        """Signature → failures, for signatures seen in more than one distinct action."""
        by: dict[str, list[Failure]] = {}
        for f in self.failures:
            by.setdefault(f.signature, []).append(f)
        return {s: v for s, v in by.items() if s and len({f.action.key for f in v}) > 1}

    def section(self, max_lines: int = 8, variant: int = 0) -> list[str]:
        """The lines of the FAILURES section: repeats first, then cascades and patterns, then the newest.
        ``variant`` picks the phrasing of repeated failures (:data:`~.variation.REPEATED_PHRASES`)."""
        if not self.failures:
            return []
        lines: list[str] = []
        reps = self.repeats()
        shown: set[str] = set()
        for key, fs in sorted(reps.items(), key=lambda kv: (-len(kv[1]), -kv[1][-1].action.turn)):
            last = fs[-1]
            turns = ", ".join(str(f.action.turn) for f in fs[-4:])
            phrase = REPEATED_PHRASES[variant % len(REPEATED_PHRASES)]
            lines.append(phrase.format(n=len(fs), action=last.action.describe(), category=last.category,
                                       signature=last.signature, turns=turns))
            shown.add(key)
        if len(self.streak) >= 3 and len({f.action.key for f in self.streak}) > 1:  # not one action repeated
            first = self.streak[0]
            cats = sorted({f.category for f in self.streak})
            lines.append(f"CASCADE: the last {len(self.streak)} actions all failed since turn {first.action.turn} "
                         f"({', '.join(cats)}), starting with {first.action.describe(60)} → {first.signature}; "
                         "re-check the assumption they share before trying more")
        for sig, fs in sorted(self.patterns().items(), key=lambda kv: -len(kv[1]))[:2]:
            if all(f.action.key in shown for f in fs):
                continue
            lines.append(f"PATTERN: {fs[-1].category}: {sig} in {len({f.action.key for f in fs})} different actions "
                         f"(turns {', '.join(str(f.action.turn) for f in fs[-4:])})")
        for f in reversed(self.failures):
            if len(lines) >= max_lines:
                break
            if f.action.key in shown:
                continue
            shown.add(f.action.key)
            lines.append(f"turn {f.action.turn}: {f.action.describe()} → {f.category}: {f.signature}")
        return lines[:max_lines]

    def report(self) -> dict[str, Any]:
        cats: dict[str, int] = {}
        for f in self.failures:
            cats[f.category] = cats.get(f.category, 0) + 1
        return {"actions": self.actions, "failures": len(self.failures), "categories": dict(sorted(cats.items())),
                "repeated_actions": len(self.repeats()), "patterns": len(self.patterns()),
                "cascade": len(self.streak), "longest_cascade": self.longest_cascade}


class FailuresLayer(Layer):
    """A ``FAILURES`` section in the dynamic tail: repeated failing actions, cascades, patterns, the newest.

    ``max_lines`` caps the section; ``budget_tokens`` is the layer's own ceiling (the assembler may give it
    less: its allocation comes from the ``failures`` weight). The manifest's ``guidance["failures"]`` holds
    the counts (actions, failures by category, repeats, patterns, current and longest cascade).
    """

    name = "failures"

    def __init__(self, max_lines: int = 8, budget_tokens: int = 600, *, vary: bool = False) -> None:
        self.max_lines = max_lines
        self.vary = vary
        self.budget_tokens = budget_tokens
        self.tracker = FailureTracker()
        self._report: dict[str, Any] | None = None

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        self.tracker.update(ctx.state)
        lines = self.tracker.section(self.max_lines, self.tracker.turns if self.vary else 0)
        while lines and ctx.counter.text("\n".join(lines)) > self.budget_tokens:
            lines.pop()  # the least important line goes first
        self._report = {**self.tracker.report(), "lines": len(lines)}
        for i, line in enumerate(lines):
            yield Item(self.name, "tail", "dynamic", line, priority=len(lines) - i, provenance="failures",
                       header="FAILURES", order=i)

    def report(self) -> dict[str, Any] | None:
        return self._report


__all__ = ["CATEGORIES", "Action", "Failure", "FailureTracker", "FailuresLayer", "classify", "failed", "signature"]
