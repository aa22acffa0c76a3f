"""Assembly: run the layers, allocate the budget, fit, and build the neutral request.

    items ← every layer
    fixed ← per-request overhead + required items (system, tools, task)   — must fit, or BudgetExceededError
    alloc ← budget.allocate(block_at * available - fixed, wants per optional layer, weights)
    fit   ← per layer, items by priority: keep, else shrink, else drop   — every action recorded
    build ← tools → system → session → history → tail (TASK, STEP, ACCEPTANCE, EVIDENCE, MEMORY, …)

The assembler knows no particular layer: it only reads item slots, phases, priorities and policies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .budget import Budget, BudgetConfig, allocate
from .errors import BudgetExceededError
from .layers.base import TAIL_HEADERS, BuildContext, Item, Layer
from .layers.shrink import MIN_VIEW
from .model import Message, ToolSpec
from .request import Lineage, NeutralRequest, Segment
from .state import SessionState
from .tokens import TokenCounter

_TAIL_SECTION_OVERHEAD = 4  # "## HEADER\n" and the blank line


@dataclass(frozen=True)
class Action:
    """One thing the assembler did to fit the window; goes into the manifest."""

    kind: str  # "drop" | "shrink" | "truncate" | "clip"
    layer: str
    reason: str
    tokens_before: int
    tokens_after: int
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"kind": self.kind, "layer": self.layer, "reason": self.reason,
             "tokens_before": self.tokens_before, "tokens_after": self.tokens_after}
        if self.detail:
            d["detail"] = self.detail
        return d


@dataclass
class LayerUsage:
    allocated: int = 0
    used: int = 0
    items: int = 0
    dropped: int = 0
    required: bool = False
    sources: list[str] = field(default_factory=list)  # provenance of kept items a layer asks to list (meta["listed"])
    # what a retrieval layer put in, one dict per kept item (meta["retrieved"]): id, source, score, matched terms
    retrieved: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"allocated": self.allocated, "used": self.used, "items": self.items, "dropped": self.dropped,
             "required": self.required}
        if self.sources:
            d["sources"] = list(self.sources)
        if self.retrieved:
            d["retrieved"] = [dict(r) for r in self.retrieved]
        return d


@dataclass
class Assembly:
    request: NeutralRequest
    budget: Budget
    layers: dict[str, LayerUsage]
    actions: list[Action]
    tokens: int
    history: Item | None
    refs: list[str]
    guidance: dict[str, Any] = field(default_factory=dict)  # layer name → its report (Layer.report)
    counted: int = 0  # the request's tokens before calibration (tokenizer x factor): what billed usage is fitted on


def measure(item: Item, counter: TokenCounter) -> int:
    c = item.content
    if item.raw_tokens is not None:
        return int(item.raw_tokens * counter.scale + 0.999999)
    if isinstance(c, ToolSpec):
        return counter.scaled(counter.overheads.per_tool + counter.raw_text(c.canonical))
    if isinstance(c, str):
        if item.slot == "tail":
            return counter.text(c) + _TAIL_SECTION_OVERHEAD
        return counter.segment(c)
    return sum(counter.message(m) for m in c)


def render_tail(items: Sequence[Item], style: Any = None) -> str | None:
    """The dynamic tail text: sections in the standard header order, items in order within each.
    ``style`` (a ``TailStyle``: header format and bullet) comes from a layer's ``tail_style()``."""
    if not items:
        return None
    by_header: dict[str, list[str]] = {}
    for it in items:
        by_header.setdefault(it.header or "NOTE", []).append(str(it.content))
    order = [h for h in TAIL_HEADERS if h in by_header] + sorted(h for h in by_header if h not in TAIL_HEADERS)
    header, bullet = (style.header, style.bullet) if style is not None else ("## {}", "- ")
    parts = []
    for h in order:
        texts = by_header[h]
        body = "\n".join(texts) if h in ("TASK", "STEP", "ACCEPTANCE", "CODEMAP", "FOCUS") else "\n".join(f"{bullet}{t}" for t in texts)
        parts.append(f"{header.format(h)}\n{body}")
    return "\n\n".join(parts)


