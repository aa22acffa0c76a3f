"""OpenHands V1 (software-agent-sdk) evaluation output: typed events with a ``kind`` discriminator.

The line in tests/data/openhands-v1 was written by the OpenHands SDK 1.58.2 (see the README there). Before, it
did not load: the V0 importer knew only ``action``/``observation`` events.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import prepare
from windowsmith.bench.run import run_strategy
from windowsmith.bench.strategies import WindowsmithStrategy
from windowsmith.errors import TraceFormatError
from windowsmith.model import ToolCall
from windowsmith.registry import load_registry
from windowsmith.traces import detect_format, iter_trace_files, load_traces

OUT = Path(__file__).parent / "data" / "openhands-v1" / "output.jsonl"


def line() -> dict:
    return json.loads(OUT.read_text(encoding="utf-8").splitlines()[0])


def test_a_v1_evaluation_output_imports_as_the_model_saw_it():
    assert detect_format(OUT) == "openhands"
    (t,) = load_traces(OUT)
    assert t.format == "openhands" and t.id == "calc__divide-by-zero" and t.meta["version"] == "1.x"
    assert t.meta["model"] == "openai/gpt-4o-mini" and t.meta["tool_schemas_recorded"] is False
    assert t.system.startswith("<SOUL>\nYou are OpenHands agent")
    assert [x.name for x in t.tools] == ["terminal", "file_editor", "task_tracker", "finish", "think"]
    assert t.tools[0].description.startswith("Execute a shell command in the terminal")
    # the event log names and describes the tools; their parameters are the SDK's defaults, restored and said so
    assert t.meta["tool_parameters_restored"] == {"from": "openhands-tools 1.58.2", "tools": [x.name for x in t.tools]}
    assert t.tools[0].parameters["required"] == ["command"] and "old_str" in t.tools[1].parameters["properties"]
    assert [m.role for m in t.messages] == ["user"] + ["assistant", "tool"] * 5
    assert t.messages[0].text.startswith("divide(1, 0) crashes")
    calls = t.tool_calls
    assert [c.name for c in calls] == ["terminal", "file_editor", "file_editor", "terminal", "finish"]
    assert calls[0].arguments["command"] == "ls -la /repo/calc" and calls[2].arguments["command"] == "str_replace"
    # a terminal observation as TerminalObservation.to_llm_content renders it for the model
    ls = t.messages[2].tool_results[0].text
    assert "test_calc.py" in ls and ls.endswith(
        "[The command completed with exit code 0.]\n[Current working directory: /repo/calc]\n"
        "[Command finished with exit code 0]")
    assert t.messages[4].tool_results[0].text.startswith("Here's the result of running `cat -n` on /repo/calc/calc.py")
    assert "2 passed" in t.messages[8].tool_results[0].text
    # each call's usage, found by its response id in the metrics
    assert [u.prompt_tokens for _, u in sorted(t.billed.items())] == [4000 + 500 * k for k in range(5)]
    assert t.repairs == ()


def test_actions_of_one_response_are_one_assistant_message(tmp_path: Path):
    """Parallel tool calls: the SDK records one ActionEvent per call with the response's id, the thought on the
    first; the model sent (and is replayed as) one message with both calls, then both results."""
    d = line()
    h = d["history"]
    a1, o1, a2, o2 = h[2], h[3], h[4], h[5]
    a2 = {**a2, "llm_response_id": a1["llm_response_id"], "thought": []}
    d["history"] = [*h[:2], a1, a2, o1, o2, *h[6:]]
    p = tmp_path / "parallel.jsonl"
    p.write_text(json.dumps(d) + "\n", encoding="utf-8")
    (t,) = load_traces(p)
    first = t.messages[1]
    assert first.text == "Let me look at the project first."
    assert [c.name for c in first.content if isinstance(c, ToolCall)] == ["terminal", "file_editor"]
    assert [m.role for m in t.messages[:4]] == ["user", "assistant", "tool", "assistant"]
    assert [r.name for r in t.messages[2].tool_results] == ["terminal", "file_editor"]  # both results, in order


def test_a_reply_without_a_tool_call_is_billed_too(tmp_path: Path):
    """An agent MessageEvent (the model answered in text, no tool call) carries its response's id like an action."""
    d = line()
    h = d["history"]
    finish = h[10]
    reply = {"kind": "MessageEvent", "source": "agent", "llm_response_id": finish["llm_response_id"],
             "llm_message": {"role": "assistant", "content": [{"type": "text", "text": "Both tests pass now."}]}}
    d["history"] = [*h[:10], reply]
    p = tmp_path / "reply.jsonl"
    p.write_text(json.dumps(d) + "\n", encoding="utf-8")
    (t,) = load_traces(p)
    assert t.messages[-1].role == "assistant" and t.messages[-1].text == "Both tests pass now."
    assert [u.prompt_tokens for _, u in sorted(t.billed.items())] == [4000 + 500 * k for k in range(5)]


