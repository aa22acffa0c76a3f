"""Compact rows (migration m010): event JSON, pack manifests and artifacts compressed where zlib pays,
no hash index on events; an older store is upgraded in place and reads back exactly as before.

``data/store_m009.db.gz`` is a real store written by the previous release (migrations m001-m009): two
sessions of agent turns with 1 KB tool results, a pack per build, a mask and a summary (folded results
and a transcript as artifacts), and a second tenant's blob."""

from __future__ import annotations

import gzip
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

import windowsmith as ws
from windowsmith.store import SQLiteStore, packs
from windowsmith.store.codec import EVENT_MIN_BYTES, MIN_BYTES, pack_blob, pack_text, unpack_blob, unpack_text

OLD = Path(__file__).parent / "data" / "store_m009.db.gz"


def _old_store(tmp_path: Path) -> Path:
    path = tmp_path / "old.db"
    path.write_bytes(gzip.decompress(OLD.read_bytes()))
    return path


def _raw(path: Path) -> dict[str, object]:
    """What the old file holds, read with plain SQL (every value plain)."""
    con = sqlite3.connect(path)
    try:
        events = {(s, q): (k, json.loads(d), h, p) for s, q, k, d, h, p in
                  con.execute("SELECT session_id, seq, kind, data, hash, parent FROM events")}
        sessions = [r[0] for r in con.execute("SELECT DISTINCT session_id FROM packs ORDER BY 1")]
        manifests = {s: packs.rebuild_all(con.execute("SELECT ord, base_ord, manifest FROM packs WHERE session_id = ? "
                                                      "ORDER BY ord", (s,)).fetchall()) for s in sessions}
        blobs = {(t, sha): bytes(d) for t, sha, d in con.execute("SELECT tenant, sha, data FROM blobs")}
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'events'")]
    finally:
        con.close()
    return {"events": events, "manifests": manifests, "blobs": blobs, "names": names}


def test_m010_upgrades_a_store_written_by_the_previous_release(tmp_path: Path) -> None:
    path = _old_store(tmp_path)
    before = _raw(path)
    assert "sqlite_autoindex_events_2" in before["names"]  # the old UNIQUE (session_id, hash)
    size_before = path.stat().st_size
    with SQLiteStore(path) as st:
        # m010, then m011 (session keys per tenant) rebuild the tables in place: every row kept
        assert st.applied_migrations()[-2:] == ["m010_compact_rows", "m011_session_keys_per_tenant"]
        events = {(sid, e.seq): (e.kind, e.data, e.hash, e.parent) for sid in ("agent", "other") for e in st.events(sid)}
        assert events == before["events"]
        for sid in ("agent", "other"):
            st.verify(sid)  # the chain still checks: the JSON hashed is the JSON read back
            assert st.list_packs(sid) == before["manifests"][sid]  # type: ignore[index]
        for (tenant, sha), data in before["blobs"].items():  # type: ignore[attr-defined]
            assert st.for_tenant(tenant).get_blob(sha) == data
        st.vacuum()
    after = _raw_kinds(path)
    assert "sqlite_autoindex_events_2" not in after["names"]
    assert after["compressed_events"] > 0 and after["compressed_packs"] > 0 and after["compressed_blobs"] > 0
    assert path.stat().st_size < size_before
    # the upgraded store goes on: resume, append, build, compact, read an artifact back
    with ws.Engine(model="gpt-4.1", store=path) as e:
        s = e.session("agent")
        s.user("one more file")
        s.assistant(tool_calls=[ws.ToolCall("t99", "read_file", {"path": "src/file_99.py"})])
        s.tool_result("t99", "file_99.py\n" + "line: value=1 status=ok\n" * 60)
        pack = s.build("openai-chat")
        assert pack.tokens > 0
        s.compact("openai-chat")
        e.store.verify("agent")


