"""Artifact stores: embedded (SQLite), folder, and object storage through obstore (in memory and a
real S3-compatible server on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import time

import pytest

from windowsmith.artifacts import EmbeddedArtifacts, FileArtifacts, ObjectArtifacts, parse_ref
from windowsmith.errors import StoreError, UsageError
from windowsmith.refs import artifact_uri
from windowsmith.store import SQLiteStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3-compatible server on a local port (no network beyond loopback)."""
    pytest.importorskip("moto")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.skip("moto server did not start")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(5)


def _s3_store(endpoint: str):
    import boto3
    from obstore.store import S3Store

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                 aws_secret_access_key="test").create_bucket(Bucket="artifacts")
    return S3Store("artifacts", endpoint=endpoint, region="us-east-1", access_key_id="test",
                   secret_access_key="test", client_options={"allow_http": True})


@pytest.fixture(params=["embedded", "folder", "memory", "s3"])
def arts(request, tmp_path):
    if request.param == "embedded":
        store = SQLiteStore(tmp_path / "w.db")
        for sid in ("a", "b"):
            store.create_session(sid)
        yield EmbeddedArtifacts(store)
        store.close()
    elif request.param == "folder":
        yield FileArtifacts(tmp_path / "arts")
    elif request.param == "memory":
        from obstore.store import MemoryStore

        yield ObjectArtifacts(MemoryStore(), prefix="ws")
    else:
        endpoint = request.getfixturevalue("s3_server")
        yield ObjectArtifacts(_s3_store(endpoint), prefix=f"t{time.time_ns()}")


@pytest.mark.slow
def test_put_get_dedupe_refs_and_gc(arts):
    data = b"line 1\nline 2\n" * 1000
    sha = arts.put(data, session_id="a")
    assert sha == hashlib.sha256(data).hexdigest()
    assert arts.put(data, session_id="b") == sha  # stored once, referenced twice
    assert arts.get(sha) == data
    assert arts.refs(sha) == ["a", "b"]
    assert arts.references(artifact_uri(sha), "a") and not arts.references(sha, "zzz")
    other = arts.put(b"only in a", session_id="a")
    assert arts.get("0" * 64) is None
    if isinstance(arts, EmbeddedArtifacts):
        arts.store.delete_session("a")
        assert arts.gc() == 1  # 'other' had only a's reference; 'data' is still used by b
    else:
        assert arts.gc(live_sessions={"b"}) == 0  # a's reference is younger than the grace period
        assert arts.refs(other) == ["a"]
        # with no grace, what was written before the gc started goes; "before" is read on the store's own clock,
        # whose tick is a second on S3 (Last-Modified): wait for the tick after the writes to be sure
        written = arts.clock()
        while arts.clock() <= written:
            time.sleep(0.05)
        assert arts.gc(live_sessions={"b"}, grace_seconds=0) == 1
    assert arts.get(other) is None
    assert arts.get(sha) == data and arts.refs(sha) == ["b"]


def test_folder_store_detects_corruption(tmp_path):
    arts = FileArtifacts(tmp_path / "a")
    sha = arts.put(b"precious", session_id="s")
    (tmp_path / "a" / "blobs" / sha[:2] / sha).write_bytes(b"tampered")
    with pytest.raises(StoreError, match="corrupt"):
        arts.get(sha)


def test_refs_are_validated():
    assert parse_ref("artifact://" + "a" * 64) == "a" * 64
    for bad in ("artifact://../../etc/passwd", "artifact://" + "g" * 64, "file:///x", "", "artifact://ab"):
        with pytest.raises(UsageError):
            parse_ref(bad)
    with pytest.raises(UsageError):
        FileArtifacts.__new__(FileArtifacts).get("../x")


@pytest.mark.slow
def test_gc_on_a_real_s3_server_racing_with_writers_loses_nothing(s3_server):
    """The same race as test_store_concurrency's, over HTTP to an S3-compatible server (rename there
    is copy + delete)."""
    import threading

    arts = ObjectArtifacts(_s3_store(s3_server), prefix=f"race{time.time_ns()}")
    garbage = [arts.put(f"garbage {i}".encode(), session_id="dead") for i in range(5)]
    stop, rounds, written = threading.Event(), [], []

    def collect():
        while not stop.is_set():
            rounds.append(arts.gc({"w0", "w1"}, grace_seconds=0))

    def write(w):
        i = 0
        while i < 30 or len(rounds) < 3:
            i += 1
            written.append(arts.put(f"w{w} {i}".encode(), session_id=f"w{w}"))

    threads = [threading.Thread(target=collect), *(threading.Thread(target=write, args=(w,)) for w in range(2))]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    stop.set()
    threads[0].join()
    assert len(rounds) >= 3
    assert [sha for sha in written if arts.get(sha) is None] == []
    arts.gc({"w0", "w1"}, grace_seconds=0)
    assert [arts.get(sha) for sha in garbage] == [None] * len(garbage)


