"""``Session.add`` costs the same at any length of the session: it touches what the new message names, never a
structure that grows with the session. The steps are counted, never timed (``benchmarks/bench_build.py`` times
``add`` at 1K and 50K messages): the session's call-id map is never iterated, and the Python lines ``add`` runs
are the same at 50 turns and at 500.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import pytest

import windowsmith as ws
from windowsmith.model import Message, Text, ToolCall, ToolResult


def _turn(i: int) -> list[Message]:
    return [Message("user", (Text(f"step {i}: check item {i}"),)),
            Message("assistant", (ToolCall(f"c{i}", "read", {"path": f"src/m{i}.py"}),)),
            Message("tool", (ToolResult(f"c{i}", f"ok {i}"),)),
            Message("assistant", (Text(f"done {i}"),))]


class _CountingDict(dict[str, str]):
    """A dict that counts the entries walked by iterating it (``set(d)``, ``list(d)``, ``for k in d``)."""

    walked = 0

    def __iter__(self) -> Any:
        _CountingDict.walked += len(self)
        return super().__iter__()

    def keys(self) -> Any:
        _CountingDict.walked += len(self)
        return super().keys()


def _session(engine: ws.Engine, turns: int) -> ws.Session:
    s = engine.session("s", goal="work through the items")
    for i in range(turns):
        for m in _turn(i):
            s.add(m)
    return s


def _lines_of_add(s: ws.Session, turn: int) -> int:
    """The Python lines of windowsmith that one turn's four ``add`` calls run."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if "windowsmith" not in frame.f_code.co_filename:
            return None
        if event == "line":
            count += 1
        return tracer

    msgs = _turn(turn)
    sys.settrace(tracer)
    try:
        for m in msgs:
            s.add(m)
    finally:
        sys.settrace(None)
    return count


def test_add_never_walks_the_sessions_call_ids(tmp_path):
    with ws.Engine(model="gpt-4.1", store=tmp_path / "s.db") as engine:
        s = _session(engine, 200)
        s.state.call_names = _CountingDict(s.state.call_names)
        _CountingDict.walked = 0
        for m in _turn(200):
            s.add(m)
        assert _CountingDict.walked == 0
        with pytest.raises(ws.InvalidMessageError, match="'c3' was already used"):
            s.add(Message("assistant", (ToolCall("c3", "read", {}),)))
        with pytest.raises(ws.InvalidMessageError, match="'n1' was already used"):
            s.add(Message("assistant", (ToolCall("n1", "read", {}), ToolCall("n1", "read", {}))))
        assert _CountingDict.walked == 0


def test_add_runs_the_same_lines_at_any_length(tmp_path):
    with ws.Engine(model="gpt-4.1", store=tmp_path / "s.db") as engine:
        s = _session(engine, 50)
        short = _lines_of_add(s, 50)
        for i in range(51, 500):
            for m in _turn(i):
                s.add(m)
        long = _lines_of_add(s, 500)
    assert long <= short * 1.05, (short, long)
