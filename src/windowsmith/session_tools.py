"""The handlers of windowsmith's built-in agent tools on :class:`~windowsmith.engine.Session`:
``tool_search`` and ``scope_tools`` (deferred and scoped tools, :mod:`windowsmith.guidance.tools`),
``search_history`` (evicted history, :mod:`windowsmith.retrieval.recall`), ``compact_context`` and
``result_tools`` (offloaded tool results, :mod:`windowsmith.result_tools`).

:class:`ToolHandlersMixin` holds no state of its own: ``Session`` inherits it and provides the log,
the builder and ``compact``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from .errors import UsageError
from .guidance.tools import DeferredToolsLayer, ToolPolicy, describe_found, load_event, select
from .result_tools import ResultTools, page_chars

if TYPE_CHECKING:
    from .build import Builder
    from .compaction.config import CompactionResult
    from .engine import Engine, Session
    from .state import SessionState


class ToolHandlersMixin:
    """The built-in tool handlers of :class:`~windowsmith.engine.Session` (see the module docstring)."""

    if TYPE_CHECKING:  # provided by Session
        engine: Engine
        id: str
        _builder: Builder

        @property
        def state(self) -> SessionState: ...

        def _append(self, kind: str, data: Mapping[str, Any]) -> None: ...

        def compact(self, provider: str | None = None, *, reason: str | None = None,
                    harder: bool = False) -> CompactionResult: ...

    def search_history(self, query: str, *, limit: int = 5) -> str:
        """Handler of the ``search_history`` tool (:data:`windowsmith.SEARCH_HISTORY_TOOL`): the evicted
        history (compacted spans, offloaded and folded results) matching ``query``, as text with the
        ``artifact://`` source and line range of each snippet. A bad call returns an ``error: …`` string."""
        from .retrieval.recall import search_history

        return search_history(cast("Session", self), query, limit=limit)

    def tool_search(self, query: str, limit: int = 5, **_: Any) -> str:
        """Handler of the ``tool_search`` tool (``windowsmith.guidance.tools``): finds deferred tools matching
        ``query``, logs a ``tools_loaded`` event (the next build sends them) and returns their descriptions."""
        if not isinstance(query, str) or not query.strip():
            return "error: tool_search needs a non-empty query, e.g. tool_search(query='create issue')"
        limit = max(1, min(10, limit if isinstance(limit, int) else 5))
        event, found = load_event(self.state, query, limit, self._tool_policy())
        if event["names"]:
            self._append("meta", event)
        return describe_found(found, query)

    def scope_tools(self, tools: Sequence[str] | None, *, step: str | None = None) -> None:
        """Restrict the tools of a step (default: the current one) to ``tools`` (names or ``"tag:x"``); None
        lifts it. The tool list stays (cache-safe): the request's tool choice says what is allowed."""
        if tools is not None and (isinstance(tools, str) or not all(isinstance(t, str) for t in tools)):
            raise UsageError("scope_tools takes a list of tool names or 'tag:x', e.g. ['get_order', 'tag:billing']")
        policy = self._tool_policy()
        if tools:
            unknown = [t for t in tools if not select(self.state.tools, [t], policy.tags)]
            if unknown:
                raise UsageError(f"scope_tools: {unknown} match no declared tool; declare them with tools() first "
                                 f"(declared: {[t.name for t in self.state.tools]})")
        self._append("meta", {"type": "tool_scope", "step": self.state.task.step if step is None else step,
                              "tools": list(tools) if tools else None})

    def _tool_policy(self) -> ToolPolicy:
        return next((la.policy for la in self._builder.layers if isinstance(la, DeferredToolsLayer)), ToolPolicy())

    @property
    def result_tools(self) -> ResultTools:
        """Handler for the ``read_result``/``search_result`` tools (``windowsmith.RESULT_TOOLS``):
        ``session.result_tools(name, arguments) -> str``. An answer is bounded by the window (``page_chars``)."""
        rt = self.__dict__.get("_result_tools")
        if rt is None:
            rt = ResultTools(self.engine.artifacts, self.id, page_chars(self._builder.budget().available))
            self.__dict__["_result_tools"] = rt
        return rt

    def compact_context(self, reason: str | None = None, **_: Any) -> str:
        """Handler of the ``compact_context`` tool (:data:`windowsmith.COMPACT_CONTEXT_TOOL`):
        compacts now and returns a short report for the tool result. Safe while the call is open."""
        return self.compact(reason=f"the agent called compact_context{': ' + reason if reason else ''}").describe()
