"""Never blind: a message the history must keep but that is larger than its share is shrunk to a compressed
view naming an artifact of the original (a ``shrink`` record), never dropped; if even that cannot fit, a
BudgetBlockedError names the message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import is_blind, prepare
from windowsmith.bench.run import run_strategy
from windowsmith.bench.strategies import WindowsmithStrategy
from windowsmith.errors import BudgetBlockedError
from windowsmith.layers.builtin import BEFORE_TASK, HistoryLayer
from windowsmith.layers.shrink import MIN_VIEW, water_level
from windowsmith.model import Message, Text, ToolCall, ToolResult
from windowsmith.records import ShrinkEntry, ShrinkRecord
from windowsmith.registry import load_registry
from windowsmith.traces import load_traces

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"


def issue_text(n: int) -> str:
    """A long first message: instructions, a demonstration, and the issue at the end (as SWE-agent sends)."""
    demo = "\n".join(f"demonstration step {i}: ran `grep -n foo_{i} src/mod_{i}.py` and read the output" for i in range(n))
    return ("You are a software engineer. Solve the issue below.\n" + demo +
            "\nISSUE: calling parse_header() in src/http/headers.py raises KeyError 'x-trace-id'.\n"
            "Fix it and run tests/test_headers.py.")


def shrinks(s: ws.Session) -> list[ShrinkRecord]:
    return [r for r in s.state.records if isinstance(r, ShrinkRecord)]


def test_a_huge_pinned_request_is_shrunk_not_dropped(tmp_path):
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("pinned")
        s.system("You are a careful engineer.")
        first = issue_text(900)  # far larger than the whole window
        s.user(first)
        prev = None
        for i in range(6):
            s.add(Message("assistant", (ToolCall(f"c{i}", "bash", {"command": f"cat src/f{i}.py"}),)))
            s.tool_result(f"c{i}", f"def f{i}():\n    return {i}\n" * 40)
            pack = s.build()
            msgs = pack.neutral.messages
            assert msgs, "the history is never dropped whole"
            assert any(r.call_id == f"c{i}" for m in msgs for r in m.tool_results)  # the newest result is there
            head = msgs[0].text
            assert head.startswith("You are a software engineer") and "x-trace-id" in head  # head and tail kept
            assert pack.manifest.tokens <= pack.manifest.available
            if prev is not None:  # the shrunk request is stable: the cache prefix holds
                assert msgs[0] == prev
            prev = msgs[0]
        recs = shrinks(s)
        assert len(recs) == 1 and recs[0].entries[0].seq == s.state.units[0].first_seq
        entry = recs[0].entries[0]
        assert entry.tokens_before > entry.tokens_after and f"artifact://{entry.artifact}" in head
        assert e.artifacts.get(entry.artifact) == first.encode()  # the artifact reads back the original
        # the manifest of the build that shrank says so, with the artifact
        detail = [a for m in e.store.list_packs(s.id) for a in m["actions"] if a["kind"] == "shrink"]
        assert len(detail) == 1
        detail = detail[0]["detail"]["shrunk"]
        assert detail[0]["artifact"] == f"artifact://{entry.artifact}" and detail[0]["seq"] == entry.seq
        # the log rebuilds the same pack
        again = e.session("pinned").build()
        assert again.manifest.checksum == pack.manifest.checksum


def demonstration(n: int) -> str:
    return "Here is a demonstration of how to use the interface.\n" + "\n".join(
        f"demo step {i}: ran `grep -n foo_{i} src/mod_{i}.py` and read the output" for i in range(n))


ISSUE = ("We're solving this issue: calling parse_header() in src/http/headers.py raises KeyError 'x-trace-id' "
         "when the header is missing; reproduce with tests/test_headers.py::test_missing_trace_id. ") * 30


def test_every_user_message_before_the_first_reply_is_the_pinned_request(tmp_path):
    """SWE-agent sends a demonstration, then the issue, as two user messages: both are the request. The
    demonstration is shrunk first; the issue (the task) stays whole and is never dropped by a later cut."""
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("demo-then-issue")
        s.system("You are a careful engineer.")
        s.user(demonstration(600))  # far larger than the window
        s.user(ISSUE)
        assert len(s.state.units) == 1 and len(s.state.units[0].messages) == 2 and s.state.units[0].pinned
        pack = s.build()  # the agent's first call: the request alone, shrunk at once to its two shares (so
        first = pack.neutral.messages  # once only: not to the low water now and to its shares again later)
        assert first[1].text == ISSUE and first[0].text.startswith("Here is a demonstration")
        assert pack.manifest.tokens <= 2 * HistoryLayer.pinned_share * pack.manifest.available
        heads = [first[0]]
        for i in range(14):
            s.add(Message("assistant", (ToolCall(f"c{i}", "bash", {"command": f"cat src/f{i}.py"}),)))
            s.tool_result(f"c{i}", f"def f{i}():\n    return {i}\n" * 60)
            msgs = s.build().neutral.messages
            assert msgs[1].text == ISSUE  # the task, whole, on every call
            assert msgs[0].text.startswith("Here is a demonstration") and "artifact://" in msgs[0].text
            heads.append(msgs[0])
        assert len(s.state.units) > 2 and s.state.first_visible_unit() > 1  # later cuts dropped history, not it
        assert all(h == heads[0] for h in heads)  # the pinned request was shrunk once: its cache prefix held
        recs = shrinks(s)
        assert [en.seq for r in recs for en in r.entries] == [s.state.units[0].first_seq]
        s.user("thanks; now also handle x-span-id")  # after the first reply a user message is history again
        assert len(s.state.units[0].messages) == 2


@pytest.mark.slow
def test_a_short_task_does_not_lend_its_share_to_the_demonstration_before_it(tmp_path):
    """Of several opening messages the task (the last) has its own share and the messages before it the other: a
    one-line task after a long demonstration leaves the demonstration half a share, not the two less the task, since
    every later call reads that view (SWE-agent 0.x with an 80,000-character demonstration at 32K: -14%, then -13%
    at half a share)."""
    task = "Fix parse_header() in src/http/headers.py: it raises KeyError 'x-trace-id' when the header is missing."
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=32000) as e:
        s = e.session("short-task")
        s.system("You are a careful engineer.")
        s.user(demonstration(3000))
        s.user(task)
        for i in range(40):
            s.add(Message("assistant", (ToolCall(f"c{i}", "bash", {"command": f"cat src/f{i}.py"}),)))
            s.tool_result(f"c{i}", f"def f{i}():\n    return {i}\n" * 60)
            msgs = s.build().neutral.messages
            assert msgs[1].text == task  # the task, whole
        available = s.build().manifest.available
        entry = next(en for r in shrinks(s) for en in r.entries if en.seq == s.state.units[0].first_seq)
        # half of one share at most (was about two shares, then one: BEFORE_TASK)
        assert entry.tokens_after <= BEFORE_TASK * HistoryLayer.pinned_share * available
        assert entry.tokens_after > 0.5 * BEFORE_TASK * HistoryLayer.pinned_share * available  # not less than needed


@pytest.mark.slow
def test_a_single_opening_message_of_one_block_is_shrunk_at_once_to_its_two_shares(tmp_path):
    """One message holding demonstration, issue and instructions in one block (SWE-agent 1.x sends them so): its first
    view takes at most the two shares, and keeps the head, the tail and the issue between them, the line naming the
    most identifiers (``message_view``; with head and tail alone, a SWE-agent request merged that way lost 19 points
    of strict recall at two shares). Once: the cuts that follow keep it as it is."""
    share = HistoryLayer.pinned_share
    issue = ISSUE[: len(ISSUE) // 30].strip()
    steps = "\n".join(f"Step {i}: think about the edge cases before you write the fix." for i in range(40))
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("one-opener")
        s.system("You are a careful engineer.")
        s.user(demonstration(600) + "\n" + issue + "\n" + steps)
        pack = s.build()
        assert share * pack.manifest.available < pack.manifest.tokens <= 2 * share * pack.manifest.available
        view = pack.neutral.messages[0]
        lines = view.text.splitlines()
        assert lines[0] == "Here is a demonstration of how to use the interface." and issue in lines
        assert "Step 39: think about the edge cases before you write the fix." in lines and "artifact://" in view.text
        assert len(s.state.units[0].messages) == 1
        for i in range(8):
            s.add(Message("assistant", (ToolCall(f"c{i}", "bash", {"command": f"cat src/f{i}.py"}),)))
            s.tool_result(f"c{i}", f"def f{i}():\n    return {i}\n" * 60)
            assert s.build().neutral.messages[0] == view  # the cache prefix holds through every cut
        assert len(shrinks(s)) == 1


def pasted(text: str, doc: str) -> Message:
    """A user message of two blocks: the ask, then a pasted document."""
    return Message("user", (Text(text), Text(doc)))


@pytest.mark.slow
def test_an_opening_message_of_several_blocks_is_shrunk_at_once_to_its_two_shares(tmp_path):
    """The ask beside a pasted document: the water level cuts the largest block first, so the ask stays whole at any
    view size, and every later call reads the view. Its first view takes at most the two shares (at the low water,
    0.7 of the history's cap, an 80,000-character paste in a 16K window cost 13% more than dropping it:
    benchmarks/bench_stress.py, bigfirst), once: the cuts that follow keep it as it is."""
    share = HistoryLayer.pinned_share
    ask = "Find why parse_header() in src/http/headers.py raises KeyError 'x-trace-id'; the log is below."
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("pasted")
        s.system("You are a careful engineer.")
        s.add(pasted(ask, demonstration(600)))
        pack = s.build()
        assert share * pack.manifest.available < pack.manifest.tokens <= 2 * share * pack.manifest.available
        view = pack.neutral.messages[0]
        assert view.content[0] == Text(ask) and "artifact://" in view.text  # the ask whole, the document a view
        for i in range(16):
            s.add(Message("assistant", (ToolCall(f"c{i}", "bash", {"command": f"cat src/f{i}.py"}),)))
            s.tool_result(f"c{i}", f"def f{i}():\n    return {i}\n" * 60)
            assert s.build().neutral.messages[0] == view  # the cache prefix holds through every cut
        assert s.state.first_visible_unit() > 4 and len(shrinks(s)) == 1


def test_an_opening_message_a_little_over_a_small_cap_keeps_more_than_its_two_shares(tmp_path):
    """In a small history cap the two shares are a few hundred tokens: a view that small is mostly its footer and
    index. The first view is cut no lower than ``ALONE_FLOOR`` (and the low water)."""
    from windowsmith.layers.builtin import ALONE_FLOOR

    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=1400) as e:
        s = e.session("small")
        s.system("You are a careful engineer.")
        s.add(pasted("Why does this fail?", (ISSUE * 2)[:6000]))
        pack = s.build()
        assert [a["kind"] for a in pack.manifest.actions] == ["shrink"]
        two_shares = 2 * HistoryLayer.pinned_share * pack.manifest.available
        assert two_shares < ALONE_FLOOR and pack.manifest.tokens > two_shares
        assert "We're solving this issue: calling parse_header()" in pack.neutral.messages[0].text


def test_the_pinned_request_holds_at_most_a_few_opening_messages(tmp_path):
    from windowsmith.state import PINNED_MESSAGES

    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db") as e:
        s = e.session("many-openers")
        for i in range(PINNED_MESSAGES + 3):
            s.user(f"note {i}")
        assert len(s.state.units[0].messages) == PINNED_MESSAGES and len(s.state.units) == 4
        again = e.session("many-openers")  # a resumed session builds the same units from the log
        assert [len(u.messages) for u in again.state.units] == [len(u.messages) for u in s.state.units]


@pytest.mark.slow
def test_a_user_message_larger_than_the_window_is_shrunk(tmp_path):
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("big-user")
        s.user("fix the build")
        s.assistant("which log?")
        log = "".join(f"line {i}: compiling module_{i}.c ok\n" for i in range(3000)) + "error: undefined symbol zz_top\n"
        s.user(log)
        pack = s.build()
        last = pack.neutral.messages[-1]
        assert last.role == "user" and "undefined symbol zz_top" in last.text and "artifact://" in last.text
        assert len(shrinks(s)) == 1
        assert is_blind(pack.neutral, Message.user(log), True) is False


def test_what_cannot_fit_even_shrunk_is_a_clear_error(tmp_path):
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=4000) as e:
        s = e.session("blocked")
        s.user("go")
        # only a tool call's string arguments can be shrunk (to a view naming their artifact): a list of 5,000
        # numbers cannot, and the newest exchange alone is over the window
        s.add(Message("assistant", (ToolCall("c1", "write", {"path": "a.py", "values": list(range(5000))}),)))
        s.tool_result("c1", "ok")
        with pytest.raises(BudgetBlockedError, match=r"the assistant message at seq \d+"):
            s.build()
        assert e.store.get_pack is not None and not shrinks(s)


@pytest.mark.parametrize("sizes,cut", [([1000, 500, 100], 600), ([3000], 2000), ([400, 400], 100), ([500, 300], 5000)])
def test_water_level_cuts_the_largest_first(sizes, cut):
    level = water_level(sizes, cut, MIN_VIEW)
    removed = sum(max(0, s - level) for s in sizes)
    assert level >= MIN_VIEW
    assert removed >= cut or level == MIN_VIEW
    if level > MIN_VIEW:
        assert removed - cut <= len(sizes)  # no more than needed (integer rounding)


SWE_AGENT = ("swe-agent/tests__test_data__trajectories__gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95"
             "__c-3.00__install-1__pydicom__pydicom-1458.traj")


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available (../shared/data/traces)")
@pytest.mark.parametrize("path", [SWE_AGENT, "mini-swe-agent/astropy__astropy-12907.traj.json"])
def test_bench_replay_of_swe_agent_runs_at_8k_has_no_blind_call(tmp_path, path):
    """The real case: SWE-agent's first message (demonstration + issue, ~4.8K tokens) is larger than the
    history's share at 8K; it is shrunk once and every call still has the newest observation."""
    spec = load_registry().get("claude-sonnet-4-5")
    cfg = BenchConfig.make(spec, 8000)
    traces = load_traces(DATA / path)
    strat = WindowsmithStrategy(cfg, tmp_dir=str(tmp_path))
    try:
        rm = run_strategy(prepare(traces[0]), strat)
    finally:
        strat.close()
    assert rm.error is None and rm.calls >= 5
    assert rm.blind_calls == 0 and rm.over_window == 0
    if path == SWE_AGENT:  # (mini-swe-agent's emergency cuts now leave its pinned request within its share)
        assert rm.events.get("shrink", 0) >= 1  # the pinned request is over its share of a full history


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available (../shared/data/traces)")
def test_a_screenshot_goes_before_the_text_of_a_message_that_must_stay(tmp_path):
    """The real SWE-agent run with a screenshot attached to every user message (an agent that looks at a browser),
    at 8K: its pinned request (demonstration + issue + screenshot) and its newest observations are over the
    history's room. Their views were planned before their images: the issue was cut to its first line beside a
    1,600-token picture and an 18-line file view to an elision marker (2 blind calls, strict recall 0.77). Images
    go first now (their stubs name their artifacts); the texts stay readable."""
    from dataclasses import replace

    spec = load_registry().get("claude-sonnet-4-5")
    trace = load_traces(DATA / SWE_AGENT)[0]
    shot = [Message(m.role, (*m.content, ws.Image(url=f"https://shots.invalid/{i}.png")))
            if m.role == "user" else m for i, m in enumerate(trace.messages)]
    strat = WindowsmithStrategy(BenchConfig.make(spec, 8000), tmp_dir=str(tmp_path))
    try:
        rm = run_strategy(prepare(replace(trace, messages=tuple(shot))), strat)
    finally:
        strat.close()
    assert rm.error is None and rm.calls >= 5
    assert rm.blind_calls == 0 and rm.over_window == 0
    assert rm.strict / rm.recall_calls >= 0.99


