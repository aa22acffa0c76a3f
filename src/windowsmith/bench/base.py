"""What every strategy of ``windowsmith bench`` shares, so that they all stand on the same footing.

Every strategy sees the same trace one message at a time (``observe``) and, before each model call,
produces one :class:`~windowsmith.request.NeutralRequest` (``build``): everything before the
assistant message of that call, as the strategy would send it. They all use the same
:class:`~windowsmith.tokens.TokenCounter` (the model's tokenizer and ``token_factor``), the same
prices and the same budget: ``available = window - reserved output - slack``, as the engine uses
(:class:`BenchConfig`).

An *observation* is a ``tool`` message; in traces without native tool calls (mini-swe-agent, SWE-agent
0.x) it is a ``user`` message after the first one. A request still over ``available`` after the
strategy's own reaction is cut to fit (oldest units dropped, a tool call never split from its result;
if the newest unit alone is too large, its largest tool outputs are clipped head + tail), and the call
is counted in ``events["cut"]`` (``events["clipped"]``): the provider would refuse it otherwise. Where a
run's system prompt and tools leave the history less than two messages' smallest views, every strategy's
reserved output is lowered to the floor the engine lowers it to (:func:`run_budget`): the same budget for all.

The strategies themselves are in :mod:`windowsmith.bench.strategies` (baselines and windowsmith) and
:mod:`windowsmith.bench.peers` (other projects' strategies); both build on :class:`Strategy` here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..assemble import least_history
from ..budget import Budget, BudgetConfig
from ..cache import plan_cache
from ..compaction.summarizer import OfflineSummarizer
from ..model import Message, ToolSpec
from ..registry import ModelSpec
from ..request import NeutralRequest, Segment
from ..text import clip_messages
from ..tokens import TokenCounter


@dataclass(frozen=True)
class BenchConfig:
    """What every strategy shares for one (model, window)."""

    spec: ModelSpec
    fmt: str
    window: int
    counter: TokenCounter
    budget: Budget
    threshold: float = 0.8  # of ``available``, for the threshold-triggered peers

    @classmethod
    def make(cls, spec: ModelSpec, window: int | None = None, fmt: str | None = None,
             counter: TokenCounter | None = None) -> BenchConfig:
        fmt = fmt or spec.default_format
        w = window or spec.context_window
        counter = counter or TokenCounter(spec.tokenizer, fmt, spec.token_factor, thinking=spec.thinking_kept)
        return cls(spec, fmt, w, counter, Budget.for_window(w, spec.max_output, BudgetConfig()))

    @property
    def available(self) -> int:
        return self.budget.available

    @property
    def trigger(self) -> int:
        return int(self.available * self.threshold)


@dataclass
class Built:
    """One request produced by a strategy, with what it did to produce it."""

    request: NeutralRequest
    tokens: int
    events: dict[str, int] = field(default_factory=dict)
    synthetic: frozenset[str] = frozenset()  # digests of messages the strategy wrote (placeholders, summaries)
    recoverable: frozenset[str] = frozenset()  # identifiers reachable through references in the request
    summary_input: int = 0  # tokens the summarizer read for a summary made for this call (a model call)
    summary_output: int = 0  # tokens of that summary


class Strategy:
    """Base: keeps the observed history; subclasses say how to turn it into a request."""

    name = "base"

    def __init__(self, cfg: BenchConfig) -> None:
        self.base_cfg = cfg  # the (model, window) budget; ``cfg`` is this run's (:func:`run_budget`)
        self.cfg = cfg
        self.history: list[Message] = []
        self.system: str | None = None
        self.tools: tuple[ToolSpec, ...] = ()
        self.native_tools = True

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self, run_id: str, system: str | None, tools: Sequence[ToolSpec], *, native_tools: bool = True) -> None:
        self.history = []
        self.system = system or None
        self.tools = tuple(tools)
        self.native_tools = native_tools
        self.cfg = self.base_cfg  # (request() reads it) then this run's: the fixed part is the empty request
        self.cfg = run_budget(self.base_cfg, self.base_cfg.counter.request(self.request(())))
        self.reset()

    def reset(self) -> None:
        """Per-run state of a subclass."""

    def observe(self, m: Message) -> None:
        self.history.append(m)

    def build(self) -> Built:
        raise NotImplementedError

    def resolve(self, ref: str) -> bytes | None:
        """The content behind an ``artifact://`` reference, when the strategy has a store."""
        return None

    def read(self, ref: str) -> str | None:
        """What the agent's ``read_result(ref)`` call returns (its first page), for a strategy with that tool."""
        return None

    def after_call(self, built: Built, output_tokens: int) -> None:
        """The model answered ``built`` with ``output_tokens`` (for peers that read reported usage)."""

    def finish(self) -> None:
        """End of a run."""

    def close(self) -> None:
        """End of the benchmark."""

    # -- helpers ----------------------------------------------------------------------------------

    def is_observation(self, i: int, msgs: Sequence[Message] | None = None) -> bool:
        msgs = self.history if msgs is None else msgs
        m = msgs[i]
        if m.role == "tool":
            return True
        return m.role == "user" and not self.native_tools and i > 0 and not m.tool_results

    def request(self, messages: Sequence[Message]) -> NeutralRequest:
        cfg = self.cfg
        req = NeutralRequest(
            model=cfg.spec.name,
            system=(Segment(self.system, "system"),) if self.system else (),
            session=(),
            tools=self.tools,
            messages=tuple(messages),
            tail=None,
            max_output_tokens=cfg.budget.reserved_output,
            cache_key="bench",
        )
        # as LangChain's AnthropicPromptCachingMiddleware ships: system, tools, the newest message (no anchor after a
        # wide turn: windowsmith's own plan adds one)
        return replace(req, cache=plan_cache(req, cfg.spec.max_breakpoints, anchor=False))

    def over(self, messages: Sequence[Message]) -> bool:
        """Whether a request with ``messages`` is over ``available`` (the provider would refuse it)."""
        return self.cfg.counter.request(self.request(messages)) > self.cfg.available

    def finish_build(self, messages: Sequence[Message], events: dict[str, int] | None = None,
                     synthetic: frozenset[str] = frozenset(), pinned: int = 0) -> Built:
        """Make the request; cut it to fit ``available`` if it does not."""
        events = dict(events or {})
        req = self.request(messages)
        n = self.cfg.counter.request(req)
        if n > self.cfg.available:
            counter = self.cfg.counter
            billed = messages_tokens(messages, counter) - counter.scaled(counter.raw_unbilled(messages))
            msgs, clipped = fit_messages(messages, self.cfg, base=n - billed,
                                         pinned=pinned)
            events["cut"] = 1
            if clipped:
                events["clipped"] = 1
            req = self.request(msgs)
            n = self.cfg.counter.request(req)
        return Built(req, n, events, synthetic)


