"""Cache-prefix reuse between compactions: rewrite vs steady calls, prefix_reuse, on hand-checked traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import needs_data
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.html import bench_html
from windowsmith.bench.metrics import prepare
from windowsmith.bench.peers import StrandsSlidingWindow, SweAgentLastNObservations
from windowsmith.bench.report import HEADERS, REUSE_NOTE, markdown, row_cells
from windowsmith.bench.results import summarize_results
from windowsmith.bench.run import extends_previous, run_strategy
from windowsmith.bench.strategies import FullHistory
from windowsmith.model import Message, Text, ToolCall, ToolResult, ToolSpec
from windowsmith.registry import load_registry
from windowsmith.request import NeutralRequest, Segment
from windowsmith.tokens import count_text
from windowsmith.traces.base import Trace

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
REG = load_registry()
SONNET = REG.get("claude-sonnet-4-5")
GPT41 = REG.get("gpt-4.1")  # implicit prefix caching: read = shared prefix rounded down to 128 (>= 1024)

BIG_TASK = "task " * 1500  # a first message past the 1,024-token minimum cacheable prefix


def call(cid: str, name: str, **args: object) -> Message:
    return Message("assistant", (ToolCall(cid, name, args),))


def result(cid: str, text: str) -> Message:
    return Message("tool", (ToolResult(cid, (Text(text),)),))


def tool_trace(n: int, first: str = BIG_TASK) -> Trace:
    """user, then n x (assistant call c{i}, tool result r{i}), then a final assistant message.
    Model calls: before every assistant message, i.e. n + 1 calls."""
    msgs = [Message.user(first)]
    for i in range(1, n + 1):
        msgs.append(call(f"c{i}", "read", path=f"src/f{i}.py"))
        msgs.append(result(f"c{i}", f"output {i}"))
    msgs.append(Message.assistant("done"))
    return Trace(f"t{n}", "openai-chat", "test", None, (), tuple(msgs))


def feed(strategy, trace: Trace, upto: int):
    run = prepare(trace)
    strategy.start(run.id, run.system, run.tools, native_tools=run.native_tools)
    for m in run.messages[:upto]:
        strategy.observe(m)
    return strategy.build()


@pytest.fixture
def gpt() -> BenchConfig:
    return BenchConfig.make(GPT41, None)


# ---------------------------------------------------------------------------------------------------
# The predicate
# ---------------------------------------------------------------------------------------------------


def req(messages, *, tail=None, system="sys", session="", tools=()) -> NeutralRequest:
    return NeutralRequest(model="m", system=(Segment(system, "system"),) if system else (),
                          session=(Segment(session, "session"),) if session else (), tools=tuple(tools),
                          messages=tuple(messages), tail=tail, max_output_tokens=100, cache_key="k")


def test_extends_previous_by_hand():
    u1, a1, u2 = Message.user("one"), Message.assistant("two"), Message.user("three")
    prev = req([u1], tail="STEP 1")
    assert prev.tail_mode() == "prepend"  # the tail goes into the last user message when rendered...
    # ...but it is kept apart in the neutral request: a new tail does not make a rewrite
    assert extends_previous(prev, req([u1, a1, u2], tail="STEP 2"))
    assert extends_previous(prev, req([Message.user("one")], tail=None))  # equal by digest, not identity
    assert extends_previous(req([]), req([u1]))
    assert not extends_previous(prev, req([Message.user("one!"), a1, u2]))  # a sent message changed
    assert not extends_previous(req([u1, a1]), req([u1]))  # a sent message dropped
    assert not extends_previous(req([u1, a1]), req([a1, u1]))  # reordered
    assert not extends_previous(req([u1, a1]), req([a1, u2]))  # a sliding window moved
    assert not extends_previous(prev, req([u1, a1, u2], system="other sys"))
    assert not extends_previous(prev, req([u1, a1, u2], session="MEMORY: x"))
    assert not extends_previous(prev, req([u1, a1, u2], tools=[ToolSpec("f", "d", {"type": "object"})]))


# ---------------------------------------------------------------------------------------------------
# Strategies on hand-checked traces
# ---------------------------------------------------------------------------------------------------


def test_full_history_never_rewrites_and_its_reuse_by_hand(gpt):
    u1, a1, u2, a2, u3 = "hello " * 1500, "sure", "thanks " * 300, "ok", "more"
    t = Trace("c", "openai-chat", "x", None, (), (Message.user(u1), Message.assistant(a1), Message.user(u2),
                                                  Message.assistant(a2), Message.user(u3), Message.assistant("bye")))
    rm = run_strategy(prepare(t), FullHistory(gpt), detail=True)
    # openai-chat overheads: 3 per request, 3 per message; three calls
    p1 = 3 + 3 + count_text(u1)
    p2 = p1 + 3 + count_text(a1) + 3 + count_text(u2)
    p3 = p2 + 3 + count_text(a2) + 3 + count_text(u3)
    read2, read3 = (p1 // 128) * 128, (p2 // 128) * 128  # each previous request is the shared prefix
    assert p1 >= 1024 and read2 > 0 and read3 > read2
    assert rm.calls == 3 and rm.input_tokens == p1 + p2 + p3
    assert rm.rewrite_calls == 0 and rm.steady_calls == 2
    assert rm.steady_input_tokens == p2 + p3
    assert rm.steady_prev_tokens == p1 + p2
    assert rm.steady_cache_read_tokens == read2 + read3 == rm.cache_read_tokens
    assert [x["rewrite"] for x in rm.turns] == [None, False, False]
    row = summarize_results([{**rm.__dict__, "window_label": "model"}], GPT41, [None], ["full"])["rows"][0]
    assert row["rewrite_calls"] == 0 and row["steady_calls"] == 2 and row["rewrite_share"] == 0.0
    assert row["prefix_reuse"] == round((read2 + read3) / (p2 + p3), 4)
    assert row["prefix_reuse_prev"] == round((read2 + read3) / (p1 + p2), 4)


def test_masking_m1_rewrites_every_call_once_a_mask_kicks_in(gpt):
    t = tool_trace(4)  # u a1 t1 a2 t2 a3 t3 a4 t4 | done: calls before a1 a2 a3 a4 done
    rm = run_strategy(prepare(t), SweAgentLastNObservations(gpt, n=1), detail=True)
    # call 1 [u] cold; call 2 [u a1 t1] nothing masked yet: steady;
    # call 3 [u a1 M1 a2 t2] masks t1 (sent verbatim by call 2): rewrite; calls 4 and 5 mask t2, t3: rewrites
    assert rm.calls == 5 and rm.error is None
    assert [x["rewrite"] for x in rm.turns] == [None, False, True, True, True]
    assert rm.rewrite_calls == 3 and rm.steady_calls == 1
    p1 = 3 + 3 + count_text(BIG_TASK)
    p2 = feed(SweAgentLastNObservations(gpt, n=1), t, 3).tokens
    read2 = (p1 // 128) * 128  # call 2 reads call 1's whole request ([u]) from cache
    assert p1 >= 1024 and p2 > p1
    assert rm.steady_input_tokens == p2 and rm.steady_prev_tokens == p1
    assert rm.steady_cache_read_tokens == read2
    assert rm.cache_read_tokens > read2  # rewrite calls read the unchanged head too, but are not steady
    row = summarize_results([{**rm.__dict__, "window_label": "model"}], GPT41, [None], ["masking"])["rows"][0]
    assert row["rewrite_calls"] == 3 and row["rewrite_share"] == 0.75
    assert row["prefix_reuse"] == round(read2 / p2, 4) and row["prefix_reuse_prev"] == round(read2 / p1, 4)
    # with the default m=10 nothing is ever masked in 4 observations: no rewrite
    rm10 = run_strategy(prepare(t), SweAgentLastNObservations(gpt))
    assert rm10.rewrite_calls == 0 and rm10.steady_calls == 4


def test_sliding_window_that_moves_every_call_has_no_steady_call(gpt):
    t = tool_trace(3)
    rm = run_strategy(prepare(t), StrandsSlidingWindow(gpt, window_size=2, per_turn=True))  # [u], [a1 t1], [a2 t2], [a3 t3]
    assert rm.calls == 4 and rm.rewrite_calls == 3 and rm.steady_calls == 0
    assert rm.steady_input_tokens == rm.steady_cache_read_tokens == rm.steady_prev_tokens == 0
    row = summarize_results([{**rm.__dict__, "window_label": "model"}], GPT41, [None], [rm.strategy])["rows"][0]
    assert row["rewrite_share"] == 1.0 and row["prefix_reuse"] is None and row["prefix_reuse_prev"] is None


@needs_data
def test_full_history_on_a_real_trace_at_the_model_window_never_rewrites():
    cfg = BenchConfig.make(SONNET, None)
    from windowsmith.traces import load_traces

    trace = load_traces(DATA / "swe-agent" / "trajectories__demonstrations__function_calling_simple.traj")[0]
    rm = run_strategy(prepare(trace), FullHistory(cfg))
    assert rm.error is None and rm.calls > 3 and "cut" not in rm.events
    assert rm.rewrite_calls == 0 and rm.steady_calls == rm.calls - 1
    assert rm.steady_cache_read_tokens == rm.cache_read_tokens > 0  # the cold call reads nothing
    assert 0 < rm.steady_cache_read_tokens <= rm.steady_prev_tokens < rm.steady_input_tokens


# ---------------------------------------------------------------------------------------------------
# Aggregation and reports
# ---------------------------------------------------------------------------------------------------


def _result(gpt: BenchConfig) -> dict:
    a = run_strategy(prepare(tool_trace(4)), SweAgentLastNObservations(gpt, n=1))  # 5 calls: 3 rewrites, 1 steady
    b = run_strategy(prepare(tool_trace(2)), SweAgentLastNObservations(gpt, n=1))  # 3 calls: 1 rewrite, 1 steady
    s = run_strategy(prepare(tool_trace(3)), StrandsSlidingWindow(gpt, window_size=2, per_turn=True))  # 4 calls: 3 rewrites
    s.strategy = "sliding"
    assert (a.rewrite_calls, a.steady_calls, b.rewrite_calls, b.steady_calls) == (3, 1, 1, 1)
    failed = {**b.__dict__, "window_label": "model", "error": "Boom: x", "rewrite_calls": 100, "run": "t-failed"}
    results = [{**r.__dict__, "window_label": "model"} for r in (a, b, s)] + [failed]
    out = summarize_results(results, GPT41, [None], ["masking", "sliding"])
    out.update({"model": "gpt-4.1", "format": "openai-chat", "runs": 3, "calls": 12, "files": ["x"],
                "elapsed_s": 0.1, "workers": 1, "errors": []})
    return {"result": out, "a": a, "b": b}


def test_rows_aggregate_over_runs_like_the_other_metrics(gpt):
    d = _result(gpt)
    a, b = d["a"], d["b"]
    masking, sliding = [r for r in d["result"]["rows"] if r["family"] == "all"]
    assert masking["runs"] == 2 and masking["failed_runs"] == 1 and masking["calls"] == 8
    assert masking["rewrite_calls"] == 4 and masking["steady_calls"] == 2
    assert masking["rewrite_share"] == round(4 / (8 - 2), 4) == 0.6667  # rewrites / (calls - runs)
    read = a.steady_cache_read_tokens + b.steady_cache_read_tokens
    assert read > 0
    assert masking["prefix_reuse"] == round(read / (a.steady_input_tokens + b.steady_input_tokens), 4)
    assert masking["prefix_reuse_prev"] == round(read / (a.steady_prev_tokens + b.steady_prev_tokens), 4)
    assert sliding["rewrite_calls"] == 3 and sliding["rewrite_share"] == 1.0 and sliding["prefix_reuse"] is None


def test_markdown_and_html_show_reuse_and_rewrites(gpt):
    res = _result(gpt)["result"]
    masking, sliding = [r for r in res["rows"] if r["family"] == "all"]
    assert sliding["strategy"] == "sliding" and len(row_cells(sliding)) == len(HEADERS)
    assert len(row_cells(masking)) == len(HEADERS)
    md = markdown(res)
    lines = md.splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("| strategy |"))
    cols = [c.strip() for c in lines[head].strip("|").split("|")]
    ru = cols.index("reuse")
    assert cols[ru:ru + 2] == ["reuse", "rewr"] and cols == list(HEADERS)
    mrow = [c.strip() for c in lines[head + 2].strip("|").split("|")]
    srow = [c.strip() for c in lines[head + 3].strip("|").split("|")]
    assert mrow[0] == "masking" and mrow[ru] == f"{masking['prefix_reuse']:.0%}" and mrow[ru + 1] == "67%"
    assert srow[0] == "sliding" and srow[ru] == "n/a" and srow[ru + 1] == "100%"
    assert mrow[cols.index("reads $")] == "0.00"  # peers have no read tool
    assert REUSE_NOTE in md and "prefix_reuse_prev" in REUSE_NOTE and "digest" in REUSE_NOTE
    page = bench_html(res)
    assert "<th>reuse</th><th>rewr</th>" in page
    assert "<td>67%</td>" in page and "<td>100%</td>" in page
    assert "rewrite calls / (calls - runs)" in page


def test_a_run_failed_by_one_strategy_leaves_every_row_at_that_window(gpt):
    a = run_strategy(prepare(tool_trace(4)), FullHistory(gpt))
    b = run_strategy(prepare(tool_trace(2)), FullHistory(gpt))
    good = [{**a.__dict__, "run": "r1", "window_label": "model"}, {**b.__dict__, "run": "r2", "window_label": "model"},
            {**a.__dict__, "run": "r1", "strategy": "masking", "window_label": "model"}]
    bad = {**b.__dict__, "run": "r2", "strategy": "masking", "window_label": "model", "error": "BudgetExceededError: x"}
    rows = summarize_results([*good, bad], GPT41, [None], ["full", "masking"])["rows"]
    full, masking = [r for r in rows if r["family"] == "all"]
    assert (full["runs"], full["excluded_runs"], full["failed_runs"]) == (1, 1, 0)
    assert (masking["runs"], masking["excluded_runs"], masking["failed_runs"]) == (1, 0, 1)
    assert full["calls"] == masking["calls"] == a.calls