def test_a_newest_message_keeps_its_text_and_stubs_its_image(tmp_path):
    """A newest user message whose text fits the history's room but not beside its image: the image becomes a stub
    naming its artifact, the text stays whole (no view)."""
    png = "iVBORw0KGgo" + "B" * 300
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=4000) as e:
        s = e.session("img")
        s.system("You operate a browser. " + "Follow the policy carefully. " * 180)
        s.user("Find the invoice and pay it.")
        s.add(Message("assistant", (ToolCall("c0", "open", {"url": "https://bank.invalid"}),)))
        s.tool_result("c0", "opened")
        text = "\n".join(f"row {i}: invoice INV-{1000 + i} due 2026-12-{i % 28 + 1:02d}" for i in range(25))
        s.user([{"type": "text", "text": text}, {"type": "image", "data": png, "media_type": "image/png"}])
        pack = s.build()
        assert pack.manifest.tokens <= pack.manifest.available
        last = pack.neutral.messages[-1]
        assert last.text.startswith(text) and "elided" not in last.text
        assert not any(isinstance(b, ws.Image) for b in last.content)
        assert "artifact://" in last.text


def test_shrunk_view_text_is_in_the_log_for_replay(tmp_path):
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("replay")
        s.user(issue_text(900))
        s.add(Message("assistant", (ToolCall("c1", "bash", {"command": "ls"}),)))
        s.tool_result("c1", "a.py\nb.py")
        pack = s.build()
        ev = [x for x in e.store.events(s.id) if x.kind == "compaction" and x.data.get("type") == "shrink"]
        assert len(ev) == 1 and ev[0].data["entries"][0]["text"] == pack.neutral.messages[0].text
        assert isinstance(pack.neutral.messages[0].content[0], Text)
        assert not any(isinstance(b, ToolResult) for b in pack.neutral.messages[0].content)


