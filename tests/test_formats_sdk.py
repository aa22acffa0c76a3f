"""Rendered requests against the real SDKs: param types, the JSON body each SDK sends, and parsing of
the SDK's own response objects. No network: every client runs over ``httpx2.MockTransport``."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from google import genai
from google.genai import types as gtypes
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

from test_formats_cases import CASES, PNG_B64, check_typed, request_append, request_new, request_prepend
from windowsmith.formats import get_renderer, is_context_overflow
from windowsmith.model import Text, Thinking, ToolCall, Usage

TAIL = "Task: fix calc.add. Budget: 12k tokens left."


class Recorder:
    def __init__(self, reply: dict[str, Any], status: int = 200) -> None:
        self.reply = reply
        self.status = status
        self.bodies: list[dict[str, Any]] = []
        self.urls: list[str] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        self.urls.append(str(request.url))
        return httpx2.Response(self.status, json=self.reply)

    def client(self) -> httpx2.Client:
        return httpx2.Client(transport=httpx2.MockTransport(self))


def as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


# --------------------------------------------------------------------------------------------------
# (1) param types
# --------------------------------------------------------------------------------------------------

PARAM_TYPES = {
    "anthropic": MessageCreateParamsNonStreaming,
    "openai-chat": CompletionCreateParamsNonStreaming,
    "openai-responses": ResponseCreateParamsNonStreaming,
}


@pytest.mark.parametrize("mode", list(CASES))
@pytest.mark.parametrize("fmt", list(PARAM_TYPES))
def test_request_matches_sdk_param_types(fmt: str, mode: str) -> None:
    check_typed(get_renderer(fmt).render(CASES[mode]()).request, PARAM_TYPES[fmt])


@pytest.mark.parametrize("mode", list(CASES))
def test_gemini_request_validates_against_sdk_models(mode: str) -> None:
    req = get_renderer("gemini").render(CASES[mode]()).request
    assert set(req) == {"model", "contents", "config"}
    gtypes.GenerateContentConfig.model_validate(req["config"])
    for content in req["contents"]:
        gtypes.Content.model_validate(content)


# --------------------------------------------------------------------------------------------------
# (2) through the real SDK clients
# --------------------------------------------------------------------------------------------------

ANTHROPIC_REPLY = {
    "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
    "content": [
        {"type": "thinking", "thinking": "The sign is wrong.", "signature": "c2ln"},
        {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
        {"type": "text", "text": "Fixing add()."},
        {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "calc.py"}},
    ],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 21, "output_tokens": 40, "cache_read_input_tokens": 1800,
              "cache_creation_input_tokens": 300},
}


def test_anthropic_sdk_roundtrip() -> None:
    rec = Recorder(ANTHROPIC_REPLY)
    client = anthropic.Anthropic(api_key="test", http_client=rec.client(), max_retries=0)
    renderer = get_renderer("anthropic")
    rendered = renderer.render(request_append())
    response = client.messages.create(**rendered.request)
    body = rec.bodies[0]
    assert body == as_json(rendered.request)
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["tools"][0]
    assert [b.get("cache_control") for b in body["system"]] == [{"type": "ephemeral"}] * 2
    # the message breakpoint: last block of messages[3] (the assistant's screenshot call)
    assert body["messages"][3]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sum("cache_control" in b for m in body["messages"] for b in m["content"]) == 1
    # tool results: a user message of tool_result blocks; error flagged; image inside; tail after
    results = body["messages"][2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result"]
    assert results[1]["is_error"] is True and "is_error" not in results[0]
    last = body["messages"][-1]
    assert last["role"] == "user"
    assert [b["type"] for b in last["content"]] == ["tool_result", "text"]
    assert last["content"][0]["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
    assert last["content"][-1] == {"type": "text", "text": TAIL}
    # thinking: only Anthropic's own block goes back
    assert body["messages"][1]["content"][0] == {"type": "thinking", "thinking": "Look at the file.", "signature": "c2lnLWE="}
    assert [b["type"] for b in body["messages"][1]["content"]] == ["thinking", "text", "tool_use", "tool_use"]

    parsed = renderer.parse_response(response)
    assert parsed.usage == Usage(input_tokens=21, output_tokens=40, cache_read_tokens=1800, cache_write_tokens=300)
    assert parsed.stop_reason == "tool_use" and parsed.model == "claude-test"
    assert parsed.message.content == (
        Thinking("anthropic", {"type": "thinking", "thinking": "The sign is wrong.", "signature": "c2ln"}, text="The sign is wrong."),
        Thinking("anthropic", {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}),
        Text("Fixing add()."),
        ToolCall("toolu_9", "read_file", {"path": "calc.py"}),
    )
    assert renderer.parse_response(ANTHROPIC_REPLY) == parsed


CHAT_REPLY = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "gpt-test",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Fixing add().",
        "tool_calls": [{"id": "call_9", "type": "function",
                        "function": {"name": "read_file", "arguments": "{\"path\": \"calc.py\"}"}}]}}],
    "usage": {"prompt_tokens": 2100, "completion_tokens": 40, "total_tokens": 2140,
              "prompt_tokens_details": {"cached_tokens": 1792}},
}


def test_openai_chat_sdk_roundtrip() -> None:
    rec = Recorder(CHAT_REPLY)
    client = openai.OpenAI(api_key="test", http_client=rec.client(), max_retries=0)
    renderer = get_renderer("openai-chat")
    rendered = renderer.render(request_prepend())
    response = client.chat.completions.create(**rendered.request)
    body = rec.bodies[0]
    assert body == as_json(rendered.request)
    assert body["prompt_cache_key"] == "session-42"
    assert body["max_completion_tokens"] == 1024
    roles = [m["role"] for m in body["messages"]]
    assert roles[:2] == ["system", "system"]
    assert body["messages"][1]["content"] == "Repo: calc (python 3.11)"
    # tool messages right after the assistant's calls, error prefixed, tool images in a user message
    assert roles[2:] == ["user", "assistant", "tool", "tool", "assistant", "tool", "user", "assistant", "user"]
    assert body["messages"][5]["content"].startswith("Error: ")
    assert body["messages"][8]["content"][1]["image_url"]["url"] == f"data:image/png;base64,{PNG_B64}"
    # tail prepended before the user's text, in the same final user message
    assert body["messages"][-1]["content"] == [{"type": "text", "text": TAIL}, {"type": "text", "text": "Yes, fix it."}]
    assert "thinking" not in json.dumps(body)

    parsed = renderer.parse_response(response)
    assert parsed.usage == Usage(input_tokens=308, output_tokens=40, cache_read_tokens=1792)
    assert parsed.message.content == (Text("Fixing add()."), ToolCall("call_9", "read_file", {"path": "calc.py"}))
    assert parsed.stop_reason == "tool_calls"
    assert renderer.parse_response(CHAT_REPLY) == parsed


RESPONSES_REPLY = {
    "id": "resp_1", "object": "response", "created_at": 1700000000, "model": "gpt-test", "status": "completed",
    "output": [
        {"type": "reasoning", "id": "rs_9", "summary": [{"type": "summary_text", "text": "Sign error."}],
         "encrypted_content": "gAAAAB"},
        {"type": "message", "id": "msg_9", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Fixing add().", "annotations": []}]},
        {"type": "function_call", "id": "fc_9", "call_id": "call_9", "name": "read_file",
         "arguments": "{\"path\":\"calc.py\"}", "status": "completed"},
    ],
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    "usage": {"input_tokens": 2100, "output_tokens": 60, "total_tokens": 2160,
              "input_tokens_details": {"cached_tokens": 1536, "cache_write_tokens": 0},
              "output_tokens_details": {"reasoning_tokens": 20}},
}


def test_openai_responses_sdk_roundtrip() -> None:
    rec = Recorder(RESPONSES_REPLY)
    client = openai.OpenAI(api_key="test", http_client=rec.client(), max_retries=0)
    renderer = get_renderer("openai-responses")
    rendered = renderer.render(request_append())
    response = client.responses.create(**rendered.request)
    body = rec.bodies[0]
    assert body == as_json(rendered.request)
    assert body["prompt_cache_key"] == "session-42" and body["max_output_tokens"] == 1024
    assert body["tools"][0] == {"type": "function", "name": "read_file", "description": "Read a file from the workspace.",
                                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
                                "strict": False}
    kinds = [(i.get("type"), i.get("role")) for i in body["input"]]
    assert kinds == [
        ("message", "system"), ("message", "system"), ("message", "user"),
        ("reasoning", None), ("message", "assistant"), ("function_call", None), ("function_call", None),
        ("function_call_output", None), ("function_call_output", None),
        ("function_call", None), ("function_call_output", None),
        ("message", "user"),
    ]
    assert body["input"][3] == {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"}
    assert body["input"][8]["output"] == "Error: No such file: missing.py"
    assert body["input"][10]["output"][1] == {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}", "detail": "auto"}
    assert body["input"][-1]["content"] == [{"type": "input_text", "text": TAIL}]

    parsed = renderer.parse_response(response)
    assert parsed.usage == Usage(input_tokens=564, output_tokens=60, cache_read_tokens=1536)
    thinking, text, call = parsed.message.content
    assert isinstance(thinking, Thinking) and thinking.provider == "openai" and thinking.text == "Sign error."
    assert thinking.data["encrypted_content"] == "gAAAAB" and thinking.data["id"] == "rs_9"
    assert text == Text("Fixing add().") and call == ToolCall("call_9", "read_file", {"path": "calc.py"})
    assert parsed.stop_reason == "completed"
    # the reasoning item goes back unchanged on the next turn
    nxt = renderer.render(request_new().__class__(**{**request_new().__dict__, "messages": (*request_new().messages, parsed.message)}))
    assert thinking.data in nxt.request["input"]


GEMINI_REPLY = {
    "candidates": [{"content": {"role": "model", "parts": [
        {"text": "Sign error.", "thought": True},
        {"text": "Fixing add().", "thoughtSignature": "c2lnLWc="},
        {"functionCall": {"name": "read_file", "args": {"path": "calc.py"}}},
    ]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 2100, "cachedContentTokenCount": 1024, "candidatesTokenCount": 40,
                      "thoughtsTokenCount": 25, "totalTokenCount": 2165},
    "modelVersion": "gemini-test", "responseId": "r-1",
}


def test_gemini_sdk_roundtrip() -> None:
    rec = Recorder(GEMINI_REPLY)
    client = genai.Client(api_key="test", http_options=gtypes.HttpOptions(httpx_client=rec.client()))
    renderer = get_renderer("gemini")
    rendered = renderer.render(request_append())
    response = client.models.generate_content(**rendered.request)
    body = rec.bodies[0]
    assert rec.urls[0].endswith("/models/test-model:generateContent")
    assert body["systemInstruction"]["parts"] == [{"text": "You are a careful coding agent.\n\nPrefer small diffs."},
                                                  {"text": "Repo: calc (python 3.11)"}]
    assert body["generationConfig"]["maxOutputTokens"] == 1024
    decls = body["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in decls] == ["read_file", "screenshot"]
    contents = body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    model_parts = contents[1]["parts"]
    assert model_parts[0] == {"text": "Reading both files.", "thoughtSignature": "c2lnLWc="}
    assert model_parts[1]["functionCall"] == {"id": "call_1", "name": "read_file", "args": {"path": "calc.py"}}
    responses = contents[2]["parts"]
    assert responses[0]["functionResponse"] == {"id": "call_1", "name": "read_file",
                                                "response": {"output": "def add(a, b):\n    return a - b"}}
    assert responses[1]["functionResponse"]["response"] == {"error": "No such file: missing.py"}
    last = contents[-1]["parts"]
    assert "functionResponse" in last[0] and last[0]["functionResponse"]["name"] == "screenshot"
    assert "inlineData" in last[1]
    assert last[-1] == {"text": TAIL}

    parsed = renderer.parse_response(response)
    assert parsed.usage == Usage(input_tokens=1076, output_tokens=65, cache_read_tokens=1024)
    assert parsed.stop_reason == "STOP" and parsed.model == "gemini-test"
    thought, sig, text, call = parsed.message.content
    assert isinstance(thought, Thinking) and thought.provider == "gemini" and thought.text == "Sign error."
    assert sig == Thinking("gemini", {"thought_signature": "c2lnLWc="})
    assert text == Text("Fixing add().")
    assert call == ToolCall("r-1-2", "read_file", {"path": "calc.py"})
    # the signature is re-attached to the part it came with
    again = renderer.render_message(parsed.message, ())
    assert again[0]["parts"][1] == {"text": "Fixing add().", "thought_signature": "c2lnLWc="}


# --------------------------------------------------------------------------------------------------
# overflow errors raised by the real SDKs
# --------------------------------------------------------------------------------------------------


def _raise(call: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def test_is_context_overflow_recognizes_each_sdk() -> None:
    req = request_prepend()
    a = Recorder({"type": "error", "error": {"type": "invalid_request_error",
                                             "message": "prompt is too long: 210000 tokens > 200000 maximum"}}, 400)
    a_client = anthropic.Anthropic(api_key="t", http_client=a.client(), max_retries=0)
    exc = _raise(lambda: a_client.messages.create(**get_renderer("anthropic").render(req).request))
    assert isinstance(exc, anthropic.BadRequestError) and is_context_overflow(exc)

    o = Recorder({"error": {"message": "This model's maximum context length is 128000 tokens.",
                            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}, 400)
    o_client = openai.OpenAI(api_key="t", http_client=o.client(), max_retries=0)
    exc = _raise(lambda: o_client.chat.completions.create(**get_renderer("openai-chat").render(req).request))
    assert isinstance(exc, openai.BadRequestError) and is_context_overflow(exc)

    g = Recorder({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                            "message": "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}}, 400)
    g_client = genai.Client(api_key="t", http_options=gtypes.HttpOptions(httpx_client=g.client()))
    exc = _raise(lambda: g_client.models.generate_content(**get_renderer("gemini").render(req).request))
    assert isinstance(exc, genai.errors.ClientError) and is_context_overflow(exc)


def test_is_context_overflow_rejects_other_errors() -> None:
    a = Recorder({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: must be positive"}}, 400)
    a_client = anthropic.Anthropic(api_key="t", http_client=a.client(), max_retries=0)
    exc = _raise(lambda: a_client.messages.create(**get_renderer("anthropic").render(request_new()).request))
    assert not is_context_overflow(exc)
    o = Recorder({"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": "invalid_value"}}, 400)
    o_client = openai.OpenAI(api_key="t", http_client=o.client(), max_retries=0)
    exc = _raise(lambda: o_client.responses.create(**get_renderer("openai-responses").render(request_new()).request))
    assert not is_context_overflow(exc)
    assert not is_context_overflow(ValueError("prompt is too long"))
