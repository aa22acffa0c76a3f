"""Context strategies compared by ``windowsmith bench``, all on the same footing.

Every strategy sees the same trace one message at a time (``observe``) and, before each model call,
produces one :class:`~windowsmith.request.NeutralRequest` (``build``): everything before the
assistant message of that call, as the strategy would send it. They all use the same
:class:`~windowsmith.tokens.TokenCounter` (the model's tokenizer and ``token_factor``), the same
prices and the same budget: ``available = window - reserved output - slack``, as the engine uses.

Peer strategies (what other agent frameworks do):

* ``full`` — full history, no engineering.
* ``sliding`` — the last ``N=40`` messages (Strands' SlidingWindowConversationManager default); the
  window never starts on a tool result (its call would be missing).
* ``masking`` — observation masking: the last ``M=10`` observations verbatim, older ones replaced by
  ``[old tool output omitted]`` (JetBrains, "The Complexity Trap", 2025). The tool calls stay.
* ``clear`` — clear old tool results: when a request exceeds 80% of ``available``, every observation
  except the last 3 is replaced by ``[old tool result cleared]``; once cleared it stays cleared
  (Anthropic context editing ``clear_tool_uses``, LangChain ``ClearToolUsesEdit``).
* ``summarize`` — when a request exceeds 80% of ``available``, the oldest span (after the first user
  message, which is kept, as OpenHands' ``keep_first``) is replaced by a rolling summary and the most
  recent messages (up to 40% of ``available``) are kept (OpenHands LLMSummarizingCondenser,
  LangChain SummarizationMiddleware), with windowsmith's offline extractive summarizer.

And ``windowsmith``: the real engine (an :class:`~windowsmith.engine.Engine` over a temporary SQLite
store), its request being ``pack.neutral``.

An *observation* is a ``tool`` message; in traces without native tool calls (mini-swe-agent, SWE-agent
0.x) it is a ``user`` message after the first one. A peer request still over ``available`` is cut to fit
(oldest units dropped, a tool call never split from its result; if the newest unit alone is too large,
its largest tool outputs are clipped head + tail), and the call is counted in ``events["cut"]``
(``events["clipped"]``): that is what a peer must do to not be refused by the provider.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..budget import Budget, BudgetConfig
from ..cache import plan_cache
from ..model import Message, Text, ToolResult, ToolSpec
from ..registry import ModelSpec
from ..request import NeutralRequest, Segment
from ..text import clip_messages
from ..tokens import TokenCounter

MASK_PLACEHOLDER = "[old tool output omitted]"
CLEAR_PLACEHOLDER = "[old tool result cleared]"
SUMMARY_PREFIX = "Here is a summary of the conversation so far:\n"

STRATEGIES: tuple[str, ...] = ("full", "sliding", "masking", "clear", "summarize", "windowsmith")


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
        counter = counter or TokenCounter(spec.tokenizer, fmt, spec.token_factor)
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


class Strategy:
    """Base: keeps the observed history; subclasses say how to turn it into a request."""

    name = "base"

    def __init__(self, cfg: BenchConfig) -> None:
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
        return replace(req, cache=plan_cache(req, cfg.spec.max_breakpoints))

    def finish_build(self, messages: Sequence[Message], events: dict[str, int] | None = None,
                     synthetic: frozenset[str] = frozenset(), pinned: int = 0) -> Built:
        """Make the request; cut it to fit ``available`` if it does not."""
        events = dict(events or {})
        req = self.request(messages)
        n = self.cfg.counter.request(req)
        if n > self.cfg.available:
            msgs, clipped = fit_messages(messages, self.cfg, base=n - _messages_tokens(messages, self.cfg.counter),
                                         pinned=pinned)
            events["cut"] = 1
            if clipped:
                events["clipped"] = 1
            req = self.request(msgs)
            n = self.cfg.counter.request(req)
        return Built(req, n, events, synthetic)


def _messages_tokens(messages: Sequence[Message], counter: TokenCounter) -> int:
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
    total = sum(raw)
    k = 0
    while k < len(starts) - 1 and (head_raw + total) * scale > limit:
        nxt = starts[k + 1]
        total -= sum(raw[starts[k]:nxt])
        k += 1
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


class SlidingWindow(Strategy):
    name = "sliding"

    def __init__(self, cfg: BenchConfig, n: int = 40) -> None:
        super().__init__(cfg)
        self.n = n

    def build(self) -> Built:
        h = self.history
        start = max(0, len(h) - self.n)
        while start < len(h) - 1 and h[start].role == "tool":
            start += 1
        events = {"dropped_messages": start} if start else {}
        return self.finish_build(h[start:], events)


class _Replacer:
    """Placeholder versions of messages, made once per original (so the same bytes every turn)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._cache: dict[int, Message] = {}

    def __call__(self, m: Message) -> Message:
        got = self._cache.get(id(m))
        if got is None:
            if m.role == "tool":
                got = Message("tool", tuple(
                    ToolResult(r.call_id, (Text(self.text),), r.is_error, r.name) for r in m.tool_results))
            else:
                got = Message(m.role, (Text(self.text),))
            self._cache[id(m)] = got
        return got

    def clear(self) -> None:
        self._cache.clear()


