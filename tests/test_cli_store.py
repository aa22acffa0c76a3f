"""The CLI over stores: read-only commands never create one, bad stores and read-only folders give
one clear line (no traceback), demo/replay never overwrite a session without --replace, delete and gc,
and tables that stay readable at 80 columns."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import windowsmith as ws
from conftest import needs_data
from windowsmith.cli import main

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
MINI = DATA / "mini-swe-agent" / "django__django-11119.traj.json"


def run(*args: str, columns: int = 80, input: str | None = None):
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(main, list(args), catch_exceptions=False, input=input)


READ_ONLY = [["sessions"], ["inspect", "s"], ["verify", "s"], ["diff", "pk_a", "pk_b"], ["delete", "s", "--yes"],
             ["gc"], ["compact", "s"]]


@pytest.mark.parametrize("cmd", READ_ONLY, ids=lambda c: c[0])
def test_commands_on_a_mistyped_store_create_nothing(tmp_path: Path, cmd: list[str]) -> None:
    typo = tmp_path / "no-such-folder" / "ws.db"
    r = run(*cmd, "--store", str(typo))
    assert r.exit_code == 2
    assert f"no windowsmith store at {typo}: the path does not exist; check --store for a typo" in r.output
    assert list(tmp_path.iterdir()) == []  # neither the file nor its folder
    r = run(*cmd, "--store", str(tmp_path))  # a folder, not a file
    assert r.exit_code == 2 and "is a folder, not a store file" in r.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cmd", READ_ONLY, ids=lambda c: c[0])
def test_a_file_that_is_not_a_database_is_one_clear_line(tmp_path: Path, cmd: list[str]) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("these are my notes, not a database\n" * 50)
    r = run(*cmd, "--store", str(junk))  # catch_exceptions=False: a traceback would fail the test
    assert r.exit_code == 2
    assert r.output.startswith("error: ") and r.output.count("\n") == 1
    assert "is not a windowsmith store (SQLite says: file is not a database)" in r.output
    assert junk.read_text() == "these are my notes, not a database\n" * 50


@pytest.mark.parametrize("cmd", READ_ONLY, ids=lambda c: c[0])
def test_another_apps_sqlite_file_is_not_touched(tmp_path: Path, cmd: list[str]) -> None:
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        con.execute("INSERT INTO users (name) VALUES ('ada')")
    con.close()
    before = other.read_bytes()
    r = run(*cmd, "--store", str(other))
    assert r.exit_code == 2 and "a SQLite file without windowsmith's tables" in r.output
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc, a file system nobody can write")
def test_a_store_on_a_read_only_file_system_says_what_to_do(tmp_path: Path) -> None:
    for store in ("/proc/ws.db", "/proc/ws-folder/ws.db"):
        r = run("demo", "--store", store)
        assert r.exit_code == 2 and r.output.count("\n") == 1
        assert "needs a writable folder: pass --store (or Engine(store=...))" in r.output


@pytest.mark.slow
@needs_data
def test_demo_and_replay_never_overwrite_a_session(tmp_path: Path) -> None:
    db = str(tmp_path / "ws.db")
    assert run("demo", "--store", db, "--json").exit_code == 0
    first = [e.hash for e in ws.SQLiteStore(db).events("demo")]
    r = run("demo", "--store", db)
    assert r.exit_code == 0 and "inspect it with: windowsmith inspect demo-2" in r.output
    with ws.SQLiteStore(db) as st:
        assert [e.hash for e in st.events("demo")] == first  # untouched
        st.append("demo", "meta", {"type": "note", "layer": "memory", "text": "mine"}, expected_parent=first[-1])
    r = run("demo", "--store", db, "--replace", "--json")
    assert json.loads(r.output)["session_id"] == "demo"
    with ws.SQLiteStore(db) as st:
        assert [e.hash for e in st.events("demo")] == first  # the extra event is gone: replaced
        assert sorted(r.id for r in st.list_sessions()) == ["demo", "demo-2"]

    ids = [json.loads(run("replay", str(MINI), "--store", db, "--json").output)["session_id"] for _ in range(2)]
    assert ids[1] == ids[0] + "-2" and ids[0].startswith("replay-")
    r = run("replay", str(MINI), "--store", db, "--json", "--session", "mine")
    assert json.loads(r.output)["session_id"] == "mine"
    r = run("replay", str(MINI), "--store", db, "--json", "--session", "mine", "--replace")
    assert json.loads(r.output)["session_id"] == "mine"
    with ws.SQLiteStore(db) as st:
        assert len(st.list_sessions()) == 5


@needs_data
def test_delete_and_gc_commands(tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    assert run("replay", str(MINI), "--store", str(db), "--json", "--session", "big").exit_code == 0
    assert run("demo", "--store", str(db), "--json").exit_code == 0
    r = run("delete", "big", "--store", str(db), input="n\n")
    assert r.exit_code == 1 and "Aborted" in r.output
    r = run("delete", "big", "--store", str(db), input="y\n")
    assert r.exit_code == 0 and "deleted session big; run `windowsmith gc`" in r.output
    r = run("delete", "big", "--store", str(db), "--yes")
    assert r.exit_code == 2 and "no session 'big'" in r.output
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    r = run("gc", "--store", str(db), "--grace", "0")
    assert r.exit_code == 0 and "deleted" in r.output
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) < size
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM blobs").fetchone() == con.execute(
            "SELECT count(DISTINCT sha) FROM blob_refs").fetchone()
    assert run("verify", "demo", "--store", str(db)).exit_code == 0
    r = run("gc", "--store", str(db), "--grace", "-1")
    assert r.exit_code == 2 and "--grace" in r.output


def _check_width(output: str, width: int) -> None:
    for line in output.splitlines():
        assert len(line) <= width, line
    assert "…" not in output  # no truncated cell such as "8,…"


@needs_data
def test_tables_are_readable_at_80_columns(tmp_path: Path) -> None:
    db = str(tmp_path / "ws.db")
    r = run("replay", str(MINI), "--window", "16000", "--store", db, "--session", "s")
    assert r.exit_code == 0
    _check_width(r.output, 80)
    assert "actions" in r.output and "turn: model call; msgs: messages sent;" in " ".join(r.output.split())
    r = run("demo", "--store", db)
    _check_width(r.output, 80)
    assert "$: the call's cost at the model's prices" in " ".join(r.output.split())  # the legend
    for cmd in (["inspect", "s"], ["sessions"]):
        r = run(*cmd, "--store", db)
        assert r.exit_code == 0
        _check_width(r.output, 80)
    r = run("inspect", "s", "--store", db, columns=50)
    _check_width(r.output, 50)
    assert "hidden at 50 columns:" in r.output and "use --json" in r.output
    packs = json.loads(run("inspect", "s", "--store", db, "--json").output)
    assert f"{packs[-1]['tokens']:,}" in r.output  # totals are never dropped
