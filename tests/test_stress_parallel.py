"""The stress bench's ``parallel`` variant (benchmarks/bench_stress.py): an agent that batches its tool calls.

Real runs (OpenHands, tau-bench) with their consecutive exchanges merged into one reply of several calls and one tool
message of their results: the merge keeps every call and result in order, and the engine replays the merged runs at
8K with every request holding the newest results (no blind call) and within the window.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import DATA, needs_data
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import family_of, prepare
from windowsmith.bench.run import run_strategy
from windowsmith.bench.strategies import make_strategy
from windowsmith.model import Message, Text, ToolCall, ToolResult
from windowsmith.registry import load_registry
from windowsmith.traces import iter_trace_files, load_traces

# the benchmark script by its path (benchmarks/ is not a package, and not put on every test's import path)
_SPEC = importlib.util.spec_from_file_location(
    "bench_stress", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_stress.py")
assert _SPEC is not None and _SPEC.loader is not None
bench_stress = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench_stress)


def exchange(i: int) -> tuple[Message, Message]:
    return (Message("assistant", (Text(f"step {i}"), ToolCall(f"c{i}", "read", {"path": f"f{i}.py"}))),
            Message("tool", (ToolResult(f"c{i}", (Text(f"body {i}"),)),)))


def test_batched_merges_runs_of_exchanges_and_leaves_the_rest() -> None:
    user = Message.user("fix it")
    ex = [m for i in range(1, 6) for m in exchange(i)]
    reply = Message.assistant("done")
    out = bench_stress.batched((user, *ex, Message.user("and also"), *exchange(6), reply))
    roles = [m.role for m in out]
    # five exchanges: one of three, one of two; the lone sixth stays as it was; user messages and replies untouched
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "user", "assistant", "tool", "assistant"]
    assert [c.id for c in out[1].tool_calls] == ["c1", "c2", "c3"]
    assert [r.call_id for r in out[2].tool_results] == ["c1", "c2", "c3"]
    assert [b.text for b in out[1].content if isinstance(b, Text)] == ["step 1", "step 2", "step 3"]
    assert [c.id for c in out[3].tool_calls] == ["c4", "c5"]
    assert out[6:8] == exchange(6)
    assert bench_stress.transform((user, reply), "parallel", "") == (user, reply)


def _runs(family: str, n: int) -> list:
    out = []
    for path in iter_trace_files(DATA / family):
        for trace in load_traces(path):
            if family_of(trace) == family:
                out.append(trace)
                if len(out) == n:
                    return out
    return out


@pytest.mark.slow
@needs_data
@pytest.mark.parametrize("family,n", [("openhands", 1), ("tau-bench", 3)])
def test_real_runs_with_batched_calls_replay_without_a_blind_call(family: str, n: int, tmp_path: Path) -> None:
    spec = load_registry().get("claude-sonnet-4-5")
    cfg = BenchConfig.make(spec, 8000)
    merged_any = False
    for trace in _runs(family, n):
        msgs = bench_stress.transform(trace.messages, "parallel", "")
        calls = [c.id for m in trace.messages if m.role == "assistant" for c in m.tool_calls]
        assert [c.id for m in msgs if m.role == "assistant" for c in m.tool_calls] == calls
        assert [r.call_id for m in msgs if m.role == "tool" for r in m.tool_results] == [
            r.call_id for m in trace.messages if m.role == "tool" for r in m.tool_results]
        merged_any |= any(len(m.tool_calls) > 1 for m in msgs if m.role == "assistant") and len(msgs) < len(trace.messages)
        run = prepare(replace(trace, messages=msgs))
        strategy = make_strategy("windowsmith", cfg, tmp_dir=str(tmp_path))
        try:
            rm = run_strategy(run, strategy)
        finally:
            strategy.close()
        assert rm.error is None
        assert rm.calls == len(run.calls) > 0
        assert rm.blind_calls == 0 and rm.over_window == 0
    assert merged_any
