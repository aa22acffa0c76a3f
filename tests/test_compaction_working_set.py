"""The working set (opt-in): a mask batch leaves out the old reads of files the kept exchanges still name."""

from __future__ import annotations

from typing import Any

import windowsmith as ws
from windowsmith.compaction import CompactionConfig
from windowsmith.compaction.working_set import WorkingSet, named_paths, read_paths
from windowsmith.model import Message, Text, ToolCall, ToolResult
from windowsmith.units import Unit

APP = "\n".join(f"{i:6d}\tdef handler_{i}(request):  # line {i}" for i in range(1, 121))


def view(s: ws.Session, cid: str, path: str, text: str) -> None:
    s.assistant(f"I will read {path}.", tool_calls=[
        {"id": cid, "name": "str_replace_editor", "arguments": {"command": "view", "path": path}}])
    s.tool_result(cid, text)


def edit(s: ws.Session, cid: str, path: str) -> None:
    s.assistant("I will edit it.", tool_calls=[{"id": cid, "name": "str_replace_editor", "arguments": {
        "command": "str_replace", "path": path, "old_str": "return None", "new_str": "return 0"}}])
    s.tool_result(cid, f"The file {path} has been edited.")


def run(s: ws.Session, cid: str, command: str) -> None:
    s.assistant("I will run it.", tool_calls=[{"id": cid, "name": "execute_bash", "arguments": {"command": command}}])
    s.tool_result(cid, "collected 30 items\n" + "".join(f"tests/test_{k}.py::test_x PASSED\n" for k in range(30)))


def folded_ids(s: ws.Session) -> set[str]:
    return {cid for c in s.state.compactions if c.get("type") == "mask" for f in c["folds"] for cid in f["calls"]}


def session(tmp_path: Any, *, working_set: bool, last_edit: str) -> ws.Session:
    e = ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=200_000,
                  compaction=CompactionConfig(keep_turns=2, working_set=working_set))
    s = e.session("ws", goal="Fix the handler in /repo/src/app.py")
    s.user("ORIGINAL TASK: handler_42 returns None.")
    view(s, "read_app", "/repo/src/app.py", APP)
    view(s, "read_cfg", "/repo/setup.cfg", "[metadata]\nname = app\n" * 40)
    for i in range(3):
        run(s, f"run{i}", f"pytest -k t{i}")
    run(s, "run_last", "pytest tests/")
    edit(s, "edit", last_edit)
    return s


def test_an_old_read_of_the_file_being_edited_stays_verbatim(tmp_path):
    s = session(tmp_path, working_set=True, last_edit="/repo/src/app.py")
    result = s.compact()
    folded = folded_ids(s)
    assert {"read_cfg", "run0", "run1", "run2"} <= folded  # done with: folded
    assert "read_app" not in folded  # the file the newest turns edit: its read is left out of the batch
    mask = next(a for a in result.actions if a.kind == "mask")
    assert mask.detail["working_set"] == 1 and "working set" in mask.reason
    s.engine.close()


def test_a_read_no_kept_turn_names_is_folded(tmp_path):
    s = session(tmp_path, working_set=True, last_edit="/repo/src/other.py")
    s.compact()
    assert {"read_app", "read_cfg"} <= folded_ids(s)
    s.engine.close()


def test_off_by_default(tmp_path):
    assert CompactionConfig().working_set is False
    s = session(tmp_path, working_set=False, last_edit="/repo/src/app.py")
    s.compact()
    assert "read_app" in folded_ids(s)
    s.engine.close()


# --------------------------------------------------------------------------- the index itself


def unit(i: int, name: str, args: dict[str, Any], result: str = "ok") -> Unit:
    call = ToolCall(f"c{i}", name, args)
    return Unit((Message("assistant", (Text("."), call)), Message("tool", (ToolResult(f"c{i}", (Text(result),)),))),
                2 * i, 2 * i + 1)


def test_reads_and_names():
    assert read_paths(unit(0, "str_replace_editor", {"command": "view", "path": "./src/a.py"})) == {"src/a.py"}
    assert read_paths(unit(0, "execute_bash", {"command": "cat -n src/a.py"})) == {"src/a.py"}
    assert read_paths(unit(0, "str_replace_editor", {"command": "str_replace", "path": "src/a.py"})) == frozenset()
    assert read_paths(unit(0, "execute_bash", {"command": "pytest"})) == frozenset()
    assert "src/a.py" in named_paths(unit(0, "execute_bash", {"command": "sed -i '3s/x/y/' src/a.py"}))
    assert "src/a.py" in named_paths(unit(0, "str_replace_editor", {"command": "insert", "path": "src/a.py"}))


def test_protected_newest_first_within_the_room_and_superseded_by_a_kept_read():
    units = [unit(0, "str_replace_editor", {"command": "view", "path": "/r/src/a.py"}),  # 300 tokens
             unit(1, "str_replace_editor", {"command": "view", "path": "/r/src/a.py"}),  # 200
             unit(2, "str_replace_editor", {"command": "view", "path": "/r/src/b.py"}),  # 100
             unit(3, "execute_bash", {"command": "pytest"}),
             unit(4, "execute_bash", {"command": "sed -i '3s/x/y/' src/a.py"})]  # kept; names a.py (relative)
    counts = [300, 200, 100, 50, 50]
    w = WorkingSet()
    assert w.protected(units, 3, 0, counts, 1000) == {0, 1}  # b.py is not named by the kept turns
    assert w.protected(units, 3, 0, counts, 250) == {1}  # newest first, within the room
    assert w.protected(units, 3, 0, counts, 0) == frozenset()
    assert w.protected(units, 3, 1, counts, 1000) == {1}  # before the view: not a candidate
    # a kept read of the file at least as large as an old one supersedes it
    units.append(unit(5, "str_replace_editor", {"command": "view", "path": "/r/src/a.py"}))
    assert w.protected(units, 3, 0, [*counts, 250], 1000) == {0}