def test_a_system_prompt_over_the_available_budget_but_within_the_window_lowers_the_reserved_output(tmp_path):
    """tau2's telecom policy alone is larger than window - reserved output at 8K, yet fits the window: the
    reservation is lowered to its floor (recorded), not the policy cut; past the floor it is a clear error."""
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("policy")
        policy = "".join(f"Policy rule {i}: agents must verify account {i} before any change.\n" for i in range(420))
        s.system(policy)
        s.user("my phone has no data")
        pack = s.build()
        acts = [a for a in pack.manifest.actions if a["layer"] == "output"]
        assert len(acts) == 1 and acts[0]["tokens_after"] < acts[0]["tokens_before"]
        assert pack.manifest.reserved_output == acts[0]["tokens_after"]
        assert pack.neutral.system[0].text == policy  # the instructions are never cut
        assert pack.neutral.max_output_tokens == pack.manifest.reserved_output
        assert pack.manifest.tokens + pack.manifest.reserved_output <= 8000
        s2 = e.session("policy-too-big")
        s2.system(policy * 2)
        s2.user("hi")
        with pytest.raises(ws.BudgetExceededError, match="'system'"):
            s2.build()


def test_a_system_prompt_that_leaves_the_history_less_than_its_newest_message_lowers_the_reserved_output(tmp_path):
    """The required layers fit beside the reserved output, with a few tokens to spare, but fewer than the newest
    message at its smallest view: the reservation is lowered (recorded, with why), where the build was refused
    with BudgetBlockedError (the tau2-bench telecom policy at 8K under Gemini 2.5's token factor: 10 runs)."""
    policy = "Policy. " + " ".join(f"Rule {i}: verify the customer before any change." for i in range(519))
    question = "My phone number is 555-0134 and my data plan stopped working since this morning, please help me."
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("tight")
        s.system(policy)
        s.user(question)
        pack = s.build()
        acts = [a for a in pack.manifest.actions if a["layer"] == "output"]
        assert len(acts) == 1 and "smallest views" in acts[0]["reason"]
        # the policy alone fits the 5,840 available beside the whole reservation; the question does not
        assert acts[0]["tokens_before"] == 2000 and pack.manifest.reserved_output == acts[0]["tokens_after"] < 2000
        assert pack.neutral.messages[-1].text == question and pack.neutral.system[0].text == policy
        assert pack.manifest.tokens <= pack.manifest.available and pack.manifest.tokens + 2000 > 5840


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available (../shared/data/traces)")
def test_a_cut_summary_message_that_cannot_fit_is_left_out_not_the_build_refused():
    """claude-sonnet-5-5 counts 1.5 o200k tokens per token: at 8K the OpenHands tools and system leave the history
    ~840 tokens, and after a cut its summary message (work log, index, transcript reference) did not fit beside the
    pinned request and the newest exchange: BudgetBlockedError, the run stopped. The summary message is now left
    out of that request (the log keeps it) and the run completes, never blind."""
    spec = load_registry().get("claude-sonnet-5-5")
    traces = load_traces(DATA / "openhands" / "msb_example_output.jsonl")
    run = prepare(next(t for t in traces if t.id.endswith("ponyc-4588")))
    rm = run_strategy(run, WindowsmithStrategy(BenchConfig.make(spec, 8000)))
    assert rm.error is None, rm.error
    assert rm.calls == len(run.calls) and rm.blind_calls == 0 and rm.events.get("emergency", 0) >= 1
    # the manifest says so on the requests that went without it
    strategy = WindowsmithStrategy(BenchConfig.make(spec, 8000))
    strategy.start(run.id, run.system, run.tools, native_tools=run.native_tools)
    left_out = 0
    calls = set(run.calls)
    for i, m in enumerate(run.messages):
        if i in calls:
            strategy.build()
            acts = strategy.session.last_pack.manifest.actions
            left_out += any(a["layer"] == "history" and a.get("detail", {}).get("carry_left_out") for a in acts)
        strategy.observe(m)
    strategy.finish()
    assert left_out >= 1


