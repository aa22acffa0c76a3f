"""LangChain / LangGraph message histories saved as JSON: ``messages_to_dict`` (``[{"type", "data"}]``), the
``dumpd`` serialization (``{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}``), or
either under a saved graph state's ``messages`` key.

Message types: ``system``, ``human``, ``ai`` (its ``tool_calls`` are the calls, ``args`` an object; text from
``content``, a string or a list of provider blocks, where an Anthropic ``thinking`` block with its signature is
kept as thinking and ``tool_use`` blocks are left to ``tool_calls``), ``tool`` (``tool_call_id``; ``status:
error`` is an error result). ``usage_metadata`` is the billed usage: LangChain's ``input_tokens`` includes the
cache reads and writes of ``input_token_details``.
"""

from __future__ import annotations

from typing import Any

from ..formats.openai_chat import chat_parts
from ..formats.reader import Builder, Ctx, as_list, usage_from
from ..model import Image, Text, Thinking
from .base import Trace, make_trace

_TYPES = {"system": "system", "SystemMessage": "system", "human": "human", "HumanMessage": "human",
          "ai": "ai", "AIMessage": "ai", "AIMessageChunk": "ai", "tool": "tool", "ToolMessage": "tool"}


def _entry(v: Any) -> tuple[str, dict[str, Any]] | None:
    """(type, fields) of one serialized message, or None when ``v`` is not one."""
    if not isinstance(v, dict):
        return None
    if v.get("lc") == 1 and isinstance(v.get("id"), list) and v["id"] and isinstance(v.get("kwargs"), dict):
        t = _TYPES.get(str(v["id"][-1]))
        return (t, v["kwargs"]) if t else None
    data = v.get("data")
    if isinstance(data, dict) and isinstance(v.get("type"), str) and v["type"] in _TYPES:
        return _TYPES[v["type"]], data
    return None


def is_langchain_messages(v: Any) -> bool:
    msgs = v.get("messages") if isinstance(v, dict) else v
    return isinstance(msgs, list) and bool(msgs) and all(_entry(m) is not None for m in msgs[:20])


def _ai_content(b: Builder, content: Any, where: str) -> tuple[list[Text | Image], list[Thinking]]:
    if not isinstance(content, list):
        return chat_parts(b, content, where), []
    text: list[Text | Image] = []
    thinking: list[Thinking] = []
    for i, c in enumerate(content):
        t = c.get("type") if isinstance(c, dict) else None
        if t in ("tool_use", "function_call", "server_tool_use"):
            continue  # the calls come from tool_calls
        if t in ("thinking", "redacted_thinking") and isinstance(c, dict):
            thinking.append(Thinking(provider="anthropic", data=dict(c), text=b.text(c.get("thinking", ""), where)))
        elif t == "reasoning" and isinstance(c, dict):
            summary = "\n".join(str(x.get("text", "")) for x in as_list(c.get("summary")) if isinstance(x, dict))
            thinking.append(Thinking(provider="openai", data=dict(c), text=b.text(summary, where)))
        else:
            text.extend(chat_parts(b, [c], f"{where}[{i}]"))
    return text, thinking


def import_langchain_messages(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    msgs = value.get("messages") if isinstance(value, dict) else value
    mctx = ctx.sub("messages") if isinstance(value, dict) else ctx
    b = Builder()
    system: list[str] = []
    for i, m in enumerate(mctx.lst(msgs)):
        w = f"{mctx.where}[{i}]" if mctx.where else f"[{i}]"
        got = _entry(m)
        if got is None:
            raise mctx.err(f"[{i}]", "not a serialized LangChain message (expected {type, data} from messages_to_dict "
                                     "or an lc constructor from dumpd)")
        kind, d = got
        if kind == "system":
            system.append("\n".join(p.text for p in chat_parts(b, d.get("content"), w) if isinstance(p, Text)))
        elif kind == "human":
            b.user(chat_parts(b, d.get("content"), w), w)
        elif kind == "ai":
            text, thinking = _ai_content(b, d.get("content"), w)
            calls = [(tc.get("id"), tc.get("name"), tc.get("args") if isinstance(tc.get("args"), dict) else {})
                     for tc in as_list(d.get("tool_calls")) if isinstance(tc, dict)]
            b.assistant(text, calls, w, thinking=thinking, usage=usage_from(d.get("usage_metadata")))
        else:
            b.tool_result(d.get("tool_call_id"), chat_parts(b, d.get("content"), w), w, name=d.get("name"),
                          is_error=d.get("status") == "error")
    return [make_trace(id=trace_id, format="langchain", source=ctx.source, system="\n\n".join(x for x in system if x),
                       tools=(), builder=b, meta={}, notes=notes)]
