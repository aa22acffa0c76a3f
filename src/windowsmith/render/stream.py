"""Streamed responses: each SDK's stream, its final message, or the list of its events/chunks, turned
into the one response the format's ``parse_response`` reads, so a streamed call records the same
message and usage as the non-streamed one.

    stream = client.messages.create(**pack.request, stream=True)
    for event in stream: ...                 # show the text as it arrives, keep the events
    session.record(events)                   # or session.record(stream) if nothing iterated it yet

Accepted, per format:

* ``anthropic``: ``Stream`` of raw events, ``MessageStream`` (``client.messages.stream()``; its final
  message), a list of events (``message_start`` … ``message_stop``);
* ``openai-chat``: ``Stream`` of ``ChatCompletionChunk`` (ask for ``stream_options={"include_usage":
  True}``, or the usage is zero), ``ChatCompletionStream`` (its final completion), a list of chunks;
* ``openai-responses``: ``Stream`` of events, ``ResponseStream`` (its final response), a list of events
  (the ``response.completed``/``incomplete``/``failed`` event carries the whole response);
* ``gemini``: the iterator of ``generate_content_stream`` or a list of its chunks (parts are merged:
  consecutive text pieces of the same kind join, the last chunk's usage and finish reason win).

Async streams (``AsyncStream``, async iterators, async stream managers) go through ``aresolve``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ProviderResponseError, UsageError
from ._common import to_plain

_FINAL_METHODS = ("get_final_message", "get_final_completion", "get_final_response")

WORKAROUND = (
    "pass the SDK's response object, its stream before you iterate it, the stream's final message "
    "(stream.get_final_message() / get_final_completion() / get_final_response()), or the list of the "
    "events/chunks you collected while iterating"
)


def _plain_events(chunks: Iterable[Any], fmt: str) -> list[dict[str, Any]]:
    out = []
    for i, c in enumerate(chunks):
        try:
            out.append(to_plain(c, what="a stream event", by_alias=fmt != "gemini"))
        except ProviderResponseError:
            raise UsageError(f"cannot record item {i} of the stream ({type(c).__name__}) as a {fmt} stream event; "
                             + WORKAROUND) from None
    return out


def is_event(fmt: str, d: Mapping[str, Any]) -> bool:
    """Whether ``d`` is one streamed event/chunk of ``fmt`` rather than a whole response."""
    t = d.get("type")
    if fmt == "anthropic":
        return isinstance(t, str) and t in _ANTHROPIC_EVENTS
    if fmt == "openai-chat":
        return d.get("object") == "chat.completion.chunk"
    if fmt == "openai-responses":
        return isinstance(t, str) and t.startswith("response.")
    return False  # a Gemini chunk has the shape of a whole response


def _is_stream(obj: Any) -> bool:
    if isinstance(obj, str | bytes | bytearray | Mapping) or hasattr(obj, "model_dump"):
        return False
    return isinstance(obj, list | tuple) or hasattr(obj, "__iter__") or hasattr(obj, "__next__")


def resolve(fmt: str, response: Any) -> Any:
    """``response`` as something ``parse_response`` reads: streams and event lists are accumulated."""
    if inspect.isawaitable(response) or hasattr(response, "__aiter__"):
        if inspect.iscoroutine(response):
            response.close()
        raise UsageError(f"record() got an async {type(response).__name__}: use `await session.arecord(...)` "
                         "(or await the call first and record its result)")
    if hasattr(response, "__enter__") and not hasattr(response, "__iter__") and not hasattr(response, "model_dump"):
        raise UsageError(f"record() got a stream manager ({type(response).__name__}): record inside its `with` block, "
                         "e.g. `with client.messages.stream(**pack.request) as stream: session.record(stream)`")
    for name in _FINAL_METHODS:
        final = getattr(response, name, None)
        if callable(final):
            return final()
    if _is_stream(response):
        return accumulate(fmt, _plain_events(response, fmt))
    if isinstance(response, Mapping) or hasattr(response, "model_dump"):
        try:
            d = to_plain(response, what="a response", by_alias=fmt != "gemini")
        except ProviderResponseError:
            return response
        if is_event(fmt, d):
            return accumulate(fmt, [d])
    return response


async def aresolve(fmt: str, response: Any) -> Any:
    """``resolve`` for async SDKs: awaits coroutines, async final-message methods and async iterators."""
    if inspect.isawaitable(response):
        response = await response
    if hasattr(response, "__aenter__") and not hasattr(response, "__aiter__"):
        raise UsageError(f"arecord() got a stream manager ({type(response).__name__}): record inside its `async with` "
                         "block, e.g. `async with client.messages.stream(**pack.request) as s: await session.arecord(s)`")
    for name in _FINAL_METHODS:
        final = getattr(response, name, None)
        if callable(final):
            value = final()
            return await value if inspect.isawaitable(value) else value
    if hasattr(response, "__aiter__"):
        return accumulate(fmt, _plain_events([c async for c in response], fmt))
    return resolve(fmt, response)


def accumulate(fmt: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold a list of plain stream events/chunks of ``fmt`` into the non-streamed response dict."""
    if not events:
        raise UsageError("the stream had no events (was it already iterated?); " + WORKAROUND)
    try:
        return _ACCUMULATORS[fmt](events)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        if fmt not in _ACCUMULATORS:
            raise UsageError(f"unknown request format {fmt!r}") from None
        raise UsageError(f"the stream events do not look like a {fmt} stream ({type(exc).__name__}: {exc}); "
                         + WORKAROUND) from None