def test_offloaded_views_name_the_identifiers_their_cut_lost(tmp_path):
    """A view keeps every identifier of the result it stands for, as far as its budget goes."""
    from windowsmith.text import identifier_index, identifiers

    lines = [f"src/pkg/mod_{i}.py:{100 + i}: warning in parse_item_{i}" for i in range(400)]
    lines[200] = "src/pkg/core.py:1458: KeyError: 'x-trace-id' raised in HeaderParser.parse_header"
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=16_000) as e:
        s = e.session("ids")
        s.user("fix it")
        s.add(Message("assistant", (ToolCall("c1", "grep", {"pattern": "warning"}),)))
        s.tool_result("c1", "\n".join(lines))
        view = s.state.units[-1].messages[-1].tool_results[0].text
    assert "artifact://" in view and "[also in the full text: " in view
    for k in ("src/pkg/core.py", "KeyError", "HeaderParser.parse_header", "1458"):
        assert k in view  # the middle of the result was cut; its identifiers were not
    count = len  # one token per character bounds the index by characters here
    idx = identifier_index("a/b.py FooError 12345 keep_me", "keep_me", 80, count)
    assert idx == "[also in the full text: FooError, a/b.py, 12345]"  # ranked: error names, paths, numbers
    short = identifier_index("a/b.py FooError 12345 keep_me", "keep_me", 44, count)
    assert short == "[also in the full text: FooError … 2 more]" and count(short) <= 44
    assert identifier_index("plain words only", "", 100, count) == ""
    assert identifiers("x " * 10 + "models.py os.path.join 404") == ["models.py", "os.path.join", "404"]


def test_a_summary_runs_only_where_its_model_call_pays():
    from windowsmith.compaction.summary import summary_pays

    spec = load_registry().get("claude-sonnet-4-5")  # cache reads at a tenth of the input price
    pays, econ = summary_pays(4000, 500, spec, 10)
    assert not pays and econ["summary_usd"] > econ["saving_usd"] > 0
    assert summary_pays(4000, 500, spec, 200)[0]  # a long session ahead: the call pays for itself
    uncached = load_registry().get("gpt-4o")
    from dataclasses import replace as dc_replace

    flat = dc_replace(uncached, prices=dc_replace(uncached.prices, cache_read=None, cache_write=None))
    assert summary_pays(4000, 500, flat, 10)[0]  # without a cache discount it pays within ten turns


def test_a_summary_pays_only_against_the_free_cut_that_would_take_the_span():
    """Without the summary, the span stays until the free cut (no model call) takes it, a few turns away; from then
    on the requests carry the cut's work log and index instead of the summary. With a cache read at half the input
    price (gpt-4o) the older model, which kept the span for every expected turn, paid on each due summary."""
    from windowsmith.compaction.summary import summary_pays

    gpt4o = load_registry().get("gpt-4o")
    assert summary_pays(4000, 500, gpt4o, 10)[0]  # the span kept for ten turns: the call looked worth it
    pays, econ = summary_pays(4000, 500, gpt4o, 10, carry=300, turns_to_cut=1)
    assert not pays and econ["turns_to_cut"] == 1 and econ["saving_usd"] < econ["summary_usd"]
    # (4000 - 500) tokens saved for 1 turn, then 200 more carried for 9: (3500 - 1800) reads at $1.25/M
    assert econ["saving_usd"] == pytest.approx(1700 * 1.25 / 1e6, abs=1e-6)
    far, econ = summary_pays(4000, 500, gpt4o, 10, carry=300, turns_to_cut=50)
    assert far and econ["turns_to_cut"] == 10  # a cut further away than the expected turns: the span stays for all
    assert not summary_pays(4000, 500, gpt4o, 10, carry=300, turns_to_cut=-3)[0]  # over the mark: the cut is now


@settings(max_examples=60, deadline=None)
@given(span=st.integers(600, 60_000), summary=st.integers(64, 4_000), carry=st.integers(0, 3_000),
       turns=st.floats(0, 40), more=st.floats(0, 10), model=st.sampled_from(["gpt-4o", "claude-sonnet-4-5",
                                                                             "gemini-2.5-flash", "gpt-4.1"]))
def test_a_summary_pays_more_the_further_away_the_free_cut_is(span, summary, carry, turns, more, model):
    """Against the free cut, a summary saves the span until the cut comes and the carry after: when the summary is
    shorter than the span it saves, a cut further away never makes it pay less; and it never pays more than
    against keeping the span for every expected turn (the older model, an upper bound)."""
    from windowsmith.compaction.summary import summary_pays

    spec = load_registry().get(model)
    summary = min(summary, span // 2)
    carry = min(carry, span)
    near = summary_pays(span, summary, spec, 10, carry=carry, turns_to_cut=turns)[1]["saving_usd"]
    far = summary_pays(span, summary, spec, 10, carry=carry, turns_to_cut=turns + more)[1]["saving_usd"]
    bound = summary_pays(span, summary, spec, 10)[1]["saving_usd"]
    assert near <= far + 1e-6 and far <= bound + 1e-6


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available (../shared/data/traces)")
def test_gpt4o_pricing_cuts_for_free_instead_of_a_summary_per_cut():
    """A real mini-swe-agent run at 8K under gpt-4o prices: the request reaches the summary threshold a turn or two
    before the free cut's mark, so the summary's model call never pays against the cut (the older model placed a
    summary at each of them: 200 summary calls, 27% of the cost, on the validation half)."""
    spec = load_registry().get("gpt-4o")
    run = prepare(load_traces(DATA / "mini-swe-agent" / "django__django-14140.traj.json")[0])
    rm = run_strategy(run, WindowsmithStrategy(BenchConfig.make(spec, 8000)))
    assert rm.error is None and rm.blind_calls == 0 and rm.over_window == 0
    assert rm.summary_calls == 0 and rm.events.get("emergency", 0) >= 1


def test_inspect_says_what_was_shrunk(tmp_path):
    from click.testing import CliRunner

    from windowsmith.cli import main

    db = tmp_path / "w.db"
    with ws.Engine(model="gpt-4o", store=db, window=8000) as e:
        s = e.session("shown")
        s.user(issue_text(900))
        s.add(Message("assistant", (ToolCall("c1", "bash", {"command": "ls"}),)))
        s.tool_result("c1", "a.py\nb.py")
        s.build()
        entry = shrinks(s)[0].entries[0]
    r = CliRunner(env={"COLUMNS": "400"}).invoke(main, ["inspect", "shown", "--store", str(db)])
    assert r.exit_code == 0, r.output
    assert f"shrink history (seq {entry.seq} {entry.tokens_before:,}→{entry.tokens_after:,})" in " ".join(r.output.split())


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pinned=st.integers(10, 4000), newest=st.integers(10, 4000), turns=st.integers(0, 6),
       window=st.sampled_from([4000, 8000, 16000]))
