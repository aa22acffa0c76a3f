"""In a long session the free cut comes at the band that costs least (``economics.cut_mark``), whatever a rewrite
costs: its future is about as long as its past, so cuts recur and waiting for the ceiling reads the fullest history
for most of the session."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import DATA, needs_data, replay_strategies
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import family_of, prepare, split_of
from windowsmith.compaction import economics
from windowsmith.model import Message, ToolCall, ToolResult
from windowsmith.registry import load_registry
from windowsmith.traces import iter_trace_files, load_traces

pytestmark = pytest.mark.slow  # every test here replays real traces or runs processes


def chained(runs: list, prefix: str = "r") -> tuple[Message, ...]:
    """The runs' messages one after the other, as one session (a customer-service agent serving customer after
    customer), each run's tool call ids prefixed so they stay unique."""
    def block(b: object, j: int) -> object:
        if isinstance(b, ToolCall):
            return replace(b, id=f"{prefix}{j}-{b.id}")
        if isinstance(b, ToolResult):
            return replace(b, call_id=f"{prefix}{j}-{b.call_id}")
        return b
    return tuple(Message(m.role, tuple(block(b, j) for b in m.content)) for j, r in enumerate(runs) for m in r.messages)


@needs_data
@pytest.mark.parametrize("long_session", [True, False])
def test_a_long_customer_service_session_costs_less_than_summarizing_it(tmp_path, monkeypatch, long_session):
    """Eight dev tau-bench runs (gpt-4o's airline runs, no thinking) chained into one session of 121 calls at 32K,
    priced for claude-sonnet-4-5: waiting for the ceiling (0.95 of the budget) before each cut, windowsmith cost $0.648
    against LangChain's summarization's $0.588 (a summary at 0.8 of the budget); with the cut at its band once the
    session is long, $0.562, every target kept. With the long-session rule switched off, it loses again."""
    if not long_session:
        monkeypatch.setattr(economics, "LONG_SESSION_TURNS", 10**6)
    runs = [t for p in iter_trace_files(DATA / "tau-bench") for t in load_traces(p)
            if family_of(t) == "tau-bench" and split_of(t.id) == "dev"][8:16]
    assert len(runs) == 8
    run = prepare(replace(runs[0], id="chain", messages=chained(runs)))
    cfg = BenchConfig.make(load_registry().get("claude-sonnet-4-5"), 32_000)
    got = replay_strategies(run, cfg, ("windowsmith", "summarize-langchain", "sticky"), tmp_path)
    ws_run = got["windowsmith"]
    assert ws_run.calls == 121  # (past LONG_SESSION_TURNS assistant turns: the rule applies when it is on)
    cheaper = ws_run.cost_usd < min(got["summarize-langchain"].cost_usd, got["sticky"].cost_usd)
    assert cheaper is long_session
    assert ws_run.strict >= got["summarize-langchain"].strict  # (the summary's recall, on the same calls)
