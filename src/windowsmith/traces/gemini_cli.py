"""Gemini CLI chat recordings: ``~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl`` (or ``.json``).

The JSONL form opens with a header (``sessionId``, ``projectHash``, ``startTime``, ``kind``), then appends
message records (``id``, ``timestamp``, ``type``: ``user`` or ``gemini``, or ``info``/``warning``/``error``
notices) and ``{"$set": {...}}`` patches; a record written again under the same ``id`` replaces the earlier one
(a model turn is written first, then again with its ``toolCalls``), and a ``$set`` of ``messages`` replaces the
list. The older ``.json`` form is one object with the header's fields and ``messages``. A ``gemini`` message
holds the model's text (``content``), ``toolCalls`` (``id``, ``name``, ``args``, ``result``: the
``functionResponse`` parts sent back, ``status``), ``thoughts`` (summaries) and ``tokens`` (``input``,
``output``, ``cached``, ``thoughts``, ``tool``).

Mapping: the messages as the last record of each left them, in order; a ``gemini`` message becomes an assistant
message with its tool calls, followed by their results (from ``toolCalls[].result``: a call without one gets the
no-result answer); ``user`` records that only carry those ``functionResponse`` parts again (newer versions) are
not repeated; notices and thoughts are counted in ``meta``; ``tokens`` become the turn's billed usage. The system
prompt and tool schemas are not recorded.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..formats.reader import Ctx
from .base import Trace, retag
from .logs import import_openai_chat


def is_gemini_cli_record(v: Any) -> bool:
    """The header or a message record of a Gemini CLI chat recording."""
    if not isinstance(v, dict):
        return False
    if "sessionId" in v and "projectHash" in v:
        return True
    return v.get("type") == "gemini" and "id" in v and "timestamp" in v


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    return ""


def _only_responses(content: Any) -> bool:
    return (isinstance(content, list) and bool(content)
            and all(isinstance(p, dict) and "functionResponse" in p for p in content))


def _result_text(result: Any) -> str:
    """What a tool call's ``result`` (functionResponse parts) sent back to the model."""
    out: list[str] = []
    for p in result if isinstance(result, list) else [result]:
        if not isinstance(p, dict):
            continue
        fr = p.get("functionResponse")
        if isinstance(fr, dict):
            resp = fr.get("response")
            if isinstance(resp, dict) and set(resp) <= {"output", "error"}:
                out.append(str(resp.get("output", resp.get("error", ""))))
            else:
                out.append(json.dumps(resp, ensure_ascii=False))
        elif isinstance(p.get("text"), str):
            out.append(p["text"])
    return "\n".join(out)


def _messages(value: Any, ctx: Ctx) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    header: dict[str, Any] = {}
    order: dict[str, dict[str, Any]] = {}
    if isinstance(value, dict):  # the older .json form
        header = value
        for i, m in enumerate(ctx.get(value, "messages", list)):
            m = ctx.obj(m, f"messages[{i}]")
            order[str(m.get("id", i))] = m
        return list(order.values()), header
    for i, r in enumerate(ctx.lst(value)):
        r = ctx.obj(r, f"[{i}]")
        if "sessionId" in r and "projectHash" in r and not header:
            header = r
        patch = r.get("$set")
        if isinstance(patch, dict):
            if isinstance(patch.get("messages"), list):
                order = {str(m.get("id", k)): m for k, m in enumerate(patch["messages"]) if isinstance(m, dict)}
            continue
        if "type" in r and "id" in r:
            order[str(r["id"])] = r  # a record written again replaces the earlier one, in place
    return list(order.values()), header


def import_gemini_cli(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    msgs, header = _messages(value, ctx)
    chat: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    thoughts = 0
    model = None
    for m in msgs:
        kind = m.get("type")
        if kind == "user":
            if _only_responses(m.get("content")):
                continue  # the results again, as sent: taken from the calls' results below
            chat.append({"role": "user", "content": _text(m.get("content"))})
        elif kind == "gemini":
            model = model or (m.get("model") if isinstance(m.get("model"), str) else None)
            thoughts += len(m.get("thoughts") or [])
            calls = [c for c in (m.get("toolCalls") or []) if isinstance(c, dict)]
            tok = m.get("tokens") if isinstance(m.get("tokens"), dict) else {}
            usage = ({"prompt_tokens": tok.get("input", 0),
                      "completion_tokens": (tok.get("output") or 0) + (tok.get("thoughts") or 0),
                      "prompt_tokens_details": {"cached_tokens": tok.get("cached", 0)}} if tok else None)
            chat.append({"role": "assistant", "content": _text(m.get("content")) or None, "usage": usage,
                         "tool_calls": [{"id": c.get("id"), "type": "function",
                                         "function": {"name": c.get("name"), "arguments": json.dumps(c.get("args") or {})}}
                                        for c in calls]})
            for c in calls:
                if "result" in c:
                    chat.append({"role": "tool", "tool_call_id": c.get("id"), "name": c.get("name"),
                                 "content": _result_text(c.get("result")), "is_error": c.get("status") == "error"})
        else:
            skipped[str(kind)] += 1
    if not any(c["role"] == "user" for c in chat):
        raise ctx.err("", "no user message (a Gemini CLI recording holds the conversation in its messages)")
    doc: dict[str, Any] = {"messages": chat}
    if model:
        doc["model"] = model
    meta = {"session_id": header.get("sessionId"), "kind": header.get("kind"),
            "skipped_messages": dict(sorted(skipped.items())), "thoughts": thoughts, "system_recorded": False}
    return retag(import_openai_chat(doc, ctx, notes, trace_id), "gemini-cli", meta)


__all__ = ["import_gemini_cli", "is_gemini_cli_record"]