class ObservationMasking(Strategy):
    name = "masking"

    def __init__(self, cfg: BenchConfig, m: int = 10, placeholder: str = MASK_PLACEHOLDER) -> None:
        super().__init__(cfg)
        self.m = m
        self.mask = _Replacer(placeholder)

    def reset(self) -> None:
        self.mask.clear()
        self.obs: list[int] = []

    def observe(self, m: Message) -> None:
        super().observe(m)
        if self.is_observation(len(self.history) - 1):
            self.obs.append(len(self.history) - 1)

    def build(self) -> Built:
        old = self.obs[: max(0, len(self.obs) - self.m)]
        if not old:
            return self.finish_build(self.history)
        msgs = list(self.history)
        synth = set()
        for i in old:
            msgs[i] = self.mask(msgs[i])
            synth.add(msgs[i].digest)
        return self.finish_build(msgs, {"masked": len(old)}, frozenset(synth))


class ClearToolResults(Strategy):
    name = "clear"

    def __init__(self, cfg: BenchConfig, keep: int = 3, placeholder: str = CLEAR_PLACEHOLDER) -> None:
        super().__init__(cfg)
        self.keep = keep
        self.placeholder = _Replacer(placeholder)

    def reset(self) -> None:
        self.placeholder.clear()
        self.obs: list[int] = []
        self.cleared: set[int] = set()

    def observe(self, m: Message) -> None:
        super().observe(m)
        if self.is_observation(len(self.history) - 1):
            self.obs.append(len(self.history) - 1)

    def _view(self) -> tuple[list[Message], set[str]]:
        msgs = list(self.history)
        synth = set()
        for i in self.cleared:
            msgs[i] = self.placeholder(msgs[i])
            synth.add(msgs[i].digest)
        return msgs, synth

    def build(self) -> Built:
        msgs, synth = self._view()
        events: dict[str, int] = {}
        if self.cfg.counter.request(self.request(msgs)) > self.cfg.trigger:
            new = set(self.obs[: max(0, len(self.obs) - self.keep)]) - self.cleared
            if new:
                self.cleared |= new
                events["clear"] = 1
                msgs, synth = self._view()
        if self.cleared:
            events["cleared"] = len(self.cleared)
        return self.finish_build(msgs, events, frozenset(synth))


class SummarizeOnThreshold(Strategy):
    name = "summarize"

    def __init__(self, cfg: BenchConfig, keep_share: float = 0.4, summary_share: float = 0.15,
                 summarizer: Any = None) -> None:
        super().__init__(cfg)
        self.keep_share = keep_share
        self.summary_share = summary_share
        self.summarizer = summarizer or default_summarizer()

    def reset(self) -> None:
        self.summary: Any = None
        self.summary_msg: Message | None = None
        self.summary_ids: frozenset[str] = frozenset()
        self.upto = 0  # history[pin:upto] is summarized
        self.summaries = 0

    @property
    def pin(self) -> int:
        h = self.history
        return 1 if h and h[0].role == "user" else 0

    def _view(self) -> list[Message]:
        h = self.history
        if self.summary_msg is None:
            return list(h)
        return [*h[: self.pin], self.summary_msg, *h[self.upto:]]

    def build(self) -> Built:
        cfg = self.cfg
        msgs = self._view()
        events: dict[str, int] = {}
        if cfg.counter.request(self.request(msgs)) > cfg.trigger:
            h = self.history
            start = max(self.upto, self.pin)
            keep_budget = cfg.available * self.keep_share
            starts = [s for s in unit_starts(h) if s > start]
            # newest suffix (at a unit boundary) within keep_budget, at least the newest unit
            new_upto = starts[-1] if starts else len(h)
            for s in reversed(starts):
                if _messages_tokens(h[s:], cfg.counter) > keep_budget:
                    break
                new_upto = s
            if new_upto > start:
                budget = max(128, int(cfg.available * self.summary_share))
                self.summary = self.summarizer.summarize(h[start:new_upto], goal=None, previous=self.summary,
                                                          budget_tokens=budget)
                self.summary_msg = Message("user", (Text(SUMMARY_PREFIX + self.summary.text),))
                self.summary_ids = _ref_identifiers(self.summary)
                self.upto = new_upto
                self.summaries += 1
                events["summarize"] = 1
                msgs = self._view()
        synth = frozenset({self.summary_msg.digest}) if self.summary_msg is not None else frozenset()
        if self.summary_msg is not None:
            events["summarized_messages"] = self.upto - self.pin
        built = self.finish_build(msgs, events, synth, pinned=min(len(msgs), self.pin + (1 if self.summary_msg else 0)))
        built.recoverable = self.summary_ids
        return built


