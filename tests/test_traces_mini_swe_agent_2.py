"""mini-swe-agent 2.x trajectories (``trajectory_format: mini-swe-agent-1.1``).

The three files in tests/data/mini-swe-agent-2 were written by mini-swe-agent 2.4.6 itself (see the README there):
its default tool-calling chat model, its text-based model and its Responses API model, each ending with the
``role: exit`` message 2.x appends. Before, each of them failed to load (``unknown role 'tool'``, ``'exit'``,
``None``): 1.x had only system, user and assistant messages.
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
from windowsmith.model import Thinking, ToolCall, ToolResult
from windowsmith.registry import load_registry
from windowsmith.traces import detect_format, load_traces

D = Path(__file__).parent / "data" / "mini-swe-agent-2"
TASK = "divide(1, 0) crashes with an unhelpful ZeroDivisionError"
COMMANDS = ["ls -la", "cat calc.py test_calc.py"]


def _check_common(t, *, native: bool) -> None:
    assert t.format == "mini-swe-agent" and t.meta["trajectory_format"] == "mini-swe-agent-1.1"
    assert t.meta["mini_version"] == "2.4.6" and t.meta["exit_status"] == "Submitted"
    assert t.meta["submission"].startswith("diff --git a/calc.py b/calc.py")
    assert t.system.startswith("You are a helpful assistant that can interact with a computer.")
    assert t.messages[0].role == "user" and TASK in t.messages[0].text
    assert all(m.role != "exit" for m in t.messages) and any("exit message" in r for r in t.repairs)
    # every model call's usage as the server billed it (1,500 prompt tokens, 400 more each turn)
    assert [u.prompt_tokens for _, u in sorted(t.billed.items())] == [1500 + 400 * k for k in range(5)]
    if native:
        assert [x.name for x in t.tools] == ["bash"] and t.tools[0].parameters["required"] == ["command"]
        calls = t.tool_calls
        assert [c.arguments["command"] for c in calls[:2]] == COMMANDS and len(calls) == 5
        results = {r.call_id: r for m in t.messages for r in m.tool_results}
        assert '"returncode": 0' in results[calls[1].id].text and "return a / b" in results[calls[1].id].text
        # the submit call was never answered: the run ended on it (the importer says so, and pairs it)
        assert any(f"{calls[-1].id!r} (bash) has no result" in r for r in t.repairs)
    else:
        assert t.tools == () and t.tool_calls == ()
        assert "```mswea_bash_command\nls -la\n```" in t.messages[1].text
        assert t.messages[2].role == "user" and t.messages[2].text.startswith("<returncode>0</returncode>")


def test_a_tool_calling_run_imports_its_calls_and_results():
    p = D / "toolcall.traj.json"
    assert detect_format(p) == "mini-swe-agent"
    (t,) = load_traces(p)
    _check_common(t, native=True)
    assert [m.role for m in t.messages] == ["user"] + ["assistant", "tool"] * 5
    assert t.messages[1].text == "Let me look at the project first."


def test_a_text_based_run_stays_text():
    (t,) = load_traces(D / "textbased.traj.json")
    _check_common(t, native=False)
    assert [m.role for m in t.messages] == ["user"] + ["assistant", "user"] * 4 + ["assistant"]


def test_a_responses_api_run_imports_its_reasoning_and_calls():
    (t,) = load_traces(D / "responses.traj.json")
    _check_common(t, native=True)
    first = t.messages[1]
    thinking = [b for b in first.content if isinstance(b, Thinking)]
    assert len(thinking) == 1 and thinking[0].provider == "openai" and thinking[0].text == "Let me look at the project first."
    assert next(b for b in first.content if isinstance(b, ToolCall)).arguments == {"command": "ls -la"}
    assert isinstance(t.messages[2].content[0], ToolResult)


def test_the_tools_a_response_recorded_win_over_the_restored_default(tmp_path: Path):
    """A Responses API turn records the tool definitions sent with it; the chat form does not, so its ``bash``
    tool is restored from mini-swe-agent's source (``MINI_BASH_TOOL``)."""
    doc = json.loads((D / "responses.traj.json").read_text(encoding="utf-8"))
    for m in doc["messages"]:
        for tool in m.get("tools") or ():
            tool["description"] = "Run one shell command (customized)"
    p = tmp_path / "custom.traj.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    (t,) = load_traces(p)
    assert [x.description for x in t.tools] == ["Run one shell command (customized)"]
    (chat,) = load_traces(D / "toolcall.traj.json")
    assert [x.description for x in chat.tools] == ["Execute a bash command"]


@pytest.mark.parametrize("name", ["toolcall", "textbased", "responses"])
def test_each_form_replays_through_the_engine(name: str):
    run = prepare(load_traces(D / f"{name}.traj.json")[0])
    spec = load_registry().get("claude-sonnet-4-5")
    rm = run_strategy(run, WindowsmithStrategy(BenchConfig.make(spec, 8000)))
    assert rm.error is None and rm.calls == len(run.calls) == 5 and rm.blind_calls == 0
    assert rm.targets > 0 and rm.strict_hits == rm.targets  # a short run fits: every identifier the agent reused


def test_an_unknown_message_is_an_error_naming_it(tmp_path: Path):
    doc = json.loads((D / "toolcall.traj.json").read_text(encoding="utf-8"))
    doc["messages"].insert(3, {"role": "narrator", "content": "meanwhile"})
    p = tmp_path / "bad.traj.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"messages\[3\]\.role: unknown role 'narrator'.*exit"):
        load_traces(p)
