"""OpenAI Chat Completions: ``client.chat.completions.create(**rendered.request)``.

* a ``system`` message with the system text, then the session context as a second ``system`` message;
* a neutral ``tool`` message becomes one ``tool`` message per result (text only, errors prefixed
  with ``Error:``); images returned by tools follow in one ``user`` message, since ``tool`` messages
  cannot carry images;
* OpenAI caches by prefix implicitly: ``prompt_cache_key`` routes requests of one session to the same
  cache, ``cache_prefix_parts`` follows the same ``CachePlan`` as Anthropic so the numbers compare;
* thinking blocks are dropped (Chat Completions takes no reasoning items back).

The other direction: :func:`read_history` reads a Chat Completions body or message list into neutral messages
(a loaded history, a proxied request and a trace file's conversation alike), ``parse_response`` a completion,
:func:`accumulate_stream` a streamed one's chunks, :func:`read_usage` its billed usage (:func:`usage_counts`
the counts as reported, for telemetry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import ProviderResponseError
from ..model import Image, Message, Text, ToolCall, ToolResult, ToolSpec, Usage, parse_arguments
from ..request import NeutralRequest
from .base import ParsedResponse, as_int, expect, to_plain
from .reader import Builder, Ctx, History, as_dict, image_from_url, tools_from, usage_from, usage_less_cache
from .units import UnitRenderer, data_uri, tool_decl

ERROR_PREFIX = "Error: "


def _part(b: Text | Image) -> dict[str, Any]:
    if isinstance(b, Text):
        return {"type": "text", "text": b.text}
    return {"type": "image_url", "image_url": {"url": data_uri(b)}}


def result_text(r: ToolResult) -> str:
    return (ERROR_PREFIX if r.is_error else "") + r.text


class OpenAIChatRenderer(UnitRenderer):
    format = "openai-chat"
    system_in_messages = True

    def render_tool(self, tool: ToolSpec) -> dict[str, Any]:
        return {"type": "function", "function": tool_decl(tool, "parameters")}

    def render_system(self, kind: str, text: str) -> dict[str, Any]:
        return {"role": "system", "content": text}

    def render_tail(self, text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "text", "text": text}]}]

    def render_message(self, message: Message, extra: tuple[Any, ...]) -> list[dict[str, Any]]:
        if message.role == "user" and not message.tool_results:
            return [{"role": "user", "content": [_part(b) for b in message.content if isinstance(b, Text | Image)]}]
        if message.role == "assistant":
            out: dict[str, Any] = {"role": "assistant"}
            texts = [b.text for b in message.content if isinstance(b, Text)]
            calls = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
                for c in message.tool_calls
            ]
            if texts or not calls:
                out["content"] = "\n".join(texts)
            if calls:
                out["tool_calls"] = calls
            return [out]
        # a tool message (or a user message carrying tool results): tool messages first
        msgs: list[dict[str, Any]] = []
        follow: list[dict[str, Any]] = []
        for r in message.tool_results:
            msgs.append({"role": "tool", "tool_call_id": r.call_id, "content": result_text(r)})
            images = [b for b in r.content if isinstance(b, Image)]
            if images:
                follow.append({"type": "text", "text": f"Images returned by tool call {r.call_id}:"})
                follow.extend(_part(i) for i in images)
        follow.extend(_part(b) for b in message.content if isinstance(b, Text | Image))
        if follow:
            msgs.append({"role": "user", "content": follow})
        return msgs

    def build(self, req: NeutralRequest, tools: list[Any], system: list[Any], messages: list[dict[str, Any]], marks: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"model": req.model, "messages": messages}
        if tools:
            out["tools"] = tools
        if req.allowed_tools is not None:
            out["tool_choice"] = {"type": "allowed_tools", "allowed_tools": {
                "mode": "auto", "tools": [{"type": "function", "function": {"name": n}} for n in req.allowed_tools]}}
        out["max_completion_tokens"] = req.max_output_tokens
        if req.cache_key:
            out["prompt_cache_key"] = req.cache_key
        return out

    # -- responses --------------------------------------------------------------------------------

    def parse_response(self, response: Any) -> ParsedResponse:
        d = to_plain(response, what="an OpenAI ChatCompletion")
        choices = expect(d, "choices", list, "OpenAI chat response")
        if not choices:
            raise ProviderResponseError("OpenAI chat response has no choices; nothing to parse")
        choice = choices[0]
        msg = expect(choice, "message", dict, "OpenAI chat response choices[0]")
        blocks: list[Text | ToolCall] = []
        if isinstance(msg.get("content"), str) and msg["content"]:
            blocks.append(Text(msg["content"]))
        if isinstance(msg.get("refusal"), str) and msg["refusal"]:
            blocks.append(Text(msg["refusal"]))
        for i, c in enumerate(msg.get("tool_calls") or []):
            where = f"OpenAI chat response tool_calls[{i}]"
            fn = expect(c, "function", dict, where)
            blocks.append(ToolCall(id=expect(c, "id", str, where), name=expect(fn, "name", str, where),
                                   arguments=parse_arguments(expect(fn, "arguments", str, where), where)))
        u = read_usage(d.get("usage") or {})
        return ParsedResponse(Message("assistant", tuple(blocks)), u, choice.get("finish_reason"), d.get("model"))


# -- usage ------------------------------------------------------------------------------------------


def read_usage(usage: Mapping[str, Any]) -> Usage:
    """A completion's ``usage`` as billed usage (``prompt_tokens`` includes the cached and written tokens)."""
    details = usage.get("prompt_tokens_details") or {}
    cached = as_int(details.get("cached_tokens"))
    written = as_int(details.get("cache_write_tokens"))
    return usage_less_cache(as_int(usage.get("prompt_tokens")), cached, written, as_int(usage.get("completion_tokens")))


