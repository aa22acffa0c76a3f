"""OpenAI Responses API: ``client.responses.create(**rendered.request)``.

* ``input`` items: the system text and the session context as ``system`` messages, then user and
  assistant ``message`` items, ``function_call`` and ``function_call_output`` items, in log order;
* tools in the flat Responses form ``{type: function, name, description, parameters, strict: false}``;
* OpenAI ``reasoning`` items (``Thinking(provider="openai")``) are passed back unchanged, just
  before the output they preceded; other providers' thinking is dropped;
* ``prompt_cache_key`` and ``max_output_tokens`` as for Chat Completions.

The other direction: :func:`read_history` reads a Responses body or item list into neutral messages (a loaded
history and a trace file's conversation alike), ``parse_response`` a response, :func:`accumulate_stream` a
streamed one's events, :func:`read_usage` its billed usage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import ProviderResponseError, UsageError
from ..model import Image, Message, Text, Thinking, ToolCall, ToolResult, ToolSpec, Usage, parse_arguments
from ..request import NeutralRequest
from .base import WORKAROUND, ParsedResponse, as_int, expect, to_plain
from .openai_chat import ERROR_PREFIX, chat_parts
from .reader import Builder, Ctx, History, tools_from, usage_less_cache
from .units import UnitRenderer, data_uri, tool_decl


def _part(b: Text | Image) -> dict[str, Any]:
    if isinstance(b, Text):
        return {"type": "input_text", "text": b.text}
    return {"type": "input_image", "image_url": data_uri(b), "detail": "auto"}


def _output(r: ToolResult) -> str | list[dict[str, Any]]:
    if not any(isinstance(b, Image) for b in r.content):
        return (ERROR_PREFIX if r.is_error else "") + r.text
    parts = [_part(b) for b in r.content]
    if r.is_error:
        parts.insert(0, {"type": "input_text", "text": ERROR_PREFIX.strip()})
    return parts


class OpenAIResponsesRenderer(UnitRenderer):
    format = "openai-responses"
    system_in_messages = True

    def render_tool(self, tool: ToolSpec) -> dict[str, Any]:
        return {"type": "function", **tool_decl(tool, "parameters", strict=False)}

    def defer_tool(self, rendered: dict[str, Any]) -> dict[str, Any]:
        return {**rendered, "defer_loading": True}

    def search_tool(self) -> dict[str, Any]:
        return {"type": "tool_search"}

    def render_system(self, kind: str, text: str) -> dict[str, Any]:
        return {"type": "message", "role": "system", "content": text}

    def render_tail(self, text: str) -> list[dict[str, Any]]:
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]

    def render_message(self, message: Message, extra: tuple[Any, ...]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if message.role == "assistant":
            texts: list[str] = []

            def flush() -> None:
                if texts:
                    items.append({"type": "message", "role": "assistant", "content": "\n".join(texts)})
                    texts.clear()

            for b in message.content:
                if isinstance(b, Text):
                    texts.append(b.text)
                    continue
                flush()
                if isinstance(b, ToolCall):
                    items.append({"type": "function_call", "call_id": b.id, "name": b.name, "arguments": b.arguments_json})
                elif isinstance(b, Thinking) and b.provider == "openai":
                    items.append(dict(b.data))
            flush()
            return items
        for r in message.tool_results:
            items.append({"type": "function_call_output", "call_id": r.call_id, "output": _output(r)})
        rest = [_part(b) for b in message.content if isinstance(b, Text | Image)]
        if rest:
            items.append({"type": "message", "role": "user", "content": rest})
        return items

    def build(self, req: NeutralRequest, tools: list[Any], system: list[Any], messages: list[dict[str, Any]], marks: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"model": req.model, "input": messages}
        if tools:
            out["tools"] = tools
        if req.allowed_tools is not None:
            out["tool_choice"] = {"type": "allowed_tools", "mode": "auto",
                                  "tools": [{"type": "function", "name": n} for n in req.allowed_tools]
                                  + ([{"type": "tool_search"}] if req.deferred else [])}
        out["max_output_tokens"] = req.max_output_tokens
        if req.cache_key:
            out["prompt_cache_key"] = req.cache_key
        return out

    # -- responses --------------------------------------------------------------------------------

    def parse_response(self, response: Any) -> ParsedResponse:
        d = to_plain(response, what="an OpenAI Response")
        if d.get("error"):
            raise ProviderResponseError(f"OpenAI response failed: {d['error']!r}")
        output = expect(d, "output", list, "OpenAI response")
        blocks: list[Text | ToolCall | Thinking] = []
        for i, item in enumerate(output):
            where = f"OpenAI response output[{i}]"
            t = item.get("type") if isinstance(item, dict) else None
            if t == "message":
                for part in expect(item, "content", list, where):
                    if part.get("type") == "output_text":
                        blocks.append(Text(expect(part, "text", str, where)))
                    elif part.get("type") == "refusal":
                        blocks.append(Text(expect(part, "refusal", str, where)))
            elif t == "function_call":
                blocks.append(ToolCall(id=expect(item, "call_id", str, where), name=expect(item, "name", str, where),
                                       arguments=parse_arguments(expect(item, "arguments", str, where), where)))
            elif t == "reasoning":
                data = {k: v for k, v in item.items() if v is not None}
                summary = "\n".join(s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict))
                blocks.append(Thinking(provider="openai", data=data, text=summary))
            elif t in ("tool_search_call", "tool_search_output"):  # kept (opaque): they hold the loaded tools
                blocks.append(Thinking(provider="openai", data={k: v for k, v in item.items() if v is not None}))
            elif not isinstance(t, str):
                raise ProviderResponseError(f"{where} has no 'type'; is this an OpenAI Responses response?")
        u = read_usage(d.get("usage") or {})
        incomplete = d.get("incomplete_details") or {}
        stop = incomplete.get("reason") or d.get("status")
        return ParsedResponse(Message("assistant", tuple(blocks)), u, stop, d.get("model"))


# -- usage ------------------------------------------------------------------------------------------


def read_usage(usage: Mapping[str, Any]) -> Usage:
    """A response's ``usage`` as billed usage (``input_tokens`` includes the cached and written tokens)."""
    details = usage.get("input_tokens_details") or {}
    cached = as_int(details.get("cached_tokens"))
    written = as_int(details.get("cache_write_tokens"))
    return usage_less_cache(as_int(usage.get("input_tokens")), cached, written, as_int(usage.get("output_tokens")))


