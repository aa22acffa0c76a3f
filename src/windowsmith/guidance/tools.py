"""Tool deferral with ``tool_search``, and step-scoped tools — without breaking the cached prefix.

With many tools (MCP servers bring dozens), sending every definition each turn costs thousands of tokens.
:class:`DeferredToolsLayer` (it replaces the default tools layer; ``Engine(layers=deferred_layers(...))``)
sends a *core* set and lets the model find the rest:

* **native** (Anthropic Messages, OpenAI Responses): every tool stays in the request in declared order, the
  deferred ones marked ``defer_loading: true``, plus the provider's own search tool (Anthropic
  ``tool_search_tool_bm25_20251119``, OpenAI ``{"type": "tool_search"}``). The provider loads what the search
  finds inside the conversation, so the tool list never changes and the cache prefix holds. Deferred
  definitions are not part of the model's context; they count 0 tokens in the budget.
* **search** (OpenAI Chat, Gemini, or ``native=False``): the core tools, then a ``tool_search`` function
  (:data:`TOOL_SEARCH_TOOL`), then the tools found so far, appended in the order they were found, after the
  stable block. Answer a ``tool_search`` call with ``session.tool_search(query)`` (or
  :func:`search_tools` + :func:`load_event` yourself): it ranks the deferred tools (BM25 over name,
  description and parameter names), logs a ``tools_loaded`` event and returns their descriptions. The tool
  list then changes once per search that loads something (a cache write of the request up to there); the
  manifest counts the loads.

**Step scope**: ``session.scope_tools([...names or "tag:x"])`` restricts the tools of the current step (until
the step changes). The tool list stays as it is (cache-safe); the request says what is allowed: OpenAI Chat and
Responses ``tool_choice: {"type": "allowed_tools", ...}``, Gemini ``tool_config.function_calling_config``
(``VALIDATED`` + ``allowed_function_names``), Anthropic (no allowed-tools parameter) a ``TOOLS`` line in the
tail. Tags come from :class:`ToolPolicy` ``tags`` and from MCP namespaces (``server__tool`` has tag ``server``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..layers.base import BuildContext, Item, Layer
from ..layers.scope import current_scope, scope_line, select, tool_tags
from ..model import ToolSpec

if TYPE_CHECKING:
    from ..state import SessionState

#: Formats whose provider has a native deferred-loading mechanism.
NATIVE_FORMATS: frozenset[str] = frozenset({"anthropic", "openai-responses"})

TOOL_SEARCH_TOOL: dict[str, Any] = {
    "name": "tool_search",
    "description": ("Search the catalog of additional tools by keywords (what you want to do, a service or an object "
                    "name). The best matches become callable from your next turn on; their descriptions are returned."),
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "keywords, e.g. 'create github issue' or 'slack message'"},
        "limit": {"type": "integer", "description": "how many tools to load (1-10, default 5)"}},
        "required": ["query"]},
}
TOOL_SEARCH_SPEC = ToolSpec.from_dict(TOOL_SEARCH_TOOL)

_TERM = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|\d+")


def _terms(text: str) -> list[str]:
    return [t.lower() for t in _TERM.findall(text) if len(t) > 1]


def tool_text(spec: ToolSpec) -> str:
    """What the search matches on: the name, the description and each parameter's name and description."""
    props = spec.parameters.get("properties") or {}
    params = " ".join(f"{k} {v.get('description', '') if isinstance(v, Mapping) else ''}" for k, v in props.items())
    return f"{spec.name} {spec.name} {spec.description} {params}"


def search_tools(tools: Sequence[ToolSpec], query: str, limit: int = 5) -> list[ToolSpec]:
    """The ``limit`` tools best matching ``query`` (BM25 over :func:`tool_text`; ties keep declared order)."""
    q = set(_terms(query))
    if not q or not tools:
        return []
    docs = [_terms(tool_text(t)) for t in tools]
    n = len(docs)
    avg = sum(len(d) for d in docs) / n or 1.0
    df = {t: sum(1 for d in docs if t in d) for t in q}
    scored = []
    for i, d in enumerate(docs):
        score = 0.0
        for t in q:
            tf = d.count(t)
            if tf:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(d) / avg))
        if score > 0:
            scored.append((-score, i))
    return [tools[i] for _, i in sorted(scored)[:limit]]


@dataclass(frozen=True)
class ToolPolicy:
    """How tools are deferred. ``core``: tool names (or ``tag:x``) always loaded; ``defer_over``: defer when more
    tools than this are declared; ``defer_share``: defer also when the definitions take more than this share of
    the available budget, however few they are (None: by count only); ``native``: use the provider's mechanism
    where there is one; ``tags``: tag → tool names, for ``core`` and step scopes."""

    core: tuple[str, ...] = ()
    defer_over: int = 15
    native: bool = True
    tags: Mapping[str, Sequence[str]] = field(default_factory=dict)
    defer_share: float | None = 0.25

    def __post_init__(self) -> None:
        if isinstance(self.core, str):
            raise UsageError("ToolPolicy(core=...) takes a list of tool names or 'tag:x', not a string")
        if self.defer_over < 0:
            raise UsageError(f"defer_over must be >= 0, got {self.defer_over}")
        if self.defer_share is not None and not 0 < self.defer_share <= 1:
            raise UsageError(f"defer_share is a share of the available budget in (0, 1] (or None), got {self.defer_share}")

    def defers(self, tools: Sequence[ToolSpec], ctx: BuildContext) -> bool:
        """Whether ``tools`` are deferred: more than ``defer_over`` of them, or (``defer_share``) definitions over that
        share of the available budget."""
        if len(tools) > self.defer_over:
            return True
        if self.defer_share is None or not tools or ctx.available <= 0:
            return False
        c = ctx.counter
        raw = sum(c.overheads.per_tool + c.raw_text(t.canonical) for t in tools)
        return c.scaled(raw) > self.defer_share * ctx.available