def test_a_tool_the_sdk_does_not_ship_keeps_empty_parameters(tmp_path: Path):
    d = line()
    d["history"][0]["tools"].append({"title": "deploy", "description": "Deploy the service.", "kind": "MCPTool"})
    p = tmp_path / "mcp.jsonl"
    p.write_text(json.dumps(d) + "\n", encoding="utf-8")
    (t,) = load_traces(p)
    assert t.tools[-1].name == "deploy" and t.tools[-1].parameters == {"type": "object", "properties": {}}
    assert "deploy" not in t.meta["tool_parameters_restored"]["tools"]


def test_errors_rejections_and_bookkeeping_events(tmp_path: Path):
    d = line()
    h = d["history"]
    err = {"kind": "AgentErrorEvent", "source": "agent", "tool_name": "terminal", "tool_call_id": h[2]["tool_call_id"],
           "error": "Error validating args: missing 'command'"}
    state = {"kind": "ConversationStateUpdateEvent", "source": "environment", "key": "execution_status",
             "value": "finished"}
    d["history"] = [*h[:3], err, *h[4:], state]
    p = tmp_path / "errors.jsonl"
    p.write_text(json.dumps(d) + "\n", encoding="utf-8")
    (t,) = load_traces(p)
    res = t.messages[2].tool_results[0]
    assert res.is_error and res.text == "Error validating args: missing 'command'"
    assert t.meta["skipped_events"] == {"ConversationStateUpdateEvent": 1}


def test_a_v1_run_replays_through_the_engine():
    run = prepare(load_traces(OUT)[0])
    spec = load_registry().get("claude-sonnet-4-5")
    rm = run_strategy(run, WindowsmithStrategy(BenchConfig.make(spec, 32_000)))
    assert rm.error is None and rm.calls == len(run.calls) == 5 and rm.blind_calls == 0
    assert rm.targets > 0 and rm.strict_hits == rm.targets


CONV = next((OUT.parent / "conversations").glob("*/base_state.json"))


def test_a_persisted_v1_conversation_is_one_trace_with_the_same_conversation():
    """The SDK's own persistence (``~/.openhands/conversations/<id>/``: ``base_state.json``, one file per event
    under ``events/``) of the same run: one trace, the event files part of it, not traces of their own."""
    assert iter_trace_files(OUT.parent / "conversations") == [CONV] and detect_format(CONV) == "openhands"
    (c,) = load_traces(CONV)
    (o,) = load_traces(OUT)
    assert c.id.replace("-", "") == CONV.parent.name  # the conversation's id (its folder drops the dashes)
    assert c.meta["model"] == "openai/gpt-4o-mini" and c.meta["execution_status"] == "finished" and c.meta["events"] == 12
    assert c.system == o.system and [x.name for x in c.tools] == [x.name for x in o.tools]
    assert [m.role for m in c.messages] == [m.role for m in o.messages]
    assert [x.arguments for x in c.tool_calls] == [x.arguments for x in o.tool_calls]
    assert [r.text for m in c.messages for r in m.tool_results] == [r.text for m in o.messages for r in m.tool_results]
    assert {k: u.prompt_tokens for k, u in c.billed.items()} == {k: u.prompt_tokens for k, u in o.billed.items()}


def test_a_conversation_without_its_events_is_an_error_naming_them(tmp_path: Path):
    d = tmp_path / "conv"
    d.mkdir()
    (d / "base_state.json").write_text(CONV.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"base_state\.json.*events.*none found"):
        load_traces(d / "base_state.json")