# -- issue 56.9: gc never deletes what an event names -------------------------------------------------


def _race_writer(store_url: str, folder: str | None, w: int, seconds: float, out) -> None:  # type: ignore[no-untyped-def]
    """One agent process: tool results large enough to be offloaded (a blob put, then the event naming
    it), as fast as it can for ``seconds``; sends how many results it wrote."""
    import windowsmith as ws

    arts = FileArtifacts(folder) if folder else None
    n = 0
    with ws.Engine("gpt-4o", store=store_url, artifacts=arts, window=8000) as e:
        s = e.session(f"w{w}")
        s.user("go")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            s.assistant("", tool_calls=[{"id": f"c{n}", "name": "bash", "arguments": {"cmd": f"run {n}"}}])
            s.tool_result(f"c{n}", "\n".join(f"w{w} result {n} line {i}: status {i * 7919 % 10007}" for i in range(400)))
            n += 1
    out.put(n)


def _race_gc(store_url: str, folder: str | None, stop, out) -> None:  # type: ignore[no-untyped-def]
    from windowsmith.artifacts import collect_garbage
    from windowsmith.store import open_store

    arts = FileArtifacts(folder) if folder else None
    rounds = deleted = 0
    with open_store(store_url) as st:
        while not stop.is_set():
            deleted += collect_garbage(st, arts, grace_seconds=0, vacuum=False)["blobs_deleted"]
            rounds += 1
    out.put((rounds, deleted))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["sqlite", "folder", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_gc_with_no_grace_racing_agent_processes_loses_no_named_artifact(tmp_path, where, request):
    import multiprocessing

    import windowsmith as ws
    from windowsmith.artifacts import collect_garbage
    from windowsmith.store import open_store

    if where == "postgres":
        from conftest import PG_DSN

        schema = request.getfixturevalue("pg_schema")
        store_url = f"postgresql://postgres@127.0.0.1:5432/test?schema={schema}"
        assert PG_DSN
    else:
        store_url = str(tmp_path / "race.db")
    folder = str(tmp_path / "blobs") if where == "folder" else None
    open_store(store_url).close()
    ctx = multiprocessing.get_context("fork")
    stop, results, gcs = ctx.Event(), ctx.Queue(), ctx.Queue()
    writers = [ctx.Process(target=_race_writer, args=(store_url, folder, w, 6.0, results)) for w in range(3)]
    collector = ctx.Process(target=_race_gc, args=(store_url, folder, stop, gcs))
    collector.start()
    for p in writers:
        p.start()
    try:  # bounded: a writer or the collector that hangs fails the test and is killed, never waited for
        written = [results.get(timeout=120) for _ in writers]
        for p in writers:
            p.join(timeout=60)
        stop.set()
        rounds, _ = gcs.get(timeout=60)
        collector.join(timeout=60)
    finally:
        stop.set()
        for p in [*writers, collector]:
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    assert all(p.exitcode == 0 for p in [*writers, collector])
    assert sum(written) >= 6 and rounds >= 3, (written, rounds)
    arts = FileArtifacts(folder) if folder else None
    with ws.Engine("gpt-4o", store=store_url, artifacts=arts) as e:
        named = {sid: e.store.named_artifacts(sid) for sid in (f"w{w}" for w in range(3))}
        assert sum(len(v) for v in named.values()) >= sum(written)  # every offloaded result is named
        lost = [(sid, sha) for sid, shas in named.items() for sha in shas if e.artifacts.get(sha) is None]
        assert lost == []
        # and what no event names still goes: a blob put for a session that never names it
        orphan = e.artifacts.put(b"never named", session_id="w0")
        collect_garbage(e.store, e.artifacts if folder else None, grace_seconds=0, vacuum=False)
        assert e.artifacts.get(orphan) is None


@pytest.mark.parametrize("where", ["embedded", "folder"])
def test_an_append_naming_a_blob_gc_took_meanwhile_stores_it_again(tmp_path, where):
    """The race, step by step: a blob is put, a gc with no grace runs before the event naming it is
    appended (and deletes it), then the append: the blob is back, referenced, and the next gc keeps it."""
    from windowsmith.artifacts import collect_garbage

    with SQLiteStore(tmp_path / "s.db") as st:
        arts = EmbeddedArtifacts(st) if where == "embedded" else FileArtifacts(tmp_path / "blobs")
        st.create_session("s", {})
        sha = arts.put(b"an offloaded tool result", session_id="s")
        collect_garbage(st, arts, grace_seconds=0, vacuum=False)
        assert arts.get(sha) is None  # no event named it yet: gc was right to take it
        [ev] = arts.append(st, "s", [("message", {"text": f"see {artifact_uri(sha)}"})], expected_parent=None)
        assert arts.get(sha) == b"an offloaded tool result" and arts.refs(sha) == ["s"]
        collect_garbage(st, arts, grace_seconds=0, vacuum=False)
        assert arts.get(sha) == b"an offloaded tool result"
        # a blob put and never named is still collected; one named later than the next append is kept until then
        later = arts.put(b"named by a later record", session_id="s")
        arts.append(st, "s", [("message", {"text": "unrelated"})], expected_parent=ev.hash)
        collect_garbage(st, arts, grace_seconds=0, vacuum=False)
        head = st.head("s")
        assert head is not None
        arts.append(st, "s", [("message", {"text": f"now {artifact_uri(later)}"})], expected_parent=head.hash)
        assert arts.get(later) == b"named by a later record"


_GC_POINTS = ("before gc", "after gc read the stale references", "before gc's write transaction", "after gc")


@pytest.mark.parametrize("first_event", [True, False], ids=["after-first-event", "before-first-event"])
@pytest.mark.parametrize(("put_at", "append_at"), [(p, a) for p in range(4) for a in range(p, 4)],
                         ids=lambda i: _GC_POINTS[i].replace(" ", "-").replace("'", ""))
def test_every_interleaving_of_gc_steps_with_another_writer_keeps_the_named_blob(tmp_path, first_event, put_at,
                                                                                   append_at):
    """Another process (its own connection to the file) puts a blob and appends the event naming it, each
    step at one of gc's four points (before it, after its read of the stale references, after its reads of
    the events, after its write transaction); gc's cutoff is in the future, so every reference it reads is
    stale. At every interleaving the named blob is there at the end, and a blob no event names is collected."""
    from datetime import timedelta

    from windowsmith.store.base import now_utc
    from windowsmith.store.blobs import collect_blobs

    path = tmp_path / "s.db"
    with SQLiteStore(path) as writer, SQLiteStore(path) as gc_store:
        arts = EmbeddedArtifacts(writer)
        writer.create_session("s", {})
        head = writer.append("s", "message", {"text": "hello"}, expected_parent=None).hash if first_event else None
        never = arts.put(b"put and never named", session_id="s")
        sha = hashlib.sha256(b"an offloaded tool result").hexdigest()
        steps: dict[int, list] = {p: [] for p in range(4)}
        steps[put_at].append(lambda: arts.put(b"an offloaded tool result", session_id="s"))
        steps[append_at].append(lambda: arts.append(writer, "s", [("message", {"text": f"see {artifact_uri(sha)}"})],
                                                    expected_parent=head))
        done: list[int] = []

        def reach(point: int) -> None:  # run the writer's steps of every point up to this one, once each
            for p in range(point + 1):
                if p not in done:
                    done.append(p)
                    for step in steps[p]:
                        step()

        reads = []

        def rows(sql, params):  # type: ignore[no-untyped-def]
            if reads:  # the stale references were read: the events reads follow
                reach(1)
            reads.append(sql)
            return gc_store._rows(sql, params)

        def write():  # type: ignore[no-untyped-def]
            reach(2)
            return gc_store._write()

        reach(0)
        cutoff = now_utc() + timedelta(hours=1)
        collect_blobs(rows, write, gc_store.dialect, gc_store.tenant, cutoff)
        reach(3)
        assert done == [0, 1, 2, 3] and len(reads) >= 1
        assert arts.get(sha) == b"an offloaded tool result" and arts.refs(sha) == ["s"], (put_at, append_at)
        assert arts.get(never) is None  # gc was not idle: what no event names went
        collect_blobs(gc_store._rows, gc_store._write, gc_store.dialect, gc_store.tenant, now_utc() + timedelta(hours=1))
        assert arts.get(sha) == b"an offloaded tool result"


def test_a_reference_written_in_the_tick_gc_started_is_kept(tmp_path):
    """gc compares write times with its start on the store's own clock (a file's mtime comes from the kernel's
    coarse clock, which lags ``time.time()``): a reference written after the start, even in the same clock tick,
    is never old enough to drop with no grace; one written in an earlier tick is."""
    from windowsmith.artifacts import FileArtifacts

    arts = FileArtifacts(tmp_path / "blobs")
    before = arts.put(b"named by nothing, written before", session_id="s")
    written = arts.clock()
    while arts.clock() <= written:  # the next clock tick
        pass
    started = arts.clock()
    after = arts.put(b"named by an event appended after gc read the events", session_id="s")
    assert arts.gc({"s": set()}, grace_seconds=0, started=started) == 1  # the earlier one goes, only
    assert arts.get(before) is None and arts.get(after) is not None
