"""The seed features issue 55 closes (items 5-14): each test shows one behaving as the seed says."""

from __future__ import annotations

import windowsmith as ws

RUN_TOOL = {"name": "run", "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}


def short_session(engine: ws.Engine, turns: int = 4) -> ws.Session:
    s = engine.session("short", goal="Fix the failing test in parser.py")
    s.system("You are a coding agent. " * 100)
    s.tools([RUN_TOOL])
    for i in range(turns):
        s.user(f"question {i}: what about src/parser.py line {i}?")
        s.assistant(f"answer {i}: ok.", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"command": f"pytest -k t{i}"}}])
        s.tool_result(f"c{i}", f"1 passed test_{i}")
    return s


# --------------------------------------------------------------------------- item 8: compaction never grows


def test_compact_on_a_short_session_is_a_noop_with_a_reason(engine):
    s = short_session(engine)
    before = s.build().manifest.to_dict()["tokens"]
    result = s.compact()
    assert not result.changed
    assert "nothing would shrink" in result.reason
    assert "nothing to compact" in result.describe() and result.reason in result.describe()
    assert any(a.kind == "noop" for a in result.actions)
    assert s.build().manifest.to_dict()["tokens"] == before
    assert "nothing would shrink" in s.compact_context(reason="tidy up")
    assert s.build().manifest.to_dict()["tokens"] == before


def test_compact_still_shrinks_a_long_session(engine):
    s = engine.session("long", goal="Fix the refund bug")
    s.tools([RUN_TOOL])
    s.user("ORIGINAL TASK: the refund endpoint refunds twice.")
    for i in range(12):
        s.assistant(f"step {i}", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"command": f"pytest -k t{i}"}}])
        s.tool_result(f"c{i}", "tests/test_x.py::test PASSED\n" * 40)
    before = s.build().manifest.to_dict()["tokens"]
    result = s.compact()
    assert result.changed and not result.reason
    assert s.build().manifest.to_dict()["tokens"] < before
