"""Context strategies compared by ``windowsmith bench``, all on the same footing.

Every strategy sees the same trace one message at a time (``observe``) and, before each model call,
produces one :class:`~windowsmith.request.NeutralRequest` (``build``): everything before the
assistant message of that call, as the strategy would send it. They all use the same
:class:`~windowsmith.tokens.TokenCounter` (the model's tokenizer and ``token_factor``), the same
prices and the same budget: ``available = window - reserved output - slack``, as the engine uses.

The strategies (:data:`STRATEGIES`), each configured as its project ships it:

* ``full`` — full history, no engineering.
* ``sticky`` — full history with a sticky cut (:class:`StickyCut`): a strong trivial baseline.
* ``sliding``, ``sliding-per-turn`` — strands-agents ``SlidingWindowConversationManager``.
* ``masking`` — SWE-agent ``LastNObservations(n=10)``.
* ``clear`` — LangChain ``ContextEditingMiddleware`` + ``ClearToolUsesEdit``.
* ``summarize-langchain`` — LangChain ``SummarizationMiddleware``.
* ``summarize-openhands`` — OpenHands ``LLMSummarizingCondenser(max_size=120, keep_first=4)``.
* ``windowsmith`` — the real engine (an :class:`~windowsmith.engine.Engine` over a temporary SQLite
  store), its request being ``pack.neutral``, unchanged.

The peers, their sources and defaults are described in :mod:`windowsmith.bench.peers`.

An *observation* is a ``tool`` message; in traces without native tool calls (mini-swe-agent, SWE-agent
0.x) it is a ``user`` message after the first one. A request still over ``available`` after the
strategy's own reaction is cut to fit (oldest units dropped, a tool call never split from its result;
if the newest unit alone is too large, its largest tool outputs are clipped head + tail), and the call
is counted in ``events["cut"]`` (``events["clipped"]``): the provider would refuse it otherwise. Where a
run's system prompt and tools leave the history less than two messages' smallest views, every strategy's
reserved output is lowered to the floor the engine lowers it to (:func:`run_budget`): the same budget for all.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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

STRATEGIES: tuple[str, ...] = ("full", "sticky", "sliding", "sliding-per-turn", "masking", "clear",
                                "summarize-langchain", "summarize-openhands", "windowsmith")
#: Variants run only when named (``--strategies windowsmith,windowsmith-recall``): options of windowsmith.
VARIANTS: tuple[str, ...] = ("windowsmith-recall",)


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


# ---------------------------------------------------------------------------------------------------
# Peers
# ---------------------------------------------------------------------------------------------------


class FullHistory(Strategy):
    name = "full"

    def build(self) -> Built:
        return self.finish_build(self.history)


class StickyCut(Strategy):
    """Full history with a sticky cut: when a request is over ``available``, drop the oldest whole
    units until the history is at most ``low`` (50%) of ``available``; keep that start and append
    until over again. The cache prefix breaks once per cut, not on every call."""

    name = "sticky"

    def __init__(self, cfg: BenchConfig, low: float = 0.5) -> None:
        super().__init__(cfg)
        self.low = low

    def reset(self) -> None:
        self.start_at = 0

    def build(self) -> Built:
        h = self.history
        events: dict[str, int] = {}
        if self.over(h[self.start_at:]):
            counter = self.cfg.counter
            base = counter.request(self.request(()))
            limit_raw = (self.cfg.available * self.low - base) / counter.scale
            starts = set(unit_starts(h))
            tail = 0
            new = len(h) - 1
            for i in range(len(h) - 1, self.start_at, -1):
                tail += counter.raw_message(h[i])
                if i in starts:
                    if tail > limit_raw and new < len(h) - 1:
                        break
                    new = i
            while new > 0 and h[new].role == "tool":
                new -= 1
            self.start_at = max(self.start_at, new)
            events["sticky_cut"] = 1
        if self.start_at:
            events["dropped_messages"] = self.start_at
        return self.finish_build(h[self.start_at:], events)


def _ref_identifiers(summary: Any) -> frozenset[str]:
    """Identifiers named by the values of a summary's references (reachable through them)."""
    from .identifiers import extract_identifiers

    names: set[str] = set()
    for r in getattr(summary, "refs", ()):
        names |= extract_identifiers(r.value)
    return frozenset(names)


def default_summarizer() -> Any:
    """windowsmith's offline extractive summarizer (what every summarizing strategy of the bench uses)."""
    return OfflineSummarizer()


# ---------------------------------------------------------------------------------------------------
# windowsmith
# ---------------------------------------------------------------------------------------------------


