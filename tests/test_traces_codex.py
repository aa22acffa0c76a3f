"""Codex CLI session rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

The rollout in tests/data/codex was written by the Codex CLI itself (see the README there): the format, the
commands' execution and outputs are the real tool's; only the model's answers were scripted. Older item
shapes and a compaction are added to a copy of it here.
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
from windowsmith.model import ToolCall, ToolResult
from windowsmith.registry import load_registry
from windowsmith.traces import FORMATS, detect_format, load_traces

CX = next((Path(__file__).parent / "data" / "codex").glob("*.jsonl"))


def records() -> list[dict]:
    return [json.loads(line) for line in CX.read_text(encoding="utf-8").splitlines() if line.strip()]


def write(tmp_path: Path, recs: list[dict]) -> Path:
    p = tmp_path / "rollout.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n", encoding="utf-8")
    return p


def test_a_real_codex_rollout_imports_as_its_conversation():
    assert "codex" in FORMATS and detect_format(CX) == "codex"
    (t,) = load_traces(CX)
    assert t.format == "codex" and t.meta["version"] == "0.171.0" and t.meta["model"] == "gpt-5-codex"
    assert [m.role for m in t.messages] == ["user", "user"] + ["assistant", "tool"] * 4 + ["assistant"]
    assert t.messages[0].text.startswith("<environment_context>")  # Codex sends it as a user message
    assert t.messages[1].text.startswith("divide(1, 0) crashes")
    first = t.messages[2]
    assert first.text == "I'll look at the project first." and [c.name for c in first.content
                                                                 if isinstance(c, ToolCall)] == ["exec_command"]
    ids = [c.id for m in t.messages for c in m.content if isinstance(c, ToolCall)]
    results = {r.call_id: r for m in t.messages for r in m.content if isinstance(r, ToolResult)}
    assert ids and set(ids) == set(results) and not t.repairs
    assert "2 passed" in " ".join(b.text for b in results[ids[-1]].content)
    # the instructions (session_meta) and the developer message make the system prompt
    assert t.meta["system_recorded"] and (t.system or "").startswith("You are a coding agent running in the Codex CLI")


def test_older_items_and_a_compaction(tmp_path):
    """Older rollouts record shell commands as local_shell_call items; a compaction writes a `compacted` record
    whose summary replaced the history; a web search has no transcript form (counted, left out)."""
    recs = records()
    k = next(i for i, r in enumerate(recs) if r.get("type") == "response_item"
             and r["payload"].get("type") == "function_call")
    ts = recs[k]["timestamp"]
    older = [
        {"timestamp": ts, "type": "compacted", "payload": {"message": "Summary: the user wants divide() fixed."}},
        {"timestamp": ts, "type": "response_item", "payload": {
            "type": "local_shell_call", "call_id": "call_old", "status": "completed",
            "action": {"type": "exec", "command": ["bash", "-lc", "git status"]}}},
        {"timestamp": ts, "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "call_old", "output": "nothing to commit"}},
        {"timestamp": ts, "type": "response_item", "payload": {"type": "web_search_call", "status": "completed"}},
    ]
    (t,) = load_traces(write(tmp_path, [*recs[:k], *older, *recs[k:]]))
    calls = [c for m in t.messages for c in m.content if isinstance(c, ToolCall)]
    assert calls[0].name == "local_shell" and calls[0].arguments["command"] == ["bash", "-lc", "git status"]
    assert any(m.text.startswith("Summary: the user wants") for m in t.messages if m.role == "user")
    assert t.meta["compactions"] == 1 and t.meta["skipped_items"] == {"web_search_call": 1} and not t.repairs


def test_a_rollout_without_messages_is_a_clear_error(tmp_path):
    recs = [r for r in records() if not (r.get("type") == "response_item" and r["payload"].get("type") == "message")]
    with pytest.raises(TraceFormatError, match="no response_item message"):
        load_traces(write(tmp_path, recs))


@pytest.mark.slow
def test_the_bench_replays_a_codex_session():
    spec = load_registry().get("gpt-4.1")
    run = prepare(load_traces(CX)[0])
    for window in (16_000, 32_000):
        rm = run_strategy(run, WindowsmithStrategy(BenchConfig.make(spec, window)))
        assert rm.error is None and rm.calls == 5 and rm.blind_calls == 0 and rm.over_window == 0