# -- history ---------------------------------------------------------------------------------------


def read_items(b: Builder, items: list[Any], ictx: Ctx, system: list[str], *, usage: Usage | None = None) -> None:
    """Feed OpenAI Responses items to ``b`` (system and developer texts go to ``system``): consecutive
    assistant-side items (reasoning, assistant message, function_call) form one turn; ``usage`` is the first
    turn's billed usage (one response's output items are one turn)."""
    turn: dict[str, Any] = {"text": [], "calls": [], "thinking": [], "where": ""}

    def flush_turn() -> None:
        nonlocal usage
        if turn["text"] or turn["calls"] or turn["thinking"]:
            b.assistant(turn["text"], turn["calls"], turn["where"], thinking=turn["thinking"], usage=usage)
            usage = None
        turn.update(text=[], calls=[], thinking=[], where="")

    for i, it in enumerate(items):
        w = f"{ictx.where}[{i}]" if ictx.where else f"[{i}]"
        if isinstance(it, str):
            flush_turn()
            b.user(it, w)
            continue
        it = ictx.obj(it, f"[{i}]")
        t = it.get("type", "message" if "role" in it else None)
        if t == "message":
            role = it.get("role")
            parts = chat_parts(b, it.get("content"), w)
            if role in ("system", "developer"):
                system.append("\n".join(p.text for p in parts if isinstance(p, Text)))
            elif role == "assistant":
                if not turn["where"]:
                    turn["where"] = w
                turn["text"].extend(p for p in parts if isinstance(p, Text))
            elif role == "user":
                flush_turn()
                b.user(parts, w)
            else:
                raise ictx.err(f"[{i}].role", f"unknown role {role!r}")
        elif t == "reasoning":
            if not turn["where"]:
                turn["where"] = w
            summary = it.get("summary") or []
            text = "\n".join(s.get("text", "") for s in summary if isinstance(s, dict))
            turn["thinking"].append(Thinking(provider="openai", data=it, text=b.text(text, w)))
        elif t in ("function_call", "custom_tool_call"):
            if not turn["where"]:
                turn["where"] = w
            args = it.get("arguments") if t == "function_call" else json.dumps({"input": it.get("input", "")})
            turn["calls"].append((it.get("call_id") or it.get("id"), it.get("name"), args))
        elif t in ("function_call_output", "custom_tool_call_output"):
            flush_turn()
            b.tool_result(it.get("call_id"), chat_parts(b, it.get("output"), w), w)
        elif t == "item_reference":
            b.repairs.append(f"{w}: item_reference {it.get('id')!r} cannot be resolved from the log; dropped")
        else:
            raise ictx.err(f"[{i}].type", f"unknown input item type {t!r}")
    flush_turn()