class WindowsmithStrategy(Strategy):
    """The real engine, replayed as :func:`windowsmith.replay.replay_trace` does, over a temp store."""

    name = "windowsmith"

    def __init__(self, cfg: BenchConfig, store_path: str | None = None, tmp_dir: str | None = None) -> None:
        super().__init__(cfg)
        from ..engine import Engine

        self._tmpdir = None
        if store_path is None:
            self._tmpdir = tempfile.mkdtemp(prefix="ws-bench-", dir=tmp_dir)
            store_path = os.path.join(self._tmpdir, "bench.db")
        window = None if cfg.window == cfg.spec.context_window else cfg.window
        self.engine = Engine(cfg.spec.name, store=store_path, window=window, format=cfg.fmt, layers=self.layers())
        self.session: Any = None
        self._n = 0

    def layers(self) -> Any:
        """The engine's layers (None: the defaults)."""
        return None

    def start(self, run_id: str, system: str | None, tools: Sequence[ToolSpec], *, native_tools: bool = True) -> None:
        super().start(run_id, system, tools, native_tools=native_tools)
        sid = f"bench-{self._n}-{run_id}"[:200]
        self._n += 1
        if self.engine.store.get_session(sid) is not None:
            self.engine.store.delete_session(sid)
        self.session = self.engine.session(sid)
        self._seen = 0
        if system:
            self.session.system(system)
        if tools:
            self.session.tools(tools)

    def observe(self, m: Message) -> None:
        self.history.append(m)
        self.session.add(m)

    def build(self) -> Built:
        pack = self.session.build(self.cfg.fmt)
        req = pack.neutral
        events: dict[str, int] = {}
        for a in pack.manifest.actions:
            events[a["kind"]] = events.get(a["kind"], 0) + 1
        if any(a["kind"] in ("truncate", "clip") for a in pack.manifest.actions):
            events["cut"] = 1
        built = Built(req, self.cfg.counter.request(req), events)
        built.summary_input, built.summary_output = self._new_summaries()
        return built

    def _new_summaries(self) -> tuple[int, int]:
        """Tokens read and written by the summaries the engine logged since the last build (each
        one a model call for an LLM summarizer): the summarized span's original messages, the
        summary it rewrites and the same instruction overhead as LangChain's prompt; the output is
        the summary text. Read from the session's compaction records (public state)."""
        from .peers import LANGCHAIN_SUMMARY_PROMPT_TOKENS

        state = self.session.state
        recs = state.compactions
        s_in = s_out = 0
        counter = self.cfg.counter
        prev_text = ""
        for rec in recs[:self._seen]:
            if rec.get("type") == "summary":
                prev_text = rec.get("summary", {}).get("text", "")
        for rec in recs[self._seen:]:
            if rec.get("type") != "summary":
                continue
            span = state.span_messages(rec["first_seq"], rec["last_seq"])
            text = rec.get("summary", {}).get("text", "")
            s_in += LANGCHAIN_SUMMARY_PROMPT_TOKENS + messages_tokens([m for _, m in span], counter) \
                + (counter.text(prev_text) if prev_text else 0)
            s_out += counter.text(text)
            prev_text = text
        self._seen = len(recs)
        return s_in, s_out

    def resolve(self, ref: str) -> bytes | None:
        sha = ref.removeprefix("artifact://")
        try:
            return self.engine.artifacts.get(sha)
        except Exception:
            return None

    def read(self, ref: str) -> str | None:
        return str(self.session.result_tools.read_result(ref))  # the engine's own tool, its default page

    def finish(self) -> None:
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.engine.store.delete_session(self.session.id)
            self.session = None

    def close(self) -> None:
        self.engine.close()
        if self._tmpdir:
            import shutil

            shutil.rmtree(self._tmpdir, ignore_errors=True)


class WindowsmithRecall(WindowsmithStrategy):
    """The engine with recall over evicted history (``default_layers(recall=True)``, opt-in): what recall adds
    to strict recall, and costs, is the difference between this row and ``windowsmith``."""

    name = "windowsmith-recall"

    def layers(self) -> Any:
        from ..budget import BudgetConfig
        from ..layers.builtin import default_layers

        low = BudgetConfig().history_low_water
        return lambda: default_layers(low, recall=True)


_CLASSES: dict[str, type[Strategy]] = {
    "full": FullHistory,
    "sticky": StickyCut,
    "windowsmith": WindowsmithStrategy,
    "windowsmith-recall": WindowsmithRecall,
}


def _peer(name: str) -> type[Strategy] | None:
    from . import peers

    return {
        "sliding": peers.StrandsSlidingWindow,
        "sliding-per-turn": peers.StrandsSlidingWindow,
        "masking": peers.SweAgentLastNObservations,
        "clear": peers.LangChainClearToolUses,
        "summarize-langchain": peers.LangChainSummarization,
        "summarize-openhands": peers.OpenHandsSummarizing,
    }.get(name)


def make_strategy(name: str, cfg: BenchConfig, **kw: Any) -> Strategy:
    """A strategy by name (see :data:`STRATEGIES`)."""
    cls = _CLASSES.get(name) or _peer(name)
    if name == "sliding-per-turn":
        kw.setdefault("per_turn", True)
    if not name.startswith("windowsmith"):
        kw.pop("tmp_dir", None)
    if cls is None:
        from ..errors import UsageError

        raise UsageError(f"unknown strategy {name!r}; use one of {', '.join(STRATEGIES + VARIANTS)}")
    return cls(cfg, **kw)


__all__ = [
    "STRATEGIES",
    "VARIANTS",
    "BenchConfig",
    "Built",
    "FullHistory",
    "StickyCut",
    "Strategy",
    "WindowsmithStrategy",
    "default_summarizer",
    "fit_messages",
    "make_strategy",
    "unit_starts",
]