def least_history(counter: TokenCounter) -> int:
    """Tokens any history needs at the least, whatever its newest message is now: the smallest views of the newest
    message and the opening request (:data:`~windowsmith.layers.shrink.MIN_VIEW` each). A floor that followed the
    newest message lowered the reservation on one call and not the next (a short user message), and that call's
    compaction cut the history to the narrow room, which the next call, lowered again, left unused. The bench gives
    every strategy the lowered reservation by the same rule (``bench.strategies.run_budget``)."""
    return counter.scaled(2 * MIN_VIEW)


def history_floor(gathered: Sequence[tuple[Item, int]], counter: TokenCounter) -> int:
    """Tokens the history needs at the least: its newest unit and the pinned request, each at most
    :data:`~windowsmith.layers.shrink.MIN_VIEW` (what a shrink leaves of a message), and the summary message a cut
    left (never shrunk); 0 without a history."""
    for it, _n in gathered:
        fit = it.fit
        if it.slot != "history" or fit is None or not fit.counts:
            continue
        counts = fit.counts
        raw = min(counts[-1], MIN_VIEW)
        if it.meta.get("head") and len(counts) > 1:
            raw += min(counts[0], MIN_VIEW)
        return counter.scaled(raw + fit.summary_raw)
    return 0


def assemble(
    state: SessionState,
    layers: Sequence[Layer],
    counter: TokenCounter,
    budget: Budget,
    config: BudgetConfig,
    *,
    model: str,
    cache_key: str,
    lower_output: bool = False,
) -> Assembly:
    """``lower_output``: lower the reserved output to its floor whatever the history's smallest views (the
    builder asks for it when the history could not fit beside the whole reservation even shrunk: a newest
    exchange of signed thinking or non-string arguments, which no view makes smaller)."""
    ctx = BuildContext(state=state, counter=counter, window=budget.window, available=budget.available)
    gathered, guidance, style = _gather(layers, ctx, counter)

    usage: dict[str, LayerUsage] = {}
    for it, _n in gathered:
        u = usage.setdefault(it.layer, LayerUsage())
        u.required = u.required or it.required

    fixed, required_by_layer = _fixed_tokens(gathered, counter)
    budget, borrowed = _reserve_output(gathered, fixed, counter, budget, config, lower_output)
    if fixed > budget.available:
        worst = max(required_by_layer, key=lambda k: required_by_layer[k]) if required_by_layer else "request"
        raise BudgetExceededError(
            f"the required layers need {fixed:,} tokens but only {budget.available:,} are available "
            f"(window {budget.window:,} - reserved output {budget.reserved_output:,} - slack {budget.slack:,}); "
            f"the largest is {worst!r} with {required_by_layer.get(worst, 0):,} tokens. Shorten it, use a model "
            "with a larger window, or lower BudgetConfig(reserved_output=...)",
            layer=worst, needed=fixed, available=budget.available,
        )

    alloc, prefit = _allocate(gathered, fixed, counter, budget, config)
    for layer_name, u in usage.items():
        u.allocated = required_by_layer.get(layer_name, 0) + alloc.get(layer_name, 0)
    kept, fitted = _fit(gathered, alloc, prefit, usage, counter)
    actions: list[Action] = [borrowed] if borrowed is not None else []
    actions += fitted

    kept.sort(key=lambda e: (e[0].order))
    slots = _place(kept, usage)
    total = fixed - sum(required_by_layer.values()) + slots.tokens
    # sent, but stripped by the provider (the history layer's own item already left it out of its count)
    history = slots.history
    unbilled = counter.scaled(counter.raw_unbilled(slots.messages)) if history is None or history.fit is None else 0
    if unbilled and history is not None:
        usage[history.layer].used -= unbilled
    total -= unbilled
    counted = round((total - max(0, counter.offset)) / counter.calibration.slope)
    if counter.offset < 0:
        total = max(total + counter.offset, counter.calibration.apply(counted))
    req = _request(slots, kept, style, model=model, cache_key=cache_key, max_output_tokens=budget.reserved_output)
    return Assembly(req, budget, usage, actions, total, history, slots.refs, guidance, counted)