def usage_counts(usage: Mapping[str, Any]) -> dict[str, Any]:
    """The counts of a completion's ``usage`` as reported, unchecked (for telemetry): ``input_tokens`` is the whole
    prompt, cached tokens included; the cache writes are not reported apart."""
    details = usage.get("prompt_tokens_details") or {}
    return {"input_tokens": usage.get("prompt_tokens"), "output_tokens": usage.get("completion_tokens"),
            "cache_read_tokens": details.get("cached_tokens") if isinstance(details, Mapping) else None}


# -- history ---------------------------------------------------------------------------------------


def chat_parts(b: Builder, content: Any, where: str) -> list[Text | Image]:
    """OpenAI chat ``content``: a string, null, or a list of parts (text, image_url, input_text…)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(b.text(content, where))]
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return [Text(b.text(content, where))]
    out: list[Text | Image] = []
    for i, p in enumerate(content):
        w = f"{where}[{i}]"
        if isinstance(p, str):
            out.append(Text(b.text(p, w)))
            continue
        if not isinstance(p, dict):
            b.repairs.append(f"{w}: content part of type {type(p).__name__} kept as JSON text")
            out.append(Text(json.dumps(p, ensure_ascii=False)))
            continue
        t = p.get("type")
        if t in ("text", "input_text", "output_text") or (t is None and "text" in p):
            out.append(Text(b.text(p.get("text", ""), w)))
        elif t in ("image_url", "input_image"):
            url = p.get("image_url")
            if isinstance(url, dict):
                url = url.get("url")
            if isinstance(url, str) and url:
                out.append(image_from_url(url))
            else:
                b.repairs.append(f"{w}: image part without a URL dropped")
        elif t == "refusal":
            out.append(Text(b.text(p.get("refusal", ""), w)))
        else:
            b.repairs.append(f"{w}: content part of type {t!r} kept as JSON text")
            out.append(Text(json.dumps(p, ensure_ascii=False)))
    return out


def read_messages(b: Builder, msgs: list[Any], ctx: Ctx) -> list[str]:
    """Feed OpenAI chat messages to ``b``; return the system texts found."""
    system: list[str] = []
    seen_other = False
    for i, m in enumerate(msgs):
        w = f"{ctx.where}[{i}]" if ctx.where else f"[{i}]"
        m = ctx.obj(m, f"[{i}]")
        role = m.get("role")
        if role in ("system", "developer"):
            text = "\n".join(p.text for p in chat_parts(b, m.get("content"), w) if isinstance(p, Text))
            if seen_other:
                b.repairs.append(f"{w}: {role} message after the conversation started; appended to the system prompt")
            if text:
                system.append(text)
            continue
        seen_other = True
        if role == "user":
            b.user(chat_parts(b, m.get("content"), w), w)
        elif role == "assistant":
            calls = []
            tcs = m.get("tool_calls") or []
            if not isinstance(tcs, list):
                raise ctx.err(f"[{i}].tool_calls", "expected a JSON array")
            for k, tc in enumerate(tcs):
                tc = ctx.obj(tc, f"[{i}].tool_calls[{k}]")
                fn = as_dict(tc.get("function")) or tc
                calls.append((tc.get("id"), fn.get("name"), fn.get("arguments")))
            fc = m.get("function_call")  # legacy single function call
            if isinstance(fc, dict):
                calls.append((None, fc.get("name"), fc.get("arguments")))
            b.assistant(chat_parts(b, m.get("content"), w), calls, w, usage=usage_from(m.get("usage")))
        elif role in ("tool", "function"):
            b.tool_result(
                m.get("tool_call_id"),
                chat_parts(b, m.get("content"), w),
                w,
                name=m.get("name"),
                is_error=bool(m.get("is_error", False)),
            )
        else:
            raise ctx.err(f"[{i}].role", f"unknown role {role!r} (expected system, developer, user, assistant or tool)")
    return system


def read_history(value: Any, ctx: Ctx, b: Builder) -> History:
    """Feed a Chat Completions body (``{"messages", "tools"}``) or a message list to ``b``."""
    tools_raw = None
    meta: dict[str, Any] = {}
    if isinstance(value, dict):
        msgs = ctx.get(value, "messages", list)
        tools_raw = value.get("tools") or value.get("functions")
        if isinstance(value.get("model"), str):
            meta["model"] = value["model"]
        mctx = ctx.sub("messages")
    else:
        msgs = ctx.lst(value)
        mctx = ctx
    repairs: list[str] = []
    tools = tools_from(tools_raw, ctx.sub("tools"), repairs)
    system = read_messages(b, msgs, mctx)
    return History("\n\n".join(system), tools, meta, repairs)


# -- streams ----------------------------------------------------------------------------------------

def is_stream_event(d: Mapping[str, Any]) -> bool:
    """Whether ``d`` is one streamed chunk rather than a whole completion."""
    return d.get("object") == "chat.completion.chunk"


def accumulate_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold the plain chunks of a Chat Completions stream into the completion ``parse_response`` reads."""
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


__all__ = [
    "OpenAIChatRenderer",
    "accumulate_stream",
    "chat_parts",
    "is_stream_event",
    "read_history",
    "read_messages",
    "read_usage",
    "usage_counts",
]
