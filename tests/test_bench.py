"""The benchmark: strategies on hand-checked traces, recall, identifiers, cost, CLI and bad input."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import needs_data
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.identifiers import action_identifiers, extract_identifiers
from windowsmith.bench.metrics import prepare, recall, sanitize
from windowsmith.bench.peers import (
    CLEARED,
    LANGCHAIN_SUMMARY_PREFIX,
    LANGCHAIN_SUMMARY_PROMPT_TOKENS,
    LangChainClearToolUses,
    LangChainSummarization,
    OpenHandsSummarizing,
    StrandsSlidingWindow,
    SweAgentLastNObservations,
)
from windowsmith.bench.run import run_strategy
from windowsmith.bench.strategies import STRATEGIES, FullHistory, StickyCut, make_strategy
from windowsmith.cli import main
from windowsmith.compaction.base import Reference, Summary
from windowsmith.costs import call_cost
from windowsmith.model import Message, Text, ToolCall, ToolResult
from windowsmith.registry import load_registry
from windowsmith.tokens import count_text
from windowsmith.traces.base import Trace

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
REG = load_registry()
SONNET = REG.get("claude-sonnet-4-5")
GPT41 = REG.get("gpt-4.1")


def call(cid: str, name: str, **args: object) -> Message:
    return Message("assistant", (ToolCall(cid, name, args),))


def result(cid: str, text: str) -> Message:
    return Message("tool", (ToolResult(cid, (Text(text),)),))


def tool_trace(n: int = 3, size: int = 1) -> Trace:
    """user, then n x (assistant call c{i}, tool result r{i}), then a final assistant message."""
    msgs = [Message.user("task: fix src/app.py")]
    for i in range(1, n + 1):
        msgs.append(call(f"c{i}", "read", path=f"src/f{i}.py"))
        msgs.append(result(f"c{i}", f"output {i} " + "word " * size))
    msgs.append(Message.assistant("done"))
    return Trace("t", "openai-chat", "test", "You are a bot.", (), tuple(msgs))


def feed(strategy, trace: Trace, upto: int):
    run = prepare(trace)
    strategy.start(run.id, run.system, run.tools, native_tools=run.native_tools)
    for m in run.messages[:upto]:
        strategy.observe(m)
    return strategy.build()


def texts(req) -> list[str]:
    out = []
    for m in req.messages:
        out.append(m.text if m.role != "tool" else "|".join(r.text for r in m.tool_results))
    return out


def pairs_ok(req) -> bool:
    msgs = req.messages
    for i, m in enumerate(msgs):
        if m.role == "tool":
            if i == 0 or msgs[i - 1].role != "assistant":
                return False
            if {r.call_id for r in m.tool_results} != {c.id for c in msgs[i - 1].tool_calls}:
                return False
    return True


@pytest.fixture
def cfg() -> BenchConfig:
    return BenchConfig.make(SONNET, 8000)


# ---------------------------------------------------------------------------------------------------
# Strategies, exactly
# ---------------------------------------------------------------------------------------------------


def test_full_history_keeps_everything(cfg):
    t = tool_trace(3)
    b = feed(FullHistory(cfg), t, 7)
    assert b.request.messages == t.messages[:7]
    assert b.tokens == cfg.counter.request(b.request) and b.events == {}
    assert b.request.system_text == "You are a bot."


def test_strands_sliding_per_turn_trims_to_a_tool_use_boundary(cfg):
    t = tool_trace(3)  # u a1 t1 a2 t2 a3 t3 | a: no later human message, so the fallback trim point
    b = feed(StrandsSlidingWindow(cfg, window_size=4, per_turn=True), t, 7)
    assert b.request.messages == t.messages[3:7]  # a2 t2 a3 t3
    b = feed(StrandsSlidingWindow(cfg, window_size=3, per_turn=True), t, 7)
    assert b.request.messages == t.messages[5:7]  # len-3 = t2: a result is never a trim point, a3 is
    assert pairs_ok(b.request) and b.events == {"dropped_messages": 5}


def test_strands_default_trims_only_when_an_invocation_ends(cfg):
    msgs = [Message.user("q1")]
    for i in range(1, 4):
        msgs += [call(f"c{i}", "read", n=i), result(f"c{i}", f"out {i}")]
    msgs += [Message.assistant("a1"), Message.user("q2"), Message.assistant("a2")]
    t = Trace("s", "openai-chat", "x", None, (), tuple(msgs))
    s = StrandsSlidingWindow(cfg, window_size=4)
    b = feed(s, t, 8)  # inside the first invocation: nothing is trimmed, whatever the count
    assert b.request.messages == t.messages[:8]
    s.observe(t.messages[8])  # q2 starts a new invocation: the first one ended with 9 messages > 4
    b = s.build()
    # from len-4 = 4 there is no plain user message yet: the fallback is the next tool use (c3)
    assert b.request.messages == t.messages[5:9]
    assert pairs_ok(b.request)


def test_strands_overflow_truncates_the_oldest_tool_result_first(cfg):
    big = "x" * 60_000
    msgs = [Message.user("task"), call("c1", "cat"), result("c1", big), call("c2", "cat"), result("c2", "small"),
            Message.assistant("end")]
    t = Trace("o", "openai-chat", "x", None, (), tuple(msgs))
    b = feed(StrandsSlidingWindow(cfg), t, 5)
    text = b.request.messages[2].tool_results[0].text
    assert "... [truncated: 59600 chars removed] ..." in text and text.startswith("x" * 200)
    assert b.events["overflow_retry"] == 1 and "cut" not in b.events
    assert b.request.messages[0].text == "task"


def test_swe_agent_masking_keeps_the_template_and_the_last_n(cfg):
    t = tool_trace(3)
    b = feed(SweAgentLastNObservations(cfg, n=1), t, 7)
    assert texts(b.request) == ["task: fix src/app.py", "", "Old environment output: (1 lines omitted)", "",
                                "Old environment output: (1 lines omitted)", "", "output 3 word "]
    m = b.request.messages
    assert [r.call_id for r in m[2].tool_results] == ["c1"] and m[1] is t.messages[1]
    assert b.events == {"masked": 2} and pairs_ok(b.request)
    assert b.synthetic == {m[2].digest, m[4].digest}


def test_masking_treats_user_observations_as_observations_without_native_tools(cfg):
    msgs = (Message.user("task"), Message.assistant("ls"), Message.user("obs 1\nline 2"),
            Message.assistant("cat a.py"), Message.user("obs 2"), Message.assistant("done"))
    t = Trace("m", "mini-swe-agent", "x", None, (), msgs)
    b = feed(SweAgentLastNObservations(cfg, n=1), t, 5)
    assert texts(b.request) == ["task", "ls", "Old environment output: (2 lines omitted)", "cat a.py", "obs 2"]


def test_langchain_clear_is_recomputed_on_every_call_over_the_trigger(cfg):
    t = tool_trace(4)  # u a1 t1 a2 t2 a3 t3 a4 t4 | a
    s = LangChainClearToolUses(cfg, keep=1)
    s.trigger = 0
    b = feed(s, t, 7)
    assert texts(b.request) == ["task: fix src/app.py", "", CLEARED, "", CLEARED, "", "output 3 word "]
    assert b.events["cleared"] == 2
    s.observe(t.messages[7])
    s.observe(t.messages[8])
    b2 = s.build()
    assert texts(b2.request)[-4:] == ["", CLEARED, "", "output 4 word "]
    assert b2.request.messages[:5] == b.request.messages[:5]  # the same placeholder bytes
    b3 = feed(LangChainClearToolUses(cfg, keep=1), t, 7)  # under the default trigger (half the window)
    assert b3.request.messages == t.messages[:7] and "cleared" not in b3.events


class StubSummarizer:
    name = "stub"

    def __init__(self) -> None:
        self.spans: list[list[Message]] = []

    def summarize(self, messages, *, goal=None, previous=None, budget_tokens=1024):
        self.spans.append(list(messages))
        n = sum(len(s) for s in self.spans)
        return Summary(f"summary of {n} messages", refs=(Reference("id", "ZFA04Y"),))


def test_langchain_summarization_replaces_everything_before_the_kept_messages(cfg):
    msgs = [Message.user("task: fix src/app.py")]
    for i in range(1, 5):
        msgs += [call(f"c{i}", "read", n=i), result(f"c{i}", f"output {i}"), Message.user(f"next {i}")]
    msgs.append(Message.assistant("done"))
    t = Trace("l", "openai-chat", "x", None, (), tuple(msgs))
    stub = StubSummarizer()
    s = LangChainSummarization(cfg, keep_messages=4, summarizer=stub)
    s.trigger = 0
    b = feed(s, t, 13)  # 13 messages; keep 4: the cut at index 9 (a4) ... t4 next4
    assert b.request.messages[1:] == t.messages[9:13]
    assert texts(b.request)[0] == LANGCHAIN_SUMMARY_PREFIX + "summary of 9 messages"
    # the summarizer read the summarized messages (all within 4,000 tokens), starting on a human message
    assert stub.spans == [list(t.messages[:9])]
    assert b.summary_input == LANGCHAIN_SUMMARY_PROMPT_TOKENS + cfg.counter.scaled(
        sum(cfg.counter.raw_message(m) for m in t.messages[:9]))
    assert b.summary_output == cfg.counter.text("summary of 9 messages")
    s2 = LangChainSummarization(cfg, keep_messages=4, summarizer=StubSummarizer(), trim_tokens=40)
    s2.trigger = 0
    b2 = feed(s2, t, 13)
    # the last 40 tokens hold no human message: LangChain writes its fixed text, no summary call
    assert s2.summarizer.spans == [] and b2.summary_input == 0
    assert texts(b2.request)[0] == LANGCHAIN_SUMMARY_PREFIX + "Previous conversation was too long to summarize."
    assert b.events["summarize"] == 1 and pairs_ok(b.request)


def test_openhands_condenser_keeps_the_head_and_half_of_max_size(cfg):
    t = tool_trace(10)  # 21 messages before the final answer
    stub = StubSummarizer()
    s = OpenHandsSummarizing(cfg, max_size=12, keep_first=1, summarizer=stub)
    b = feed(s, t, 21)
    # over 12 events: keep 1 head event, the summary, and 12 // 2 - 1 - 1 = 4 events from the tail
    assert b.request.messages[0] is t.messages[0]
    assert b.request.messages[2:] == t.messages[17:21]
    assert texts(b.request)[1].startswith("summary of")
    assert b.summary_input > 0 and b.summary_output > 0 and pairs_ok(b.request)


def test_sticky_cut_drops_to_half_and_then_only_appends(cfg):
    t = tool_trace(14, size=800)
    s = StickyCut(cfg)
    s.start("t", t.system, ())
    cuts = []
    prev = None
    for i, m in enumerate(t.messages[:-1]):
        if m.role == "assistant" and i:
            b = s.build()
            assert b.tokens <= cfg.available and pairs_ok(b.request)
            if b.events.get("sticky_cut"):
                cuts.append(i)
                assert b.tokens <= cfg.available * 0.5 + 400
            elif prev is not None:
                assert b.request.messages[: len(prev.messages)] == prev.messages  # appends only
            prev = b.request
        s.observe(m)
    assert cuts  # the trace is larger than the window


@pytest.mark.slow
def test_every_strategy_fits_the_window_and_keeps_pairs_with_a_huge_output(cfg):
    msgs = [Message.user("task")]
    for i in range(1, 6):
        msgs.append(call(f"c{i}", "run", cmd=f"step {i}"))
        msgs.append(result(f"c{i}", (f"line of output {i}\n") * (40_000 if i == 3 else 200)))
    msgs.append(Message.assistant("end"))
    t = Trace("big", "openai-chat", "x", "sys", (), tuple(msgs))
    run = prepare(t)
    for name in STRATEGIES:
        s = make_strategy(name, cfg)
        try:
            s.start(run.id, run.system, run.tools, native_tools=run.native_tools)
            for i, m in enumerate(run.messages):
                if i in run.calls:
                    b = s.build()
                    assert b.tokens <= cfg.available, name
                    assert pairs_ok(b.request), name
                s.observe(m)
        finally:
            s.finish()
            s.close()


def test_full_history_is_cut_to_fit_dropping_the_oldest_units(cfg):
    t = tool_trace(6, size=1500)  # ~1.5K tokens per result, 8K window
    b = feed(FullHistory(cfg), t, 13)
    assert b.events.get("cut") == 1 and b.tokens <= cfg.available
    assert b.request.messages == t.messages[13 - len(b.request.messages):13]
    assert b.request.messages[0].role == "assistant" and pairs_ok(b.request)


@needs_data
def test_a_peers_cut_fits_what_is_billed_when_earlier_thinking_is_stripped():
    """The Claude airline runs think (claude-sonnet-4-5 strips earlier turns' thinking): the bench's cut for a
    framework with no reaction of its own took the request's non-message part as the request less every message's
    tokens, stripped thinking included, so it stopped dropping too early and the request stayed over the window
    (``full`` at 8K: 2 to 6 calls over in 10 of 25 runs, 23 on the validation half). Now it counts what is billed."""
    from windowsmith.traces import load_traces

    spec = load_registry().get("claude-sonnet-4-5")
    cfg = BenchConfig.make(spec, 8000)
    traces = load_traces(DATA / "tau2-bench" / "claude-sonnet-4-5_airline.json")
    for k in (6, 21, 23):
        s = make_strategy("full", cfg)
        try:
            rm = run_strategy(prepare(traces[k]), s)
        finally:
            s.close()
        assert rm.error is None and rm.events.get("cut", 0) >= 1
        assert rm.over_window == 0 and rm.peak <= cfg.available


def test_a_system_prompt_leaving_less_than_two_views_lowers_every_strategys_reserved_output(cfg):
    # the engine lowers its reservation when the system prompt leaves the history less than the smallest views of
    # the newest message and the opening request (assemble.history_floor: MIN_VIEW each). The bench gave the peers
    # the lower reservation only below one view: with an airline policy 3,000 tokens longer at 8K (bench_stress.py's
    # ``bigsys``) the engine took a room the peers did not have, its requests over their budget on 3 to 12 calls a run
    from windowsmith.budget import BudgetConfig
    from windowsmith.layers.shrink import MIN_VIEW

    overhead = cfg.counter.request(FullHistory(cfg).request(()))
    block = BudgetConfig().block_tokens(cfg.available)
    one, two = cfg.counter.scaled(MIN_VIEW), cfg.counter.scaled(2 * MIN_VIEW)
    rule = "Rule: verify the reservation id and the user id before any change. "
    policy = next(rule * k for k in range(300, 600)
                  if one + 10 < block - overhead - cfg.counter.text(rule * k) < two - 10)
    t = replace(tool_trace(6, size=60), system=policy)
    run = prepare(t)
    floor = cfg.budget.output_floor()
    for name in ("sticky", "sliding", "windowsmith"):
        s = make_strategy(name, cfg)
        try:
            rm = run_strategy(run, s)
            assert rm.error is None and rm.calls == len(run.calls), name
            assert s.cfg.budget.reserved_output == floor, name  # the same budget as the engine's
            assert rm.over_window == 0 and rm.peak <= s.cfg.available, name
        finally:
            s.finish()
            s.close()


def test_a_system_prompt_over_the_budget_lowers_every_strategys_reserved_output_like_the_engine(cfg):
    # a policy larger than the 8K window's available budget (tau2-bench telecom): the engine lowers the reserved
    # output to its floor (assemble.py); every strategy gets the same budget (run_budget), so its requests fit,
    # say so in their max_output_tokens, and keep the newest message whole instead of clipping it to nothing
    policy = "Rule: refunds need a receipt id and the order number. " * 440  # 6,070 tokens
    t = tool_trace(4, size=40)
    t = replace(t, system=policy)
    run = prepare(t)
    fixed = cfg.counter.request(FullHistory(cfg).request(()))  # no system yet: the request overhead
    assert cfg.counter.text(policy) + fixed > cfg.available  # the premise: the policy alone is over the budget
    floor = cfg.budget.output_floor()
    lowered = cfg.window - cfg.budget.slack - floor
    for name in ("full", "sticky", "sliding", "masking", "summarize-langchain", "windowsmith"):
        s = make_strategy(name, cfg)
        try:
            rm = run_strategy(run, s, detail=True)
            assert rm.error is None and rm.calls == len(run.calls), name
            assert s.cfg.budget.reserved_output == floor and s.cfg.available == lowered, name
            assert rm.over_window == 0 and rm.blind_calls == 0, name
            assert rm.peak <= lowered, name
        finally:
            s.finish()
            s.close()
    # the last request of a peer holds the newest tool result verbatim (before: clipped to a few tokens)
    s = make_strategy("sticky", cfg)
    b = feed(s, t, len(t.messages) - 1)
    assert b.request.max_output_tokens == floor
    assert texts(b.request)[-1] == t.messages[-2].tool_results[0].text
    assert "clipped" not in b.events
    # a run whose system prompt leaves room keeps the model's whole reservation
    s2 = make_strategy("sticky", cfg)
    feed(s2, tool_trace(2), 3)
    assert s2.cfg is cfg and s2.cfg.budget.reserved_output > floor


# ---------------------------------------------------------------------------------------------------
# Recall by hand
# ---------------------------------------------------------------------------------------------------


def recall_trace() -> Trace:
    msgs = (
        Message.user("Please check reservation ZFA04Y"),
        call("c1", "get_reservation", reservation_id="ZFA04Y"),  # call 1: targets {ZFA04Y}
        result("c1", "flight HAT170, user mia_li_3668"),
        call("c2", "get_user", user_id="mia_li_3668"),  # call 2: targets {mia_li_3668}
        result("c2", "payment credit_card_7447"),
        call("c3", "cancel", reservation_id="ZFA04Y", payment="credit_card_7447", note="new_id_999"),  # call 3
    )
    return Trace("r", "openai-chat", "x", "Use tools. Reservation codes look like ABC123.", (), msgs)


def test_targets_are_action_identifiers_first_seen_in_observations():
    run = prepare(recall_trace())
    assert run.calls == (1, 3, 5)
    assert run.targets == {1: {"ZFA04Y"}, 3: {"mia_li_3668"}, 5: {"ZFA04Y", "credit_card_7447"}}
    assert "new_id_999" in action_identifiers(run.messages[5])  # first seen in the action itself: not a target


def test_recall_strict_and_recoverable_by_hand(cfg):
    t = recall_trace()
    rm = run_strategy(prepare(t), StrandsSlidingWindow(cfg, window_size=2, per_turn=True))
    # call 1: [u0] holds ZFA04Y → 1; call 2: [a1 t2] holds mia_li_3668 → 1;
    # call 3: [a3 t4] holds credit_card_7447, not ZFA04Y → 1/2
    assert rm.recall_calls == 3 and rm.targets == 4 and rm.strict_hits == 3
    assert rm.strict == pytest.approx(1 + 1 + 0.5)
    assert rm.recoverable == pytest.approx(2.5)
    s = StrandsSlidingWindow(cfg, window_size=2, per_turn=True)
    b = feed(s, t, 5)
    tg = prepare(t).targets[5]
    assert recall(b.request, tg) == (1, 1)
    assert recall(b.request, tg, recoverable=frozenset({"ZFA04Y"})) == (1, 2)
    sha = "a" * 64
    ref_msg = Message.user(f"older output stored as artifact://{sha}")
    req = replace(b.request, messages=(ref_msg, *b.request.messages))
    assert recall(req, tg, resolve=lambda r: b"reservation ZFA04Y" if r == f"artifact://{sha}" else None) == (1, 2)


def test_misses_name_the_targets_a_call_lost_by_hand(cfg):
    t = recall_trace()
    rm = run_strategy(prepare(t), StrandsSlidingWindow(cfg, window_size=2, per_turn=True), misses=True)
    # call 3 of the hand-checked run above lost ZFA04Y (only there); nothing references it, so it is unrecoverable
    assert rm.misses == [{"call": 3, "targets": ["ZFA04Y", "credit_card_7447"], "missed": ["ZFA04Y"],
                          "unrecoverable": ["ZFA04Y"]}]
    assert run_strategy(prepare(t), StrandsSlidingWindow(cfg, window_size=2, per_turn=True)).misses is None


def test_misses_leave_out_a_run_another_strategy_failed_at_that_window_as_the_tables_do():
    from windowsmith.bench.results import miss_records

    def res(strategy, run, label, misses, error=None):
        return {"family": "f", "strategy": strategy, "window": 8000 if label == "8000" else 200000,
                "window_label": label, "run": run, "misses": misses, "error": error}

    lost = [{"call": 2, "targets": ["X1", "Y2"], "missed": ["X1"], "unrecoverable": []}]
    results = [res("full", "a", "8000", lost), res("sticky", "a", "8000", None, error="BudgetBlockedError: x"),
               res("full", "b", "8000", lost), res("full", "a", "model", lost)]
    got = miss_records(results)
    assert [(m["run"], m["window_label"]) for m in got] == [("b", "8000"), ("a", "model")]
    assert got[0] == {"family": "f", "strategy": "full", "window": 8000, "window_label": "8000", "run": "b", **lost[0]}
    assert all("misses" not in r for r in results)  # the records leave the results


@needs_data
def test_misses_account_for_every_target_strict_recall_lost_on_a_real_run(cfg):
    from windowsmith.traces import load_traces

    # run 7: both lose a target at 8K, sticky for good, windowsmith behind an artifact reference (the runs before it
    # lose none, which left every check below true of an empty list)
    run = prepare(load_traces(DATA / "tau2-bench" / "claude-sonnet-4-5_airline.json")[7])
    lost_by: dict[str, list[dict]] = {}
    for name in ("sticky", "windowsmith"):
        s = make_strategy(name, cfg)
        try:
            rm = run_strategy(run, s, misses=True)
        finally:
            s.close()
        assert rm.error is None and rm.misses is not None
        # the lost identifiers are exactly what strict recall did not count, call by call
        assert sum(len(m["missed"]) for m in rm.misses) == rm.targets - rm.strict_hits
        lost_share = sum(len(m["missed"]) / len(m["targets"]) for m in rm.misses)
        assert rm.strict == pytest.approx(rm.recall_calls - lost_share)
        for m in rm.misses:
            assert set(m["unrecoverable"]) <= set(m["missed"]) <= set(m["targets"]) and m["missed"]
            assert 1 <= m["call"] <= rm.calls
        assert [m["call"] for m in rm.misses] == sorted({m["call"] for m in rm.misses})
        lost_by[rm.strategy] = rm.misses
    assert lost_by["sticky"] and all(m["unrecoverable"] for m in lost_by["sticky"])
    assert lost_by["windowsmith"] and not any(m["unrecoverable"] for m in lost_by["windowsmith"])


def test_reads_recoverable_recall_assumes_are_priced_with_the_engines_own_tool(cfg):
    """A target only in an offloaded result's artifact counts as recoverable through one read_result call;
    the call is priced (its output, then the request with the tool's answer appended), outside cost_usd."""
    log = "\n".join(f"tests/test_mod{i % 40}.py::test_case_{i} PASSED" for i in range(4000))
    log = log.replace("test_case_3210 PASSED", "test_case_3210 PASSED ref_QZX42W")
    msgs = (Message.user("run the tests"), call("c1", "bash", cmd="pytest -q"), result("c1", log),
            call("c2", "bash", cmd="grep ref_QZX42W -r ."), result("c2", "nothing"), Message.assistant("done"))
    run = prepare(Trace("reads", "openai-chat", "x", "You run commands.", (), msgs))
    assert run.targets.get(3) == {"ref_QZX42W"}
    s = make_strategy("windowsmith", cfg)
    try:
        rm = run_strategy(run, s, detail=True)
    finally:
        s.close()
    assert rm.strict_hits == 0 and rm.recoverable == pytest.approx(1.0) and rm.reads_needed == 1
    # at least the tool's answer at the input price, at most a cold resend of the whole request and answer
    lo = SONNET.cost(input_tokens=500, output_tokens=10)
    hi = SONNET.cost(input_tokens=cfg.available + 2000, output_tokens=100) * 1.25
    assert lo < rm.reads_cost_usd < hi, rm.reads_cost_usd
    sticky = run_strategy(run, StickyCut(cfg))
    assert sticky.reads_needed == 0 and sticky.reads_cost_usd == 0.0
    # the reads are not in cost_usd: it is the sum of the calls' own prices (no summary was made here)
    assert rm.summary_cost_usd == 0 and rm.cost_usd == pytest.approx(sum(t["cost_usd"] for t in rm.turns))


# ---------------------------------------------------------------------------------------------------
# Identifiers
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("see ./django/db/models/query.py:123", {"django/db/models/query.py", "query.py", "123"}),
    ("cd /testbed && cat setup.cfg", {"/testbed", "setup.cfg"}),
    ("raise ValueError; E501 line too long", {"ValueError", "E501"}),
    ("reservation ZFA04Y and order #W2378156", {"ZFA04Y", "#W2378156"}),
    ("user mia_li_3668 mail mia.li@example.com", {"mia_li_3668", "mia.li@example.com"}),
    ("QuerySet.filter getName HTTPServer sha256 __init__", {"QuerySet.filter", "getName", "HTTPServer", "sha256", "__init__"}),
    ("commit 3ea751c on 2024-05-15 costs 1234.56", {"3ea751c", "2024-05-15", "2024", "1234.56"}),
    ("https://example.com/a/b", {"https://example.com/a/b"}),
])
def test_identifiers_positive(text, expected):
    assert extract_identifiers(text) == expected