def _gather(layers: Sequence[Layer], ctx: BuildContext, counter: TokenCounter
            ) -> tuple[list[tuple[Item, int]], dict[str, Any], Any]:
    """Every layer's items with their tokens, each layer's report (by name) and the first tail style a layer gives."""
    gathered: list[tuple[Item, int]] = []
    guidance: dict[str, Any] = {}
    style = None
    for layer in layers:
        for it in layer.items(ctx):
            gathered.append((it, measure(it, counter)))
        rep = layer.report()
        if rep is not None:
            guidance[layer.name] = rep
        style = style or layer.tail_style()
    return gathered, guidance, style


def _fixed_tokens(gathered: Sequence[tuple[Item, int]], counter: TokenCounter) -> tuple[int, dict[str, int]]:
    """The tokens the request takes whatever is fitted (its overheads and every required item), and the required
    items' tokens per layer."""
    # a positive calibration offset (billed tokens the count cannot see) takes room; a negative one never gives any
    fixed = counter.scaled(counter.overheads.per_request) + max(0, counter.offset)
    if any(isinstance(it.content, ToolSpec) for it, _ in gathered):
        fixed += counter.scaled(counter.overheads.tools_base)
    required_by_layer: dict[str, int] = {}
    for it, n in gathered:
        if it.required:
            required_by_layer[it.layer] = required_by_layer.get(it.layer, 0) + n
    fixed += sum(required_by_layer.values())
    return fixed, required_by_layer


def _reserve_output(gathered: Sequence[tuple[Item, int]], fixed: int, counter: TokenCounter, budget: Budget,
                    config: BudgetConfig, lower_output: bool) -> tuple[Budget, Action | None]:
    """The budget with the reserved output lowered to its floor when the required layers (``fixed`` tokens) need
    it, and the action that records it (None if the reservation stays)."""
    least = history_floor(gathered, counter)
    short = bool(least) and config.block_tokens(budget.available) - fixed < max(least, least_history(counter))
    if lower_output or fixed > budget.available or short:
        # the required layers fit the window but not beside the whole reserved output, or leave the history less
        # than the smallest views of what it must keep (the newest unit, the pinned request): lower the reservation
        # to its floor (recorded) rather than refuse; only when they leave not even the floor is it an error
        floor = budget.output_floor()
        if fixed <= budget.window - budget.slack - floor:
            before = budget.reserved_output
            what = ("exceed the available budget beside the reserved output" if fixed > budget.available
                    else f"leave the history less than the {least:,} tokens of its smallest views (the newest message "
                         "and the pinned request) beside the reserved output" if short
                    else "leave the history too little room beside the reserved output for the messages it must "
                         "keep, even shrunk (thinking and non-string arguments have no smaller view)")
            return replace(budget, reserved_output=floor), Action(
                "shrink", "output", f"the required layers ({fixed:,} tokens) {what}; the reservation "
                f"was lowered from {before:,} to {floor:,} tokens (the request's max output)", before, floor)
    return budget, None


def _allocate(gathered: Sequence[tuple[Item, int]], fixed: int, counter: TokenCounter, budget: Budget,
              config: BudgetConfig) -> tuple[dict[str, int], tuple[tuple[Item, Item | None], dict[str, int]] | None]:
    """Each optional layer's tokens, and the history fitted first (``_history_first``) when it needs fitting."""
    wants: dict[str, int] = {}
    for it, n in gathered:
        if not it.required:
            wants[it.layer] = wants.get(it.layer, 0) + n
    # optional layers share what is left under the block threshold, so a request is only ever over it
    # when its required layers alone are (the engine refuses that build)
    pool = max(0, config.block_tokens(budget.available) - fixed)
    alloc = allocate(pool, wants, config.weights, caps=config.caps)
    prefit = _history_first(gathered, wants, alloc, pool, counter, config)
    if prefit is not None:
        alloc = prefit[1]
    return alloc, prefit


