"""Codex CLI session rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``.

One JSON record per line, ``{"timestamp", "type", "payload"}``. ``session_meta`` opens the file (its
``base_instructions`` are the model's instructions); each ``response_item`` payload is an item of the
OpenAI Responses API as sent or received (``message`` of role developer, user or assistant,
``reasoning``, ``function_call`` and ``function_call_output``, ``custom_tool_call`` and its output for
the freeform ``apply_patch``, ``local_shell_call`` in older versions); ``compacted`` holds the summary
that replaced the history at a compaction; ``event_msg``, ``turn_context`` and the rest are bookkeeping.

Mapping: the response items in order (a ``local_shell_call`` becomes a call of ``local_shell`` with its
action as arguments, a ``compacted`` summary a user message; web searches and other items without a
transcript form are counted in ``meta["skipped_items"]``), then the OpenAI Responses importer. The
tool schemas are not recorded.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..formats.reader import Ctx
from .base import Trace, retag
from .logs import import_openai_responses

_KEPT = {"message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
         "custom_tool_call_output"}


def is_codex_record(v: Any) -> bool:
    """A record of a Codex CLI rollout."""
    return (isinstance(v, dict) and v.get("type") in ("session_meta", "response_item", "turn_context", "event_msg",
                                                       "compacted")
            and isinstance(v.get("payload"), dict) and "timestamp" in v)


def _instructions(meta: dict[str, Any]) -> str | None:
    for key in ("base_instructions", "instructions"):
        v = meta.get(key)
        if isinstance(v, dict) and isinstance(v.get("text"), str):
            return v["text"]
        if isinstance(v, str):
            return v
    return None


def import_codex(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    records = [ctx.obj(r, f"[{i}]") for i, r in enumerate(ctx.lst(value))]
    session: dict[str, Any] = next((r["payload"] for r in records if r.get("type") == "session_meta"
                                    and isinstance(r.get("payload"), dict)), {})
    items: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    for r in records:
        p = r.get("payload")
        if not isinstance(p, dict):
            continue
        if r.get("type") == "compacted":
            text = p.get("message")
            if isinstance(text, str) and text:
                items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
            continue
        if r.get("type") != "response_item":
            continue
        t = p.get("type")
        if t in _KEPT:
            items.append(p)
        elif t == "local_shell_call":
            items.append({"type": "function_call", "call_id": p.get("call_id") or p.get("id"), "name": "local_shell",
                          "arguments": json.dumps(p.get("action") or {})})
        else:
            skipped[str(t)] += 1
    if not any(i.get("type") == "message" for i in items):
        raise ctx.err("", "no response_item message (a Codex rollout holds the conversation in them)")
    doc: dict[str, Any] = {"input": items}
    system = _instructions(session)
    if system:
        doc["instructions"] = system
    model = next((r["payload"].get("model") for r in records if r.get("type") == "turn_context"
                  and isinstance(r.get("payload"), dict) and isinstance(r["payload"].get("model"), str)), None)
    if model:
        doc["model"] = model
    meta: dict[str, Any] = {
        "session_id": session.get("id") or session.get("session_id"),
        "version": session.get("cli_version"),
        "records": dict(sorted(Counter(str(r.get("type")) for r in records).items())),
        "skipped_items": dict(sorted(skipped.items())),
        "compactions": sum(1 for r in records if r.get("type") == "compacted"),
        "system_recorded": bool(system),
    }
    return retag(import_openai_responses(doc, ctx, notes, trace_id), "codex", meta)


__all__ = ["import_codex", "is_codex_record"]