def test_never_blind_property(tmp_path_factory, pinned, newest, turns, window):
    """Whatever the sizes: the pack holds the newest user message (its head survives any shrink) and fits
    the budget, or the build raises a BudgetExceededError; never a pack without it."""
    db = tmp_path_factory.mktemp("p") / "w.db"
    with ws.Engine(model="gpt-4o", store=db, window=window) as e:
        s = e.session("p")
        s.user("TASK-HEAD " + " ".join(f"word{i}" for i in range(pinned)))
        for i in range(turns):
            s.add(Message("assistant", (ToolCall(f"c{i}", "bash", {"command": f"ls {i}"}),)))
            s.tool_result(f"c{i}", f"out_{i} " * 200)
        s.user("NEWEST-HEAD " + " ".join(f"line{i}" for i in range(newest)))
        try:
            pack = s.build()
        except ws.BudgetExceededError:
            return
        assert pack.manifest.tokens <= pack.manifest.available
        last = [m for m in pack.neutral.messages if m.role == "user"][-1]
        assert last.text.startswith("NEWEST-HEAD")
        assert pack.neutral.messages[0].text.startswith("TASK-HEAD")


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ask=st.integers(5, 600), doc=st.integers(50, 12_000), turns=st.integers(1, 8),
       window=st.sampled_from([4000, 8000, 16000]))
def test_a_pasted_document_beside_its_ask_property(tmp_path_factory, ask, doc, turns, window):
    """An opening message of two blocks, the ask then a pasted document, of any sizes: every build fits the budget
    (or refuses with a BudgetExceededError), the ask's head leads the request, the newest result is there, and the
    opening message changes at most once: to its two shares at its first call when it is over the cap, to its share
    when the history behind it fills when it is not (a view is never shrunk again)."""
    db = tmp_path_factory.mktemp("p") / "w.db"
    with ws.Engine(model="gpt-4o", store=db, window=window) as e:
        s = e.session("p")
        s.add(pasted("ASK-HEAD " + " ".join(f"need{i}" for i in range(ask)),
                     " ".join(f"doc_line_{i}" for i in range(doc))))
        versions: list[Message] = []
        for i in range(turns):
            try:
                pack = s.build()
            except ws.BudgetExceededError:
                return
            msgs = pack.neutral.messages
            assert pack.manifest.tokens <= pack.manifest.available
            assert msgs[0].text.startswith("ASK-HEAD")
            if not versions or msgs[0] != versions[-1]:
                versions.append(msgs[0])
            assert len(versions) <= 2
            s.add(Message("assistant", (ToolCall(f"c{i}", "bash", {"command": f"ls {i}"}),)))
            s.tool_result(f"c{i}", f"out_{i} " * 300)
        pack = s.build()
        assert any(r.call_id == f"c{turns - 1}" for m in pack.neutral.messages for r in m.tool_results)


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shots=st.integers(1, 7), earlier=st.integers(0, 4), text=st.integers(5, 1500),
       window=st.sampled_from([4000, 8000, 16000]))
def test_screenshots_never_block_or_blind_a_build_property(tmp_path_factory, shots, earlier, text, window):
    """A computer-use agent's steps, each with a screenshot, the newest with ``shots`` parallel ones: the build
    fits the budget, holds the newest tool results (text first), and if an image of them is kept, the newest is;
    never a BudgetBlockedError because images cannot shrink."""
    db = tmp_path_factory.mktemp("i") / "w.db"
    png = "iVBORw0KGgo" + "A" * 200
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=window) as e:
        s = e.session("cu")
        s.user("Pay the invoice in the browser.")
        for i in range(earlier):
            s.add(Message("assistant", (ToolCall(f"e{i}", "screenshot", {"step": i}),)))
            s.tool_result(f"e{i}", [{"type": "text", "text": f"step {i}"},
                                    {"type": "image", "data": png + str(i), "media_type": "image/png"}])
        calls = tuple(ToolCall(f"n{k}", "screenshot", {"display": k}) for k in range(shots))
        s.add(Message("assistant", calls))
        for k in range(shots):
            s.tool_result(f"n{k}", [{"type": "text", "text": f"NEWEST-{k} " + "px " * text},
                                    {"type": "image", "data": png + f"n{k}", "media_type": "image/png"}])
        pack = s.build()
        assert pack.manifest.tokens <= pack.manifest.available
        results = {r.call_id: r for m in pack.neutral.messages if m.role == "tool" for r in m.tool_results}
        assert all(results[f"n{k}"].text.startswith(f"NEWEST-{k}") for k in range(shots))
        kept = [k for k in range(shots) if any(isinstance(c, ws.Image) for c in results[f"n{k}"].content)]
        assert not kept or kept[-1] == shots - 1


