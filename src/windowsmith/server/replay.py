"""A recorded reply sent again: the answer to a client's retry of a turn the session already answered.

The proxy keeps the JSON body of each turn's reply (OpenAI chat or Anthropic messages; a streamed reply as the
accumulator rebuilt it). A retry that asks for a stream gets the reply as the provider's server-sent events,
rebuilt from that body: one event per content block, so every SDK's stream reader ends with the same message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from starlette.responses import Response

from ..model import Message, Text
from .conversation import GEMINI, OPENAI, RESPONSES

#: The header a replayed reply carries (its value: the session log holds this reply already).
REPLAY_HEADER = "x-windowsmith-replay"


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def openai_events(reply: Mapping[str, Any], include_usage: bool) -> Iterator[bytes]:
    """A ``chat.completion`` as ``chat.completion.chunk`` events."""
    meta = {k: reply[k] for k in ("id", "created", "model") if k in reply}
    choice = (reply.get("choices") or [{}])[0]
    msg = dict(choice.get("message") or {})
    delta: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    if msg.get("refusal"):
        delta["refusal"] = msg["refusal"]
    if msg.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(msg["tool_calls"])]
    chunk = {**meta, "object": "chat.completion.chunk"}
    yield _sse({**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    yield _sse({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}]})
    if include_usage and reply.get("usage"):
        yield _sse({**chunk, "choices": [], "usage": reply["usage"]})
    yield b"data: [DONE]\n\n"


def anthropic_events(reply: Mapping[str, Any]) -> Iterator[bytes]:
    """An Anthropic ``message`` as its streaming events."""
    usage = dict(reply.get("usage") or {})
    start = {k: v for k, v in reply.items() if k not in ("content", "stop_reason", "stop_sequence")}
    yield _sse({"type": "message_start", "message": {**start, "content": [], "stop_reason": None,
                                                      "stop_sequence": None, "usage": usage}}, "message_start")
    for i, block in enumerate(reply.get("content") or []):
        t = block.get("type")
        if t == "text":
            first, delta = {**block, "text": ""}, {"type": "text_delta", "text": block.get("text", "")}
        elif t == "tool_use":
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}
        elif t == "thinking":
            first, delta = {**block, "thinking": "", "signature": ""}, {"type": "thinking_delta",
                                                                        "thinking": block.get("thinking", "")}
        else:
            first, delta = dict(block), None
        yield _sse({"type": "content_block_start", "index": i, "content_block": first}, "content_block_start")
        if delta is not None:
            yield _sse({"type": "content_block_delta", "index": i, "delta": delta}, "content_block_delta")
        if t == "thinking" and block.get("signature"):
            yield _sse({"type": "content_block_delta", "index": i,
                        "delta": {"type": "signature_delta", "signature": block["signature"]}}, "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": i}, "content_block_stop")
    yield _sse({"type": "message_delta", "delta": {"stop_reason": reply.get("stop_reason"),
                                                   "stop_sequence": reply.get("stop_sequence")},
                "usage": {"output_tokens": usage.get("output_tokens", 0)}}, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


def responses_events(reply: Mapping[str, Any]) -> Iterator[bytes]:
    """A Responses API ``response`` as its stream: created, each output item added and done, completed."""
    n = 0

    def ev(kind: str, **data: Any) -> bytes:
        nonlocal n
        n += 1
        return _sse({"type": kind, "sequence_number": n - 1, **data}, kind)

    yield ev("response.created", response={**reply, "status": "in_progress", "output": []})
    for i, item in enumerate(reply.get("output") or []):
        yield ev("response.output_item.added", output_index=i, item=item)
        yield ev("response.output_item.done", output_index=i, item=item)
    yield ev("response.completed", response=dict(reply))


def reply_from_message(fmt: str, msg: Message, model: str) -> dict[str, Any]:
    """A reply body rebuilt from the log's recorded message (a reply recorded without its body: a process that
    stopped between the two writes). Its text and tool calls; no usage (it was billed once)."""
    text = "".join(b.text for b in msg.content if isinstance(b, Text)) or None
    calls = msg.tool_calls
    if fmt == GEMINI:
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        parts += [{"functionCall": {"id": c.id, "name": c.name, "args": dict(c.arguments)}} for c in calls]
        return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "modelVersion": model}
    if fmt == RESPONSES:
        output: list[dict[str, Any]] = [{"type": "message", "id": "msg_replay", "role": "assistant", "status": "completed",
                                         "content": [{"type": "output_text", "text": text, "annotations": []}]}] \
            if text else []
        output += [{"type": "function_call", "id": f"fc_{c.id}", "call_id": c.id, "name": c.name,
                    "arguments": json.dumps(dict(c.arguments)), "status": "completed"} for c in calls]
        return {"id": "resp_replay", "object": "response", "created_at": 0, "model": model, "status": "completed",
                "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    if fmt == OPENAI:
        m: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            m["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": json.dumps(dict(c.arguments))}} for c in calls]
        return {"id": "chatcmpl-replay", "object": "chat.completion", "created": 0, "model": model, "choices": [
            {"index": 0, "message": m, "finish_reason": "tool_calls" if calls else "stop"}]}
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)} for c in calls]
    return {"id": "msg_replay", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}


def replay_response(fmt: str, reply: Mapping[str, Any], stream: bool, include_usage: bool = False) -> Response:
    """The recorded ``reply`` as the response to a retry (a stream when the retry asks for one)."""
    headers = {REPLAY_HEADER: "recorded"}
    if not stream:
        return Response(json.dumps(reply), media_type="application/json", headers=headers)
    if fmt == GEMINI:
        return Response(b"data: " + json.dumps(reply).encode() + b"\r\n\r\n", media_type="text/event-stream",
                        headers=headers)
    events = openai_events(reply, include_usage) if fmt == OPENAI else \
        responses_events(reply) if fmt == RESPONSES else anthropic_events(reply)
    return Response(b"".join(events), media_type="text/event-stream", headers=headers)


__all__ = ["REPLAY_HEADER", "anthropic_events", "openai_events", "reply_from_message", "replay_response",
           "responses_events"]