def read_history(value: Any, ctx: Ctx, b: Builder) -> History:
    """Feed a Responses body (``{"input", "instructions", "tools"}``, or a response's ``output``) or an item
    list to ``b``."""
    meta: dict[str, Any] = {}
    system: list[str] = []
    tools_raw = None
    if isinstance(value, dict):
        if isinstance(value.get("instructions"), str):
            system.append(value["instructions"])
        tools_raw = value.get("tools")
        if isinstance(value.get("model"), str):
            meta["model"] = value["model"]
        key = "input" if "input" in value else "output"
        items = ctx.get(value, key, list)
        if key == "input" and isinstance(value.get("output"), list):
            items = items + value["output"]
        ictx = ctx.sub(key)
    else:
        items = ctx.lst(value)
        ictx = ctx
    repairs: list[str] = []
    tools = tools_from(tools_raw, ctx.sub("tools"), repairs)

    read_items(b, items, ictx, system)
    return History("\n\n".join(s for s in system if s), tools, meta, repairs)


#: the input items the history reader turns into neutral blocks
INPUT_ITEMS = frozenset({"message", "reasoning", "function_call", "custom_tool_call", "function_call_output",
                         "custom_tool_call_output", "item_reference"})


def hosted_as_text(item: Any, i: int, repairs: list[str]) -> Any:
    """A Responses item the neutral model has no block for (a hosted tool's call and result: web or file
    search, code interpreter, …) becomes assistant text holding its JSON, so the model still sees it."""
    if not isinstance(item, Mapping) or item.get("type", "message" if "role" in item else None) in INPUT_ITEMS:
        return item
    kind = item.get("type")
    repairs.append(f"[{i}]: {kind} item kept as assistant text (no neutral block for hosted tool items)")
    text = f"[{kind}] " + json.dumps({k: v for k, v in item.items() if k != "type"}, ensure_ascii=False, default=str)
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


# -- streams ----------------------------------------------------------------------------------------

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def is_stream_event(d: Mapping[str, Any]) -> bool:
    """Whether ``d`` is one streamed event rather than a whole response."""
    t = d.get("type")
    return isinstance(t, str) and t.startswith("response.")


def accumulate_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The response a Responses stream's terminal event carries (what ``parse_response`` reads)."""
    for ev in reversed(events):
        if ev.get("type") in _TERMINAL and isinstance(ev.get("response"), Mapping):
            return dict(ev["response"])
    if any(ev.get("type") == "error" for ev in events):
        raise ProviderResponseError(f"the OpenAI Responses stream failed: {next(e for e in events if e.get('type') == 'error')!r}")
    raise UsageError("the OpenAI Responses stream ended without a response.completed event (was it cut short?); "
                     + WORKAROUND)


__all__ = [
    "INPUT_ITEMS",
    "OpenAIResponsesRenderer",
    "accumulate_stream",
    "hosted_as_text",
    "is_stream_event",
    "read_history",
    "read_items",
    "read_usage",
]
