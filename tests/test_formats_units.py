"""Renderer behaviour in detail: registry, memoization, checksums, breakpoints, thinking, errors."""

from __future__ import annotations

import pytest

from test_formats_cases import history, make_request, request_append, request_new, request_prepend
from windowsmith.errors import ConfigError, ProviderResponseError, UnmatchedToolResultError
from windowsmith.formats import (
    FORMATS,
    AnthropicRenderer,
    GeminiRenderer,
    OpenAIChatRenderer,
    OpenAIResponsesRenderer,
    get_renderer,
    is_context_overflow,
    require_sdk,
)
from windowsmith.model import Message, Text, ToolResult
from windowsmith.request import CachePlan


def test_registry() -> None:
    assert FORMATS == ("anthropic", "openai-chat", "openai-responses", "gemini")
    classes = [AnthropicRenderer, OpenAIChatRenderer, OpenAIResponsesRenderer, GeminiRenderer]
    for fmt, cls in zip(FORMATS, classes, strict=True):
        r = get_renderer(fmt)
        assert isinstance(r, cls) and r.format == fmt
    with pytest.raises(ConfigError, match="use one of anthropic"):
        get_renderer("cohere")
    assert require_sdk("anthropic").__name__ == "anthropic"
    with pytest.raises(ConfigError):
        require_sdk("nope")


@pytest.mark.parametrize("fmt", FORMATS)
def test_deterministic_and_checksum_sensitive(fmt: str) -> None:
    a = get_renderer(fmt).render(request_append())
    b = get_renderer(fmt).render(request_append())
    assert a.request == b.request and a.checksum == b.checksum and a.parts == b.parts
    moved = make_request(history()[:5], cache=CachePlan(tools=True, system=True, session=True, message_index=2))
    c = get_renderer(fmt).render(moved)
    assert c.parts == a.parts  # markers are not content
    assert c.checksum != a.checksum  # but they are part of the request
    other_tail = make_request(history()[:5], tail="something else")
    assert get_renderer(fmt).render(other_tail).checksum != a.checksum
    assert a.cache_prefix_parts == 2 + 2 + 4  # two tools, system, session, messages 0..3


@pytest.mark.parametrize("fmt", FORMATS)
def test_only_new_messages_are_rendered(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    r = get_renderer(fmt)
    calls: list[str] = []
    original = r.render_message

    def spy(message: Message, extra: tuple) -> list:
        calls.append(message.digest)
        return original(message, extra)

    monkeypatch.setattr(r, "render_message", spy)
    r.render(make_request(history()[:3]))
    assert len(calls) == 3
    calls.clear()
    r.render(make_request(history()[:5]))
    assert len(calls) == 2  # only the two new messages


def test_message_index_out_of_range() -> None:
    req = make_request(history(), cache=CachePlan(message_index=99))
    for fmt in FORMATS:
        with pytest.raises(ConfigError, match="out of range"):
            get_renderer(fmt).render(req)


def test_no_plan_means_no_markers_and_no_prefix() -> None:
    rendered = get_renderer("anthropic").render(make_request(history(), cache=CachePlan()))
    assert "cache_control" not in str(rendered.request)
    assert rendered.cache_prefix_parts == 0


def test_anthropic_breakpoint_skips_thinking_and_counts_at_most_four() -> None:
    msgs = history()[:2]
    from windowsmith.model import Thinking

    thinking_last = Message("assistant", (*msgs[1].content, Thinking("anthropic", {"type": "redacted_thinking", "data": "x"})))
    req = make_request((msgs[0], thinking_last), cache=CachePlan(True, True, True, 1), tail=None)
    out = get_renderer("anthropic").render(req).request
    content = out["messages"][1]["content"]
    assert content[-1] == {"type": "redacted_thinking", "data": "x"}
    assert content[-2]["cache_control"] == {"type": "ephemeral"}
    assert str(out).count("cache_control") == 4


def test_tail_modes_across_formats() -> None:
    tail = {"type": "text", "text": "Task: fix calc.add. Budget: 12k tokens left."}
    pre = get_renderer("anthropic").render(request_prepend()).request["messages"][-1]["content"]
    assert pre == [tail, {"type": "text", "text": "Yes, fix it."}]
    new = get_renderer("anthropic").render(request_new()).request["messages"]
    assert new[-2]["role"] == "assistant" and new[-1] == {"role": "user", "content": [tail]}
    g = get_renderer("gemini").render(request_prepend()).request["contents"][-1]
    assert g == {"role": "user", "parts": [{"text": tail["text"]}, {"text": "Yes, fix it."}]}
    r = get_renderer("openai-responses").render(request_prepend()).request["input"][-1]
    assert r["content"] == [{"type": "input_text", "text": tail["text"]}, {"type": "input_text", "text": "Yes, fix it."}]
    no_tail = make_request(history(), tail=None)
    for fmt in FORMATS:
        assert "Budget" not in str(get_renderer(fmt).render(no_tail).request)


def test_thinking_goes_back_only_to_its_provider() -> None:
    req = request_new()
    a = str(get_renderer("anthropic").render(req).request)
    assert "signature" in a and "encrypted_content" not in a and "c2lnLWc=" not in a
    r = str(get_renderer("openai-responses").render(req).request)
    assert "encrypted_content" in r and "c2lnLWE=" not in r and "c2lnLWc=" not in r
    g = str(get_renderer("gemini").render(req).request)
    assert "c2lnLWc=" in g and "encrypted_content" not in g and "c2lnLWE=" not in g
    c = str(get_renderer("openai-chat").render(req).request)
    assert "encrypted_content" not in c and "c2ln" not in c


def test_anthropic_merges_user_after_tool_results_first() -> None:
    msgs = (*history()[:3], Message.user("also check tests"))
    out = get_renderer("anthropic").render(make_request(msgs, tail=None)).request["messages"]
    assert [b["type"] for b in out[-1]["content"]] == ["tool_result", "tool_result", "text"]


def test_gemini_needs_a_tool_name() -> None:
    orphan = Message("tool", (ToolResult("nope", (Text("x"),)),))
    with pytest.raises(UnmatchedToolResultError, match=r"ToolResult\.name"):
        get_renderer("gemini").render(make_request((Message.user("hi"), Message.assistant("ok"), orphan)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("garbage", [None, 42, {}, {"content": "nope"}, {"choices": []}, {"output": [1]}, {"candidates": []}])
def test_garbage_responses_raise(fmt: str, garbage: object) -> None:
    with pytest.raises(ProviderResponseError):
        get_renderer(fmt).parse_response(garbage)


def test_invalid_tool_arguments_are_kept_raw() -> None:
    reply = {"choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}}]}
    parsed = get_renderer("openai-chat").parse_response(reply)
    assert parsed.message.tool_calls[0].arguments == {"_raw": "{not json"}
    assert parsed.usage.prompt_tokens == 0


def test_cache_writes_are_not_input_tokens() -> None:
    reply = {"output": [], "usage": {"input_tokens": 1000, "output_tokens": 5,
                                     "input_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300}}}
    u = get_renderer("openai-responses").parse_response(reply).usage
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.prompt_tokens) == (100, 600, 300, 1000)


def test_is_context_overflow_ignores_plain_exceptions() -> None:
    assert not is_context_overflow(RuntimeError("context_length_exceeded"))