def _fit(gathered: Sequence[tuple[Item, int]], alloc: dict[str, int],
         prefit: tuple[tuple[Item, Item | None], dict[str, int]] | None, usage: dict[str, LayerUsage],
         counter: TokenCounter) -> tuple[list[tuple[Item, int]], list[Action]]:
    """The items kept (every required one, then each layer's optional ones by priority, highest first, then
    declared order: kept whole, else shrunk, else dropped within the layer's ``alloc``), and what was done."""
    kept: list[tuple[Item, int]] = [(it, n) for it, n in gathered if it.required]
    actions: list[Action] = []
    optional: dict[str, list[tuple[Item, int]]] = {}
    for it, n in gathered:
        if not it.required:
            optional.setdefault(it.layer, []).append((it, n))
    for layer_name, entries in optional.items():
        left = alloc.get(layer_name, 0)
        for it, n in sorted(entries, key=lambda e: (-e[0].priority, e[0].order)):
            if n <= left:
                kept.append((it, n))
                left -= n
                continue
            shrunk: Item | None
            if prefit is not None and prefit[0][0] is it:
                shrunk = prefit[0][1]
            else:
                shrunk = it.shrink(it, left, counter) if it.shrink is not None else None
            if shrunk is not None:
                m = measure(shrunk, counter)
                if m <= left:
                    kept.append((shrunk, m))
                    left -= m
                    actions.append(_shrink_action(it, shrunk, n, m))
                    continue
            usage[layer_name].dropped += 1
            actions.append(Action("drop", layer_name, f"over the layer's budget of {alloc.get(layer_name, 0):,} tokens "
                                  f"(priority {it.priority})", n, 0, {"provenance": it.provenance}))
    return kept, actions


@dataclass
class _Slots:
    """The kept items by the part of the request they go to, and what they add up to."""

    system: list[Segment] = field(default_factory=list)
    session: list[Segment] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)
    messages: Sequence[Message] = ()
    tail: list[Item] = field(default_factory=list)
    history: Item | None = None
    lineage: Lineage | None = None
    refs: list[str] = field(default_factory=list)
    tokens: int = 0


def _place(kept: Sequence[tuple[Item, int]], usage: dict[str, LayerUsage]) -> _Slots:
    """Each kept item in its slot, in order, counted in its layer's usage."""
    s = _Slots()
    for it, n in kept:
        usage[it.layer].used += n
        usage[it.layer].items += 1
        s.tokens += n
        if it.ref:
            s.refs.append(it.ref)
        if it.meta.get("listed"):
            usage[it.layer].sources.append(it.provenance)
        if "retrieved" in it.meta:
            usage[it.layer].retrieved.append(it.meta["retrieved"])
        if it.slot == "system":
            s.system.append(Segment(str(it.content), it.layer))
        elif it.slot == "session":
            s.session.append(Segment(str(it.content), it.layer))
        elif it.slot == "tools":
            assert isinstance(it.content, ToolSpec)
            s.tools.append(it.content)
        elif it.slot == "history":
            assert not isinstance(it.content, str | ToolSpec)
            s.messages = it.content
            s.history = it
            s.lineage = it.lineage if it.lineage is not None and it.lineage.messages is it.content else None
        elif it.slot == "tail":
            s.tail.append(it)
    return s


def _request(slots: _Slots, kept: Sequence[tuple[Item, int]], style: Any, *, model: str, cache_key: str,
             max_output_tokens: int) -> NeutralRequest:
    """The neutral request of the placed items: the tail's sections in the standard order, the tools deferred or
    allowed as their items say, the history's breakpoints as its item's meta gives them."""
    slots.tail.sort(key=lambda it: (TAIL_HEADERS.index(it.header) if it.header in TAIL_HEADERS else 99, it.order))
    tool_items = [it for it, _ in kept if it.slot == "tools"]
    deferred = tuple(it.content.name for it in tool_items if it.meta.get("deferred"))  # type: ignore[union-attr]
    scoped = [it for it in tool_items if "allowed" in it.meta]
    allowed = tuple(it.content.name for it in scoped if it.meta["allowed"]) if scoped else None  # type: ignore[union-attr]
    history = slots.history
    return NeutralRequest(
        model=model,
        system=tuple(slots.system),
        session=tuple(slots.session),
        tools=tuple(slots.tools),
        messages=slots.messages,
        tail=render_tail(slots.tail, style),
        max_output_tokens=max_output_tokens,
        cache_key=cache_key,
        deferred=deferred,
        allowed_tools=allowed,
        tail_after_user=any(it.meta.get("after_user") for it in slots.tail),
        lineage=slots.lineage,
        head=int(history.meta.get("head", 0)) if history is not None else 0,
        carry=int(history.meta.get("carry", 0)) if history is not None else 0,
        fold=int(history.meta.get("fold", 0)) if history is not None else 0,
        turn=int(history.meta.get("turn", 0)) if history is not None else 0,
    )


