"""Contract tests every Store backend passes (SQLite on real files; PostgreSQL when reachable)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import PG_DSN, new_pg_schema, open_backend
from windowsmith.errors import ConflictError, InvalidMessageError, StoreError, UsageError
from windowsmith.hashing import canonical_json, chain_hash
from windowsmith.model import EVENT_KINDS
from windowsmith.store import SQLiteStore, Store


@pytest.fixture(scope="session")
def pg_schema() -> Iterator[str]:
    """One fresh schema for this test run (the stores' tests share it)."""
    yield from new_pg_schema()


@pytest.fixture
def second(backend: str, tmp_path: Path, request: pytest.FixtureRequest, store: Store) -> Iterator[Store]:
    """A second, independent store instance on the same database (as another worker would open)."""
    if backend == "sqlite":
        s: Store = SQLiteStore(tmp_path / "ws.db")
    else:
        from windowsmith.store.postgres import PostgresStore

        s = PostgresStore(PG_DSN, schema=request.getfixturevalue("pg_schema"))
    try:
        yield s
    finally:
        s.close()


# -- sessions ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_create_session_is_idempotent_with_equal_meta(store: Store) -> None:
    store.create_session("s1", {"agent": "coder", "n": 1})
    store.create_session("s1", {"n": 1, "agent": "coder"})  # same meta, other key order
    rec = store.get_session("s1")
    assert rec is not None
    assert (rec.id, dict(rec.meta), rec.head, rec.event_count) == ("s1", {"agent": "coder", "n": 1}, None, 0)
    assert rec.created_at.tzinfo is not None
    with pytest.raises(UsageError, match="already exists with different meta"):
        store.create_session("s1", {"agent": "other"})


def test_get_session_unknown_is_none_and_bad_ids_are_usage_errors(store: Store) -> None:
    assert store.get_session("nope") is None
    with pytest.raises(UsageError, match="non-empty string"):
        store.create_session("", {})
    with pytest.raises(UsageError, match="not JSON-serializable"):
        store.create_session("s", {"x": object()})


def test_unknown_session_is_named_with_the_fix(store: Store) -> None:
    with pytest.raises(UsageError, match=r"no session 'ghost'.*create_session"):
        store.append("ghost", "message", {}, expected_parent=None)
    with pytest.raises(UsageError, match="no session 'ghost'"):
        store.events("ghost")
    with pytest.raises(UsageError, match="no session 'ghost'"):
        store.head("ghost")


@pytest.mark.slow
def test_many_sessions_in_one_store(store: Store) -> None:
    heads: dict[str, str | None] = {}
    for i in range(30):
        sid = f"sess-{i:02d}"
        store.create_session(sid, {"i": i})
        heads[sid] = None
    for turn in range(3):
        for sid in heads:
            heads[sid] = store.append(sid, "message", {"sid": sid, "turn": turn}, expected_parent=heads[sid]).hash
    records = store.list_sessions()
    assert [r.id for r in records] == sorted(heads)
    for r in records:
        assert r.event_count == 3 and r.head == heads[r.id]
        assert [e.data for e in store.events(r.id)] == [{"sid": r.id, "turn": t} for t in range(3)]
        store.verify(r.id)


def test_delete_session_removes_its_log_packs_and_refs(store: Store) -> None:
    store.create_session("a", {})
    store.create_session("b", {})
    store.append("a", "message", {"x": 1}, expected_parent=None)
    store.save_pack("pack-a", "a", 0, {"n": 1})
    sha = store.put_blob(b"shared", session_id="a")
    store.put_blob(b"shared", session_id="b")
    store.set_kv("counts:a", "o200k|0", {"n": 1})  # what a resume reads: it goes with the session
    store.set_kv("counts:b", "o200k|0", {"n": 2})
    store.set_kv("other", "a", {"n": 3})
    assert store.delete_session("a") is True
    assert store.get_kv("counts:a", "o200k|0") is None
    assert store.get_kv("counts:b", "o200k|0") == {"n": 2}
    assert store.get_kv("other", "a") == {"n": 3}
    assert store.delete_session("a") is False
    assert store.get_session("a") is None
    assert store.get_pack("pack-a") is None
    assert store.blob_refs(sha) == ["b"]
    assert store.gc_blobs() == 0
    store.delete_session("b")
    assert store.gc_blobs() == 1
    assert store.get_blob(sha) is None


# -- log --------------------------------------------------------------------------------------------


def test_append_and_read_round_trip(store: Store) -> None:
    store.create_session("s", {})
    data1 = {"role": "user", "content": [{"type": "text", "text": "héllo ✓ \u0000 tab\t"}]}
    e0 = store.append("s", "message", data1, expected_parent=None)
    e1 = store.append("s", "usage", {"input_tokens": 10, "ratio": 0.25, "neg": -0.0}, expected_parent=e0.hash)
    assert (e0.seq, e0.parent, e1.seq, e1.parent) == (0, None, 1, e0.hash)
    assert e0.hash == chain_hash(None, canonical_json({"kind": "message", "data": data1}))
    assert e0.hash.startswith("b1:")
    assert store.events("s") == [e0, e1]
    assert store.events("s", since_seq=1) == [e1]
    assert store.events("s", since_seq=2) == []
    assert store.head("s") == e1
    rec = store.get_session("s")
    assert rec is not None and (rec.head, rec.event_count) == (e1.hash, 2)
    store.verify("s")


def test_returned_event_is_detached_from_the_callers_dict(store: Store) -> None:
    store.create_session("s", {})
    data: dict[str, Any] = {"items": [1, 2]}
    e = store.append("s", "meta", data, expected_parent=None)
    data["items"].append(3)
    assert e.data == {"items": [1, 2]} == store.events("s")[0].data


def test_empty_session_head_is_none(store: Store) -> None:
    store.create_session("s", {})
    assert store.head("s") is None
    assert store.events("s") == []
    store.verify("s")


@pytest.mark.parametrize(
    ("kind", "data", "match"),
    [
        ("chat", {}, "unknown event kind 'chat'"),
        ("message", {"x": object()}, "not JSON-serializable"),
        ("message", {"x": float("nan")}, "not JSON-serializable"),
        ("message", {"x": "\ud800"}, "lone surrogate"),
        ("message", ["not", "a", "dict"], "must be a JSON object"),
    ],
)
def test_invalid_events_are_rejected_before_writing(store: Store, kind: str, data: Any, match: str) -> None:
    store.create_session("s", {})
    with pytest.raises(InvalidMessageError, match=match):
        store.append("s", kind, data, expected_parent=None)
    assert store.events("s") == []
    assert store.get_session("s").event_count == 0  # type: ignore[union-attr]


def test_optimistic_conflict_between_two_store_instances(store: Store, second: Store) -> None:
    store.create_session("s", {})
    e0 = store.append("s", "message", {"n": 0}, expected_parent=None)
    # the other worker sees the same head and appends first
    assert second.head("s") == e0
    e1 = second.append("s", "message", {"n": 1, "by": "second"}, expected_parent=e0.hash)
    with pytest.raises(ConflictError, match=r"session 's' moved on: head is b1:\w+, expected b1:\w+ \(ConflictError: ") as ei:
        store.append("s", "message", {"n": 1, "by": "first"}, expected_parent=e0.hash)
    assert isinstance(ei.value, StoreError) and "session.refresh()" in str(ei.value)
    assert (ei.value.session_id, ei.value.head, ei.value.expected) == ("s", e1.hash, e0.hash)
    with pytest.raises(StoreError, match="moved on"):
        store.append("s", "message", {"n": 0}, expected_parent=None)
    # after reloading, the first worker continues from the new head
    head = store.head("s")
    assert head == e1
    store.append("s", "message", {"n": 2}, expected_parent=head.hash)
    assert [e.data["n"] for e in second.events("s")] == [0, 1, 2]
    store.verify("s")


@pytest.mark.slow
def test_concurrent_appenders_never_fork_the_chain(store: Store, second: Store) -> None:
    """Two threads on two store instances race for the head; every success extends one chain."""
    store.create_session("s", {})
    wins: list[int] = []

    def worker(s: Store, name: int) -> None:
        for _ in range(40):
            head = s.head("s")
            try:
                s.append("s", "message", {"w": name}, expected_parent=head.hash if head else None)
                wins.append(name)
            except StoreError:
                pass

    threads = [threading.Thread(target=worker, args=(s, i)) for i, s in enumerate((store, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = store.events("s")
    assert len(events) == len(wins) >= 40
    store.verify("s")


def test_append_many_is_one_transaction(store: Store) -> None:
    store.create_session("s", {})
    e0 = store.append("s", "system", {"text": "sys"}, expected_parent=None)
    evs = store.append_many("s", [("message", {"n": 1}), ("usage", {"n": 2})], expected_parent=e0.hash)
    assert [(e.seq, e.kind) for e in evs] == [(1, "message"), (2, "usage")]
    assert evs[1].parent == evs[0].hash and evs[0].parent == e0.hash
    assert store.events("s") == [e0, *evs]
    assert store.append_many("s", [], expected_parent=evs[-1].hash) == []
    store.verify("s")


def test_append_many_with_one_bad_item_writes_nothing(store: Store) -> None:
    store.create_session("s", {})
    with pytest.raises(InvalidMessageError, match=r"item 2 \(message\) data is not JSON-serializable"):
        store.append_many(
            "s", [("message", {"ok": 1}), ("usage", {"ok": 2}), ("message", {"bad": {1, 2}})], expected_parent=None
        )
    with pytest.raises(InvalidMessageError, match="item 1 has unknown event kind"):
        store.append_many("s", [("message", {}), ("nope", {})], expected_parent=None)
    with pytest.raises(UsageError, match="list of"):
        store.append_many("s", ("message", {}), expected_parent=None)  # type: ignore[arg-type]
    assert store.events("s") == []
    assert store.get_session("s").head is None  # type: ignore[union-attr]


def test_conflicting_append_many_writes_nothing(store: Store) -> None:
    store.create_session("s", {})
    e0 = store.append("s", "message", {}, expected_parent=None)
    with pytest.raises(StoreError, match="moved on"):
        store.append_many("s", [("message", {"a": 1}), ("message", {"b": 2})], expected_parent=None)
    assert store.events("s") == [e0]


# -- packs ------------------------------------------------------------------------------------------


def test_packs_round_trip_in_build_order(store: Store) -> None:
    store.create_session("s", {})
    store.create_session("t", {})
    ids = ["f00d", "0abc", "beef"]  # not sorted: build order is insertion order
    for i, pid in enumerate(ids):
        store.save_pack(pid, "s", i, {"id": pid, "i": i, "items": [{"layer": "history"}]})
    store.save_pack("ffff", "t", 0, {"id": "ffff"})
    assert [m["id"] for m in store.list_packs("s")] == ids
    assert store.list_packs("t") == [{"id": "ffff"}]
    assert store.get_pack("beef") == {"id": "beef", "i": 2, "items": [{"layer": "history"}]}
    assert store.get_pack("nope") is None


def test_save_pack_is_idempotent_for_equal_content(store: Store) -> None:
    store.create_session("s", {})
    store.save_pack("p1", "s", 0, {"a": 1})
    store.save_pack("p1", "s", 0, {"a": 1})
    assert store.list_packs("s") == [{"a": 1}]
    with pytest.raises(UsageError, match="already saved with a different"):
        store.save_pack("p1", "s", 0, {"a": 2})
    with pytest.raises(UsageError, match="no session 'ghost'"):
        store.save_pack("p2", "ghost", 0, {})


def test_pack_prefix_lookup(store: Store) -> None:
    store.create_session("s", {})
    store.save_pack("abc123", "s", 0, {"n": 1})
    store.save_pack("abd456", "s", 1, {"n": 2})
    store.save_pack("abc", "s", 2, {"n": 3})  # an id that is also a prefix of another
    store.save_pack("x_%", "s", 3, {"n": 4})  # LIKE metacharacters are not wildcards
    assert store.get_pack("abc1") == {"n": 1}
    assert store.get_pack("abd") == {"n": 2}
    assert store.get_pack("abc") == {"n": 3}  # exact id wins over being a prefix
    assert store.resolve_pack_id("abd4") == "abd456"
    assert store.get_pack("x_%") == {"n": 4}
    assert store.get_pack("x%") is None
    assert store.get_pack("zz") is None
    with pytest.raises(UsageError, match=r"pack prefix 'ab' is ambiguous: it matches abc, abc123, abd456; give more"):
        store.get_pack("ab")
    with pytest.raises(UsageError, match="non-empty"):
        store.get_pack("")


# -- blobs ------------------------------------------------------------------------------------------


def test_blobs_dedupe_refs_and_gc(store: Store) -> None:
    store.create_session("a", {})
    store.create_session("b", {})
    payload = bytes(range(256)) * 100
    sha = store.put_blob(payload, session_id="a")
    assert sha == __import__("hashlib").sha256(payload).hexdigest()
    assert store.put_blob(bytearray(payload), session_id="b") == sha
    assert store.put_blob(payload, session_id="a") == sha
    assert store.get_blob(sha) == payload
    assert store.blob_refs(sha) == ["a", "b"]
    loose = store.put_blob(b"no session")
    assert store.blob_refs(loose) == []
    assert store.gc_blobs() == 1  # only the unreferenced one
    assert store.get_blob(loose) is None
    assert store.get_blob(sha) == payload
    assert store.get_blob("0" * 64) is None
    with pytest.raises(UsageError, match="takes bytes"):
        store.put_blob("text")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="no session 'ghost'"):
        store.put_blob(b"x", session_id="ghost")
    assert store.put_blob(b"") == __import__("hashlib").sha256(b"").hexdigest()
    assert store.get_blob(store.put_blob(b"")) == b""


def test_put_blobs_stores_many_at_once_with_their_refs(store: Store) -> None:
    import hashlib

    store.create_session("a", {})
    datas = [f"result {i}\n".encode() * 40 for i in range(5)] + [b"result 0\n" * 40, b""]
    shas = store.put_blobs(datas, session_id="a")
    assert shas == [hashlib.sha256(d).hexdigest() for d in datas]
    assert all(store.get_blob(sha) == d for sha, d in zip(shas, datas, strict=True))
    assert all(store.blob_refs(sha) == ["a"] for sha in shas)
    assert store.put_blobs([], session_id="a") == []
    with pytest.raises(UsageError, match="no session 'ghost'"):
        store.put_blobs([b"never stored"], session_id="ghost")
    assert store.get_blob(hashlib.sha256(b"never stored").hexdigest()) is None  # nothing of a refused batch
    with pytest.raises(UsageError, match="takes bytes"):
        store.put_blobs([b"ok", "text"], session_id="a")  # type: ignore[list-item]
    assert store.get_blob(hashlib.sha256(b"ok").hexdigest()) is None


# -- key-value --------------------------------------------------------------------------------------


def test_kv_round_trip_and_overwrite(store: Store) -> None:
    assert store.get_kv("calibration", "gpt-x") is None
    store.set_kv("calibration", "gpt-x", {"ratio": 1.07, "n": 12})
    store.set_kv("calibration", "other", [1, 2])
    store.set_kv("scope2", "gpt-x", "text")
    assert store.get_kv("calibration", "gpt-x") == {"ratio": 1.07, "n": 12}
    store.set_kv("calibration", "gpt-x", 3)
    assert store.get_kv("calibration", "gpt-x") == 3
    assert store.get_kv("scope2", "gpt-x") == "text"
    with pytest.raises(UsageError, match="not JSON-serializable"):
        store.set_kv("calibration", "bad", {"x": b"bytes"})
    with pytest.raises(UsageError, match="non-empty"):
        store.set_kv("", "k", 1)


# -- lifecycle --------------------------------------------------------------------------------------


def test_closed_store_says_so(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    with open_backend(backend, tmp_path, request) as s:
        s.create_session("s", {})
    s.close()  # idempotent
    with pytest.raises(UsageError, match="closed"):
        s.get_session("s")


# -- property ---------------------------------------------------------------------------------------

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
event_item = st.tuples(st.sampled_from(EVENT_KINDS), st.dictionaries(st.text(max_size=8), json_value, max_size=4))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(event_item, min_size=1, max_size=4), min_size=1, max_size=5))
def test_any_sequence_of_appends_round_trips_and_verifies(
    store: Store, batches: list[list[tuple[str, dict[str, Any]]]]
) -> None:
    sid = uuid.uuid4().hex  # the store outlives hypothesis examples; each example gets its own session
    store.create_session(sid, {})
    written = []
    head = None
    for batch in batches:
        if len(batch) == 1:
            written.append(store.append(sid, batch[0][0], batch[0][1], expected_parent=head))
        else:
            written.extend(store.append_many(sid, batch, expected_parent=head))
        head = written[-1].hash
    read = store.events(sid)
    assert read == written
    assert [(e.kind, e.data) for e in read] == [item for batch in batches for item in batch]
    assert [e.seq for e in read] == list(range(len(read)))
    for e in read:
        assert e.hash == chain_hash(e.parent, e.payload_json())
    store.verify(sid)


def _growing_manifest(i: int) -> dict[str, Any]:
    # what a build's manifest looks like: part digests that grow every turn, a few values that change
    return {"id": f"p{i:04d}", "seq": i, "parts": "".join(f"{k:012x}" for k in range(40 + 4 * i)),
            "artifacts": [f"{k:064x}" for k in range(i // 3)], "layers": {"history": {"used": 100 * i}},
            "checksum": f"{i:064x}", **({"extra": True} if i % 7 == 0 else {})}


@pytest.mark.slow
def test_packs_are_stored_as_deltas_and_rebuild_exactly(store: Store, second: Store) -> None:
    store.create_session("s", {})
    store.create_session("t", {})
    made = []
    for i in range(120):
        m = _growing_manifest(i)
        made.append(m)
        store.save_pack(m["id"], "s", i, m)
        if i % 10 == 0:  # another session's packs in between
            store.save_pack(f"t{i}", "t", i, {"i": i})
    assert store.list_packs("s") == made
    for i in (0, 1, 59, 119):
        assert store.get_pack(f"p{i:04d}") == made[i]
    store.save_pack("p0119", "s", 119, made[119])  # idempotent for equal content
    with pytest.raises(UsageError, match="already saved with a different"):
        store.save_pack("p0050", "s", 50, made[51])
    # storage grows with what changed: the full manifests sum to far more than the rows hold
    full = sum(len(canonical_json(m)) for m in made)
    stored = _stored_manifest_bytes(store, "s")
    assert stored < full / 5, (stored, full)
    # a second writer (a new store object on the same database) starts its own chain and both read back
    m = _growing_manifest(120)
    second.save_pack(m["id"], "s", 120, m)
    store.save_pack("p0121", "s", 121, _growing_manifest(121))
    assert second.list_packs("s") == [*made, m, _growing_manifest(121)]
    assert store.get_pack("p0121") == _growing_manifest(121)


def _stored_manifest_bytes(store: Store, session: str) -> int:
    if isinstance(store, SQLiteStore):
        rows = store._read("SELECT manifest FROM packs WHERE session_id = ?", (session,))
    else:
        rows = store._read("SELECT manifest FROM packs WHERE session_id = %s", (session,))  # type: ignore[attr-defined]
    return sum(len(r[0]) for r in rows)



_json_leaf = st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab", max_size=40)
_json_value = st.recursive(_json_leaf, lambda kids: st.lists(kids, max_size=40) | st.dictionaries(st.sampled_from("abcd"), kids,
                                                                                             max_size=4), max_leaves=20)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from("abcdef"), _json_value, max_size=6),
       st.dictionaries(st.sampled_from("abcdef"), _json_value, max_size=6))
def test_manifest_delta_round_trips_through_json(a: dict[str, Any], b: dict[str, Any]) -> None:
    import json

    from windowsmith.store.packs import apply_delta, manifest_delta

    b2 = {**a, **b}  # mostly shared, as consecutive manifests are
    for target in (b, b2):
        d = json.loads(canonical_json(manifest_delta(a, target)))
        assert apply_delta(json.loads(canonical_json(a)), d) == json.loads(canonical_json(target))


_sorted_shas = st.sets(st.text("0123456789abcdef", min_size=4, max_size=8), max_size=30).map(sorted)


@settings(max_examples=200, deadline=None)
@given(_sorted_shas, _sorted_shas, st.lists(st.text("ab", max_size=3), max_size=5))
def test_a_sorted_list_changed_anywhere_round_trips_as_its_changes(a: list[str], b: list[str], other: list[str]) -> None:
    import json

    from windowsmith.store.packs import apply_delta, manifest_delta

    for base, target in (({"artifacts": a}, {"artifacts": b}), ({"artifacts": a, "x": other}, {"artifacts": b, "x": a})):
        d = json.loads(canonical_json(manifest_delta(base, target)))
        assert apply_delta(json.loads(canonical_json(base)), d) == target


def test_a_sha_added_in_the_middle_of_the_artifacts_stores_only_that_sha() -> None:
    from windowsmith.store.packs import apply_delta, manifest_delta

    base = {"artifacts": [f"{k * 7:064x}" for k in range(500)]}
    new = {"artifacts": sorted([*base["artifacts"], f"{3:064x}", f"{1000:064x}"])}
    d = manifest_delta(base, new)
    assert d == {"put": {}, "sets": {"artifacts": {"add": [f"{3:064x}", f"{1000:064x}"], "del": []}}}
    assert apply_delta(base, d) == new
    unsorted = {"artifacts": [*new["artifacts"][1:], new["artifacts"][0]]}  # not sorted: stored as a list
    assert apply_delta(base, manifest_delta(base, unsorted)) == unsorted


@pytest.mark.slow
def test_a_deleted_and_recreated_session_never_chains_onto_a_stale_base(store: Store, second: Store) -> None:
    # SQLite reuses the highest rowid once its row is deleted: the next pack another writer saves can get
    # the ord this store last wrote; the store must notice it is not its pack and start a new chain
    store.create_session("t", {})
    store.save_pack("t0", "t", 0, {"t": 0})
    store.create_session("s", {})
    store.save_pack("a0", "s", 0, _growing_manifest(39))  # the highest ord, then deleted
    assert store.delete_session("s")
    second.create_session("s", {})
    other = {"id": "b0", "parts": "z" * 600, "seq": 0}
    second.save_pack("b0", "s", 0, other)
    mine = {**_growing_manifest(41), "id": "b1"}
    store.save_pack("b1", "s", 1, mine)
    assert store.list_packs("s") == [other, mine]
    assert second.get_pack("b1") == mine