@pytest.mark.parametrize("text", [
    "Hello there, the order is ready and/or shipped.",
    "I will check it now. OK? NOTE: e.g. i.e. etc.",
    "We have 12 items and 2 bags; HTTP and JSON are fine.",
    "input/output or yes/no",
])
def test_identifiers_negative(text):
    assert extract_identifiers(text) == set()


# ---------------------------------------------------------------------------------------------------
# Cost by hand
# ---------------------------------------------------------------------------------------------------


def test_cost_of_two_calls_by_hand_against_gpt41_prices():
    assert (GPT41.prices.input, GPT41.prices.output, GPT41.prices.cache_read) == (2.0, 8.0, 0.5)
    cfg = BenchConfig.make(GPT41, None)
    u1, a1, u2 = "hello " * 1500, "sure", "thanks"
    t = Trace("c", "openai-chat", "x", None, (), (Message.user(u1), Message.assistant(a1), Message.user(u2),
                                                  Message.assistant("bye")))
    rm = run_strategy(prepare(t), FullHistory(cfg))
    # openai-chat overheads: 3 per request, 3 per message
    p1 = 3 + 3 + count_text(u1)
    p2 = p1 + 3 + count_text(a1) + 3 + count_text(u2)
    o1, o2 = 3 + count_text(a1), 3 + count_text("bye")
    read2 = (p1 // 128) * 128  # the whole first request is the shared prefix (> 1024 tokens)
    expected = (p1 * 2.0 + o1 * 8.0) / 1e6 + ((p2 - read2) * 2.0 + read2 * 0.5 + o2 * 8.0) / 1e6
    assert rm.input_tokens == p1 + p2 and rm.cache_read_tokens == read2
    assert rm.cost_usd == pytest.approx(expected, rel=1e-12)
    # and call_cost agrees on the second call alone
    s = FullHistory(cfg)
    b1 = feed(s, t, 1)
    s.observe(t.messages[1])
    s.observe(t.messages[2])
    b2 = s.build()
    c2, _ = call_cost(GPT41, "openai-chat", b1.request, b2.request, cfg.counter, prompt_tokens=b2.tokens, output_tokens=o2)
    assert c2.usd == pytest.approx(((p2 - read2) * 2.0 + read2 * 0.5 + o2 * 8.0) / 1e6, rel=1e-12)


# ---------------------------------------------------------------------------------------------------
# Bad input and the CLI
# ---------------------------------------------------------------------------------------------------


def test_sanitize_pairs_calls_and_drops_empty_turns():
    msgs = (Message.user("a"), Message("user", ()), call("c1", "f"), Message.user("b"), result("zz", "x"),
            call("c1", "g"), result("c1", "y"))
    out, notes = sanitize(msgs)
    roles = [m.role for m in out]
    assert roles == ["user", "assistant", "tool", "user", "assistant", "tool"]
    assert out[4].tool_calls[0].id != "c1" and out[5].tool_results[0].call_id == out[4].tool_calls[0].id
    assert len(notes) == 4


@pytest.mark.slow
def test_bad_trace_benches_without_a_traceback(tmp_path):
    bad = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "ok"},
        {"role": "tool", "tool_call_id": "zz", "content": "x" * 1_000_000},
        {"role": "assistant", "content": "done"},
    ]
    good = tmp_path / "bad.json"
    good.write_text(json.dumps(bad))
    (tmp_path / "truncated.json").write_text('{"messages": [{"role": "user", "content": "a')
    (tmp_path / "weird.json").write_text('{"foo": 1, "bar": [2]}')
    out = tmp_path / "r.json"
    r = CliRunner(env={"COLUMNS": "400"}).invoke(main, ["bench", str(tmp_path), "--windows", "8000", "--workers", "1",
                                                         "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    assert "a JSON object with keys [bar, foo]" in r.output  # the problem line as written, not read as rich markup
    res = json.loads(out.read_text())
    assert any("truncated.json" in e for e in res["errors"])
    assert all(row["failed_runs"] == 0 and row["over_window_calls"] == 0 for row in res["rows"])


@needs_data
def test_cli_bench_on_two_small_shared_files(tmp_path):
    files = [DATA / "swe-agent" / "trajectories__demonstrations__function_calling_simple.traj",
             DATA / "swe-agent" / "trajectories__demonstrations__human_thought__swe-bench-HumanEvalFix-python__lcb__"
             "t-0.00__p-0.95__c-4.00__install-0__humanevalfix-python-0.traj"]
    out, page, md = tmp_path / "b.json", tmp_path / "b.html", tmp_path / "b.md"
    r = CliRunner().invoke(main, ["bench", *map(str, files), "--windows", "8000,16000", "--workers", "1",
                                  "--json", str(out), "--html", str(page), "--markdown", str(md)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    fams = res["families"]
    assert res["runs"] == 2 and len(res["rows"]) == len(STRATEGIES) * 3 * (len(fams) + 1)
    assert {row["strategy"] for row in res["rows"]} == set(STRATEGIES)
    keys = {"family", "strategy", "window", "window_label", "calls", "failed_runs", "cost_usd", "recall_strict",
            "recall_recoverable", "blind_calls", "reads_needed", "reads_cost_usd", "summary_cost_usd"}
    assert all(keys <= set(row) for row in res["rows"])
    assert {row["family"] for row in res["rows"]} == {*fams, "all"} and fams[0].startswith("swe-agent-")
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.count("<svg") >= 3
    assert "<script" not in text and "http-equiv" not in text
    assert "| strategy |" in md.read_text()


def test_bench_on_only_malformed_input_fails_with_a_message(tmp_path):
    (tmp_path / "truncated.json").write_text('{"messages": [{"role": "user", "content": "a')
    (tmp_path / "empty.json").write_text("[]")
    r = CliRunner().invoke(main, ["bench", str(tmp_path), "--windows", "8000", "--workers", "1"])
    assert r.exit_code == 2, r.output
    assert "no run to replay" in r.output and "truncated.json" in r.output
    assert "0.00" not in r.output  # no table of zeros
    assert "supported format: tau-bench, tau2-bench" in r.output  # the formats themselves (no command lists them)


@pytest.mark.slow
@needs_data
def test_multi_worker_bench_leaves_no_store_behind(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None
    try:
        from windowsmith.bench.run import run_bench

        res = run_bench([str(DATA / "swe-agent")], windows=[8000], strategies=["full", "windowsmith"],
                        limit_runs=2, workers=2, token_count=False)
        assert res["runs"] >= 2 and res["workers"] == 2
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("ws-bench-")] == []
    finally:
        tempfile.tempdir = None


@pytest.mark.slow
@needs_data
def test_split_is_deterministic_and_halves_the_runs():
    from windowsmith.bench.metrics import split_of
    from windowsmith.bench.run import collect_runs

    every, _ = collect_runs([str(DATA / "tau2-bench")])
    dev, _ = collect_runs([str(DATA / "tau2-bench")], split="dev")
    val, _ = collect_runs([str(DATA / "tau2-bench")], split="validation")
    assert {r[2] for r in dev} | {r[2] for r in val} == {r[2] for r in every}
    assert not {r[2] for r in dev} & {r[2] for r in val}
    assert 0.3 < len(dev) / len(every) < 0.7
    assert all(split_of(r[2]) == "validation" for r in val) and split_of("x") == split_of("x")
    lim, _ = collect_runs([str(DATA / "tau2-bench")], limit_runs=2, split="validation")
    assert len(lim) == 2 * 3 and all(split_of(r[2]) == "validation" for r in lim)


@needs_data
def test_token_count_section_honours_limit_runs_and_the_trace_model():
    from windowsmith.bench.billing import token_count_by_file

    f = str(DATA / "tau2-bench" / "gpt-4o_telecom_dual-control.json")
    one = token_count_by_file([f], limit_runs=1)
    two = token_count_by_file([f], limit_runs=2)
    assert one[0]["runs"] == 1 and two[0]["runs"] == 2 and one[0]["calls"] < two[0]["calls"]
    assert one[0]["model"] == "gpt-4o" and one[0]["model_from_trace"]


@pytest.mark.slow
@needs_data
def test_tables_fit_80_columns_and_plain_progress_lines():
    from rich.console import Console

    from windowsmith.bench.cli import PlainProgress
    from windowsmith.bench.report import rich_tables
    from windowsmith.bench.run import run_bench

    res = run_bench([str(DATA / "swe-agent")], windows=[8000], limit_runs=1, workers=1, token_count=False)
    con = Console(width=80, record=True, highlight=False)
    for t in rich_tables(res):
        con.print(t)
    text = con.export_text()
    assert "…" not in text and max(len(x) for x in text.splitlines()) <= 80
    assert "summarize-openhands" in text and "sliding-per-turn" in text
    lines: list[str] = []
    now = [0.0]
    p = PlainProgress(every_s=10, write=lines.append, clock=lambda: now[0])
    for i in range(1, 6):
        now[0] = i * 4.0
        p(i, 5)
    assert lines == ["bench: 3/5 runs, 12 s", "bench: 5/5 runs, 20 s"]


@pytest.mark.slow
@needs_data
@needs_data
def test_cli_bench_writes_the_calls_that_lost_a_target(tmp_path):
    out, rows = tmp_path / "misses.jsonl", tmp_path / "bench.json"
    r = CliRunner().invoke(main, ["bench", str(DATA / "openhands"), "--windows", "8000", "--strategies",
                                  "sticky,windowsmith", "--limit-runs", "2", "--workers", "1", "--misses", str(out),
                                  "--json", str(rows)])
    assert r.exit_code == 0, r.output
    lost = [json.loads(line) for line in out.read_text().splitlines()]
    result = json.loads(rows.read_text())
    assert "misses" not in result  # its own file, not the result JSON
    assert lost and {m["strategy"] for m in lost} <= {"sticky", "windowsmith"}
    for row in result["rows"]:
        if row["family"] == "all":
            continue
        mine = [m for m in lost if (m["strategy"], m["window"], m["family"]) ==
                (row["strategy"], row["window"], row["family"])]
        # one record per call whose strict recall was under 1: the row's strict recall follows from them
        share = sum(len(m["missed"]) / len(m["targets"]) for m in mine)
        assert row["recall_strict"] == pytest.approx(1 - share / row["recall_calls"], abs=1e-4)
    assert set(lost[0]) == {"family", "strategy", "window", "window_label", "run", "call", "targets", "missed",
                            "unrecoverable"}
    assert lost == sorted(lost, key=lambda m: (m["family"], m["window"], m["strategy"], m["run"], m["call"]))


def test_cli_bench_rejects_unknown_strategy(tmp_path):
    r = CliRunner().invoke(main, ["bench", str(DATA / "swe-agent"), "--strategies", "full,magic"])
    assert r.exit_code == 2 and "magic" in r.output


def test_cli_replay_html(tmp_path):
    from windowsmith.traces import demo_trace_path

    page = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["replay", str(demo_trace_path()), "--store", str(tmp_path / "s.db"),
                                  "--html", str(page)])
    assert r.exit_code == 0, r.output
    text = page.read_text()
    assert "<svg" in text and "cumulative" in text


@pytest.mark.slow
@needs_data
def test_tau2_dual_control_trace_counts_like_the_billed_prompts():
    """The agent never saw the user simulator's own tool calls: leaving them out makes the count follow
    the billed prompt_tokens (median offset error <= 0.5%, p95 <= 2%)."""
    from windowsmith.bench.billing import token_count_error

    f = DATA / "tau2-bench" / "gpt-4o_telecom_dual-control.json"
    res = token_count_error([f], model="gpt-4o", fmt="openai-chat")
    off = res["windowsmith"]["first_call_offset"]
    assert res["runs"] == 20 and off["median_abs"] <= 0.005 and off["p95_abs"] <= 0.02


def test_blind_calls_are_counted_when_the_newest_message_is_missing(cfg):
    from windowsmith.bench.metrics import is_blind

    t = tool_trace(2)
    full = feed(FullHistory(cfg), t, 5).request
    assert not is_blind(full, t.messages[4], True)
    no_last = replace(full, messages=full.messages[:3])
    assert is_blind(no_last, t.messages[4], True)  # the newest tool result is gone
    assert is_blind(replace(full, messages=()), t.messages[4], True)  # an empty history
    u = Message.user("<returncode>0</returncode>\nPASS: value 1\nPASS: value 2")
    redacted = Message.user("<returncode>0</returncode>\nPASS: [REDACTED:x] 1\nPASS: [REDACTED:x] 2")
    act = Message.assistant("run the tests")
    req = replace(full, messages=(Message.user("task"), act, redacted))
    assert not is_blind(req, u, True, before=act)  # the same message, redacted, after the same action
    other = Message.user("<returncode>1</returncode>\nTraceback: something else entirely, a different output")
    assert is_blind(replace(full, messages=(Message.user("task"), Message.assistant("x"), other)), u, True)


def test_a_view_naming_the_newest_messages_own_artifact_is_not_blind(cfg):
    """A shrunk view keeps lines of the message (head, lines that name identifiers, tail) with a footer naming the
    artifact holding the message's text byte for byte: the message is there. A view naming another artifact, whose
    first 600 characters differ, is not."""
    import hashlib

    from windowsmith.bench.metrics import is_blind

    task = "\n".join(["Fix the crash in the parser."] + [f"context line {i} of the report" for i in range(60)]
                     + ["type CrashIt is (I32 | (I32, (I32)))"] + ["steps: explore, reproduce, fix, test"] * 20)
    newest = Message.user(task)
    sha = hashlib.sha256(task.encode("utf-8")).hexdigest()
    view = ("Something else first, then\n[... 80 lines elided ...]\ntype CrashIt is (I32 | (I32, (I32)))\n"
            "[windowsmith: the full message (102 lines, 1,200 tokens) is stored as artifact://{}]")
    full = feed(FullHistory(cfg), tool_trace(1), 3).request
    assert not is_blind(replace(full, messages=(Message.user(view.format(sha)),)), newest, False)
    assert is_blind(replace(full, messages=(Message.user(view.format("0" * 64)),)), newest, False)


def test_summaries_are_charged_as_model_calls(cfg):
    msgs = [Message.user("task")]
    for i in range(1, 12):
        msgs += [call(f"c{i}", "read", n=i), result(f"c{i}", f"output {i} " + "word " * 700), Message.user(f"go {i}")]
    msgs.append(Message.assistant("done"))
    t = Trace("s", "openai-chat", "x", None, (), tuple(msgs))
    rm = run_strategy(prepare(t), LangChainSummarization(cfg, keep_messages=4))
    assert rm.summary_calls >= 1 and rm.summary_input_tokens > rm.summary_output_tokens > 0
    price = cfg.spec.cost(input_tokens=rm.summary_input_tokens, output_tokens=rm.summary_output_tokens)
    assert rm.summary_cost_usd == pytest.approx(price)
    base = run_strategy(prepare(t), LangChainSummarization(cfg, keep_messages=4))
    assert rm.cost_usd == pytest.approx(base.cost_usd) and rm.cost_usd > rm.summary_cost_usd > 0


@needs_data
def test_calibrated_online_estimate_learns_only_from_earlier_billed_calls():
    """The "calibrated online" column is the engine's own Session.record() -> Calibration path: call k is
    counted with what calls 1..k-1 of its run taught it. Changing call k's billed usage must leave call
    k's estimate alone and move call k+1's; the first call of a run is uncalibrated."""
    import dataclasses

    from windowsmith.bench.billing import count_samples
    from windowsmith.model import Usage
    from windowsmith.tokens import Calibration
    from windowsmith.traces import load_traces

    f = DATA / "tau2-bench" / "gpt-4o_telecom_dual-control.json"
    t = next(t for t in load_traces(f) if len(t.billed) >= 4)
    base = count_samples([], model="gpt-4o", traces=[t])
    assert len(base) >= 4
    assert base[0]["calibrated"] == base[0]["windowsmith"]  # nothing learnt before the first call
    # call 2 is counted with what the engine's Calibration learnt from call 1 alone: a pure offset
    cal = Calibration()
    cal.observe(base[0]["windowsmith"], base[0]["billed"])
    assert base[1]["calibrated"] != base[1]["windowsmith"]
    assert base[1]["calibrated"] - base[1]["windowsmith"] == base[0]["billed"] - base[0]["windowsmith"]
    assert abs(base[1]["calibrated"] - cal.apply(base[1]["windowsmith"])) <= 1

    k = 2  # change what call k+1 (index k) billed
    idx = sorted(i for i, u in t.billed.items() if u.prompt_tokens > 0)[k]
    billed = dict(t.billed)
    billed[idx] = Usage(input_tokens=billed[idx].prompt_tokens * 3, output_tokens=billed[idx].output_tokens)
    moved = count_samples([], model="gpt-4o", traces=[dataclasses.replace(t, billed=billed)])
    assert moved[k]["billed"] == base[k]["billed"] * 3
    assert [s["calibrated"] for s in moved[: k + 1]] == [s["calibrated"] for s in base[: k + 1]]  # no peeking
    assert moved[k + 1]["calibrated"] > base[k + 1]["calibrated"]  # the later call did learn from it
    assert [s["windowsmith"] for s in moved] == [s["windowsmith"] for s in base]  # the raw count never learns


@pytest.mark.slow
@needs_data
def test_calibrated_online_starts_each_run_from_the_earlier_runs_only():
    """A production engine serves many sessions of one model: a new session starts from the calibration
    the earlier ones stored (their offset, their slopes as its prior). The bench models that in replay
    order: the first run starts fresh, a later run from the runs before it, never from itself or a later
    run; ``stored`` carries the engine's calibration to the next file billed by the same model."""
    import dataclasses

    from windowsmith.bench.billing import count_samples, token_count_error
    from windowsmith.model import Usage
    from windowsmith.tokens import Calibration
    from windowsmith.traces import load_traces

    f = DATA / "tau2-bench" / "gpt-4o_telecom_dual-control.json"
    ts = [t for t in load_traces(f) if t.billed][:3]
    samples = count_samples([], model="gpt-4o", traces=ts)
    firsts = [next(s for s in samples if s["run"] == t.id) for t in ts]
    assert firsts[0]["calibrated"] == firsts[0]["windowsmith"]  # a fresh store: nothing learnt yet
    assert all(s["calibrated"] != s["windowsmith"] for s in firsts[1:])  # the earlier runs' offset
    # a later run's billing never reaches an earlier run's estimates
    last = ts[-1]
    billed = {i: Usage(input_tokens=u.prompt_tokens * 3, output_tokens=u.output_tokens) for i, u in last.billed.items()}
    moved = count_samples([], model="gpt-4o", traces=[*ts[:-1], dataclasses.replace(last, billed=billed)])
    n_before = sum(1 for s in samples if s["run"] != last.id)
    assert [s["calibrated"] for s in moved[:n_before]] == [s["calibrated"] for s in samples[:n_before]]
    # what the engine stored after the runs carries to the next file of the same model, in order
    stored: dict = {}
    first_part = count_samples([], model="gpt-4o", traces=ts[:2], stored=stored)
    assert stored["observations"] == len(first_part) and "history" in stored
    rest = count_samples([], model="gpt-4o", traces=ts[2:], stored=stored)
    assert [s["calibrated"] for s in first_part + rest] == [s["calibrated"] for s in samples]
    assert Calibration.from_dict(stored).observations == len(samples)
    res = token_count_error([], model="gpt-4o", traces=ts)
    assert res["calibrated"]["after_first"]["n"] == res["calls"] - 3


@pytest.mark.slow
@needs_data
def test_claude_airline_billing_includes_the_thinking_of_the_current_tool_loop_only():
    """The Claude airline file keeps each assistant turn's thinking blocks (raw_data.thinking_blocks); the
    importer replays them and the counter bills them by the model's rule (Sonnet 4.5: only the thinking
    since the last user message). The billed growth between consecutive calls confirms the rule: inside a
    tool loop and across a user message, windowsmith's count now grows as the billed prompt does; counting
    every turn's thinking (the rule of Opus 4.5, same tokenizer approximation) overcounts across a user
    message by the earlier turn's thinking."""
    import statistics

    from windowsmith.bench.billing import count_samples
    from windowsmith.tokens import COUNT_CACHE
    from windowsmith.traces import load_traces

    f = DATA / "tau2-bench" / "claude-sonnet-4-5_airline.json"
    sims = {s["id"]: s for s in json.loads(f.read_text())["simulations"]}
    traces = load_traces(f)
    assert sum(t.meta.get("thinking_blocks", 0) for t in traces) > 100

    def residuals(model: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        loop: list[tuple[int, int]] = []  # (billed growth - counted growth, thinking tokens in between)
        across: list[tuple[int, int]] = []
        for t in traces:
            raw = sims[t.meta["simulation_id"]]["messages"]
            if len(raw) != len(t.messages):  # an empty turn was dropped: message indices would not line up
                continue
            samples = {s["call"]: s for s in count_samples([], model=model, fmt="anthropic", traces=[t])}
            calls = [i for i, m in enumerate(t.messages) if m.role == "assistant" and i > 0]
            for (k, i), (k2, j) in itertools.pairwise(enumerate(calls, 1)):
                if k not in samples or k2 not in samples:
                    continue
                between = raw[i:j]
                thinking = sum(COUNT_CACHE.count("o200k_base", b.get("thinking", ""))
                               for m in between if m["role"] == "assistant"
                               for b in (m.get("raw_data") or {}).get("thinking_blocks") or [])
                resid = ((samples[k2]["billed"] - samples[k]["billed"])
                         - (samples[k2]["windowsmith"] - samples[k]["windowsmith"]))
                (across if any(m["role"] == "user" for m in between) else loop).append((resid, thinking))
        return loop, across

    loop, across = residuals("claude-sonnet-4-5")
    assert len(loop) > 10 and len(across) > 10
    loop_resid, loop_thinking = statistics.median(r for r, _ in loop), statistics.median(t for _, t in loop)
    across_resid, across_thinking = statistics.median(r for r, _ in across), statistics.median(t for _, t in across)
    assert abs(loop_resid) < 0.5 * loop_thinking and abs(across_resid) < 0.5 * across_thinking
    _, across_all = residuals("claude-opus-4-5")  # every turn's thinking counted
    all_resid = statistics.median(r for r, _ in across_all)
    assert all_resid < -0.5 * across_thinking < 0
    print(f"tool loop: {len(loop)} pairs, {loop_resid} (thinking {loop_thinking}); across a user turn: "
          f"{len(across)} pairs, {across_resid} (thinking {across_thinking}); counting all thinking: {all_resid}")
