"""Property: a valid neutral conversation exported to openai-chat or anthropic-messages JSON imports back unchanged."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from windowsmith.model import Message, Text, ToolCall, ToolResult
from windowsmith.traces import load_traces

pytestmark = pytest.mark.slow  # every test here replays real traces or runs processes

# text the importers keep verbatim: valid UTF-8 (no surrogates) and not whitespace-only (empty turns are dropped)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40).filter(lambda s: s.strip() != "")
NAME = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True)
JSON_LEAF = (
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | TEXT
)
JSON_VALUE = st.recursive(
    JSON_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8
)
ARGS = st.dictionaries(NAME, JSON_VALUE, max_size=4)


@st.composite
def conversations(draw: st.DrawFn, *, errors: bool) -> tuple[str | None, list[Message]]:
    system = draw(st.none() | TEXT)
    msgs: list[Message] = [Message.user(draw(TEXT))]
    n_calls = 0
    for _ in range(draw(st.integers(0, 5))):
        text = draw(st.none() | TEXT)
        calls = []
        for _ in range(draw(st.integers(0 if text else 1, 3))):
            n_calls += 1
            calls.append(ToolCall(id=f"call_{n_calls}_{draw(NAME)}", name=draw(NAME), arguments=draw(ARGS)))
        msgs.append(Message.assistant(text or "", calls))
        if calls:
            msgs.append(
                Message(
                    "tool",
                    tuple(
                        ToolResult(
                            call_id=c.id,
                            content=(Text(draw(TEXT)),),
                            is_error=draw(st.booleans()) if errors else False,
                            name=c.name,
                        )
                        for c in calls
                    ),
                )
            )
        if draw(st.booleans()):
            msgs.append(Message.user(draw(TEXT)))
    return system, msgs


def to_openai_chat(system: str | None, messages: list[Message]) -> dict[str, Any]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "user":
            out.append({"role": "user", "content": m.text})
        elif m.role == "assistant":
            d: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            if m.tool_calls:
                d["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                    for c in m.tool_calls
                ]
            out.append(d)
        else:
            out.extend(
                {"role": "tool", "tool_call_id": r.call_id, "name": r.name, "content": r.text} for r in m.tool_results
            )
    return {"messages": out}


def to_anthropic(system: str | None, messages: list[Message]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "user":
            out.append({"role": "user", "content": [{"type": "text", "text": m.text}]})
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m.text}] if m.text else []
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)} for c in m.tool_calls
            ]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": r.call_id, "content": r.text, "is_error": r.is_error}
                        for r in m.tool_results
                    ],
                }
            )
    doc: dict[str, Any] = {"messages": out}
    if system:
        doc["system"] = system
    return doc


def _roundtrip(doc: dict[str, Any], fmt_expected: str) -> Any:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "conv.json"
        p.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
        [t] = load_traces(p)
    assert t.format == fmt_expected
    return t


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(errors=False))
def test_openai_chat_roundtrip(conv: tuple[str | None, list[Message]]) -> None:
    system, messages = conv
    t = _roundtrip(to_openai_chat(system, messages), "openai-chat")
    assert t.system == system
    assert list(t.messages) == messages
    assert t.repairs == ()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(errors=True))
def test_anthropic_messages_roundtrip(conv: tuple[str | None, list[Message]]) -> None:
    system, messages = conv
    doc = to_anthropic(system, messages)
    if system is None:  # without "system", a list of messages is detected by its blocks; force the format
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "conv.json"
            p.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
            [t] = load_traces(p, format="anthropic-messages")
    else:
        t = _roundtrip(doc, "anthropic-messages")
    assert t.system == system
    assert list(t.messages) == messages
    assert t.repairs == ()