def run_budget(cfg: BenchConfig, fixed: int) -> BenchConfig:
    """The budget of a run whose system prompt and tool definitions take ``fixed`` tokens: ``cfg``'s, or, when
    they leave the history less than the smallest views of the two messages it keeps (the newest and the opening
    request, ``MIN_VIEW`` each: ``assemble.least_history``) under the block threshold, the same budget with the
    reserved output lowered to its floor (``Budget.output_floor``). That is the engine's rule (``assemble.py``),
    given to every strategy: the same budget for all, and what a user of any framework does to send such a call at
    all (a tau2-bench telecom policy is larger than the 8K window's available budget). Without it a peer's every
    request in such a run is over the window, charged as if the provider took it, its newest message clipped to
    nothing. (With one view instead of two, an airline policy 3,000 tokens longer left the peers 217 tokens of
    history at 8K while the engine lowered its reservation and took 1,671: its requests over the peers' budget on
    3 to 12 calls a run, and dearer.)"""
    if fixed + least_history(cfg.counter) <= BudgetConfig().block_tokens(cfg.available):
        return cfg
    return replace(cfg, budget=replace(cfg.budget, reserved_output=cfg.budget.output_floor()))


def messages_tokens(messages: Sequence[Message], counter: TokenCounter) -> int:
    return counter.scaled(sum(counter.raw_message(m) for m in messages))


def unit_starts(messages: Sequence[Message]) -> list[int]:
    """Indices where a unit starts: every message that is not a ``tool`` message (a tool message
    belongs to the assistant message that called it)."""
    return [i for i, m in enumerate(messages) if m.role != "tool" or i == 0]


def fit_messages(messages: Sequence[Message], cfg: BenchConfig, *, base: int, pinned: int = 0
                 ) -> tuple[tuple[Message, ...], bool]:
    """Drop the oldest units (after the first ``pinned`` messages) until the request fits
    ``cfg.available``; never split a tool call from its result. If the newest unit alone does not
    fit, clip its largest tool outputs. Returns the messages and whether anything was clipped."""
    counter = cfg.counter
    msgs = list(messages)
    head = msgs[:pinned]
    body = msgs[pinned:]
    raw = [counter.raw_message(m) for m in body]
    head_raw = sum(counter.raw_message(m) for m in head)
    scale = counter.scale
    limit = cfg.available - base
    starts = unit_starts(body)
    # the thinking the provider strips (before the last user message that is not a tool result) is not billed, as
    # long as that message stays: dropping units from the front keeps it unless it drops them all
    upto = counter.stripped_before(msgs) - pinned
    thought = [counter.raw_thinking(m) if i < upto else 0 for i, m in enumerate(body)]
    total = sum(raw)
    stripped = sum(thought)
    k = 0

    def billed() -> int:
        """Raw billed tokens of the body kept (from ``starts[k]``)."""
        return total - (stripped if not starts or starts[k] <= upto else 0)

    while k < len(starts) - 1 and (head_raw + billed()) * scale > limit:
        nxt = starts[k + 1]
        total -= sum(raw[starts[k]:nxt])
        stripped -= sum(thought[starts[k]:nxt])
        k += 1
    total = billed()
    keep = body[starts[k]:] if starts else body
    if (head_raw + total) * scale <= limit:
        return tuple(head + keep), False
    if head and (total * scale) <= limit:
        return tuple(keep), False  # drop the pinned head too (still fits nothing else)
    cap = max(1, int(limit - head_raw * scale))
    clipped = clip_texts(tuple(keep), cap, counter)
    out = tuple(head + list(clipped))
    if (sum(counter.raw_message(m) for m in out)) * scale > limit:
        out = tuple(clipped)
    return out, True


def clip_texts(messages: tuple[Message, ...], cap: int, counter: TokenCounter) -> tuple[Message, ...]:
    """Cut the largest text (a tool output or a user/observation text) head + tail until the messages
    fit ``cap`` scaled tokens (a peer has to do this, or the provider refuses the request)."""
    return clip_messages(messages, cap, counter, texts=True)[0]


def default_summarizer() -> Any:
    """windowsmith's offline extractive summarizer (what every summarizing strategy of the bench uses)."""
    return OfflineSummarizer()



__all__ = ["BenchConfig", "Built", "Strategy", "clip_texts", "default_summarizer", "fit_messages", "messages_tokens",
           "run_budget", "unit_starts"]
