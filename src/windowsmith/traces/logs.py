"""Logs users keep: OpenAI chat messages, OpenAI Responses input items, Anthropic messages.

Accepted shapes (each may also be one conversation per JSONL line, or one message per JSONL line):

- ``openai-chat``: ``[messages]`` or ``{"messages": [...], "tools": [...]}``; ``system``/``developer``
  messages become the system prompt; ``tool_calls`` with JSON-string arguments; ``role: tool``
  results; an optional ``usage`` on an assistant message is taken as billed usage.
- ``openai-responses``: ``[items]`` or ``{"input": [...], "instructions": ..., "tools": [...]}``
  with items ``message``, ``function_call``, ``function_call_output``, ``reasoning``.
- ``anthropic-messages``: ``{"system", "tools", "messages"}`` or ``[messages]`` with content blocks
  ``text``, ``image``, ``tool_use``, ``tool_result``, ``thinking``, ``redacted_thinking``.
"""

from __future__ import annotations

import json
from typing import Any

from ..model import Image, Text, Thinking, Usage
from .base import Builder, Ctx, Trace, as_dict, image_from_url, make_trace, tools_from, usage_from

# ---------------------------------------------------------------------------------------------------
# OpenAI chat
# ---------------------------------------------------------------------------------------------------


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


def import_chat_messages(b: Builder, msgs: list[Any], ctx: Ctx) -> list[str]:
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


def import_openai_chat(value: Any, ctx: Ctx, notes: list[str], trace_id: str, builder: Builder | None = None) -> list[Trace]:
    b = builder or Builder()
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
    system = import_chat_messages(b, msgs, mctx)
    return [
        make_trace(
            id=trace_id,
            format="openai-chat",
            source=ctx.source,
            system="\n\n".join(system),
            tools=tools,
            builder=b,
            meta=meta,
            notes=notes,
            extra_repairs=repairs,
        )
    ]


# ---------------------------------------------------------------------------------------------------
# OpenAI Responses
# ---------------------------------------------------------------------------------------------------


def responses_items(b: Builder, items: list[Any], ictx: Ctx, system: list[str], *, usage: Usage | None = None) -> None:
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


def import_openai_responses(value: Any, ctx: Ctx, notes: list[str], trace_id: str, builder: Builder | None = None) -> list[Trace]:
    b = builder or Builder()
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

    responses_items(b, items, ictx, system)
    return [
        make_trace(
            id=trace_id,
            format="openai-responses",
            source=ctx.source,
            system="\n\n".join(s for s in system if s),
            tools=tools,
            builder=b,
            meta=meta,
            notes=notes,
            extra_repairs=repairs,
        )
    ]


# ---------------------------------------------------------------------------------------------------
# Anthropic messages
# ---------------------------------------------------------------------------------------------------


def _anthropic_blocks(b: Builder, content: Any, where: str) -> list[Text | Image]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(b.text(content, where))]
    out: list[Text | Image] = []
    for i, blk in enumerate(content if isinstance(content, list) else [content]):
        w = f"{where}[{i}]"
        if isinstance(blk, str):
            out.append(Text(b.text(blk, w)))
        elif isinstance(blk, dict) and blk.get("type") == "text":
            out.append(Text(b.text(blk.get("text", ""), w)))
        elif isinstance(blk, dict) and blk.get("type") == "image":
            src = blk.get("source") or {}
            if src.get("type") == "base64" and src.get("data"):
                out.append(Image(data=src["data"], media_type=src.get("media_type") or "application/octet-stream"))
            elif src.get("type") == "url" and src.get("url"):
                out.append(Image(url=src["url"]))
            else:
                b.repairs.append(f"{w}: image block without usable source dropped")
        else:
            b.repairs.append(
                f"{w}: content block of type {blk.get('type') if isinstance(blk, dict) else type(blk).__name__!r} kept as JSON text"
            )
            out.append(Text(json.dumps(blk, ensure_ascii=False)))
    return out


def import_anthropic_messages(value: Any, ctx: Ctx, notes: list[str], trace_id: str, builder: Builder | None = None) -> list[Trace]:
    b = builder or Builder()
    meta: dict[str, Any] = {}
    system: list[str] = []
    tools_raw = None
    if isinstance(value, dict):
        sys_v = value.get("system")
        if isinstance(sys_v, str):
            system.append(sys_v)
        elif isinstance(sys_v, list):
            system.append("\n".join(x.get("text", "") for x in sys_v if isinstance(x, dict)))
        tools_raw = value.get("tools")
        if isinstance(value.get("model"), str):
            meta["model"] = value["model"]
        msgs = ctx.get(value, "messages", list)
        mctx = ctx.sub("messages")
    else:
        msgs = ctx.lst(value)
        mctx = ctx
    repairs: list[str] = []
    tools = tools_from(tools_raw, ctx.sub("tools"), repairs)
    for i, m in enumerate(msgs):
        w = f"{mctx.where}[{i}]" if mctx.where else f"[{i}]"
        m = mctx.obj(m, f"[{i}]")
        role = m.get("role")
        content = m.get("content")
        if role == "system":
            system.append("\n".join(t.text for t in _anthropic_blocks(b, content, w) if isinstance(t, Text)))
            continue
        if role == "user":
            blocks = content if isinstance(content, list) else [content] if content is not None else []
            rest: list[Any] = []
            for k, blk in enumerate(blocks):
                if isinstance(blk, dict) and blk.get("type") == "tool_result":
                    b.tool_result(
                        blk.get("tool_use_id"),
                        _anthropic_blocks(b, blk.get("content"), f"{w}.content[{k}].content"),
                        f"{w}.content[{k}]",
                        is_error=bool(blk.get("is_error", False)),
                    )
                else:
                    rest.append(blk)
            if rest or not blocks:
                b.user(_anthropic_blocks(b, rest, f"{w}.content"), w)
        elif role == "assistant":
            blocks = content if isinstance(content, list) else [content] if content is not None else []
            texts: list[Text | Image] = []
            calls: list[tuple[Any, Any, Any]] = []
            thinking: list[Thinking] = []
            for k, blk in enumerate(blocks):
                wk = f"{w}.content[{k}]"
                t = blk.get("type") if isinstance(blk, dict) else None
                if t in ("tool_use", "server_tool_use"):
                    calls.append((blk.get("id"), blk.get("name"), blk.get("input")))
                elif t in ("thinking", "redacted_thinking"):
                    thinking.append(Thinking(provider="anthropic", data=blk, text=b.text(blk.get("thinking", ""), wk)))
                else:
                    texts.extend(x for x in _anthropic_blocks(b, [blk], wk) if isinstance(x, Text))
            b.assistant(texts, calls, w, thinking=thinking, usage=usage_from(m.get("usage")))
        else:
            raise mctx.err(f"[{i}].role", f"unknown role {role!r} (expected user or assistant)")
    return [
        make_trace(
            id=trace_id,
            format="anthropic-messages",
            source=ctx.source,
            system="\n\n".join(s for s in system if s),
            tools=tools,
            builder=b,
            meta=meta,
            notes=notes,
            extra_repairs=repairs,
        )
    ]
