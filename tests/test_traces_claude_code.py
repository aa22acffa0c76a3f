"""Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

The transcript in tests/data/claude-code was written by Claude Code itself (see the README there): the
format, the tools' execution and outputs are the real tool's; only the model's answers were scripted.
Branches, subagents and ``/compact`` boundaries are added to a copy of it here, as Claude Code writes them.
"""

from __future__ import annotations

import json
import uuid
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

CC = next((Path(__file__).parent / "data" / "claude-code").glob("*.jsonl"))


def records() -> list[dict]:
    return [json.loads(line) for line in CC.read_text(encoding="utf-8").splitlines() if line.strip()]


def write(tmp_path: Path, recs: list[dict], name: str = "session.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n", encoding="utf-8")
    return p


def test_a_real_claude_code_transcript_imports_as_its_conversation():
    assert "claude-code" in FORMATS and detect_format(CC) == "claude-code"
    (t,) = load_traces(CC)
    assert t.format == "claude-code" and t.id == CC.name.removesuffix(".jsonl")
    assert [m.role for m in t.messages] == ["user"] + ["assistant", "tool"] * 4 + ["assistant"]
    assert t.messages[0].text.startswith("divide(1, 0) crashes")
    # Claude Code writes one record per content block: the text and the Bash call of the first response are one message
    first = t.messages[1]
    calls = [b for b in first.content if isinstance(b, ToolCall)]
    assert first.text == "I'll look at the project first." and [c.name for c in calls] == ["Bash"]
    assert t.meta["merged_blocks"] == 2 and t.meta["version"] == "2.1.332" and t.meta["off_thread_records"] == 0
    # every call has its result, by id; the test run's real output is there
    ids = [c.id for m in t.messages for c in m.content if isinstance(c, ToolCall)]
    results = {r.call_id: r for m in t.messages for r in m.content if isinstance(r, ToolResult)}
    assert ids and set(ids) == set(results)
    assert "2 passed" in " ".join(b.text for b in results[ids[-1]].content)
    # the request's system prompt and tool schemas, as this version records them (api-request-shape)
    assert t.meta["system_recorded"] and (t.system or "").startswith("You are a Claude agent")
    assert {"Bash", "Read", "Edit", "Write"} <= {s.name for s in t.tools}
    assert t.meta["model"] == "claude-sonnet-4-5"


def test_a_rewound_branch_and_a_subagent_are_left_out(tmp_path):
    """Editing a prompt (or rewinding) leaves the old branch in the file; a Task subagent's own conversation is
    written with isSidechain. The trace is the chain that ends at the last main-thread record."""
    recs = records()
    first_user = next(r for r in recs if r.get("type") == "user")
    k = recs.index(first_user)
    dead_a = {**first_user, "type": "assistant", "uuid": str(uuid.uuid4()), "parentUuid": first_user["uuid"],
              "message": {"id": "msg_dead", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                          "content": [{"type": "text", "text": "An answer the user rewound."}]}}
    dead_u = {**first_user, "uuid": str(uuid.uuid4()), "parentUuid": dead_a["uuid"],
              "message": {"role": "user", "content": "no, not like that"}}
    side = {**first_user, "uuid": str(uuid.uuid4()), "parentUuid": None, "isSidechain": True,
            "message": {"role": "user", "content": "(a subagent's task)"}}
    path = write(tmp_path, [*recs[:k + 1], dead_a, dead_u, side, *recs[k + 1:]])
    (t,) = load_traces(path)
    assert t.meta["off_thread_records"] == 2 and t.meta["sidechain_records"] == 1
    texts = " ".join(m.text for m in t.messages)
    assert "rewound" not in texts and "not like that" not in texts and "subagent" not in texts
    assert [m.role for m in t.messages] == [m.role for m in load_traces(CC)[0].messages]


def test_a_compact_boundary_keeps_the_whole_session(tmp_path):
    """/compact starts a new chain (parentUuid null) that names the old leaf in logicalParentUuid: the trace
    follows it, so the run holds every turn the agent took."""
    recs = records()
    convo = [r for r in recs if r.get("type") in ("user", "assistant")]
    results = [i for i, r in enumerate(convo) if r["type"] == "user" and isinstance(r["message"]["content"], list)]
    cut_after, nxt = convo[results[1]], convo[results[1] + 1]  # after the Read call's result
    boundary = {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted",
                "parentUuid": None, "logicalParentUuid": cut_after["uuid"], "uuid": str(uuid.uuid4()),
                "isSidechain": False, "sessionId": cut_after["sessionId"]}
    summary = {**convo[0], "uuid": str(uuid.uuid4()), "parentUuid": boundary["uuid"], "isCompactSummary": True,
               "message": {"role": "user", "content": "This session is being continued from a previous conversation."}}
    out = []
    for r in recs:
        if r is nxt:
            out += [boundary, summary, {**nxt, "parentUuid": summary["uuid"]}]
        else:
            out.append(r)
    (t,) = load_traces(write(tmp_path, out))
    assert t.meta["compactions"] == 1
    assert len(t.messages) == len(load_traces(CC)[0].messages) + 1 and not t.repairs
    assert any(m.text.startswith("This session is being continued") for m in t.messages)


def test_bookkeeping_alone_is_a_clear_error(tmp_path):
    recs = [r for r in records() if r.get("type") not in ("user", "assistant")]
    with pytest.raises(TraceFormatError, match="not a recognised trace record"):
        load_traces(write(tmp_path, recs))
    with pytest.raises(TraceFormatError, match="no user or assistant record"):
        load_traces(write(tmp_path, recs, "forced.jsonl"), format="claude-code")


@pytest.mark.slow
def test_the_bench_replays_a_claude_code_session():
    """Claude Code's system prompt and tool schemas take ~19.5K tokens: at 32K every call is built, never blind;
    at 8K the build is refused naming the tools (they alone exceed the budget)."""
    spec = load_registry().get("claude-sonnet-4-5")
    run = prepare(load_traces(CC)[0])
    rm = run_strategy(run, WindowsmithStrategy(BenchConfig.make(spec, 32_000)))
    assert rm.error is None and rm.calls == 5 and rm.blind_calls == 0 and rm.over_window == 0
    small = run_strategy(run, WindowsmithStrategy(BenchConfig.make(spec, 8_000)))
    assert small.error is not None and "BudgetExceededError" in small.error and "'tools'" in small.error


def test_a_subagent_transcript_is_its_own_thread(tmp_path):
    """Claude Code writes a Task subagent's conversation to its own file, every record marked isSidechain."""
    recs = [{**r, "isSidechain": True} if r.get("type") in ("user", "assistant") else r for r in records()]
    (t,) = load_traces(write(tmp_path, recs, "agent-1.jsonl"))
    assert t.meta["subagent"] and t.meta["sidechain_records"] == 0
    assert [m.role for m in t.messages] == [m.role for m in load_traces(CC)[0].messages]


def test_records_that_do_not_link_are_taken_in_file_order(tmp_path):
    """A transcript cut by hand (or written by a tool that leaves parentUuid out): the chain from the last record
    is that record alone, so every main-thread record is taken, in file order."""
    recs = [{**r, "parentUuid": None} if r.get("type") in ("user", "assistant") else r for r in records()]
    (t,) = load_traces(write(tmp_path, recs))
    assert [m.role for m in t.messages] == [m.role for m in load_traces(CC)[0].messages] and not t.repairs