@pytest.mark.slow
def test_the_newest_message_is_shrunk_to_the_history_cap_not_to_its_low_water(tmp_path):
    """A newest message larger than the whole history's room keeps as much of itself as fits: its view is cut to
    the cap (the next build drops its unit when a newer one needs the room). Cut to the low water (0.7 of the
    cap), as the pinned request is, the request left a third of its room empty and the view lost lines."""
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=4000) as e:
        s = e.session("newest")
        s.user("Fix the failing test in tests/test_parse.py")
        s.add(Message("assistant", (ToolCall("c0", "bash", {"command": "pytest -x"}),)))
        s.tool_result("c0", "FAILED tests/test_parse.py::test_header - KeyError: 'x-trace-id'")
        s.user("\n".join(f"{i:4d}: def function_{i}(arg_{i}): return compute(arg_{i}, {i})" for i in range(600)))
        pack = s.build()
        m = pack.manifest
        assert m.tokens <= m.available
        assert m.tokens >= 0.85 * m.available  # was 0.67: the view cut to the low water
        last = pack.neutral.messages[-1]
        assert last.text.startswith("   0: def function_0") and "artifact://" in last.text
        assert "function_90," in last.text  # its identifier index reaches further (was: up to function_71)


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available (../shared/data/traces)")
def test_a_tight_window_keeps_the_newest_observation_readable():
    """claude-sonnet-5-5 (1.5 tokens per o200k token) at 6K: SWE-agent's demonstration and issue leave the
    history ~1,900 tokens; a 5,000-character file view arriving beside the cut's work log was shrunk to the low
    water, its view all elision marker and index (2 blind calls). Cut to the cap it keeps its lines: none."""
    spec = load_registry().get("claude-sonnet-5-5")
    rm = run_strategy(prepare(load_traces(DATA / SWE_AGENT)[0]), WindowsmithStrategy(BenchConfig.make(spec, 6000)))
    assert rm.error is None, rm.error
    assert rm.blind_calls == 0 and rm.events.get("emergency", 0) >= 1 and rm.events.get("shrink", 0) >= 1


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available (../shared/data/traces)")
def test_the_history_takes_its_room_before_failure_evidence():
    """Claude airline run at 5K: once a cut's truncate record is logged, the dropped turn's failed tool call becomes
    failure evidence, whose share of the optional room left the history less than its newest exchange needs even
    shrunk; the history was dropped whole and the request went out blind (no messages). The history now takes
    what it needs first and the evidence what is left; a request without its history is refused, never sent."""
    spec = load_registry().get("claude-sonnet-4-5")
    run = prepare(next(t for t in load_traces(DATA / "tau2-bench" / "claude-sonnet-4-5_airline.json")
                       if "814d832e" in t.id))
    strategy = WindowsmithStrategy(BenchConfig.make(spec, 5000))
    strategy.start(run.id, run.system, run.tools, native_tools=run.native_tools)
    calls, newest, before, evidence_dropped = set(run.calls), None, None, 0
    try:
        for i, m in enumerate(run.messages):
            if i in calls:
                built = strategy.build()
                assert built.request.messages and not is_blind(built.request, newest, i > 0, before), i
                acts = strategy.session.last_pack.manifest.actions
                evidence_dropped += any(a["kind"] == "drop" and a["layer"] == "evidence" for a in acts)
                strategy.after_call(built, 0)
            strategy.observe(m)
            if m.role in ("user", "tool"):
                newest, before = m, (run.messages[i - 1] if i else None)
    finally:
        strategy.finish()
    assert evidence_dropped >= 1


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available (../shared/data/traces)")
def test_the_task_after_a_demonstration_keeps_its_share_in_a_tight_room():
    """SWE-agent 0.x opens with a demonstration, then the issue. Giving that request 1.5 pinned shares instead of 2
    looked 6.6% cheaper on the dev run at 8K, but the saving came out of the issue itself: at 5K under
    claude-sonnet-5-5's token factor the demonstration is at its floor and the issue was cut to a view whose head no
    longer read as the issue (a blind first call). Two shares keep it; this run is never blind."""
    from windowsmith.bench.metrics import prepare as prep

    spec = load_registry().get("claude-sonnet-5-5")
    path = next((DATA / "swe-agent").glob("*gpt4__swe-bench-dev-easy*pydicom-1458.traj"))
    run = prep(load_traces(path)[0])
    rm = run_strategy(run, WindowsmithStrategy(BenchConfig.make(spec, 5000)))
    assert rm.error is None and rm.calls == len(run.calls) and rm.blind_calls == 0
    assert HistoryLayer().pinned_share_for(3000, 5840, several=True) == 2 * HistoryLayer.pinned_share


def _file_body(n: int) -> str:
    return "\n".join(f"def handler_{i}(request):\n    return render(request, 'page_{i}.html', {{'id': {i}}})"
                     for i in range(n))


def test_a_tool_call_writing_a_file_larger_than_the_share_is_shrunk_not_refused(tmp_path):
    # a coding agent writes a 300-function file through its editor at 8K: the newest unit's assistant message
    # alone is over the history's share. No text block of it could shrink (the file is a tool-call argument),
    # so the build was refused with BudgetBlockedError; now the argument becomes a view naming its artifact
    body = _file_body(300)
    db = tmp_path / "w.db"
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=8000) as e:
        s = e.session("write")
        s.user("Add a handler per page to app/views.py")
        s.add(Message("assistant", (Text("Writing the views."),
                                    ToolCall("w1", "str_replace_editor",
                                             {"command": "create", "path": "app/views.py", "file_text": body}))))
        s.tool_result("w1", "File created successfully at: app/views.py")
        pack = s.build()
        assert pack.tokens <= pack.manifest.available
        call = next(b for m in pack.neutral.messages for b in m.content if isinstance(b, ToolCall))
        assert call.arguments["command"] == "create" and call.arguments["path"] == "app/views.py"
        view = call.arguments["file_text"]
        assert view.startswith("def handler_0(request):") and len(view) < 0.6 * len(body)
        rec = shrinks(s)[0]
        entry = next(x for x in rec.entries if x.at == (1, "file_text"))
        assert f"artifact://{entry.artifact}" in view and e.artifacts.get(entry.artifact) == body.encode()
        results = [r for m in pack.neutral.messages for r in m.tool_results]
        assert results[0].text == "File created successfully at: app/views.py"  # the newest result, whole
        assert s.messages[1].tool_calls[0].arguments["file_text"] == body  # the log keeps the original
        for fmt, model in (("anthropic", None), ("openai-chat", "gpt-4o"), ("gemini", "gemini-2.5-flash")):
            built = s.build(fmt, model=model) if model else s.build(fmt)
            assert "def handler_0(request)" in json.dumps(built.request)
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=8000) as e2:
        again = e2.session("write").build()
    assert again.request == pack.request


