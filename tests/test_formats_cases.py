"""Shared cases for the renderer tests, plus a strict checker for the SDKs' TypedDict params.

pydantic validates ``Iterable[...]`` fields lazily and ignores unknown TypedDict keys, so
``check_typed`` walks the SDK's param types itself: every required key present, no unknown key,
literals and unions checked all the way down.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any

import pytest
from typing_extensions import is_typeddict

from windowsmith.model import Image, Message, Text, Thinking, ToolCall, ToolResult, ToolSpec
from windowsmith.request import CachePlan, NeutralRequest, Segment

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

TOOLS = (
    ToolSpec("read_file", "Read a file from the workspace.",
             {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    ToolSpec("screenshot", "Take a screenshot.", {"type": "object", "properties": {}}),
)

ANTHROPIC_THINKING = Thinking("anthropic", {"type": "thinking", "thinking": "Look at the file.", "signature": "c2lnLWE="},
                              text="Look at the file.")
OPENAI_REASONING = Thinking("openai", {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"})
GEMINI_SIGNATURE = Thinking("gemini", {"thought_signature": "c2lnLWc="})


def history() -> tuple[Message, ...]:
    """A multi-turn conversation: tool calls, an error result, images, thinking from all providers."""
    return (
        Message("user", (Text("Fix the failing test in calc.py"), Image(url="https://example.com/diagram.png"))),
        Message("assistant", (ANTHROPIC_THINKING, OPENAI_REASONING, GEMINI_SIGNATURE, Text("Reading both files."),
                              ToolCall("call_1", "read_file", {"path": "calc.py"}),
                              ToolCall("call_2", "read_file", {"path": "missing.py"}))),
        Message("tool", (ToolResult("call_1", (Text("def add(a, b):\n    return a - b"),)),
                         ToolResult("call_2", (Text("No such file: missing.py"),), is_error=True))),
        Message("assistant", (ToolCall("call_3", "screenshot", {}),)),
        Message("tool", (ToolResult("call_3", (Text("screen:"), Image(data=PNG_B64, media_type="image/png")),
                                    name="screenshot"),)),
        Message("assistant", (Text("add() subtracts. Shall I fix it?"),)),
    )


def make_request(messages: tuple[Message, ...], *, tail: str | None = "Task: fix calc.add. Budget: 12k tokens left.",
                 cache: CachePlan | None = None, session: str | None = "Repo: calc (python 3.11)") -> NeutralRequest:
    return NeutralRequest(
        model="test-model",
        system=(Segment("You are a careful coding agent.", "system"), Segment("Prefer small diffs.", "instructions")),
        session=(Segment(session, "session"),) if session else (),
        tools=TOOLS,
        messages=messages,
        tail=tail,
        max_output_tokens=1024,
        cache_key="session-42",
        cache=cache if cache is not None else CachePlan(tools=True, system=True, session=True,
                                                         message_index=len(messages) - 2 if len(messages) > 1 else None),
    )


def request_prepend() -> NeutralRequest:
    """Last message is a plain user message: the tail goes before the user's text."""
    return make_request((*history(), Message.user("Yes, fix it.")))


def request_append() -> NeutralRequest:
    """Last message is a tool message: the tail goes after the tool results."""
    return make_request(history()[:5])


def request_new() -> NeutralRequest:
    """Last message is an assistant message: the tail becomes a new user message."""
    return make_request(history())


CASES = {"prepend": request_prepend, "append": request_append, "new": request_new}


@pytest.mark.parametrize("mode", list(CASES))
def test_cases_have_the_tail_mode_they_claim(mode: str) -> None:
    assert CASES[mode]().tail_mode() == mode


# --------------------------------------------------------------------------------------------------
# strict TypedDict checking
# --------------------------------------------------------------------------------------------------


class Mismatch(Exception):
    pass


def check_typed(value: Any, tp: Any, path: str = "$") -> None:
    """Raise ``Mismatch`` unless ``value`` conforms to the (TypedDict-based) type ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return
    if origin is typing.Annotated:
        return check_typed(value, args[0], path)
    if origin in (typing.Required, typing.NotRequired) or str(origin).endswith(("Required", "NotRequired")):
        return check_typed(value, args[0], path)
    if origin is typing.Literal:
        if value not in args:
            raise Mismatch(f"{path}: {value!r} not in {args}")
        return
    if origin in (typing.Union, types.UnionType):
        errors = []
        for alt in args:
            try:
                check_typed(value, alt, path)
                return
            except Mismatch as e:
                errors.append(str(e))
        raise Mismatch(f"{path}: no alternative matched: " + " | ".join(errors[:6]))
    if tp is type(None):
        if value is not None:
            raise Mismatch(f"{path}: expected None")
        return
    if is_typeddict(tp):
        if not isinstance(value, dict):
            raise Mismatch(f"{path}: expected object for {tp.__name__}, got {type(value).__name__}")
        hints = typing.get_type_hints(tp, include_extras=True)
        unknown = set(value) - set(hints)
        if unknown:
            raise Mismatch(f"{path}: unknown keys {sorted(unknown)} for {tp.__name__}")
        missing = set(tp.__required_keys__) - set(value)
        if missing:
            raise Mismatch(f"{path}: missing keys {sorted(missing)} for {tp.__name__}")
        for k, v in value.items():
            check_typed(v, hints[k], f"{path}.{k}")
        return
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence, typing.List):  # noqa: UP006
        if not isinstance(value, list):
            raise Mismatch(f"{path}: expected a list, got {type(value).__name__}")
        for i, v in enumerate(value):
            check_typed(v, args[0], f"{path}[{i}]")
        return
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            raise Mismatch(f"{path}: expected a dict")
        return
    if tp is str:
        if not isinstance(value, str):
            raise Mismatch(f"{path}: expected str, got {type(value).__name__}")
        return
    if tp is bool:
        if not isinstance(value, bool):
            raise Mismatch(f"{path}: expected bool")
        return
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Mismatch(f"{path}: expected number")
        return
    if getattr(tp, "__name__", "") == "SequenceNotStr":
        if not isinstance(value, list):
            raise Mismatch(f"{path}: expected a list")
        return
    if isinstance(tp, type):
        if not isinstance(value, tp):
            raise Mismatch(f"{path}: expected {tp.__name__}, got {type(value).__name__}")
        return
    if isinstance(tp, typing.TypeVar | typing.ForwardRef):
        raise Mismatch(f"{path}: cannot check {tp!r}")
    raise Mismatch(f"{path}: unsupported type {tp!r}")