def _history_first(gathered: Sequence[tuple[Item, int]], wants: dict[str, int], alloc: dict[str, int], pool: int,
                   counter: TokenCounter, config: BudgetConfig
                   ) -> tuple[tuple[Item, Item | None], dict[str, int]] | None:
    """Fit the history (over its share of the optional room) before the other optional layers. Shrunk to its
    share if it fits there; if not, but it fits the whole ``pool`` they share, it takes what it needs first and
    the others share the rest: the history is never dropped (a request without the newest message is blind);
    failure evidence, memory or retrieved knowledge may be. ``((item, its fitted item or None), the allocation)``
    (fitted once: the assembler keeps it, or drops the history and the build refuses it, naming the message), or
    None when it needs no fitting."""
    hist = [(it, n) for it, n in gathered if not it.required and it.slot == "history"]
    if len(hist) != 1:
        return None
    it, n = hist[0]
    name, fit = it.layer, it.shrink
    share = alloc.get(name, 0)
    if fit is None or n <= share or pool <= share or wants.get(name, 0) != n:
        return None
    shrunk = fit(it, share, counter)
    if shrunk is not None and measure(shrunk, counter) <= share:
        return (it, shrunk), alloc
    wide = fit(it, pool, counter)
    if wide is None or (m := measure(wide, counter)) > pool:
        return (it, shrunk), alloc
    others = allocate(pool - m, {k: v for k, v in wants.items() if k != name}, config.weights, caps=config.caps)
    return (it, wide), {**others, name: m}


def _shrink_action(before: Item, after: Item, n: int, m: int) -> Action:
    fit = after.fit
    if fit is not None:
        detail: dict[str, Any] = {"dropped_units": fit.dropped_units, "dropped_tokens": fit.dropped_tokens,
                                  "keep_from_seq": fit.keep_from_seq}
        if fit.clipped:
            detail["clipped_results"] = list(fit.clipped)
        if fit.carry_left_out:
            detail["carry_left_out"] = True  # the cut's summary message (work log, index) is not in this request
        if fit.image_stubs:
            detail["images_stubbed"] = [{"seq": st.entry.seq, "at": list(st.entry.at), "tokens_saved": st.saving,
                                         "artifact": f"artifact://{st.entry.artifact}"} for st in fit.image_stubs]
        if fit.shrinks or fit.image_stubs:
            if fit.shrinks:
                detail["shrunk"] = [{"seq": s.entry.seq, "at": list(s.entry.at), "tokens_before": s.entry.tokens_before,
                                     "tokens_after": s.entry.tokens_after, "artifact": f"artifact://{s.entry.artifact}"}
                                    for s in fit.shrinks]
            what = []
            if fit.shrinks:
                what.append("message(s) larger than their share of the history shrunk to a compressed view naming the "
                            "artifact that holds them whole (never dropped)")
            if fit.image_stubs:
                what.append(f"{len(fit.image_stubs)} image(s) of the messages that must stay replaced by stubs naming "
                            "their artifacts (the newest image last)")
            return Action("shrink", "history", "; ".join(what)
                          + (f"; {fit.dropped_units} oldest unit(s) dropped" if fit.dropped_units else ""),
                          n, m, detail)
        kind = "truncate" if not fit.clipped else "clip"
        return Action(kind, "history", "history over its budget: oldest units dropped (first user message pinned; "
                      "tool calls kept with their results)", n, m, detail)
    return Action("shrink", before.layer, "over the layer's budget: head and tail kept, middle elided", n, m,
                  {"provenance": before.provenance})


__all__ = ["Action", "Assembly", "LayerUsage", "assemble", "measure", "render_tail"]
