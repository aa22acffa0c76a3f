"""Step-scoped tools (``Session.scope_tools``): which declared tools the current step may call.

The tool list never changes for a scope (that would break the cached prefix): each tool item carries
``meta["allowed"]`` and the request says what is allowed (OpenAI ``tool_choice: allowed_tools``, Gemini
``allowed_function_names``, Anthropic a ``TOOLS`` line in the tail). The default tools layer and the deferred one
(:mod:`windowsmith.guidance.tools`) both honour it. Tags come from ``ToolPolicy.tags`` and MCP namespaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from ..model import ToolSpec
from .base import BuildContext, Item

if TYPE_CHECKING:
    from ..state import SessionState


def tool_tags(spec: ToolSpec, tags: Mapping[str, Sequence[str]]) -> set[str]:
    """A tool's tags: those ``tags`` give it, and its MCP namespace (``github__create_issue`` → ``github``)."""
    out = {tag for tag, names in tags.items() if spec.name in names}
    if "__" in spec.name:
        out.add(spec.name.split("__", 1)[0])
    return out


def select(tools: Sequence[ToolSpec], names: Iterable[str], tags: Mapping[str, Sequence[str]]) -> list[str]:
    """Names of ``tools`` picked by ``names`` (tool names, or ``tag:x``), in declared order."""
    wanted = list(names)
    by_name = {n for n in wanted if not n.startswith("tag:")}
    by_tag = {n[4:] for n in wanted if n.startswith("tag:")}
    return [t.name for t in tools if t.name in by_name or tool_tags(t, tags) & by_tag]


def current_scope(state: SessionState) -> list[str] | None:
    """The tool names/tags the current step is restricted to, or None (the newest scope of this step wins)."""
    step = state.task.step or ""
    for ev in reversed(state.tool_events):
        if ev.get("type") == "tool_scope" and (ev.get("step") or "") == step:
            return list(ev["tools"]) if ev.get("tools") else None
    return None


def scope_line(tools: Sequence[ToolSpec], allowed: set[str]) -> Item:
    """The tail line that states a scope where the provider has no allowed-tools parameter (Anthropic)."""
    return Item("tools", "tail", "dynamic", "In this step use only these tools: " + ", ".join(
        t.name for t in tools if t.name in allowed), priority=100, required=True, provenance="tool-scope", header="TOOLS")


def scoped_tools(layer: str, ctx: BuildContext) -> Iterator[Item]:
    """The default tools layer's items: every declared tool in declared order, each marked allowed or not while a
    scope holds (``Session.scope_tools``), and the Anthropic ``TOOLS`` line. Without a scope: the plain items."""
    tools = ctx.state.tools
    scope = current_scope(ctx.state)
    allowed = set(select(tools, scope, {})) if scope is not None else None
    for i, t in enumerate(tools):
        meta = {} if allowed is None else {"allowed": t.name in allowed}
        yield Item(layer, "tools", "stable", t, priority=100, required=True, provenance=f"tool:{t.name}", order=i,
                   meta=meta)
    if allowed is not None and ctx.counter.format == "anthropic":
        yield scope_line(tools, allowed)


__all__ = ["current_scope", "scope_line", "scoped_tools", "select", "tool_tags"]
