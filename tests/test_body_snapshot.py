"""Stored bodies (body_snapshot.py): a resumed session's first build takes the rendered body an earlier process
stored and sends the same bytes as one that renders everything; stale, foreign, edited rows and rows of another
render scheme are ignored. Real SQLite files and a real PostgreSQL schema."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import windowsmith as ws
from conftest import PG_DSN
from test_resume import _turn
from windowsmith import body_snapshot
from windowsmith.body_snapshot import SEGMENT
from windowsmith.compaction import CompactionConfig
from windowsmith.resume import row_check

#: (format, the model the request names)
FORMATS = {"openai-chat": None, "openai-responses": None, "anthropic": "claude-sonnet-4-5"}


@pytest.fixture(autouse=True)
def _small_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_snapshot, "MIN_MESSAGES", 2 * SEGMENT)  # bodies of test-sized sessions are stored


def _engine(store: Any) -> ws.Engine:
    return ws.Engine(model="gpt-4.1", store=store, window=200_000, compaction=CompactionConfig(keep_turns=4))


def _build(s: ws.Session, fmt: str) -> ws.Pack:
    return s.build(fmt, model=FORMATS[fmt])


def _grow(store: Any, turns: int, fmts: tuple[str, ...] = tuple(FORMATS), sid: str = "long") -> None:
    with _engine(store) as e:
        s = e.session(sid, goal="Check every item")
        for i in range(turns):
            _turn(s, i)
            if i in (7, 207):  # a secret (a redaction marker) and a large output (offloaded: an artifact reference)
                s.user(f"and the deploy log {i}, token=ghp_{'a1B2c3D4e5' * 4}")
                s.assistant(tool_calls=[ws.ToolCall(f"d{i}", "read", {"path": "deploy.log"})])
                s.tool_result(f"d{i}", "".join(f"line {k}: deployed unit {k * i % 977} ok\n" for k in range(1000)))
            if i % 50 == 49:
                for fmt in fmts:
                    _build(s, fmt)
        for fmt in fmts:
            _build(s, fmt)


def _sent(pack: ws.Pack) -> str:
    m = pack.manifest
    return json.dumps([pack.request, m.checksum, pack.rendered.prefix_hash, m.artifacts, m.redactions], sort_keys=True)


def _packs(store: Any, fmt: str, start: int, turns: int = 4, sid: str = "long") -> tuple[list[str], int]:
    """Resume, then (a build, a turn) ``turns`` times (an on-demand compaction after the second): the requests
    and how many body messages the first build took from the store."""
    out = []
    with _engine(store) as e:
        s = e.session(sid)
        s.user("resume here")
        first = _build(s, fmt)
        restored = s._builder.bodies.restored
        assert not restored or (first.manifest.artifacts and first.manifest.redactions)  # (counted in the rows)
        out.append(_sent(first))
        for j in range(turns):
            _turn(s, start + j)
            if j == 1:
                s.compact(fmt)
            out.append(_sent(_build(s, fmt)))
    return out, restored


def _body_rows(db: Path, sid: str = "long") -> dict[str, dict[str, Any]]:
    con = sqlite3.connect(db)
    rows = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM kv WHERE scope = ? AND key LIKE 'body|%'",
                                                     (f"counts:{sid}",))}
    con.close()
    return rows


def _rewrite(db: Path, change: Any, sid: str = "long", check: bool = True) -> None:
    con = sqlite3.connect(db)
    for key, v in _body_rows(db, sid).items():
        change(v)
        if check:
            v["check"] = row_check(v)
        con.execute("UPDATE kv SET value = ? WHERE scope = ? AND key = ?", (json.dumps(v), f"counts:{sid}", key))
    con.commit()
    con.close()


def _drop(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("DELETE FROM kv WHERE key LIKE 'body|%'")
    con.commit()
    con.close()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_resume_from_a_stored_body_sends_the_same_bytes(tmp_path: Path, fmt: str) -> None:
    a = tmp_path / "a.db"
    _grow(a, 400, (fmt,))  # 1,612 messages, the view of at least two full segments (aged exchanges folded)
    rows = _body_rows(a)
    assert len(rows) >= 2 and sorted(rows) == [f"body|{fmt}|{j}" for j in range(len(rows))]
    b = tmp_path / "b.db"
    shutil.copy(a, b)
    _drop(b)
    got, restored = _packs(a, fmt, 400)
    expected, none = _packs(b, fmt, 400)
    assert restored == len(rows) * SEGMENT and none == 0
    assert got == expected
    # the summary left a short view: the rows of the longer one were cleared (never taken, no bytes kept)
    assert sorted(_body_rows(a)) == sorted(rows) and all(v is None for v in _body_rows(a).values())
    assert _packs(a, fmt, 404, 1)[1] == 0


@pytest.mark.slow
def test_stale_foreign_edited_and_older_rows_are_ignored(tmp_path: Path) -> None:
    fmt = "openai-chat"
    a = tmp_path / "a.db"
    _grow(a, 400, (fmt,))
    clean = tmp_path / "clean.db"
    shutil.copy(a, clean)
    _drop(clean)
    expected, _ = _packs(clean, fmt, 400)

    def variant(name: str, change: Any = None, check: bool = True) -> Path:
        db = tmp_path / f"{name}.db"
        shutil.copy(a, db)
        if change is not None:
            _rewrite(db, change, check=check)
        return db

    # edited by hand: the row's check no longer matches
    edited = variant("edited", lambda v: v.update(values=v["values"][:-8] + "AAAAAAAA"), check=False)
    assert _packs(edited, fmt, 400) == (expected, 0)
    # consistent rows with renderings a renderer would not make: the sampled check drops them
    wrong = variant("wrong", lambda v: v.update(parts="A" * len(v["parts"])))
    assert _packs(wrong, fmt, 400) == (expected, 0)
    # written under an older render scheme (or by an older version of this module)
    older = variant("older", lambda v: v.update(render=v["render"] - 1))
    assert _packs(older, fmt, 400) == (expected, 0)
    version = variant("version", lambda v: v.update(v=0))
    assert _packs(version, fmt, 400) == (expected, 0)
    junk = variant("junk", lambda v: v.update(values="not base64!"))
    assert _packs(junk, fmt, 400) == (expected, 0)

    # stale: the view was compacted after the rows were written (no build since stored it again)
    stale = variant("stale")
    with _engine(stale) as e:
        s = e.session("long")
        s.compact(fmt)
        assert "mask" in [r.kind for r in s.state.records]
    stale_clean = tmp_path / "stale_clean.db"
    shutil.copy(stale, stale_clean)
    _drop(stale_clean)
    assert _packs(stale, fmt, 400) == (_packs(stale_clean, fmt, 400)[0], 0)

    # foreign: another session with the same log takes none of this one's rows
    twin = tmp_path / "twin.db"
    _grow(twin, 400, (fmt,), sid="twin")
    twin_clean = tmp_path / "twin_clean.db"
    shutil.copy(twin, twin_clean)
    _drop(twin_clean)
    con = sqlite3.connect(twin)
    con.execute("DELETE FROM kv WHERE scope = 'counts:twin' AND key LIKE 'body|%'")
    con.execute("ATTACH DATABASE ? AS a", (str(a),))
    con.execute("INSERT INTO kv SELECT tenant, 'counts:twin', key, value, updated_at FROM a.kv "
                "WHERE scope = 'counts:long' AND key LIKE 'body|%'")
    con.commit()
    con.close()
    got, restored = _packs(twin, fmt, 400, sid="twin")
    assert restored == 0 and got == _packs(twin_clean, fmt, 400, sid="twin")[0]


@pytest.mark.slow
def test_no_rows_for_short_sessions_or_gemini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_snapshot, "MIN_MESSAGES", 4 * SEGMENT)
    a = tmp_path / "a.db"
    with ws.Engine(model="gemini-2.5-pro", store=a, window=200_000) as e:
        s = e.session("long", goal="Check every item")
        for i in range(500):  # 2,000 messages
            _turn(s, i)
        s.build("gemini")  # its rendering of a message depends on more than the message: never stored
        s.build("openai-chat", model="gpt-4.1")  # under MIN_MESSAGES: not stored
    assert _body_rows(a) == {}


@pytest.mark.slow
@pytest.mark.postgres
def test_stored_body_on_postgres(pg_schema: str) -> None:
    from windowsmith.store.postgres import PostgresStore

    fmt = "openai-chat"

    def resumed() -> tuple[str, int]:  # a build without new events: the same request each time
        with PostgresStore(PG_DSN, schema=pg_schema) as store, _engine(store) as e:
            s = e.session("long")
            return _sent(_build(s, fmt)), s._builder.bodies.restored

    with PostgresStore(PG_DSN, schema=pg_schema) as store:
        _grow(store, 400, (fmt,))
    got, restored = resumed()
    assert restored >= 2 * SEGMENT
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg_schema)))
        assert conn.execute("DELETE FROM kv WHERE key LIKE 'body|%'").rowcount == restored // SEGMENT
    assert resumed() == (got, 0)