def test_a_shrink_entry_of_a_tool_call_argument_round_trips():
    entry = ShrinkEntry(7, (1, "file_text"), "view", "ab" * 32, 4000, 300)
    assert ShrinkEntry.from_dict(json.loads(json.dumps(entry.to_dict()))) == entry
    assert ShrinkEntry.from_dict({"seq": 3, "at": [0, 2], "text": "v"}).at == (0, 2)  # older logs


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arg=st.integers(10, 9000), turns=st.integers(0, 4), window=st.sampled_from([4000, 8000, 16000]))
def test_large_tool_call_arguments_never_block_or_blind_a_build_property(tmp_path_factory, arg, turns, window):
    """Whatever the size of the newest call's argument: the build fits the budget and holds the newest tool
    result, or raises BudgetExceededError (the required layers alone); never BudgetBlockedError."""
    db = tmp_path_factory.mktemp("a") / "w.db"
    with ws.Engine(model="gpt-4o", store=db, window=window) as e:
        s = e.session("a")
        s.user("Write the module.")
        for i in range(turns):
            s.add(Message("assistant", (ToolCall(f"c{i}", "bash", {"command": f"ls {i}"}),)))
            s.tool_result(f"c{i}", f"out_{i} " * 150)
        s.add(Message("assistant", (ToolCall("w", "write_file", {"path": "m.py", "content": _file_body(arg // 20)}),)))
        s.tool_result("w", "NEWEST-RESULT written")
        try:
            pack = s.build()
        except ws.BudgetExceededError:
            return
        assert pack.manifest.tokens <= pack.manifest.available
        assert [r.text for m in pack.neutral.messages for r in m.tool_results][-1] == "NEWEST-RESULT written"


def thinking_reply(thought: str, call: ToolCall) -> Message:
    """An assistant message of a signed Anthropic thinking block, then ``call``: what a tool loop passes back whole."""
    from windowsmith.model import Thinking

    return Message("assistant", (Thinking("anthropic", {"type": "thinking", "thinking": thought, "signature": "c2ln"},
                                          thought), call))


def test_a_newest_exchange_no_view_shrinks_borrows_from_the_output_reservation(tmp_path):
    # claude-sonnet-5-5 at 5K on a tau2-bench airline run: the policy left the history 1,143 tokens and the newest
    # assistant message (signed thinking, passed back whole in the current tool loop) needed 1,146: refused,
    # although the output reservation could lend the room. The history floor counts a newest message at its
    # smallest view, which thinking does not have; the build now lowers the reservation before refusing
    from windowsmith.model import Thinking

    thought = " ".join(f"step {i}: check the fare rules and the baggage allowance" for i in range(90))
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=5000) as e:
        s = e.session("think")
        s.system("Airline policy: " + "verify the reservation id and the user id before any change. " * 210)
        s.user("Change my flight to Friday.")
        s.add(thinking_reply(thought, ToolCall("t1", "get_reservation_details", {"reservation_id": "ZFA04Y"})))
        s.tool_result("t1", '{"reservation_id": "ZFA04Y", "flights": ["HAT170"]}')
        pack = s.build()
        out = [a for a in pack.manifest.actions if a["layer"] == "output"]
        assert out and "even shrunk" in out[0]["reason"]
        assert pack.request["max_tokens"] == out[0]["tokens_after"] == 512  # the floor: max(512, 1,250 / 4)
        assert pack.tokens <= pack.manifest.available
        msgs = pack.neutral.messages
        assert any(isinstance(b, Thinking) for m in msgs for b in m.content)
        assert [r.call_id for m in msgs for r in m.tool_results] == ["t1"]


def _parallel_lookups(s: ws.Session) -> list[str]:
    """An ask, then one assistant message of signed thinking and twelve parallel searches, and their twelve results
    (about 230 tokens each): a tau2-bench airline agent looking up a week of flights at once."""
    from windowsmith.model import Thinking

    thought = " ".join(f"step {i}: compare the fares and the seat maps" for i in range(40))
    days = [f"2024-05-{d:02d}" for d in range(10, 22)]
    s.user("Find me the cheapest flight from JFK to SEA next week.")
    s.add(Message("assistant", (Thinking("anthropic", {"type": "thinking", "thinking": thought, "signature": "c2ln"},
                                         thought),
                                *(ToolCall(f"s{k}", "search_direct_flight", {"origin": "JFK", "destination": "SEA",
                                                                            "date": d}) for k, d in enumerate(days)))))
    for k, d in enumerate(days):
        s.tool_result(f"s{k}", json.dumps([
            {"flight_number": f"HAT{100 + 7 * k + j}", "origin": "JFK", "destination": "SEA", "status": "available",
             "scheduled_departure_time_est": f"{6 + j}:00:00", "scheduled_arrival_time_est": f"{12 + j}:30:00",
             "date": d, "available_seats": {"basic_economy": 9 + j, "economy": 12, "business": 3},
             "prices": {"basic_economy": 88 + j, "economy": 160 + k, "business": 410}} for j in range(2)]))
    return [f"s{k}" for k in range(12)]


def test_a_dozen_parallel_results_in_a_narrow_room_are_clipped_to_a_few_words_not_refused(tmp_path, monkeypatch):
    # a tau2-bench airline run with a system prompt 3,000 tokens longer (bench_stress.py's ``bigsys``) at 8K: the
    # signed thinking, twelve calls and twelve results cut to 128 characters each took 17 tokens more than the
    # history's room, and the build was refused although the system prompt and tools fit. The last tier cuts each
    # result to a few words (the marker says how much); the log keeps them whole
    import windowsmith.layers.builtin as builtin

    policy = "Airline policy: " + "verify the reservation id and the user id before any change. " * 390
    for tight, name in ((128, "as-before"), (builtin.TIGHT_CLIP_CHARS, "tight")):
        monkeypatch.setattr(builtin, "TIGHT_CLIP_CHARS", tight)
        with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / f"{name}.db", window=8000) as e:
            s = e.session(name)
            s.system(policy)
            calls = _parallel_lookups(s)
            if tight == 128:
                with pytest.raises(BudgetBlockedError, match=r"the tool message at seq \d+|the assistant message"):
                    s.build()
                continue
            pack = s.build()
            msgs = pack.neutral.messages
            assert [r.call_id for m in msgs for r in m.tool_results] == calls  # every call answered
            assert pack.manifest.tokens <= pack.manifest.available
            texts = [r.text for m in msgs for r in m.tool_results]
            assert all("windowsmith elided" in t for t in texts)
            assert min(len(t.split("\n[…")[0] + t.rsplit("…]\n", 1)[-1]) for t in texts) < 128  # below the guard's floor
            assert texts[0].startswith('[{"flight_number": "HAT10')  # each keeps its head
            clip = [a for a in pack.manifest.actions if a["layer"] == "history"][-1]
            assert clip["detail"]["clipped_results"] == calls
            # the log keeps every result whole
            unit = s.state.units[-1]
            logged = [r.text for _, m in s.state.span_messages(unit.first_seq, unit.last_seq) for r in m.tool_results]
            assert len(logged) == 12 and all("elided" not in t and t.endswith("}]") for t in logged)


def test_a_clip_never_goes_below_its_floor():
    from windowsmith.text import clip_messages
    from windowsmith.tokens import TokenCounter

    counter = TokenCounter("o200k_base")
    msgs = tuple(Message("tool", (ToolResult(f"c{i}", (Text("x = " + "word " * 200),)),)) for i in range(6))
    for floor, least in ((128, 64), (24, 32)):
        out, raw, clipped = clip_messages(msgs, 1, counter, floor_chars=floor, min_tokens=least)
        assert clipped and raw == sum(counter.raw_message(m) for m in out)
        for m in out:
            text = m.tool_results[0].text
            kept = text.split("\n[…")[0] + text.rsplit("…]\n", 1)[-1]
            assert len(kept) >= floor  # head + tail at least the floor


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 24), size=st.integers(80, 3000), policy=st.integers(100, 480))
def test_parallel_results_in_a_narrow_room_property(tmp_path_factory, n, size, policy):
    """One reply of ``n`` parallel calls and their results of ``size`` characters, beside a system prompt that leaves
    the history a narrow room: every call keeps its result and the pack fits the budget, or the build is refused only
    where the reply alone and each result at a few words (45 raw tokens, its marker and framing) exceed the room."""
    db = tmp_path_factory.mktemp("p") / "w.db"
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=8000) as e:
        s = e.session("p")
        s.system("Airline policy: " + "verify the reservation id and the user id before any change. " * policy)
        s.user("Look them all up.")
        reply = Message("assistant", tuple(ToolCall(f"c{k}", "lookup", {"id": f"R{k:04d}"}) for k in range(n)))
        s.add(reply)
        for k in range(n):
            s.tool_result(f"c{k}", (f'{{"id": "R{k:04d}", "rows": [' + ", ".join(
                f'{{"n": {j}, "v": "value {j} of R{k:04d}"}}' for j in range(size // 30)) + "]}")[:size])
        try:
            pack = s.build()
        except ws.BudgetExceededError as err:
            counter = s.counter("anthropic")
            assert counter.scaled(counter.raw_message(reply) + 45 * n) > err.available
            return
        assert pack.manifest.tokens <= pack.manifest.available
        assert [r.call_id for m in pack.neutral.messages for r in m.tool_results] == [f"c{k}" for k in range(n)]
        assert all(r.text.startswith('{"id": "R') for m in pack.neutral.messages for r in m.tool_results)


def test_a_refusal_says_when_what_must_stay_is_signed_thinking(tmp_path):
    # a tau2-bench telecom run at 8K with a 3,000-character thinking block per reply (bench_stress.py's ``think``): the
    # policy leaves the history a few hundred tokens, and the newest reply's signed thinking alone is larger. No view
    # shrinks it and the provider requires it back whole within the tool loop: the error says so, and what to do
    thought = " ".join(f"step {i}: the line 555-01{i:02d} shows no data; check roaming, APN and the SIM" for i in range(60))
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("think")
        s.system("Telecom policy: " + "verify the customer's phone number before any change to the line. " * 500)
        s.user("My mobile data stopped working.")
        s.add(thinking_reply(thought, ToolCall("t1", "get_line_details", {"phone_number": "555-0134"})))
        s.tool_result("t1", '{"phone_number": "555-0134", "roaming": false}')
        with pytest.raises(BudgetBlockedError) as err:
            s.build()
        msg = str(err.value)
        assert re.search(r"the assistant message at seq \d+ \([\d,]+ tokens\), [\d,]+ of them signed thinking", msg)
        assert "without thinking enabled" in msg and "tool results cut to a few words" in msg
        assert e.store.get_pack is not None and s.last_pack is None


def test_a_clipped_result_names_the_identifiers_its_cut_lost_in_the_room_left():
    # a tau2-bench telecom run at 8K with signed thinking (bench_stress.py's ``think``): the customer record of the
    # newest result, cut head + tail to fit, lost the line ids in its middle, and the next call passed one (L1001).
    # The history's clip now gives the room its floor left (the overflow asked for more than the record had) to a line
    # naming them; the bench's guard for the peers cuts as before. Strict recall on that variant, tau2-bench at 8K:
    # 94.83% -> 97.14%, at +0.015% cost
    from windowsmith.text import clip_messages
    from windowsmith.tokens import TokenCounter

    counter = TokenCounter("o200k_base")
    record = json.dumps({"customer_id": "C1001", "full_name": "John Smith", "email": "john.smith@example.com",
                         "address": {"street": "123 Main St", "city": "Anytown", "zip_code": "90210"},
                         "line_ids": ["L1001", "L1002", "L1003"], "bill_ids": ["B1001", "B1002"],
                         "payment_methods": [{"method_type": "credit_card", "method_id": "P1001"}],
                         "goodwill_credit_used_this_year": 25.0})
    call = Message("assistant", (ToolCall("t1", "get_customer_by_phone", {"phone_number": "555-123-2002"}),))
    msgs = (call, Message("tool", (ToolResult("t1", (Text(record),)),)))
    whole = sum(counter.raw_message(m) for m in msgs)
    cap = whole - counter.raw_text(record) + 90  # room for a little more than the floor's 128 characters
    plain, raw_plain, _ = clip_messages(msgs, cap, counter)
    named, raw_named, clipped = clip_messages(msgs, cap, counter, index=True)
    assert clipped == ["t1"] and raw_named * counter.scale <= cap and raw_plain <= raw_named
    text = named[1].tool_results[0].text
    assert "[also in the full text: L1001, L1002, L1003" in text  # the ids its middle held, in order
    assert text.startswith('{"customer_id": "C1001"') and "windowsmith elided" in text
    assert "[also in the full text" not in plain[1].tool_results[0].text


@pytest.mark.slow
def test_the_output_reservation_is_lowered_on_every_call_of_a_narrow_room_not_only_when_the_newest_message_is_long(
        tmp_path):
    # an airline policy 3,000 tokens longer at 8K (bench_stress.py's ``bigsys``) left the history about 210 tokens beside
    # the whole reservation. The floor that decides to lower it followed the newest message: lowered on a call whose
    # newest exchange was long, not on the next, whose newest was a short user message; that call's compaction cut
    # the history to the 210 tokens (the opening request and the customer's ids went), and the calls after it, lowered
    # again, had 1,671 tokens and used 500. Now any history gets two smallest views at least
    # (``assemble.least_history``): lowered on every call. (Here every newest message is small enough that the old
    # floor never lowered it: the reservation stayed 2,000 on every call.)
    from windowsmith.budget import BudgetConfig

    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000) as e:
        rule = "Verify the reservation id and the user id before any change. "
        counter = None
        for k in range(300, 520):  # a policy leaving the history between one and two smallest views
            s = e.session(f"probe{k}")
            s.system("Airline policy: " + rule * k)
            s.user("hi")
            counter = s.counter("openai-chat")
            p = s.build()
            room = BudgetConfig().block_tokens(p.manifest.available + p.manifest.reserved_output - 2000) \
                - p.manifest.layers["system"]["used"]
            if counter.scaled(MIN_VIEW) < room < counter.scaled(2 * MIN_VIEW) - 8:
                break
        else:
            pytest.fail("no policy size leaves the history between one and two views")
        s = e.session("narrow")
        s.system("Airline policy: " + rule * k)
        s.user("Hi, I need to cancel reservation SI5UKW; my user id is amelia_rossi_1297.")
        reserved = []
        for i in range(4):
            s.add(Message("assistant", (ToolCall(f"c{i}", "get_reservation_details", {"reservation_id": "SI5UKW"}),)))
            s.tool_result(f"c{i}", json.dumps({"reservation_id": "SI5UKW", "user_id": "amelia_rossi_1297",
                                               "flights": [{"flight_number": f"HAT{60 + j}"} for j in range(12)]}))
            reserved.append(s.build().manifest.reserved_output)
            s.add(Message.assistant("It is basic economy, booked four days ago."))
            s.user("ok")  # a short newest message
            pack = s.build()
            reserved.append(pack.manifest.reserved_output)
            assert "SI5UKW" in " ".join(m.text for m in pack.neutral.messages)  # the opening request stays
        assert len(set(reserved)) == 1 and reserved[0] < 2000, reserved
