"""Summarizers over the official Anthropic and OpenAI SDKs (the client is passed in).

    from anthropic import Anthropic
    summarizer = AnthropicSummarizer(Anthropic(), model="claude-haiku-4-5")
    engine = Engine(model="claude-sonnet-4-5", summarizer=summarizer)

The model is asked for JSON with the summary's sections and lessons; ``budget_tokens`` is reserved as
the call's output limit (``max_tokens`` / ``max_completion_tokens``). References are extracted from the
span itself (and merged by the compactor), so a model that forgets a file path loses nothing.
Output that is not JSON is kept as plain summary text; the compactor's checks reject empty, echoed or
error-message output. The SDKs are imported lazily: install ``windowsmith[anthropic]`` or
``windowsmith[openai]``.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..model import Message
from .base import Reference, Summary
from .references import extract_refs, merge_refs
from .summarizer import fit_summary, render_transcript

INSTRUCTIONS = """You compact the history of an AI agent's session so the agent can continue without it.
Summarize the transcript below (and absorb the previous summary, if given) as a JSON object with keys:
"goal" (string), "decisions" (list of strings), "state" (string: the state of the work),
"open_questions" (list of strings), "next_step" (string), "references" (list of {"kind", "value"} with kind
one of file, url, function, error, command, id), and "lessons" (list of strings worth remembering beyond this
session: user preferences, project facts, what failed and why). Be specific: keep exact paths, ids, error
messages and commands. Reply with the JSON object only."""


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"this summarizer needs the {module} SDK: pip install 'windowsmith[{extra}]'") from None


def build_prompt(messages: Sequence[Message], goal: str | None, previous: Summary | None, max_chars: int) -> str:
    parts = []
    if goal:
        parts.append(f"GOAL OF THE SESSION: {goal}")
    if previous is not None and previous.text:
        parts.append(f"PREVIOUS SUMMARY (absorb it):\n{previous.text}")
    transcript = render_transcript(messages)
    if len(transcript) > max_chars:
        transcript = transcript[: max_chars // 3] + "\n[… middle of the span clipped …]\n" + transcript[-2 * max_chars // 3:]
    parts.append(f"TRANSCRIPT:\n{transcript}")
    return "\n\n".join(parts)


_JSON_RE = re.compile(r"\{.*\}", re.S)


def parse_output(text: str, messages: Sequence[Message], goal: str | None, previous: Summary | None,
                 budget_tokens: int, name: str, usage: tuple[int, int]) -> Summary:
    """The model's reply → a Summary (JSON sections when it gave them; else its text as is)."""
    data: Any = None
    m = _JSON_RE.search(text or "")
    if m:
        try:
            data = json.loads(m.group(0))
        except json.JSONDecodeError:
            data = None
    refs = extract_refs(messages, goal=goal)
    if previous is not None:
        refs = merge_refs(previous.refs, refs)
    if not isinstance(data, dict):
        return Summary((text or "").strip(), tuple(refs), (), name, usage[0], usage[1])
    model_refs = [Reference(str(r.get("kind", "id")), str(r.get("value", "")), 0.9)
                  for r in data.get("references", []) if isinstance(r, dict) and r.get("value")]
    refs = merge_refs(model_refs, refs)
    sections = {k: data.get(k) for k in ("goal", "decisions", "state", "open_questions", "next_step") if data.get(k)}
    if not sections:
        return Summary("", tuple(refs), (), name, usage[0], usage[1])
    sections.setdefault("goal", goal or "")
    lessons = tuple(str(x) for x in data.get("lessons", []) if isinstance(x, str | int | float))
    return Summary(fit_summary(sections, refs, budget_tokens), tuple(refs), lessons, name, usage[0], usage[1], sections)


class AnthropicSummarizer:
    """Summaries from a Claude model through ``anthropic.Anthropic().messages.create``."""

    name = "anthropic"

    def __init__(self, client: Any, model: str = "claude-haiku-4-5", *, max_input_chars: int = 400_000,
                 timeout: float | None = 60.0) -> None:
        _require("anthropic", "anthropic")
        self.client = client
        self.model = model
        self.max_input_chars = max_input_chars
        self.timeout = timeout

    def summarize(self, messages: Sequence[Message], *, goal: str | None = None, previous: Summary | None = None,
                  budget_tokens: int = 1024) -> Summary:
        prompt = build_prompt(messages, goal, previous, self.max_input_chars)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": budget_tokens,
            "system": INSTRUCTIONS,
            "messages": [{"role": "user", "content": prompt}],
        }
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        resp = self.client.messages.create(**kwargs)
        text = "".join(getattr(b, "text", "") for b in resp.content if getattr(b, "type", "") == "text")
        u = getattr(resp, "usage", None)
        usage = (int(getattr(u, "input_tokens", 0) or 0), int(getattr(u, "output_tokens", 0) or 0))
        return parse_output(text, messages, goal, previous, budget_tokens, f"{self.name}:{self.model}", usage)


class OpenAISummarizer:
    """Summaries from an OpenAI model through ``openai.OpenAI().chat.completions.create`` (JSON mode)."""

    name = "openai"

    def __init__(self, client: Any, model: str = "gpt-4.1-mini", *, max_input_chars: int = 400_000,
                 timeout: float | None = 60.0) -> None:
        _require("openai", "openai")
        self.client = client
        self.model = model
        self.max_input_chars = max_input_chars
        self.timeout = timeout

    def summarize(self, messages: Sequence[Message], *, goal: str | None = None, previous: Summary | None = None,
                  budget_tokens: int = 1024) -> Summary:
        prompt = build_prompt(messages, goal, previous, self.max_input_chars)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_completion_tokens": budget_tokens,
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": prompt}],
        }
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        resp = self.client.chat.completions.create(**kwargs)
        text = resp.choices[0].message.content or "" if resp.choices else ""
        u = getattr(resp, "usage", None)
        usage = (int(getattr(u, "prompt_tokens", 0) or 0), int(getattr(u, "completion_tokens", 0) or 0))
        return parse_output(text, messages, goal, previous, budget_tokens, f"{self.name}:{self.model}", usage)


__all__ = ["INSTRUCTIONS", "AnthropicSummarizer", "OpenAISummarizer", "build_prompt", "parse_output"]
