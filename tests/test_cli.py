"""The CLI over a real store: demo, replay, inspect, diff, sessions, verify, with --json."""

from __future__ import annotations

import json
import sqlite3

from click.testing import CliRunner

from conftest import DATA, needs_data
from windowsmith.cli import main


def run(*args: str):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def test_demo_prints_a_per_turn_report_and_inspect_diff_work(tmp_path):
    db = str(tmp_path / "ws.db")
    r = run("demo", "--store", db, "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    turns = report["turns"]
    assert report["totals"]["turns"] == len(turns) >= 3
    assert all(t["tokens"] > 0 for t in turns)
    assert turns[-1]["cache_read_tokens"] > 0  # later turns read the previous prefix from cache

    r = run("demo", "--store", db)  # the table form; a rerun goes to a new session, never over 'demo'
    assert r.exit_code == 0 and "vs the full history" in r.output and "inspect demo-2" in r.output

    r = run("inspect", "demo", "--store", db, "--json")
    packs = json.loads(r.output)
    assert len(packs) == len(turns)
    assert [p["tokens"] for p in packs] == [t["tokens"] for t in turns]
    r = run("inspect", "demo", "--store", db)
    assert r.exit_code == 0 and packs[0]["pack_id"][:8] in r.output

    r = run("diff", packs[0]["pack_id"], packs[1]["pack_id"][:12], "--store", db, "--json")
    d = json.loads(r.output)
    assert d["cache_prefix"]["kept"] is True
    assert d["tokens"]["delta"] == packs[1]["tokens"] - packs[0]["tokens"]
    r = run("diff", packs[1]["pack_id"], packs[2]["pack_id"], "--store", db)
    assert "cache prefix kept" in r.output

    r = run("sessions", "--store", db)
    assert "demo" in r.output
    r = run("verify", "demo", "--store", db)
    assert r.exit_code == 0 and "verified" in r.output


def test_diff_reports_where_the_prefix_broke(tmp_path):
    import windowsmith as ws

    db = tmp_path / "ws.db"
    with ws.Engine(model="claude-sonnet-4-5", store=db) as e:
        s = e.session("s")
        s.system("first system prompt")
        s.user("hello")
        a = s.build()
        s.system("a different system prompt")  # changes the prefix at the system block
        b = s.build()
    r = run("diff", a.id, b.id, "--store", str(db), "--json")
    d = json.loads(r.output)
    assert d["cache_prefix"]["kept"] is False
    assert d["cache_prefix"]["broke_in"].startswith("system")


def test_verify_detects_tampering(tmp_path):
    from windowsmith.traces import demo_trace_path

    db = str(tmp_path / "ws.db")
    run("demo", "--trace", str(demo_trace_path()), "--store", db, "--json")  # (small events, stored inline)
    con = sqlite3.connect(db)
    cur = con.execute("UPDATE events SET data = replace(data, 'the', 'THE') WHERE rowid = "
                      "(SELECT rowid FROM events WHERE session_id = 'demo' AND data LIKE '%the%' ORDER BY seq LIMIT 1)")
    assert cur.rowcount == 1
    con.commit()
    con.close()
    r = CliRunner().invoke(main, ["verify", "demo", "--store", db])
    assert r.exit_code == 2 and "seq" in r.output


@needs_data
def test_replay_a_shared_trace_with_a_small_window(tmp_path):
    r = run("replay", str(DATA / "mini-swe-agent" / "django__django-11119.traj.json"), "--window", "16000",
            "--store", str(tmp_path / "ws.db"), "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["window"] == 16000
    assert max(t["tokens"] for t in rep["turns"]) <= 16000
    assert any(t["actions"] for t in rep["turns"])  # the window forced history truncation somewhere


def test_errors_are_clear_not_tracebacks(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a trace"}')
    r = CliRunner().invoke(main, ["replay", str(bad), "--store", str(tmp_path / "ws.db")])
    assert r.exit_code == 2 and "error:" in r.output and "bad.json" in r.output
    import windowsmith as ws

    ws.SQLiteStore(tmp_path / "ws.db").close()
    r = CliRunner().invoke(main, ["inspect", "nope", "--store", str(tmp_path / "ws.db")])
    assert r.exit_code == 2 and "no session 'nope'" in r.output
    r = CliRunner().invoke(main, ["diff", "pk_x", "pk_y", "--store", str(tmp_path / "ws.db")])
    assert r.exit_code == 2 and "no pack" in r.output


def test_the_cli_never_imports_the_benchmark():
    """``windowsmith.bench`` (the peers' strategies, behind the bench extra) stays out of the core import path."""
    import subprocess
    import sys

    code = ("import sys, windowsmith, windowsmith.cli; "
            "print(sorted(m for m in sys.modules if m.startswith('windowsmith.bench')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bench_without_its_extra_names_the_extra(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def missing_dependency(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 2 and name == "bench":  # the command's own ``from ..bench import cli``
            raise ModuleNotFoundError("No module named 'langchain_core'", name="langchain_core")
        return real(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", missing_dependency)
    r = CliRunner().invoke(main, ["bench", str(tmp_path)])
    assert r.exit_code == 2
    assert "pip install 'windowsmith[bench]'" in r.output and "Traceback" not in r.output