def _ref_identifiers(summary: Any) -> frozenset[str]:
    """Identifiers named by the values of a summary's references (reachable through them)."""
    from .identifiers import extract_identifiers

    names: set[str] = set()
    for r in getattr(summary, "refs", ()):
        names |= extract_identifiers(r.value)
    return frozenset(names)


def default_summarizer() -> Any:
    """windowsmith's offline extractive summarizer, or a small extractive fallback if it is absent."""
    try:
        from ..compaction.summarizer import OfflineSummarizer
    except ImportError:  # pragma: no cover - the compaction package ships it
        return FallbackExtractiveSummarizer()
    return OfflineSummarizer()


class FallbackExtractiveSummarizer:
    """Used only when ``windowsmith.compaction.summarizer`` is missing: first line of each message,
    plus the identifiers seen, within the budget."""

    name = "bench-fallback-extractive"

    def summarize(self, messages: Sequence[Message], *, goal: str | None = None, previous: Any = None,
                  budget_tokens: int = 1024) -> Any:
        from ..compaction.base import Summary
        from ..tokens import count_text
        from .identifiers import extract_identifiers, message_text

        lines = [previous.text] if previous is not None else []
        ids: set[str] = set()
        for m in messages:
            t = message_text(m)
            ids |= extract_identifiers(t)
            first = t.strip().split("\n", 1)[0][:160]
            if first:
                lines.append(f"{m.role}: {first}")
        text = "\n".join(lines) + "\nIDENTIFIERS: " + ", ".join(sorted(ids))
        while count_text(text) > budget_tokens and len(text) > 64:
            text = text[: int(len(text) * 0.8)]
        return Summary(text=text, summarizer=self.name)


# ---------------------------------------------------------------------------------------------------
# windowsmith
# ---------------------------------------------------------------------------------------------------


class WindowsmithStrategy(Strategy):
    """The real engine, replayed as :func:`windowsmith.replay.replay_trace` does, over a temp store."""

    name = "windowsmith"

    def __init__(self, cfg: BenchConfig, store_path: str | None = None) -> None:
        super().__init__(cfg)
        from ..engine import Engine

        self._tmpdir = None
        if store_path is None:
            self._tmpdir = tempfile.mkdtemp(prefix="ws-bench-")
            store_path = os.path.join(self._tmpdir, "bench.db")
        window = None if cfg.window == cfg.spec.context_window else cfg.window
        self.engine = Engine(cfg.spec.name, store=store_path, window=window, format=cfg.fmt)
        self.session: Any = None
        self._n = 0

    def start(self, run_id: str, system: str | None, tools: Sequence[ToolSpec], *, native_tools: bool = True) -> None:
        super().start(run_id, system, tools, native_tools=native_tools)
        sid = f"bench-{self._n}-{run_id}"[:200]
        self._n += 1
        if self.engine.store.get_session(sid) is not None:
            self.engine.store.delete_session(sid)
        self.session = self.engine.session(sid)
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
        return Built(req, self.cfg.counter.request(req), events)

    def resolve(self, ref: str) -> bytes | None:
        sha = ref.removeprefix("artifact://")
        try:
            return self.engine.artifacts.get(sha)
        except Exception:
            return None

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


_CLASSES: dict[str, type[Strategy]] = {
    "full": FullHistory,
    "sliding": SlidingWindow,
    "masking": ObservationMasking,
    "clear": ClearToolResults,
    "summarize": SummarizeOnThreshold,
    "windowsmith": WindowsmithStrategy,
}


def make_strategy(name: str, cfg: BenchConfig, **kw: Any) -> Strategy:
    """A strategy by name (see :data:`STRATEGIES`)."""
    cls = _CLASSES.get(name)
    if cls is None:
        from ..errors import UsageError

        raise UsageError(f"unknown strategy {name!r}; use one of {', '.join(STRATEGIES)}")
    return cls(cfg, **kw)


__all__ = [
    "CLEAR_PLACEHOLDER",
    "MASK_PLACEHOLDER",
    "STRATEGIES",
    "BenchConfig",
    "Built",
    "ClearToolResults",
    "FallbackExtractiveSummarizer",
    "FullHistory",
    "ObservationMasking",
    "SlidingWindow",
    "Strategy",
    "SummarizeOnThreshold",
    "WindowsmithStrategy",
    "default_summarizer",
    "fit_messages",
    "make_strategy",
    "unit_starts",
]
