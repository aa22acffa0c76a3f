"""Claude Code session transcripts: ``~/.claude/projects/<project>/<session id>.jsonl``.

One JSON record per line. The conversation is in the ``user`` and ``assistant`` records, each holding an
Anthropic Messages ``message``; ``uuid``/``parentUuid`` chain them (a rewind or an edited prompt leaves a
dead branch in the file; ``/compact`` starts a new chain whose first record names the old one in
``logicalParentUuid``). Claude Code writes one ``assistant`` record per content block of a response, all
with the response's ``message.id`` (the tool results of the first blocks may come in between). The other
records are bookkeeping (``summary``, ``file-history-snapshot``, ``queue-operation``, ``last-prompt``,
``attachment``, ``system``, ...); records of a subagent's own conversation are marked ``isSidechain`` (left
out of the session's trace; a subagent's own file, all sidechain, is imported as its thread).

Mapping: the chain that ends at the last main-thread ``user``/``assistant`` record, from its root (across
``/compact`` boundaries), in order; the records of one response merged into one assistant message (its
usage counted once); then the Anthropic Messages importer. The system prompt and tool schemas are not
in older transcripts; where the session recorded them (``api-request-shape`` records, Claude Code 2.1.3xx)
the first one is used, else the first ``prompt_snapshot`` attachment's system prompt. What was left out is
counted in ``meta``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..formats.reader import Ctx
from .base import Trace, retag
from .logs import import_anthropic_messages

#: The record types that hold the conversation.
CONVERSATION = ("user", "assistant")


def is_claude_code_record(v: Any) -> bool:
    """A conversation record of a Claude Code transcript (the bookkeeping ones do not tell it apart)."""
    return (isinstance(v, dict) and v.get("type") in CONVERSATION and isinstance(v.get("message"), dict)
            and ("sessionId" in v or "parentUuid" in v) and "uuid" in v)


def _main_thread(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The conversation records on the chain that ends at the last main-thread one, oldest first, and the
    ``/compact`` boundaries the chain crosses."""
    convo = [r for r in records if r.get("type") in CONVERSATION and isinstance(r.get("message"), dict)]
    if any(not r.get("isSidechain") for r in convo):  # a subagent's own file holds only sidechain records: its thread
        convo = [r for r in convo if not r.get("isSidechain")]
    if not convo:
        return [], 0
    by_uuid = {r["uuid"]: r for r in records if isinstance(r.get("uuid"), str)}
    chain: list[dict[str, Any]] = []
    seen: set[Any] = set()
    cur: dict[str, Any] | None = convo[-1]
    while cur is not None and cur.get("uuid") not in seen:
        seen.add(cur.get("uuid"))
        chain.append(cur)
        parent = cur.get("parentUuid") or cur.get("logicalParentUuid")
        cur = by_uuid.get(parent) if isinstance(parent, str) else None
    chain.reverse()
    on_chain = [r for r in chain if r.get("type") in CONVERSATION and isinstance(r.get("message"), dict)]
    compactions = sum(1 for r in chain if not r.get("parentUuid") and r.get("logicalParentUuid"))
    # a transcript whose records do not link (hand-made or cut): every main-thread record, in file order
    return (on_chain, compactions) if len(on_chain) > 1 or len(convo) == 1 else (convo, 0)


def _system_and_tools(records: list[dict[str, Any]]) -> tuple[Any, Any]:
    for r in records:
        shape = r.get("shape") if r.get("type") == "api-request-shape" else None
        if isinstance(shape, dict) and (shape.get("system") or shape.get("tools")):
            return shape.get("system"), shape.get("tools")
    for r in records:
        att = r.get("attachment") if r.get("type") == "attachment" else None
        if isinstance(att, dict) and att.get("type") == "prompt_snapshot":
            sp = att.get("systemPrompt")
            if isinstance(sp, list):
                return "\n\n".join(s for s in sp if isinstance(s, str)), att.get("tools")
            if isinstance(sp, str):
                return sp, att.get("tools")
    return None, None


def import_claude_code(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    records = [ctx.obj(r, f"[{i}]") for i, r in enumerate(ctx.lst(value))]
    if not any(is_claude_code_record(r) for r in records):
        raise ctx.err("", "no user or assistant record (a Claude Code transcript holds the conversation in them)")
    thread, compactions = _main_thread(records)
    messages: list[dict[str, Any]] = []
    last_id: str | None = None  # the response the last assistant message holds
    last_at = -1
    merged = 0
    for r in thread:
        m = r["message"]
        role = m.get("role") or r.get("type")
        content = m.get("content")
        if role == "assistant":
            mid = m.get("id")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}] if content else []
            if isinstance(mid, str) and mid == last_id:
                messages[last_at]["content"].extend(blocks)  # another block of the same response
                merged += 1
                continue
            messages.append({"role": "assistant", "content": list(blocks), "usage": m.get("usage")})
            last_id, last_at = (mid if isinstance(mid, str) else None), len(messages) - 1
        else:
            messages.append({"role": "user", "content": content})
    system, tools = _system_and_tools(records)
    model = next((r["message"].get("model") for r in thread
                  if r.get("type") == "assistant" and isinstance(r["message"].get("model"), str)), None)
    doc: dict[str, Any] = {"messages": messages}
    if system:
        doc["system"] = system
    if tools:
        doc["tools"] = tools
    if model:
        doc["model"] = model
    kinds = Counter(r.get("type") if isinstance(r.get("type"), str) else "?" for r in records)
    on_thread = {id(r) for r in thread}
    meta: dict[str, Any] = {
        "session_id": next((r["sessionId"] for r in records if isinstance(r.get("sessionId"), str)), None),
        "version": next((r["version"] for r in records if isinstance(r.get("version"), str)), None),
        "records": dict(sorted(kinds.items())),
        "sidechain_records": sum(1 for r in records if r.get("isSidechain") and id(r) not in on_thread),
        "subagent": bool(thread) and all(r.get("isSidechain") for r in thread),
        "off_thread_records": sum(1 for r in records if r.get("type") in CONVERSATION and not r.get("isSidechain")
                                  and id(r) not in on_thread),
        "merged_blocks": merged,
        "compactions": compactions,
        "system_recorded": bool(system),
    }
    return retag(import_anthropic_messages(doc, ctx, notes, trace_id), "claude-code", meta)


__all__ = ["import_claude_code", "is_claude_code_record"]