# -- Anthropic ------------------------------------------------------------------------------------

_ANTHROPIC_EVENTS = frozenset({
    "message_start", "message_delta", "message_stop", "content_block_start", "content_block_delta",
    "content_block_stop", "ping", "error",
})


def _anthropic(events: list[dict[str, Any]]) -> dict[str, Any]:
    msg: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for ev in events:
        t = ev.get("type")
        if t == "error":
            raise ProviderResponseError(f"the Anthropic stream failed: {ev.get('error')!r}")
        if t == "message_start":
            msg = dict(ev["message"])
            msg["usage"] = dict(msg.get("usage") or {})
        elif t == "content_block_start":
            blocks[ev["index"]] = dict(ev["content_block"])
        elif t == "content_block_delta":
            b, d = blocks[ev["index"]], ev["delta"]
            dt = d.get("type")
            if dt == "text_delta":
                b["text"] = b.get("text", "") + d["text"]
            elif dt == "input_json_delta":
                partial[ev["index"]] = partial.get(ev["index"], "") + d.get("partial_json", "")
            elif dt == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + d["thinking"]
            elif dt == "signature_delta":
                b["signature"] = d["signature"]
        elif t == "message_delta" and msg is not None:
            for k, v in (ev.get("delta") or {}).items():
                msg[k] = v
            for k, v in (ev.get("usage") or {}).items():
                if v is not None:
                    msg["usage"][k] = v
    if msg is None:
        raise UsageError("the Anthropic stream has no message_start event; " + WORKAROUND)
    for i, raw in partial.items():
        blocks[i]["input"] = json.loads(raw) if raw.strip() else {}
    msg["content"] = [blocks[i] for i in sorted(blocks)]
    return msg


# -- OpenAI Chat ----------------------------------------------------------------------------------


def _openai_chat(events: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"object": "chat.completion"}
    message: dict[str, Any] = {"role": "assistant"}
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for ch in events:
        for k in ("id", "model", "created"):
            if ch.get(k) is not None:
                out[k] = ch[k]
        if ch.get("usage"):
            out["usage"] = ch["usage"]
        for choice in ch.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            d = choice.get("delta") or {}
            for key in ("content", "refusal"):
                if d.get(key):
                    message[key] = message.get(key, "") + d[key]
            for tc in d.get("tool_calls") or []:
                c = calls.setdefault(tc.get("index", 0), {"type": "function", "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    c["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    c["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    c["function"]["arguments"] += fn["arguments"]
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    out["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return out


# -- OpenAI Responses -----------------------------------------------------------------------------

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def _openai_responses(events: list[dict[str, Any]]) -> dict[str, Any]:
    for ev in reversed(events):
        if ev.get("type") in _TERMINAL and isinstance(ev.get("response"), Mapping):
            return dict(ev["response"])
    if any(ev.get("type") == "error" for ev in events):
        raise ProviderResponseError(f"the OpenAI Responses stream failed: {next(e for e in events if e.get('type') == 'error')!r}")
    raise UsageError("the OpenAI Responses stream ended without a response.completed event (was it cut short?); "
                     + WORKAROUND)


# -- Gemini ---------------------------------------------------------------------------------------


def _mergeable(prev: dict[str, Any], part: dict[str, Any]) -> bool:
    if set(prev) - {"text", "thought", "thought_signature"} or set(part) - {"text", "thought", "thought_signature"}:
        return False
    return ("text" in prev and "text" in part and bool(prev.get("thought")) == bool(part.get("thought"))
            and prev.get("thought_signature") is None)


def _gemini(events: list[dict[str, Any]]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    role = "model"
    finish = None
    for ch in events:
        for k in ("usage_metadata", "model_version", "response_id", "create_time"):
            if ch.get(k) is not None:
                out[k] = ch[k]
        for cand in (ch.get("candidates") or [])[:1]:
            content = cand.get("content") or {}
            role = content.get("role") or role
            for p in content.get("parts") or []:
                p = {k: v for k, v in p.items() if v is not None}
                if parts and _mergeable(parts[-1], p):
                    parts[-1]["text"] += p["text"]
                    if p.get("thought_signature") is not None:
                        parts[-1]["thought_signature"] = p["thought_signature"]
                else:
                    parts.append(dict(p))
            if cand.get("finish_reason"):
                finish = cand["finish_reason"]
    out["candidates"] = [{"content": {"role": role, "parts": parts}, "finish_reason": finish, "index": 0}]
    return out


_ACCUMULATORS = {
    "anthropic": _anthropic,
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "gemini": _gemini,
}

__all__ = ["WORKAROUND", "accumulate", "aresolve", "is_event", "resolve"]