def deferred_note(n: int) -> str:
    """The line that tells the model some tools are not in its list yet."""
    return f"[{n} tool{'s' if n != 1 else ''} deferred: search with tool_search]"


def loaded_tools(state: SessionState) -> list[str]:
    """Names loaded by ``tool_search`` in this session, in the order they were found."""
    out: list[str] = []
    for ev in state.tool_events:
        if ev.get("type") == "tools_loaded":
            out.extend(n for n in ev.get("names", ()) if n not in out)
    return out


def load_event(state: SessionState, query: str, limit: int, policy: ToolPolicy) -> tuple[dict[str, Any], list[ToolSpec]]:
    """The ``tools_loaded`` event for a search (tools found that were not loaded yet) and every match."""
    core = set(select(state.tools, policy.core, policy.tags))
    already = set(loaded_tools(state))
    candidates = [t for t in state.tools if t.name not in core]
    found = search_tools(candidates, query, limit)
    new = [t.name for t in found if t.name not in already]
    return {"type": "tools_loaded", "query": query, "names": new}, found


def describe_found(found: Sequence[ToolSpec], query: str) -> str:
    if not found:
        return f"no tool matches {query!r}; try other keywords (a service, an object, an action)"
    lines = [f"{len(found)} tool(s) found for {query!r}; you can call them from now on:"]
    for t in found:
        params = ", ".join((t.parameters.get("properties") or {}).keys())
        lines.append(f"- {t.name}({params}): {t.description.strip().splitlines()[0] if t.description else ''}")
    return "\n".join(lines)


class DeferredToolsLayer(Layer):
    """The tools layer with deferral and step scope (see the module docstring). Its manifest report
    (``guidance["tools"]``): mode, declared, sent, deferred, loaded, deferred tokens saved, the scope."""

    name = "tools"

    def __init__(self, policy: ToolPolicy | None = None) -> None:
        self.policy = policy or ToolPolicy()
        self._report: dict[str, Any] | None = None

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        state = ctx.state
        tools = state.tools
        pol = self.policy
        fmt = ctx.counter.format
        scope = current_scope(state)
        allowed = set(select(tools, scope, pol.tags)) if scope is not None else None
        defer = pol.defers(tools, ctx)
        native = defer and pol.native and fmt in NATIVE_FORMATS
        core = set(select(tools, pol.core, pol.tags))
        loaded = [n for n in loaded_tools(state) if n not in core] if defer else []
        report: dict[str, Any] = {"mode": "native" if native else "search" if defer else "all", "declared": len(tools)}
        self._report = report

        def item(t: ToolSpec, order: int, deferred: bool = False) -> Item:
            meta: dict[str, Any] = {"deferred": deferred}
            if allowed is not None:
                meta["allowed"] = t.name in allowed or t.name == TOOL_SEARCH_SPEC.name
            return Item(self.name, "tools", "stable", t, priority=100, required=True, provenance=f"tool:{t.name}",
                        order=order, raw_tokens=0 if deferred else None, meta=meta)

        saved = 0
        if not defer:
            out = [item(t, i) for i, t in enumerate(tools)]
        elif native:
            out = []
            for i, t in enumerate(tools):
                deferred = t.name not in core
                if deferred:
                    saved += ctx.counter.overheads.per_tool + ctx.counter.raw_text(t.canonical)
                out.append(item(t, i, deferred))
            report["deferred"] = sum(1 for it in out if it.meta["deferred"])
        else:
            by_name = {t.name: t for t in tools}
            sent = [t for t in tools if t.name in core]
            if TOOL_SEARCH_SPEC.name not in by_name:
                sent.append(TOOL_SEARCH_SPEC)
            sent += [by_name[n] for n in loaded if n in by_name]
            out = [item(t, i) for i, t in enumerate(sent)]
            names = {t.name for t in sent}
            saved = sum(ctx.counter.overheads.per_tool + ctx.counter.raw_text(t.canonical)
                        for t in tools if t.name not in names)
            report["deferred"] = sum(1 for t in tools if t.name not in names)
        if defer:
            report["loaded"] = len(loaded)
            report["saved_tokens"] = ctx.counter.scaled(saved)
        report["sent"] = len(out)
        if allowed is not None:
            report["scope"] = sorted(allowed)
        yield from out
        if defer and report.get("deferred"):
            yield Item("tools", "tail", "dynamic", deferred_note(report["deferred"]), priority=100, required=True,
                       provenance="tools-deferred", header="NOTE")
        if allowed is not None and fmt == "anthropic":
            yield scope_line(tools, allowed)

    def report(self) -> dict[str, Any] | None:
        return self._report


def deferred_layers(policy: ToolPolicy | None = None, low_water: float = 0.7) -> list[Layer]:
    """The default layers with :class:`DeferredToolsLayer` in place of the plain tools layer."""
    from ..layers.builtin import ToolsLayer, default_layers

    return [DeferredToolsLayer(policy) if isinstance(layer, ToolsLayer) else layer for layer in default_layers(low_water)]


__all__ = ["NATIVE_FORMATS", "TOOL_SEARCH_SPEC", "TOOL_SEARCH_TOOL", "DeferredToolsLayer", "ToolPolicy", "current_scope",
           "deferred_layers", "deferred_note", "describe_found", "load_event", "loaded_tools", "search_tools", "select", "tool_tags"]
