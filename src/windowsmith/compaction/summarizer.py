"""Summarizers: the offline extractive default, a public fake for tests, and output checks.

    OfflineSummarizer()           extractive, no model, deterministic (the default)
    FakeSummarizer(...)           a scripted test double: fixed text, or bad output on purpose
    AnthropicSummarizer(client)   over the official SDK (windowsmith.compaction.providers)
    OpenAISummarizer(client)      over the official SDK (windowsmith.compaction.providers)

Every summary has the same structure: GOAL, DECISIONS, STATE OF WORK, REFERENCES (files, URLs,
functions, errors, commands, ids), OPEN QUESTIONS, NEXT STEP; lessons (user preferences, project
facts, what failed and why) ride along for the memory layer. Rolling: a new summary absorbs the
previous one (its decisions, references and lessons carry over).

:func:`check_summary` rejects bad output — empty, the prompt echoed back, an error message, or no
shorter than its input — so the compactor can fall back to the next stage instead of replacing
history with garbage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ..model import Message, Text, ToolCall, ToolResult
from ..tokens import count_text
from .base import Reference, Summary
from .references import KEY_SCAN, extract_refs, format_args, merge_refs, result_keys, sentences_with
from .references import decisions as find_decisions

SUMMARY_HEADER = "[windowsmith: summary of the earlier conversation; the full transcript is kept in the session log]"

SECTION_ORDER: tuple[tuple[str, str], ...] = (
    ("goal", "GOAL"),
    ("decisions", "DECISIONS"),
    ("state", "STATE OF WORK"),
    ("references", "REFERENCES"),
    ("identifiers", "IDENTIFIERS SEEN"),
    ("open_questions", "OPEN QUESTIONS"),
    ("next_step", "NEXT STEP"),
)

PREFERENCE_WORDS = re.compile(r"\b(?:I prefer|prefer|please always|always|never|don't|do not|make sure|I want|I need|must)\b", re.I)
NEXT_STEP_WORDS = re.compile(r"\b(?:next|then I|I will|I'll|now I|going to)\b", re.I)
#: a question: a sentence of at least 8 characters ending in "?", matched only from a sentence's start (the
#: lookbehind), so a long line without one is read once, not once from each of its characters
QUESTION_RE = re.compile(r"(?<![^.!?\n])[^.!?\n]{8,}+\?")


_ERRORISH_RE = re.compile(
    r"^\s*(?:\{?\s*\"?error\"?\s*[:=]|error\b|exception\b|traceback\b|i'?m sorry|i cannot|i can't|as an ai|"
    r"rate limit|internal server error|service unavailable|overloaded|request timed out|bad request|unauthorized|"
    r"\d{3} [A-Z][a-z]+ Error)",
    re.I,
)


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def render_transcript(messages: Sequence[Message], *, max_chars_per_block: int = 4000) -> str:
    """A plain-text transcript of ``messages`` for a summarization prompt (long blocks clipped)."""
    lines: list[str] = []
    for m in messages:
        for b in m.content:
            if isinstance(b, Text):
                t = b.text
                if len(t) > max_chars_per_block:
                    t = t[: max_chars_per_block // 2] + f"\n[… {len(t) - max_chars_per_block:,} chars …]\n" + t[-max_chars_per_block // 2:]
                lines.append(f"{m.role.upper()}: {t}")
            elif isinstance(b, ToolCall):
                lines.append(f"ASSISTANT CALLS {b.name}({format_args(b.arguments, 200)}) [id {b.id}]")
            elif isinstance(b, ToolResult):
                t = b.text
                if len(t) > max_chars_per_block:
                    t = t[: max_chars_per_block // 2] + f"\n[… {len(t) - max_chars_per_block:,} chars …]\n" + t[-max_chars_per_block // 2:]
                lines.append(f"TOOL RESULT{' (error)' if b.is_error else ''} [{b.name or b.call_id}]: {t}")
    return "\n".join(lines)


def render_summary(sections: dict[str, Any], refs: Sequence[Reference], *, max_refs: int = 24) -> str:
    """The summary text placed in the context, from structured sections and scored references."""
    out = [SUMMARY_HEADER]
    for key, title in SECTION_ORDER:
        if key == "references":
            top = list(refs)[:max_refs]
            if top:
                out.append(f"{title}:\n" + "\n".join(f"- {r.kind}: {r.value}" for r in top))
            continue
        v = sections.get(key)
        if not v:
            continue
        if key == "identifiers" and isinstance(v, list | tuple):
            out.append(f"{title}: " + ", ".join(str(x) for x in v))
        elif isinstance(v, list | tuple):
            out.append(f"{title}:\n" + "\n".join(f"- {x}" for x in v))
        else:
            out.append(f"{title}: {v}")
    return "\n".join(out)


def fit_summary(sections: dict[str, Any], refs: Sequence[Reference], budget_tokens: int) -> str:
    """Render, dropping the lowest-scored references and oldest list entries until within budget."""
    max_refs = min(len(refs), 24)
    secs = {k: (list(v) if isinstance(v, list | tuple) else v) for k, v in sections.items()}
    text = render_summary(secs, refs, max_refs=max_refs)
    for _ in range(200):
        if count_text(text) <= budget_tokens:
            break
        ids = secs.get("identifiers")
        if isinstance(ids, list) and len(ids) > 24:
            secs["identifiers"] = ids[max(1, len(ids) // 8):]  # the oldest identifiers go first
        elif max_refs > 4:
            max_refs = max(4, max_refs - 4)
        else:
            longest = max((k for k, v in secs.items() if isinstance(v, list) and len(v) > 1),
                          key=lambda k: len(secs[k]), default=None)
            if longest is not None:
                secs[longest] = secs[longest][1:]
            elif max_refs > 0:
                max_refs -= 1
            else:
                for k, v in secs.items():
                    if isinstance(v, str) and len(v) > 80:
                        secs[k] = v[: len(v) * 2 // 3] + "…"
                        break
                else:
                    break
        text = render_summary(secs, refs, max_refs=max_refs)
    return text


def _dedupe(items: Sequence[str], limit: int) -> list[str]:
    seen: dict[str, None] = {}
    for x in items:
        x = x.strip()
        if x and x.lower() not in {k.lower() for k in seen}:
            seen[x] = None
    return list(seen)[-limit:]


def extract_lessons(messages: Sequence[Message]) -> list[str]:
    """Memory candidates, extractively: user preferences and what failed and why."""
    out: list[str] = []
    calls: dict[str, str] = {}
    for m in messages:
        for b in m.content:
            if isinstance(b, ToolCall):
                calls[b.id] = f"{b.name}({format_args(b.arguments, 60)})"
            elif isinstance(b, Text) and m.role == "user":
                out.extend(f"preference: {_clip(p, 200)}" for p in sentences_with(PREFERENCE_WORDS, b.text[:20_000], 3))
            elif isinstance(b, ToolResult) and b.is_error:
                first = next((ln for ln in b.text.splitlines() if ln.strip()), "")
                out.append(f"failed: {calls.get(b.call_id, b.name or b.call_id)} → {_clip(first, 160)}")
    return _dedupe(out, 12)


class OfflineSummarizer:
    """Extractive summary with no model: goal, decisions, state, references, questions, next step.

    Deterministic (same span, same summary), so it is safe as the default in replayed sessions.
    """

    name = "offline"

    def __init__(self, max_refs: int = 24, max_decisions: int = 8, max_identifiers: int = 120) -> None:
        self.max_refs = max_refs
        self.max_decisions = max_decisions
        self.max_identifiers = max_identifiers

    def summarize(
        self,
        messages: Sequence[Message],
        *,
        goal: str | None = None,
        previous: Summary | None = None,
        budget_tokens: int = 1024,
    ) -> Summary:
        prev = previous.sections if previous is not None else {}
        first_user = next((m.text for m in messages if m.role == "user" and m.text.strip()), "")
        goal_text = goal or prev.get("goal") or _clip(first_user, 300)
        refs = extract_refs(messages, goal=goal_text)
        if previous is not None:
            refs = merge_refs(previous.refs, refs)
        decisions: list[str] = list(prev.get("decisions", []))
        questions: list[str] = []
        calls = failed = 0
        tools_used: dict[str, int] = {}
        last_text = ""
        for m in messages:
            for b in m.content:
                if isinstance(b, ToolCall):
                    calls += 1
                    tools_used[b.name] = tools_used.get(b.name, 0) + 1
                elif isinstance(b, ToolResult) and b.is_error:
                    failed += 1
                elif isinstance(b, Text) and b.text.strip():
                    if m.role == "assistant":
                        last_text = b.text
                        decisions.extend(_decisions_of(m))
                    questions.extend(_clip(q, 200) for q in QUESTION_RE.findall(b.text[-20_000:])[-2:])
        totals = dict(prev.get("totals", {}))
        for k, v in tools_used.items():
            totals[k] = totals.get(k, 0) + v
        n_msgs = len(messages) + int(prev.get("messages", 0))
        n_calls = calls + int(prev.get("calls", 0))
        n_failed = failed + int(prev.get("failed", 0))
        usage = ", ".join(f"{k} x{v}" for k, v in sorted(totals.items(), key=lambda kv: -kv[1])[:8])
        state = f"{n_msgs} messages so far, {n_calls} tool calls ({n_failed} failed)" + (f": {usage}" if usage else "")
        if last_text:
            state += f". Last said: {_clip(last_text, 240)}"
        nxt = sentences_with(NEXT_STEP_WORDS, last_text[-4000:])
        sections: dict[str, Any] = {
            "goal": goal_text,
            "decisions": _dedupe(decisions, self.max_decisions),
            "state": state,
            "open_questions": _dedupe([*prev.get("open_questions", []), *questions], 5),
            "next_step": _clip(nxt[-1], 240) if nxt else prev.get("next_step", ""),
            "messages": n_msgs, "calls": n_calls, "failed": n_failed, "totals": totals,
        }
        sections["identifiers"] = _recent_identifiers(messages, prev.get("identifiers", []), self.max_identifiers)
        lessons = _dedupe([*(previous.lessons if previous else ()), *extract_lessons(messages)], 16)
        text = fit_summary(sections, refs[: self.max_refs], budget_tokens)
        return Summary(text, tuple(refs), tuple(lessons), self.name, 0, count_text(text), sections)


def _block_text(b: Any) -> str:
    return b.text if isinstance(b, Text | ToolResult) else (b.arguments_json if isinstance(b, ToolCall) else "")


def _recent_identifiers(messages: Sequence[Message], earlier: Sequence[str], n: int) -> list[str]:
    """The ``n`` identifiers (``result_keys``, ``KEY_SCAN`` a block) sighted last, oldest first, after ``earlier``
    (the previous summary's). Read from the newest block back, so a long span stops being read once
    ``n`` are found."""
    if n <= 0:  # [-0:] keeps everything: the forward fold, as written
        idents: dict[str, None] = dict.fromkeys(earlier)
        for m in messages:
            for b in m.content:
                for k in result_keys(_block_text(b), KEY_SCAN):
                    idents.pop(k, None)
                    idents[k] = None
        return list(idents)[-n:]
    found: dict[str, None] = {}
    for m in reversed(messages):
        for b in reversed(m.content):
            for k in reversed(result_keys(_block_text(b), KEY_SCAN)):
                if k not in found:
                    found[k] = None
                    if len(found) >= n:
                        return list(reversed(found))
    for k in reversed(list(dict.fromkeys(earlier))):  # an earlier list's first sighting is its place
        if k not in found:
            found[k] = None
            if len(found) >= n:
                break
    return list(reversed(found))


def _decisions_of(m: Message) -> list[str]:
    """The decision references ``extract_refs([m])`` finds in one message, in its order (by value: they
    score alike), without scanning the message for every other kind of reference."""
    found = {v for b in m.content if isinstance(b, Text)
             for d in find_decisions(b.text[:20_000])[:4] if len(v := _clip(d, 200).strip()) >= 2}
    return sorted(found)


class FakeSummarizer:
    """A public test double. Returns ``text`` (default: a short fixed summary), or misbehaves on purpose.

    ``script``: outputs for successive calls — a string (returned as the summary text), an exception
    instance (raised), or one of the modes ``"empty"``, ``"echo"`` (the prompt back), ``"error"``
    (an error message instead of a summary), ``"timeout"`` (raises :class:`TimeoutError`). After the
    script runs out, ``text`` is used. ``calls`` records every call's arguments.
    """

    name = "fake"

    def __init__(self, text: str | None = None, *, script: Sequence[str | BaseException] = (),
                 lessons: Sequence[str] = ()) -> None:
        self.text = text
        self.script = list(script)
        self.lessons = tuple(lessons)
        self.calls: list[dict[str, Any]] = []

    def summarize(
        self,
        messages: Sequence[Message],
        *,
        goal: str | None = None,
        previous: Summary | None = None,
        budget_tokens: int = 1024,
    ) -> Summary:
        self.calls.append({"messages": list(messages), "goal": goal, "previous": previous, "budget_tokens": budget_tokens})
        out: str | BaseException | None = self.script.pop(0) if self.script else None
        if isinstance(out, BaseException):
            raise out
        if out == "timeout":
            raise TimeoutError("fake summarizer timed out")
        if out == "empty":
            return Summary("", summarizer=self.name)
        if out == "echo":
            return Summary(render_transcript(messages), summarizer=self.name)
        if out == "error":
            return Summary("Error: 529 Overloaded. Please retry later.", summarizer=self.name)
        text = out if out is not None else (self.text or f"{SUMMARY_HEADER}\nGOAL: {goal or '(none)'}\n"
                                            f"STATE OF WORK: {len(messages)} messages summarized by the fake summarizer.")
        refs = extract_refs(messages, goal=goal)
        return Summary(text, tuple(refs), self.lessons, self.name, 0, count_text(text), {"goal": goal or ""})


def check_summary(summary: Any, transcript: str, *, input_tokens: int | None = None) -> str | None:
    """Why ``summary`` is unusable, or None if it is fine.

    Rejects: not a Summary; empty or whitespace; an error message instead of a summary; the prompt
    (transcript) echoed back; output no shorter than the span it replaces.
    """
    if not isinstance(summary, Summary):
        return f"the summarizer returned {type(summary).__name__}, not a Summary"
    text = summary.text.strip()
    if not text:
        return "the summarizer returned empty text"
    if len(text) < 200 and _ERRORISH_RE.search(text):
        return f"the summarizer returned an error message instead of a summary: {_clip(text, 120)!r}"
    if transcript:
        probe = transcript.strip()
        if len(probe) >= 80 and (probe[:400] in text or text in probe):
            return "the summarizer echoed its input back instead of summarizing it"
        n_in = input_tokens if input_tokens is not None else count_text(transcript)
        n_out = count_text(text)
        if n_in >= 200 and n_out >= n_in:
            return f"the summary ({n_out:,} tokens) is no shorter than the span it replaces ({n_in:,} tokens)"
    return None


#: Anything with a ``summarize`` method of the :class:`~windowsmith.compaction.base.Summarizer` protocol.
SummarizerFactory = Callable[[], Any]

__all__ = [
    "SUMMARY_HEADER",
    "FakeSummarizer",
    "NEXT_STEP_WORDS",
    "OfflineSummarizer",
    "PREFERENCE_WORDS",
    "QUESTION_RE",
    "check_summary",
    "extract_lessons",
    "fit_summary",
    "render_summary",
    "render_transcript",
]
