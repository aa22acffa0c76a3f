"""SQLite-specific store behaviour: the file itself, pragmas, migrations, tampering, other processes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from windowsmith.errors import StoreError, UsageError
from windowsmith.hashing import canonical_json
from windowsmith.store import SQLiteStore, open_store
from windowsmith.store.sqlite import MIGRATIONS_TABLE, migration


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def fill(store: SQLiteStore, sid: str = "s", n: int = 5) -> list[str]:
    store.create_session(sid, {"k": "v"})
    head = None
    hashes = []
    for i in range(n):
        head = store.append(sid, "message", {"i": i, "text": f"turn {i} ✓"}, expected_parent=head).hash
        hashes.append(head)
    return hashes


def test_creates_parent_dirs_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "ws.db"
    with SQLiteStore(path) as s:
        assert path.exists()
        db = s._db
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000


def test_migrations_recorded_once_and_idempotent_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    with SQLiteStore(path) as s:
        assert s.applied_migrations() == migration.names
        assert migration.names[0] == "m001_initial"
        fill(s)
    for _ in range(2):
        with SQLiteStore(path) as s:
            assert s.applied_migrations() == migration.names
            assert len(s.events("s")) == 5
    with closing(raw(path)) as db:
        rows = db.execute(f"SELECT name, applied_at FROM {MIGRATIONS_TABLE}").fetchall()
    assert [r[0] for r in rows] == migration.names
    assert all(r[1] for r in rows)


def test_newer_database_is_refused_with_upgrade_hint(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    SQLiteStore(path).close()
    with closing(raw(path)) as db:
        db.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES ('m999_from_the_future', 'x')")
    with pytest.raises(StoreError, match=r"newer windowsmith \(unknown migrations: m999_from_the_future\); upgrade"):
        SQLiteStore(path)


def test_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"junk\.db is not a windowsmith store \(SQLite says: file is not a database\); check --store"):
        SQLiteStore(path)
    with pytest.raises(StoreError, match="is not a windowsmith store"):
        SQLiteStore(path, create=False)
    assert path.read_bytes() == b"this is not sqlite" * 100  # untouched


def test_tampered_data_is_detected_at_its_seq(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    with SQLiteStore(path) as s:
        fill(s)
        s.verify("s")
    with closing(raw(path)) as db:
        db.execute("""UPDATE events SET data = '{"i":2,"text":"forged"}' WHERE session_id = 's' AND seq = 2""")
    with (
        SQLiteStore(path) as s,
        pytest.raises(StoreError, match=r"session 's' is corrupt at seq 2: stored hash .* != recomputed"),
    ):
        s.verify("s")


def test_tampered_parent_link_and_deleted_row_are_detected(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    with SQLiteStore(path) as s:
        hashes = fill(s)
    with closing(raw(path)) as db:
        db.execute("UPDATE events SET parent = ? WHERE session_id = 's' AND seq = 3", (hashes[0],))
    with SQLiteStore(path) as s, pytest.raises(StoreError, match="corrupt at seq 3: parent is"):
        s.verify("s")
    with closing(raw(path)) as db:
        db.execute("UPDATE events SET parent = ? WHERE session_id = 's' AND seq = 3", (hashes[2],))
        db.execute("DELETE FROM events WHERE session_id = 's' AND seq = 1")
    with SQLiteStore(path) as s, pytest.raises(StoreError, match="corrupt at seq 2: expected seq 1"):
        s.verify("s")


def test_truncated_log_is_detected_against_the_session_head(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    with SQLiteStore(path) as s:
        fill(s)
    with closing(raw(path)) as db:
        db.execute("DELETE FROM events WHERE session_id = 's' AND seq = 4")
    with (
        SQLiteStore(path) as s,
        pytest.raises(StoreError, match=r"its record says head .* after 5 events, the log ends .* after 4"),
    ):
        s.verify("s")


def test_tampered_blob_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    with SQLiteStore(path) as s:
        s.create_session("s", {})
        sha = s.put_blob(b"original", session_id="s")
    with closing(raw(path)) as db:
        db.execute("UPDATE blobs SET data = ? WHERE sha = ?", (b"forged", sha))
    with SQLiteStore(path) as s, pytest.raises(StoreError, match="does not match its hash"):
        s.get_blob(sha)


def test_failure_mid_transaction_leaves_no_rows(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "ws.db") as s:
        s.create_session("s", {})
        with pytest.raises(RuntimeError, match="boom"), s._transaction() as db:
            db.execute(
                "INSERT INTO events (session_id, seq, kind, data, hash, parent, created_at) "
                "VALUES ('s', 0, 'message', '{}', 'b1:x', NULL, 'now')"
            )
            raise RuntimeError("boom")
        assert s.events("s") == []
        # a database error half way through append_many rolls back the rows already inserted
        s._db.execute(
            "CREATE TRIGGER no_usage BEFORE INSERT ON events WHEN NEW.kind = 'usage' "
            "BEGIN SELECT RAISE(ABORT, 'usage refused'); END"
        )
        with pytest.raises(StoreError, match="usage refused"):
            s.append_many("s", [("message", {"a": 1}), ("usage", {"b": 2})], expected_parent=None)
        assert s.events("s") == []
        assert s.get_session("s").head is None  # type: ignore[union-attr]
        assert not s._db.in_transaction
        s.append("s", "message", {"a": 1}, expected_parent=None)


@pytest.mark.slow
def test_reopen_in_another_process_sees_identical_events(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    with SQLiteStore(path) as s:
        fill(s, n=8)
        s.save_pack("packabc", "s", 7, {"n": 8})
        expected = [[e.seq, e.kind, e.data, e.hash, e.parent] for e in s.events("s")]
    script = (
        "import json, sys\n"
        "from windowsmith.store import SQLiteStore\n"
        "with SQLiteStore(sys.argv[1]) as s:\n"
        "    s.verify('s')\n"
        "    evs = [[e.seq, e.kind, e.data, e.hash, e.parent] for e in s.events('s')]\n"
        "    e = s.append('s', 'usage', {'from': 'child'}, expected_parent=evs[-1][3])\n"
        "    print(json.dumps({'events': evs, 'pack': s.get_pack('packa'), 'new': e.hash}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["events"] == expected
    assert got["pack"] == {"n": 8}
    with SQLiteStore(path) as s:
        assert s.head("s").hash == got["new"]  # type: ignore[union-attr]
        s.verify("s")


def test_memory_store(tmp_path: Path) -> None:
    with SQLiteStore(":memory:") as s:
        fill(s)
        s.verify("s")


def test_default_path_and_open_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WINDOWSMITH_HOME", raising=False)
    assert SQLiteStore.default_path() == Path(".windowsmith/windowsmith.db")
    monkeypatch.setenv("WINDOWSMITH_HOME", str(tmp_path / "home"))
    assert SQLiteStore.default_path() == tmp_path / "home" / "windowsmith.db"
    with open_store(None) as s:
        assert isinstance(s, SQLiteStore) and Path(s.path) == tmp_path / "home" / "windowsmith.db"
    with open_store(str(tmp_path / "plain.db")) as s:
        assert Path(s.path) == tmp_path / "plain.db"  # type: ignore[attr-defined]
    with open_store(f"sqlite:///{tmp_path}/url.db") as s:  # tmp_path is absolute: sqlite:////abs
        assert Path(s.path) == tmp_path / "url.db"  # type: ignore[attr-defined]
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///rel/x.db") as s:
        assert s.path == "rel/x.db"  # type: ignore[attr-defined]
        assert os.path.exists(tmp_path / "rel" / "x.db")
    with pytest.raises(UsageError, match="unknown store URL scheme 'mysql'"):
        open_store("mysql://x")
    with pytest.raises(UsageError, match="needs a path"):
        open_store("sqlite://")


def test_a_referenced_blob_cannot_be_deleted_under_its_references(tmp_path: Path) -> None:
    """References never vanish with their blob: only gc_blobs deletes blobs, and only unreferenced ones."""
    with SQLiteStore(tmp_path / "ws.db") as s:
        s.create_session("s", {})
        sha = s.put_blob(b"keep me", session_id="s")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            s._db.execute("DELETE FROM blobs WHERE sha = ?", (sha,))
        assert s.gc_blobs() == 0
        assert s.blob_refs(sha) == ["s"] and s.get_blob(sha) == b"keep me"


def test_m006_rewrites_the_packs_of_an_older_store_as_deltas(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    for name, fn in migration:
        if name >= "m006":
            break
        fn(conn)
        conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (?, '2026-01-01')", (name,))
    conn.execute("INSERT INTO sessions (id, meta, created_at) VALUES ('s', '{}', '2026-01-01')")
    made = [{"id": f"p{i}", "parts": "".join(f"{k:012x}" for k in range(50 + 4 * i)), "tokens": i} for i in range(60)]
    for i, m in enumerate(made):
        conn.execute("INSERT INTO packs (id, session_id, seq, manifest, created_at) VALUES (?, 's', ?, ?, '2026-01-01')",
                     (m["id"], i, canonical_json(m)))
    conn.commit()
    before = conn.execute("SELECT sum(length(manifest)) FROM packs").fetchone()[0]
    conn.close()
    with SQLiteStore(path) as s:
        assert "m006_pack_deltas" in s.applied_migrations()
        assert s.list_packs("s") == made
        assert s.get_pack("p59") == made[59]
        after = s._read("SELECT sum(length(manifest)) FROM packs")[0][0]
        assert after < before / 5, (after, before)
        s.save_pack("p60", "s", 60, {"id": "p60", "parts": made[59]["parts"] + "x" * 12, "tokens": 60})
        assert s.list_packs("s")[-1]["tokens"] == 60
