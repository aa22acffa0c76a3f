"""A mock model server for the real SDK clients: JSON replies, or the same reply as real SSE when the
request asks for a stream. Shared by the streaming, async and integration tests. No network."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from typing import Any

import httpx2

# --------------------------------------------------------------------------------------------------
# replies: one per format, each with the SSE events a real server sends for it
# --------------------------------------------------------------------------------------------------


def anthropic_reply(text: str = "Reading calc.py first.", calls: list[tuple[str, str, dict[str, Any]]] | None = None, *,
                    thinking: bool = True, usage: dict[str, int] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if thinking:
        content.append({"type": "thinking", "thinking": "The sign is wrong in add().", "signature": "c2lnLTE="})
    if text:
        content.append({"type": "text", "text": text})
    for cid, name, args in calls if calls is not None else [("toolu_1", "read_file", {"path": "calc.py"})]:
        content.append({"type": "tool_use", "id": cid, "name": name, "input": args})
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": content,
        "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn",
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 812, "output_tokens": 57, "cache_read_input_tokens": 1536,
                           "cache_creation_input_tokens": 64},
    }


def anthropic_events(reply: dict[str, Any]) -> list[dict[str, Any]]:
    u = reply["usage"]
    start = {**reply, "content": [], "stop_reason": None,
             "usage": {**u, "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, b in enumerate(reply["content"]):
        if b["type"] == "text":
            events.append({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            half = len(b["text"]) // 2
            for piece in (b["text"][:half], b["text"][half:]):
                events.append({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": piece}})
        elif b["type"] == "thinking":
            events.append({"type": "content_block_start", "index": i,
                           "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
            events.append({"type": "content_block_delta", "index": i,
                           "delta": {"type": "thinking_delta", "thinking": b["thinking"]}})
            events.append({"type": "content_block_delta", "index": i,
                           "delta": {"type": "signature_delta", "signature": b["signature"]}})
        elif b["type"] == "tool_use":
            events.append({"type": "content_block_start", "index": i,
                           "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
            raw = json.dumps(b["input"])
            for piece in (raw[:5], raw[5:]):
                events.append({"type": "content_block_delta", "index": i,
                               "delta": {"type": "input_json_delta", "partial_json": piece}})
        events.append({"type": "content_block_stop", "index": i})
        if i == 0:
            events.append({"type": "ping"})
    events.append({"type": "message_delta", "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": None},
                   "usage": dict(u)})  # the API repeats the cumulative usage here (input and cache too)
    events.append({"type": "message_stop"})
    return events


def chat_reply(text: str = "Reading calc.py first.", calls: list[tuple[str, str, dict[str, Any]]] | None = None, *,
               usage: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = calls if calls is not None else [("call_1", "read_file", {"path": "calc.py"})]
    if calls:
        msg["tool_calls"] = [{"id": c, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                             for c, n, a in calls]
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}],
        "usage": usage or {"prompt_tokens": 2400, "completion_tokens": 31, "total_tokens": 2431,
                           "prompt_tokens_details": {"cached_tokens": 2048}},
    }


def chat_events(reply: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"id": reply["id"], "object": "chat.completion.chunk", "created": 1, "model": reply["model"]}
    msg = reply["choices"][0]["message"]
    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    text = msg.get("content") or ""
    for piece in (text[: len(text) // 2], text[len(text) // 2:]):
        if piece:
            out.append({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    for k, c in enumerate(msg.get("tool_calls") or []):
        args = c["function"]["arguments"]
        out.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": k, "id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": ""}}]},
            "finish_reason": None}]})
        for piece in (args[:4], args[4:]):
            out.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": k, "function": {"arguments": piece}}]}, "finish_reason": None}]})
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reply["choices"][0]["finish_reason"]}]})
    out.append({**base, "choices": [], "usage": reply["usage"]})
    return out


def responses_reply(text: str = "Reading calc.py first.", calls: list[tuple[str, str, dict[str, Any]]] | None = None, *,
                    usage: dict[str, Any] | None = None, n: int = 1) -> dict[str, Any]:
    """``n`` numbers the output item ids (``rs_<n>``, ``msg_<n>``): item ids are unique in a conversation."""
    output: list[dict[str, Any]] = [
        {"type": "reasoning", "id": f"rs_{n}", "summary": [{"type": "summary_text", "text": "Check add()."}],
         "encrypted_content": "ZW5j"},
    ]
    if text:
        output.append({"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for k, (cid, name, args) in enumerate(calls if calls is not None else [("call_1", "read_file", {"path": "calc.py"})]):
        output.append({"type": "function_call", "id": f"fc_{n}_{k}", "call_id": cid, "name": name,
                       "arguments": json.dumps(args), "status": "completed"})
    return {
        "id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-test", "status": "completed",
        "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": usage or {"input_tokens": 2400, "input_tokens_details": {"cached_tokens": 1024}, "output_tokens": 44,
                           "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 2444},
    }


def responses_events(reply: dict[str, Any]) -> list[dict[str, Any]]:
    start = {**reply, "status": "in_progress", "output": [], "usage": None}
    out: list[dict[str, Any]] = [{"type": "response.created", "sequence_number": 0, "response": start}]
    n = 1
    for i, item in enumerate(reply["output"]):
        out.append({"type": "response.output_item.added", "sequence_number": n, "output_index": i, "item": item})
        n += 1
        if item["type"] == "message":
            text = item["content"][0]["text"]
            out.append({"type": "response.output_text.delta", "sequence_number": n, "item_id": item["id"],
                        "output_index": i, "content_index": 0, "delta": text, "logprobs": []})
            n += 1
        out.append({"type": "response.output_item.done", "sequence_number": n, "output_index": i, "item": item})
        n += 1
    out.append({"type": "response.completed", "sequence_number": n, "response": reply})
    return out


def gemini_reply(text: str = "Reading calc.py first.", calls: list[tuple[str, dict[str, Any]]] | None = None, *,
                 usage: dict[str, int] | None = None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": "Check the sign.", "thought": True}]
    if text:
        parts.append({"text": text})
    for k, (name, args) in enumerate(calls if calls is not None else [("read_file", {"path": "calc.py"})]):
        p: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
        if k == 0:
            p["thoughtSignature"] = "c2lnLWc="
        parts.append(p)
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage or {"promptTokenCount": 2100, "cachedContentTokenCount": 1024,
                                   "candidatesTokenCount": 40, "thoughtsTokenCount": 25, "totalTokenCount": 2165},
        "modelVersion": "gemini-test", "responseId": "r-1",
    }


def gemini_events(reply: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in reply["candidates"][0]["content"]["parts"]:
        if "text" in p and len(p["text"]) > 4:
            pieces = [dict(p, text=p["text"][:4]), dict(p, text=p["text"][4:])]
            pieces[0].pop("thoughtSignature", None)
        else:
            pieces = [p]
        for piece in pieces:
            out.append({"candidates": [{"content": {"role": "model", "parts": [piece]}, "index": 0}],
                        "modelVersion": reply["modelVersion"], "responseId": reply["responseId"],
                        "usageMetadata": {"promptTokenCount": reply["usageMetadata"]["promptTokenCount"]}})
    out[-1]["candidates"][0]["finishReason"] = "STOP"
    out[-1]["usageMetadata"] = reply["usageMetadata"]
    return out


EVENTS: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "anthropic": anthropic_events, "openai-chat": chat_events, "openai-responses": responses_events,
    "gemini": gemini_events,
}


def sse(fmt: str, events: list[dict[str, Any]]) -> bytes:
    chunks = []
    for ev in events:
        if fmt in ("anthropic", "openai-responses"):
            chunks.append(f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n")
        else:
            chunks.append(f"data: {json.dumps(ev)}\n\n")
    if fmt == "openai-chat":
        chunks.append("data: [DONE]\n\n")
    return "".join(chunks).encode()


def billed_prompt(body: dict[str, Any]) -> int:
    """What a provider would bill for a request body: o200k tokens of its JSON, tools and system included."""
    from windowsmith.tokens import count_text

    return 20 + count_text(json.dumps(body, sort_keys=True))


def _bill(fmt: str, usage: dict[str, Any], n: int) -> None:
    """Rescale a scripted usage block to a prompt of ``n`` tokens, keeping its cache split where it fits."""
    if fmt == "anthropic":
        cr = min(usage.get("cache_read_input_tokens") or 0, n)
        cw = min(usage.get("cache_creation_input_tokens") or 0, n - cr)
        usage.update(input_tokens=n - cr - cw, cache_read_input_tokens=cr, cache_creation_input_tokens=cw)
    elif fmt == "openai-chat":
        d = usage.setdefault("prompt_tokens_details", {})
        d["cached_tokens"] = min(d.get("cached_tokens") or 0, n)
        usage.update(prompt_tokens=n, total_tokens=n + usage.get("completion_tokens", 0))
    elif fmt == "openai-responses":
        d = usage.setdefault("input_tokens_details", {})
        d["cached_tokens"] = min(d.get("cached_tokens") or 0, n)
        usage.update(input_tokens=n, total_tokens=n + usage.get("output_tokens", 0))
    elif fmt == "gemini":
        usage.update(promptTokenCount=n, cachedContentTokenCount=min(usage.get("cachedContentTokenCount") or 0, n))


class MockModel:
    """A scripted model server: ``replies`` are served in order (the last one repeats), as JSON or as
    SSE when the request streams. Every request body is kept in ``bodies``. With ``bill_prompt`` each
    reply's usage bills the prompt it answers (:func:`billed_prompt`, kept in ``billed``), as a provider
    does: windowsmith calibrates its counts on billed usage, so a fixed figure would tell it the
    requests never grow."""

    def __init__(self, fmt: str, replies: list[dict[str, Any]], *, bill_prompt: bool = False) -> None:
        self.fmt = fmt
        self.replies = replies
        self.bill_prompt = bill_prompt
        self.bodies: list[dict[str, Any]] = []
        self.urls: list[str] = []
        self.billed: list[int] = []

    def reply(self) -> dict[str, Any]:
        r = copy.deepcopy(self.replies[min(len(self.bodies) - 1, len(self.replies) - 1)])
        if self.bill_prompt:
            key = "usageMetadata" if self.fmt == "gemini" else "usage"
            if isinstance(r.get(key), dict):
                n = billed_prompt(self.bodies[-1])
                _bill(self.fmt, r[key], n)
                self.billed.append(n)
        return r

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content) if request.content else {}
        self.bodies.append(body)
        self.urls.append(str(request.url))
        reply = self.reply()
        streaming = body.get("stream") is True or "streamGenerateContent" in str(request.url)
        if streaming:
            return httpx2.Response(200, content=sse(self.fmt, EVENTS[self.fmt](reply)),
                                   headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json=reply)

    def client(self) -> httpx2.Client:
        return httpx2.Client(transport=httpx2.MockTransport(self))

    def async_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self))


def assert_cache_prefix_kept(packs: list[Any]) -> int:
    """Between compactions each pack's cacheable prefix (the parts up to its last breakpoint) starts the
    next pack: an adapter re-declaring system or tools each call would break this. Returns how many
    consecutive pairs were checked."""
    checked = 0
    for prev, cur in itertools.pairwise(packs):
        if any(a["kind"] in ("mask", "summary", "emergency", "truncate") for a in cur.manifest.actions):
            continue
        n = prev.rendered.cache_prefix_parts
        assert n > 0 and cur.rendered.parts[:n] == prev.rendered.parts[:n], (prev.id, cur.id)
        checked += 1
    return checked
