"""Context strategies compared by ``windowsmith bench``: the baselines and windowsmith itself.

The strategies (:data:`STRATEGIES`), each configured as its project ships it:

* ``full`` — full history, no engineering.
* ``sticky`` — full history with a sticky cut (:class:`StickyCut`): a strong trivial baseline.
* ``sliding``, ``sliding-per-turn`` — strands-agents ``SlidingWindowConversationManager``.
* ``masking`` — SWE-agent ``LastNObservations(n=10)``.
* ``clear`` — LangChain ``ContextEditingMiddleware`` + ``ClearToolUsesEdit``.
* ``summarize-langchain`` — LangChain ``SummarizationMiddleware``.
* ``summarize-openhands`` — OpenHands ``LLMSummarizingCondenser(max_size=120, keep_first=4)``.
* ``anthropic-context-editing`` (run when named) — Anthropic's server-side ``clear_tool_uses_20250919`` edit with
  its documented defaults (:mod:`windowsmith.bench.native`).
* ``windowsmith`` — the real engine (an :class:`~windowsmith.engine.Engine` over a temporary SQLite
  store), its request being ``pack.neutral``, unchanged.

The peers, their sources and defaults are described in :mod:`windowsmith.bench.peers`; what every
strategy shares (the budget, the base class, the cut to fit) in :mod:`windowsmith.bench.base`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from ..model import Message, ToolSpec
from . import native, peers
from .base import BenchConfig, Built, Strategy, messages_tokens, unit_starts

STRATEGIES: tuple[str, ...] = ("full", "sticky", "sliding", "sliding-per-turn", "masking", "clear",
                                "summarize-langchain", "summarize-openhands", "windowsmith")
#: Variants run only when named (``--strategies windowsmith,windowsmith-recall``): options of windowsmith.
#: Provider-native strategies run the same way (``--strategies windowsmith,anthropic-context-editing``).
VARIANTS: tuple[str, ...] = ("windowsmith-recall", "anthropic-context-editing")


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
            s_in += peers.LANGCHAIN_SUMMARY_PROMPT_TOKENS + messages_tokens([m for _, m in span], counter) \
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
    return {
        "sliding": peers.StrandsSlidingWindow,
        "sliding-per-turn": peers.StrandsSlidingWindow,
        "masking": peers.SweAgentLastNObservations,
        "clear": peers.LangChainClearToolUses,
        "summarize-langchain": peers.LangChainSummarization,
        "summarize-openhands": peers.OpenHandsSummarizing,
        "anthropic-context-editing": native.AnthropicContextEditing,
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
    "FullHistory",
    "StickyCut",
    "WindowsmithRecall",
    "WindowsmithStrategy",
    "make_strategy",
]