def _raw_kinds(path: Path) -> dict[str, object]:
    con = sqlite3.connect(path)
    try:
        return {
            "names": [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'events'")],
            "compressed_events": con.execute("SELECT count(*) FROM events WHERE typeof(data) = 'blob'").fetchone()[0],
            "compressed_packs": con.execute("SELECT count(*) FROM packs WHERE typeof(manifest) = 'blob'").fetchone()[0],
            "compressed_blobs": con.execute("SELECT count(*) FROM blobs WHERE length(data) < size").fetchone()[0],
        }
    finally:
        con.close()


def test_new_rows_are_compressed_where_it_pays_and_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    big = "status=ok value=12345 " * 100
    with SQLiteStore(path) as st:
        st.create_session("s", {})
        st.append_many("s", [("message", {"text": "hi"}), ("message", {"text": big}),
                             ("message", {"text": hashlib.sha256(b"x").hexdigest()})], expected_parent=None)
        evs = st.events("s")
        assert [e.data["text"] for e in evs] == ["hi", big, hashlib.sha256(b"x").hexdigest()]
        assert st.head("s") == evs[-1]
        st.verify("s")
        noise = _noise()  # zlib cannot shrink it by an eighth: stored as is
        shas = st.put_blobs([big.encode(), noise, b"short"], session_id="s")
        assert [st.get_blob(sha) for sha in shas] == [big.encode(), noise, b"short"]
        st.save_pack("p1", "s", 2, {"id": "p1", "parts": big})
        assert st.get_pack("p1") == {"id": "p1", "parts": big}
    con = sqlite3.connect(path)
    kinds = [r[0] for r in con.execute("SELECT typeof(data) FROM events ORDER BY seq")]
    assert kinds == ["text", "blob", "text"]  # short, compressible, short
    stored = dict(con.execute("SELECT sha, length(data) FROM blobs").fetchall())
    assert stored[shas[0]] < len(big) // 4 and stored[shas[1]] == len(noise) and stored[shas[2]] == 5
    con.close()


def _noise() -> bytes:
    return b"".join(hashlib.sha256(bytes([i])).digest() for i in range(32))  # 1 KB without repeats


def test_a_short_event_row_is_stored_plain_even_where_zlib_would_pay(tmp_path: Path) -> None:
    """A resume inflates every compressed event row; a short one is kept as text (a pack of the same size is not)."""
    path = tmp_path / "ws.db"
    short = "ab" * ((EVENT_MIN_BYTES - 40) // 2)  # compresses well, but its event JSON is under EVENT_MIN_BYTES
    assert MIN_BYTES < len(short) < EVENT_MIN_BYTES and isinstance(pack_text(short), bytes)
    with SQLiteStore(path) as st:
        st.create_session("s", {})
        st.append_many("s", [("message", {"text": short}), ("message", {"text": short * 2})], expected_parent=None)
        st.save_pack("p1", "s", 1, {"id": "p1", "parts": short})
        assert [e.data["text"] for e in st.events("s")] == [short, short * 2]
        st.verify("s")
    con = sqlite3.connect(path)
    assert [r[0] for r in con.execute("SELECT typeof(data) FROM events ORDER BY seq")] == ["text", "blob"]
    assert con.execute("SELECT typeof(manifest) FROM packs").fetchone()[0] == "blob"
    con.close()


def test_codec_round_trips_and_keeps_what_does_not_pay() -> None:
    for text in ["", "{}", "x" * (MIN_BYTES - 1), "ab" * 500, json.dumps(list(range(300))), "é" * 400]:
        assert unpack_text(pack_text(text)) == text
    assert pack_text("x" * (MIN_BYTES - 1)) == "x" * (MIN_BYTES - 1)
    assert isinstance(pack_text("ab" * 500), bytes)
    noise = _noise()
    assert pack_blob(noise) == noise
    for raw in [b"", noise, b"ab" * 500]:
        assert unpack_blob(pack_blob(raw), len(raw)) == raw


def test_a_changed_compressed_row_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "ws.db"
    with SQLiteStore(path) as st:
        st.create_session("s", {})
        st.append("s", "message", {"text": "ok " * 200}, expected_parent=None)
        sha = st.put_blob(b"value " * 200, session_id="s")
        st._db.execute("UPDATE events SET data = x'789c0000' WHERE seq = 0")
        st._db.execute("UPDATE blobs SET data = x'789c0000' WHERE sha = ?", (sha,))
        st._db.commit()
        with pytest.raises(ws.StoreError, match="does not decompress"):
            st.events("s")
        with pytest.raises(ws.StoreError, match="does not match its hash"):
            st.get_blob(sha)
