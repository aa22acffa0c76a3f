"""Importers over the real shared traces: every file imports, with hand-checked counts and invariants."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from conftest import DATA
from windowsmith.model import Message, Text, Thinking, ToolCall, ToolResult
from windowsmith.traces import (
    FORMATS,
    NO_RESULT_TEXT,
    Trace,
    demo_trace_path,
    detect_format,
    iter_trace_files,
    load_traces,
)

needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available")

FOLDER_FORMAT = {
    "tau-bench": "tau-bench",
    "tau2-bench": "tau2-bench",
    "mini-swe-agent": "mini-swe-agent",
    "swe-agent": "swe-agent",
    "openhands": "openhands",
}


def assert_well_formed(t: Trace) -> None:
    """The neutral-form invariants every importer must produce."""
    msgs = t.messages
    seen_ids: set[str] = set()
    for i, m in enumerate(msgs):
        assert isinstance(m, Message)
        assert m.role in ("user", "assistant", "tool")
        assert m.content, f"{t.id}: message {i} is empty"
        if m.role == "tool":
            prev = msgs[i - 1] if i else None
            assert prev is not None and prev.role == "assistant" and prev.tool_calls, (
                f"{t.id}: tool message {i} does not follow an assistant tool call"
            )
        calls = m.tool_calls
        if calls:
            for c in calls:
                assert c.id not in seen_ids, f"{t.id}: duplicate tool call id {c.id}"
                seen_ids.add(c.id)
            assert i + 1 < len(msgs) and msgs[i + 1].role == "tool", f"{t.id}: call at {i} not followed by results"
            results = msgs[i + 1].tool_results
            assert [r.call_id for r in results] == [c.id for c in calls]
            assert [r.name for r in results] == [c.name for c in calls]
    # every ToolCall has exactly one matching ToolResult later
    all_results = Counter(r.call_id for m in msgs for r in m.tool_results)
    assert all(all_results[c.id] == 1 for c in t.tool_calls)
    assert sum(all_results.values()) == len(t.tool_calls)
    for idx in t.billed:
        assert msgs[idx].role == "assistant", f"{t.id}: billed index {idx} is not an assistant message"
    assert t.format in FORMATS
    assert t.source


# ---------------------------------------------------------------------------------------------------
# The whole corpus
# ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_data
def test_every_shared_trace_file_imports_well_formed() -> None:
    files = iter_trace_files(DATA)
    assert len(files) == 1 + 3 + 63 + 6 + 1
    per_format: Counter[str] = Counter()
    for f in files:
        expected = FOLDER_FORMAT[f.parent.name]
        assert detect_format(f) == expected, f
        traces = load_traces(f)
        assert traces, f
        ids = [t.id for t in traces]
        assert len(set(ids)) == len(ids), f"{f}: trace ids not unique"
        for t in traces:
            assert t.format == expected
            assert t.system, f"{t.id}: no system prompt"
            assert_well_formed(t)
        per_format[expected] += len(traces)
    assert per_format == {"tau-bench": 200, "tau2-bench": 110, "mini-swe-agent": 63, "swe-agent": 6, "openhands": 3}


@pytest.mark.slow
@needs_data
def test_tau_bench_counts_and_reused_call_ids() -> None:
    path = DATA / "tau-bench" / "gpt-4o-airline.json"
    raw = json.loads(path.read_text())
    traces = load_traces(path)
    assert len(traces) == 200
    # hand-checked: 5308 raw messages minus 200 system messages; 1164 tool calls, 1164 tool messages
    # (each result follows its call alone, so no grouping changes the count)
    assert sum(len(t.messages) for t in traces) == 5108
    assert sum(len(t.tool_calls) for t in traces) == 1164
    raw_calls = sum(len(m.get("tool_calls") or []) for r in raw for m in r["traj"])
    assert raw_calls == 1164
    t0 = traces[0]
    assert t0.meta["task_id"] == 0 and t0.meta["trial"] == 0 and t0.meta["reward"] == 0.0
    assert t0.system.startswith("# Airline Agent Policy")
    assert len(t0.messages) == 31 and len(t0.tool_calls) == 8
    # the real file reuses call ids inside one run: the later one is renamed and noted
    assert [c.id for c in t0.tool_calls[:4]] == [
        "call_oIHazX6yQrB8hUwl4cRilFKj",
        "call_HGn16KZh9oNCruxsMJ4gYXan",
        "call_HGn16KZh9oNCruxsMJ4gYXan~2",
        "call_oIHazX6yQrB8hUwl4cRilFKj~2",
    ]
    assert t0.messages[12].tool_results[0].name == "search_onestop_flight"
    assert any("reused by an earlier call" in r for r in t0.repairs)
    assert sum("reused" in r for t in traces for r in t.repairs) == 73
    # the first tool call's arguments were a JSON string in the file
    assert t0.tool_calls[0].name == "get_user_details"
    assert dict(t0.tool_calls[0].arguments) == {"user_id": "mia_li_3668"}
    assert t0.source.endswith("gpt-4o-airline.json#0")
    # 90 assistant turns hold both text and a tool call: both kept
    both = sum(1 for t in traces for m in t.messages if m.tool_calls and m.text)
    assert both == 90


@needs_data
def test_tau2_gpt41_retail_billed_usage_and_system() -> None:
    path = DATA / "tau2-bench" / "gpt-4.1_retail_default_1trial.json"
    raw = json.loads(path.read_text())
    traces = load_traces(path)
    assert len(traces) == 40
    assert sum(len(t.messages) for t in traces) == 1032
    assert sum(len(t.tool_calls) for t in traces) == 299
    # every assistant turn produced by the model carries billed usage (the scripted greeting does not)
    assert sum(len(t.billed) for t in traces) == 476
    t = traces[0]
    assert t.meta["simulation_id"] == "55094b9e-ef3e-42b4-8ca2-18e82cd7e7ae"
    assert t.meta["model"] == "gpt-4.1" and t.meta["reward"] == 1.0
    # hand-checked against the file: turn 2 billed 3571 prompt tokens, turn 4 (a tool call) 3625
    assert t.messages[0].text == "Hi! How can I help you today?" and 0 not in t.billed
    assert t.billed[2].prompt_tokens == 3571 and t.billed[2].output_tokens == 34
    assert t.billed[4].prompt_tokens == 3625
    assert t.messages[4].tool_calls[0].name == "find_user_id_by_email"
    assert t.messages[5].tool_results[0].text == "isabella_lopez_6490"
    assert t.messages[5].tool_results[0].name == "find_user_id_by_email"
    # user-simulator usage (prompt_tokens 433 on message 1) is not agent billing
    assert all(t.messages[i].role == "assistant" for i in t.billed)
    assert all(u.prompt_tokens != 433 for u in t.billed.values())
    policy = raw["info"]["environment_info"]["policy"]
    assert t.system == policy and t.system.startswith("# Retail agent policy")
    assert t.tools == () and t.meta["tools_recorded"] is False  # tool_defs is null in the published file
    # 12 tool results carry error: true
    assert sum(r.is_error for t in traces for m in t.messages for r in m.tool_results) == 12


@needs_data
def test_tau2_claude_airline() -> None:
    traces = load_traces(DATA / "tau2-bench" / "claude-sonnet-4-5_airline.json")
    assert len(traces) == 50
    assert sum(len(t.messages) for t in traces) == 1034
    assert sum(len(t.tool_calls) for t in traces) == 371
    assert sum(len(t.billed) for t in traces) == 467
    t = traces[0]
    assert t.billed[2].prompt_tokens == 5730 and t.billed[2].output_tokens == 157
    assert t.meta["model"] == "claude-sonnet-4-5" and t.meta["thinking_blocks"] == 5
    # the thinking blocks are replayed as Anthropic returned them (signature included), before the text
    first = t.messages[2].content[0]
    assert isinstance(first, Thinking) and first.provider == "anthropic" and first.data["signature"]
    assert first.text == first.data["thinking"] and first.text.startswith("The user wants to modify")
    # 75 assistant turns hold both text and tool calls: both kept
    assert sum(1 for t in traces for m in t.messages if m.tool_calls and m.text) == 75


@pytest.mark.slow
@needs_data
def test_mini_swe_agent_text_actions_and_billing() -> None:
    t = load_traces(DATA / "mini-swe-agent" / "astropy__astropy-12907.traj.json")[0]
    assert t.id == "astropy__astropy-12907"
    assert t.system.startswith("You are a helpful assistant that can interact multiple times")
    assert len(t.messages) == 41 and t.tool_calls == ()
    assert [m.role for m in t.messages[:3]] == ["user", "assistant", "user"]
    assert "```bash\nls -R\n```" in t.messages[1].text
    assert t.messages[2].text.startswith("<returncode>0</returncode>")
    assert len(t.billed) == 20
    assert t.billed[1].prompt_tokens == 1662 and t.billed[1].output_tokens == 106
    assert t.meta["exit_status"] == "Submitted"
    total = sum(len(x.messages) for f in sorted((DATA / "mini-swe-agent").iterdir()) for x in load_traces(f))
    assert total == 5032 - 63  # 5032 raw messages, 63 system prompts lifted out


@needs_data
def test_swe_agent_both_versions() -> None:
    d = DATA / "swe-agent"
    fc = load_traces(d / "trajectories__demonstrations__function_calling_simple.traj")[0]
    assert fc.meta["version"] == "1.x"
    assert len(fc.messages) == 11 and len(fc.tool_calls) == 5
    first = fc.tool_calls[0]
    assert first.name == "find_file" and dict(first.arguments) == {"file_name": "missing_colon.py"}
    assert fc.messages[2].tool_results[0].text.startswith('Found 1 matches for "missing_colon.py"')
    old = load_traces(next(d.glob("tests__test_data__*pydicom-1458.traj")))[0]
    assert old.meta["version"] == "0.x"
    assert len(old.messages) == 25 and old.tool_calls == ()
    assert old.meta["demonstration_messages"] == 1
    replay = load_traces(next(d.glob("*function_calling_replace_from_source*")))[0]
    assert len(replay.messages) == 27 and len(replay.tool_calls) == 13
    assert any("reused by an earlier call" in r for r in replay.repairs)


@needs_data
def test_openhands_event_stream() -> None:
    traces = load_traces(DATA / "openhands" / "msb_example_output.jsonl")
    assert [t.id for t in traces] == ["ponylang__ponyc-4595", "ponylang__ponyc-4593", "ponylang__ponyc-4588"]
    assert [len(t.messages) for t in traces] == [47, 68, 100]
    assert sum(len(t.tool_calls) for t in traces) == 105
    t = traces[0]
    assert t.source.endswith("msb_example_output.jsonl:1")
    assert t.system.startswith("You are OpenHands agent")
    assert [s.name for s in t.tools] == ["execute_bash", "think", "finish", "str_replace_editor"]
    assert t.messages[0].role == "user" and "<uploaded_files>" in t.messages[0].text
    call = t.messages[1].tool_calls[0]
    assert (call.id, call.name) == ("toolu_01", "execute_bash")
    assert dict(call.arguments) == {"command": "ls -l /workspace/ponylang__ponyc__0.1"}
    assert t.billed[1].prompt_tokens == 5920 and t.billed[1].output_tokens == 128
    out = t.messages[2].tool_results[0].text
    assert out.startswith("total 300") and out.endswith("[Command finished with exit code 0]")
    # the finish call never gets an observation: synthetic error result, noted
    last = t.messages[-1].tool_results[0]
    assert last.name == "finish" and last.is_error and last.text == NO_RESULT_TEXT
    assert any("toolu_23" in r and "no result" in r for r in t.repairs)
    # a rejected tool call comes back as a user error message, as OpenHands sends it
    errs = [
        m for m in traces[1].messages if m.role == "user" and "[Error occurred in processing last action]" in m.text
    ]
    assert len(errs) == 1


# ---------------------------------------------------------------------------------------------------
# Demo
# ---------------------------------------------------------------------------------------------------


def test_demo_trace_is_one_real_tau_bench_run() -> None:
    p = demo_trace_path()
    assert p.is_file() and (p.parent / "PROVENANCE.md").is_file()
    assert detect_format(p) == "tau-bench"
    [t] = load_traces(p)
    assert_well_formed(t)
    assert t.meta["task_id"] == 12 and t.meta["trial"] == 1 and t.meta["reward"] == 1.0
    assert len(t.messages) == 13 and [c.name for c in t.tool_calls] == [
        "get_user_details",
        "get_reservation_details",
        "transfer_to_human_agents",
    ]
    assert t.repairs == ()
    assert (
        8_000
        < sum(len(m.text) for m in t.messages)
        + len(t.system or "")
        + sum(len(r.text) for m in t.messages for r in m.tool_results)
        < 20_000
    )


@needs_data
def test_demo_matches_the_source_entry() -> None:
    raw = json.loads((DATA / "tau-bench" / "gpt-4o-airline.json").read_text())
    assert json.loads(demo_trace_path().read_text()) == [raw[62]]


def test_neutral_blocks_types() -> None:
    [t] = load_traces(demo_trace_path())
    kinds = {type(b) for m in t.messages for b in m.content}
    assert kinds == {Text, ToolCall, ToolResult}
