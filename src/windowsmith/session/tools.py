"""The handlers of windowsmith's built-in agent tools: ``tool_search`` and ``scope_tools`` (deferred and scoped
tools, :mod:`windowsmith.guidance.tools`), ``search_history`` (evicted history, :mod:`windowsmith.retrieval.recall`), ``memory`` (the agent's memory,
:mod:`windowsmith.retrieval.memory_tool`),
``compact_context`` and ``result_tools`` (offloaded tool results, :mod:`windowsmith.result_tools`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..build import Builder
from ..errors import UsageError
from ..guidance.tools import DeferredToolsLayer, ToolPolicy, describe_found, load_event, select
from ..log import SessionLog
from ..memory import Memory
from ..ports import SessionEngine
from ..result_tools import ResultTools, page_chars
from ..retrieval.memory_tool import memory_tool
from ..retrieval.recall import search_history
from ..state import SessionState
from .calls import Calls


class ToolHandlers:
    """What ``Session.search_history``, ``tool_search``, ``scope_tools``, ``result_tools`` and
    ``compact_context`` do (see the module docstring)."""

    def __init__(self, engine: SessionEngine, session_id: str, log: SessionLog, builder: Builder, calls: Calls) -> None:
        self.engine = engine
        self.id = session_id
        self.log = log
        self.builder = builder
        self.calls = calls
        self._result_tools: ResultTools | None = None

    @property
    def state(self) -> SessionState:
        return self.log.state

    def search_history(self, query: str, limit: int) -> str:
        return search_history(self, query, limit=limit)  # (what recall reads: this session's id, state, stores)

    def memory_tool(self, memory: Memory, args: dict[str, Any]) -> str:
        return memory_tool(memory, self.log, args)

    def tool_search(self, query: str, limit: int) -> str:
        if not isinstance(query, str) or not query.strip():
            return "error: tool_search needs a non-empty query, e.g. tool_search(query='create issue')"
        limit = max(1, min(10, limit if isinstance(limit, int) else 5))
        event, found = load_event(self.state, query, limit, self.tool_policy())
        if event["names"]:
            self.log.append_event("meta", event)
        return describe_found(found, query)

    def scope_tools(self, tools: Sequence[str] | None, step: str | None) -> None:
        if tools is not None and (isinstance(tools, str) or not all(isinstance(t, str) for t in tools)):
            raise UsageError("scope_tools takes a list of tool names or 'tag:x', e.g. ['get_order', 'tag:billing']")
        policy = self.tool_policy()
        if tools:
            unknown = [t for t in tools if not select(self.state.tools, [t], policy.tags)]
            if unknown:
                raise UsageError(f"scope_tools: {unknown} match no declared tool; declare them with tools() first "
                                 f"(declared: {[t.name for t in self.state.tools]})")
        self.log.append_event("meta", {"type": "tool_scope", "step": self.state.task.step if step is None else step,
                                       "tools": list(tools) if tools else None})

    def tool_policy(self) -> ToolPolicy:
        return next((la.policy for la in self.builder.layers if isinstance(la, DeferredToolsLayer)), ToolPolicy())

    @property
    def result_tools(self) -> ResultTools:
        rt = self._result_tools
        if rt is None:
            rt = ResultTools(self.engine.artifacts, self.id, page_chars(self.builder.budget().available))
            self._result_tools = rt
        return rt

    def compact_context(self, reason: str | None) -> str:
        why = f"the agent called compact_context{': ' + reason if reason else ''}"
        return self.calls.compact(None, why, False).describe()


__all__ = ["ToolHandlers"]
