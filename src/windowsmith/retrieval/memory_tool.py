"""``memory``: the agent's own tool to view, create, edit and delete what it remembers, in the shape of
Anthropic's memory tool (commands ``view``, ``create``, ``str_replace``, ``delete`` on paths).

Paths: ``/memories`` (the scopes the session reads and their item counts), ``/memories/<scope>`` (the items
of ``session``, ``project`` or ``user``: id, source and first line), ``/memories/<scope>/<id>`` (one item).
``create`` takes ``/memories/<scope>`` (or any path under it) and ``file_text``; ``str_replace`` and
``delete`` take an item's path. What the agent writes is redacted, recorded as ``source: assistant`` with
``trusted: False`` and ``via: memory_tool`` (a prompt injection in a tool result could have asked for it),
and every change is a ``memory_edit`` event in the session's log.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import UsageError
from ..memory import SCOPES, Memory, MemoryItem

MEMORY_TOOL: dict[str, Any] = {
    "name": "memory",
    "description": (
        "View and edit your long-term memory. Paths: /memories (the scopes), /memories/<session|project|user> "
        "(its items), /memories/<scope>/<id> (one item). Commands: view(path); create(path=/memories/<scope>, "
        "file_text); str_replace(path=/memories/<scope>/<id>, old_str, new_str); delete(path=/memories/<scope>/<id>). "
        "Project and user memory are read by later sessions: keep items short, one fact each."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": ["view", "create", "str_replace", "delete"]},
            "path": {"type": "string", "description": "/memories, /memories/<scope> or /memories/<scope>/<id>"},
            "file_text": {"type": "string", "description": "create: the text to remember"},
            "old_str": {"type": "string", "description": "str_replace: the exact text to replace (once in the item)"},
            "new_str": {"type": "string", "description": "str_replace: the replacement"},
        },
        "required": ["command", "path"],
    },
}


class EventLog(Protocol):
    def append_event(self, kind: str, data: dict[str, Any]) -> Any: ...


def _parse(path: Any) -> tuple[str | None, int | None]:
    """(scope name, item id) of a path; raises UsageError with the expected shape."""
    if not isinstance(path, str) or not path.startswith("/memories"):
        raise UsageError(f"path must start with /memories, got {path!r:.80}")
    parts = [p for p in path[len("/memories"):].split("/") if p]
    if not parts:
        return None, None
    if parts[0] not in SCOPES:
        raise UsageError(f"unknown memory scope {parts[0]!r:.40}; use /memories/session, /memories/project or /memories/user")
    if len(parts) == 1:
        return parts[0], None
    try:
        return parts[0], int(parts[1])
    except ValueError:
        return parts[0], None  # create accepts any name under a scope


def _line(m: MemoryItem) -> str:
    first = m.text.splitlines()[0] if m.text else ""
    trust = "" if m.trusted else " (untrusted)"
    return f"{m.id}\t{m.source}{trust}\t{first[:120]}"


def _item(memory: Memory, scope: str | None, item_id: int | None) -> MemoryItem:
    if scope is None or item_id is None:
        raise UsageError("name one item: /memories/<scope>/<id> (view /memories/<scope> to list the ids)")
    item = memory.get(item_id)
    if item is None or item.scope != memory.scope(scope) or "superseded_by" in item.provenance:
        raise UsageError(f"no memory item {item_id} in {scope} memory; view /memories/{scope} to list them")
    return item


def _view(memory: Memory, scope: str | None, item_id: int | None) -> str:
    if scope is None:
        counts = {s.split(":", 1)[0]: 0 for s in memory.scopes}
        for m in memory.list():
            counts[m.scope.split(":", 1)[0]] += 1
        return "\n".join(f"/memories/{s}\t{n} item(s)" for s, n in counts.items()) or "no memory scope is on"
    if item_id is None:
        items = memory.list(scope)
        return "\n".join(_line(m) for m in items) if items else f"/memories/{scope} is empty"
    m = _item(memory, scope, item_id)
    return f"[memory {m.id} {scope}, source {m.source}{'' if m.trusted else ', untrusted'}]\n{m.text}"


def memory_tool(memory: Memory, log: EventLog, args: dict[str, Any]) -> str:
    """Run one ``memory`` tool call; returns the tool result (``error: ...`` for a bad call)."""
    try:
        return _run(memory, log, args)
    except UsageError as e:
        return f"error: {e}"


def _run(memory: Memory, log: EventLog, args: dict[str, Any]) -> str:
    command = args.get("command")
    scope, item_id = _parse(args.get("path"))
    if command == "view":
        return _view(memory, scope, item_id)
    if command == "create":
        text = args.get("file_text")
        if scope is None or not isinstance(text, str) or not text.strip():
            raise UsageError("create needs path=/memories/<scope> and a non-empty file_text")
        made = memory.add(text, scope=scope, source="assistant", meta={"trusted": False, "via": "memory_tool"})
        if made is None:  # pragma: no cover - only named writes return None
            return "nothing added"
        log.append_event("meta", {"type": "memory_edit", "command": "create", "item": made.id, "scope": made.scope})
        return f"created /memories/{scope}/{made.id}"
    if command == "str_replace":
        m = _item(memory, scope, item_id)
        old, new = args.get("old_str"), args.get("new_str", "")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise UsageError("str_replace needs old_str (non-empty) and new_str strings")
        if m.text.count(old) != 1:
            raise UsageError(f"old_str must occur exactly once in item {m.id}; it occurs {m.text.count(old)} times")
        memory.replace(m.id, m.text.replace(old, new), meta={"trusted": False, "via": "memory_tool"})
        log.append_event("meta", {"type": "memory_edit", "command": "str_replace", "item": m.id, "scope": m.scope})
        return f"edited /memories/{scope}/{m.id}"
    if command == "delete":
        m = _item(memory, scope, item_id)
        memory.forget(m.id)
        log.append_event("meta", {"type": "memory_edit", "command": "delete", "item": m.id, "scope": m.scope})
        return f"deleted /memories/{scope}/{m.id}"
    raise UsageError(f"unknown command {command!r:.40}; use view, create, str_replace or delete")


__all__ = ["MEMORY_TOOL", "memory_tool"]
