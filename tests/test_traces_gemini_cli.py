"""Gemini CLI chat recordings (``~/.gemini/tmp/<project>/chats/session-*.jsonl``, older ``.json``).

The recording in tests/data/gemini-cli was written by the Gemini CLI itself (see the README there): the
format, the tools' execution and outputs are the real tool's; only the model's answers were scripted. The
older single-object form and a notice are derived from a copy of it here.
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

GM = next((Path(__file__).parent / "data" / "gemini-cli").glob("*.jsonl"))
ROLES = ["user", "user"] + ["assistant", "tool"] * 4 + ["assistant"]


def records() -> list[dict]:
    return [json.loads(line) for line in GM.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_a_real_gemini_cli_recording_imports_as_its_conversation():
    assert "gemini-cli" in FORMATS and detect_format(GM) == "gemini-cli"
    (t,) = load_traces(GM)
    assert t.format == "gemini-cli" and t.meta["model"] == "gemini-2.5-pro" and t.meta["kind"] == "main"
    # each model turn is written twice (then again with its toolCalls) and each result twice: once in the list
    assert [m.role for m in t.messages] == ROLES and not t.repairs
    assert t.messages[0].text.startswith("<session_context>") and t.messages[1].text.startswith("divide(1, 0)")
    ids = [c.id for m in t.messages for c in m.content if isinstance(c, ToolCall)]
    results = {r.call_id: r for m in t.messages for r in m.content if isinstance(r, ToolResult)}
    assert len(ids) == 4 and set(ids) == set(results)
    assert "Output: 2 passed" in " ".join(b.text for b in results[ids[-1]].content)
    assert [c.name for m in t.messages for c in m.content if isinstance(c, ToolCall)] == \
        ["run_shell_command", "read_file", "replace", "run_shell_command"]


def test_the_older_json_form_and_notices(tmp_path):
    """Older versions kept one JSON object, the results only inside the model turn's toolCalls; notices (info,
    error) are the CLI's own, not the model's: counted, left out. A failed call's result is an error."""
    header = records()[0]
    latest: dict[str, dict] = {}
    for r in records():
        if isinstance(r.get("$set"), dict) and isinstance(r["$set"].get("messages"), list):
            latest = {m["id"]: m for m in r["$set"]["messages"]}
        elif "type" in r and "id" in r and not (r["type"] == "user" and isinstance(r["content"], list)
                                                and all("functionResponse" in p for p in r["content"])):
            latest[r["id"]] = r
    msgs = list(latest.values())
    msgs.insert(2, {"id": "n1", "timestamp": msgs[1]["timestamp"], "type": "info", "content": "Loaded cached credentials."})
    msgs[-2]["toolCalls"][0]["status"] = "error"
    p = tmp_path / "session-old.json"
    p.write_text(json.dumps({**header, "messages": msgs}), encoding="utf-8")
    assert detect_format(p) == "gemini-cli"
    (t,) = load_traces(p)
    assert [m.role for m in t.messages] == ROLES and t.meta["skipped_messages"] == {"info": 1}
    last_result = [r for m in t.messages for r in m.content if isinstance(r, ToolResult)][-1]
    assert last_result.is_error


def test_a_recording_without_user_messages_is_a_clear_error(tmp_path):
    p = tmp_path / "session.json"
    p.write_text(json.dumps({**records()[0], "messages": []}), encoding="utf-8")
    with pytest.raises(TraceFormatError, match="no user message"):
        load_traces(p)


def test_the_bench_replays_a_gemini_cli_session():
    spec = load_registry().get("gemini-2.5-flash")
    run = prepare(load_traces(GM)[0])
    rm = run_strategy(run, WindowsmithStrategy(BenchConfig.make(spec, 8_000)))
    assert rm.error is None and rm.calls == 5 and rm.blind_calls == 0 and rm.over_window == 0
