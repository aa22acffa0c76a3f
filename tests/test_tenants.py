"""Tenants: two teams on one store read none of each other's rows, on SQLite (checked by the store)
and PostgreSQL (row-level security, connected as an ordinary role), through every read path: sessions,
events, packs (by id and prefix), blobs via read_result / search_result / reconstruct, key-value
(calibration, proxy sync), and the server's JSON API."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import windowsmith as ws
from conftest import PG_DSN
from windowsmith.compaction import CompactionConfig
from windowsmith.errors import UsageError
from windowsmith.store import Store, open_store

APP_ROLE = "windowsmith_tenant_test"  # an ordinary role: superusers and BYPASSRLS roles skip the policies

def big(tag: str) -> str:
    return "\n".join(f"tests/{tag}/test_mod_{i}.py::test_case_{i} FAILED AssertionError: expected {i} got {i + 1}"
                     for i in range(600))


def _pg_store() -> Iterator[Callable[[], Store]]:
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    try:
        admin = psycopg.connect(PG_DSN, autocommit=True)
    except psycopg.OperationalError as e:
        pytest.skip(f"PostgreSQL is not reachable at {PG_DSN!r} ({' '.join(str(e).split())[:100]})")
    schema = f"ws_tenant_{uuid.uuid4().hex[:10]}"
    admin.execute(sql.SQL(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {r}) THEN "
        "CREATE ROLE {i} LOGIN NOSUPERUSER NOBYPASSRLS; END IF; END $$").format(
            r=sql.Literal(APP_ROLE), i=sql.Identifier(APP_ROLE)))
    admin.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(sql.Identifier(schema), sql.Identifier(APP_ROLE)))
    url = f"postgresql://{APP_ROLE}@127.0.0.1:5432/test?schema={schema}"
    opened: list[Store] = []

    def make() -> Store:
        st = open_store(url)
        opened.append(st)
        return st

    make.url = url  # type: ignore[attr-defined]
    try:
        yield make
    finally:
        for st in opened:
            st.close()
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        admin.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        st = open_store(tmp_path / "shared.db")
        yield st
        st.close()
    else:
        gen = _pg_store()
        make = next(gen)
        yield make()
        with contextlib.suppress(StopIteration):
            next(gen)


def fill(engine: ws.Engine, sid: str) -> dict[str, Any]:
    """A session with an offloaded tool result, compaction (summary references) and billed usage."""
    s = engine.session(sid, goal=f"fix the failing tests of {sid}")
    s.system("You are a careful engineer.")
    s.tools([{"name": "bash", "description": "run a command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}])
    s.user(f"please fix {sid}")
    for i in range(8):
        s.build()
        s.assistant(f"running step {i}", tool_calls=[{"id": f"{sid}-c{i}", "name": "bash", "arguments": {"cmd": f"pytest -k {i}"}}])
        s.record(usage={"input_tokens": 900 + i, "output_tokens": 20})
        s.tool_result(f"{sid}-c{i}", big(f"{sid}-{i}") if i % 3 == 0 else f"ok {i}")
    s.compact()
    pack = s.build()
    s.search_history(f"pytest {sid}")  # indexes the session's history (recall is opt-in; the index is on demand)
    shas = {a.removeprefix("artifact://") for a in pack.manifest.artifacts}
    shas |= set(engine.store.named_artifacts(sid))
    return {"session": s, "pack": pack, "shas": sorted(shas), "packs": [m.pack_id for m in s.packs()]}


@pytest.mark.slow
def test_two_tenants_never_read_each_other(store: Store) -> None:
    ea = ws.Engine("claude-sonnet-4-5", store=store, tenant="team-a", window=6000,
                   compaction=CompactionConfig())
    eb = ws.Engine("claude-sonnet-4-5", store=store, tenant="team-b", window=6000)
    try:
        a = fill(ea, "a-1")
        b = fill(eb, "b-1")
        assert a["shas"] and a["packs"]
        assert not set(a["shas"]) & set(b["shas"])  # different content: a hit below would be a leak
        reads = 0  # every read below that returned another tenant's data
        for me, other, mine in ((eb, a, b), (ea, b, a)):
            st = me.store
            reads += sum(1 for r in st.list_sessions() if r.id == other["session"].id)
            reads += st.get_session(other["session"].id) is not None
            for fn in (st.events, st.head, st.verify):
                with pytest.raises(UsageError):
                    fn(other["session"].id)
            reads += len(st.list_packs(other["session"].id))
            for pid in other["packs"]:
                reads += st.get_pack(pid) is not None
                reads += st.get_pack(pid[:10]) is not None
            for sha in other["shas"]:
                reads += st.get_blob(sha) is not None
                reads += len(st.blob_refs(sha))
                reads += me.artifacts.get(sha) is not None
            # the result tools of my own session cannot open the other tenant's artifacts
            s = mine["session"]
            for sha in other["shas"]:
                out = s.result_tools("read_result", {"ref": f"artifact://{sha}"})
                reads += not out.startswith("error")
                out = s.result_tools("search_result", {"ref": f"artifact://{sha}", "pattern": "FAILED"})
                reads += not out.startswith("error")
            # my own artifacts do read (the check above is not vacuous)
            own = mine["shas"][0]
            assert not s.result_tools("read_result", {"ref": f"artifact://{own}"}).startswith("error")
            # reconstruct pulls references of my summary only, and artifact text only from my store
            text = s.reconstruct(2000)
            reads += other["session"].id in text
            # key-value: calibration is per tenant
            cal_key = f"{me.spec.name}|anthropic"
            assert st.get_kv("calibration", cal_key) is not None
            # opening the other tenant's session id is refused, not joined
            with pytest.raises(UsageError, match="in use"):
                me.session(other["session"].id)
            # gc of one tenant leaves the other's blobs alone
            me.gc(grace_seconds=0)
        assert reads == 0
        assert all(ea.store.get_blob(sha) is not None for sha in a["shas"])
        assert all(eb.store.get_blob(sha) is not None for sha in b["shas"])
        # the default tenant sees neither
        assert [r.id for r in store.list_sessions()] == []
    finally:
        ea.close()
        eb.close()


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_policies_hold_even_for_a_query_without_a_tenant_filter() -> None:
    gen = _pg_store()
    make = next(gen)
    try:
        base = make()
        ea = ws.Engine("gpt-4o", store=base, tenant="team-a")
        try:
            fill(ea, "pg-a")
        finally:
            ea.close()
        b = base.for_tenant("team-b")
        try:
            # a query with no tenant filter at all (a bug in our code) sees no row of team-a
            for table in ("sessions", "events", "packs", "blobs", "blob_refs", "kv", "chunks"):
                (n,) = b._read(f"SELECT count(*) FROM {table}")[0]  # type: ignore[attr-defined]
                assert n == 0, table
            a = base.for_tenant("team-a")
            try:
                (n,) = a._read("SELECT count(*) FROM events")[0]  # type: ignore[attr-defined]
                assert n > 10
                (n,) = a._read("SELECT count(*) FROM chunks")[0]  # type: ignore[attr-defined]
                assert n > 0  # the history index of team-a's session
                with pytest.raises(ws.StoreError):
                    a._read("INSERT INTO chunks (tenant, namespace, scope, key, doc, source, text, meta) "  # type: ignore[attr-defined]
                            "VALUES ('team-b', 'memory', 'project:p', 'k', 'd', 's', 't', '{}') RETURNING 1")
                # nor can team-a write a row labelled as team-b
                with pytest.raises(ws.StoreError):
                    a._read("INSERT INTO kv (tenant, scope, key, value) VALUES ('team-b', 's', 'k', '1') RETURNING 1")  # type: ignore[attr-defined]
            finally:
                a.close()
        finally:
            b.close()
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)


@pytest.mark.slow
def test_json_api_scopes_every_route_to_the_token_tenant(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    httpx = pytest.importorskip("httpx")
    from windowsmith.server import ServerConfig, create_app
    from windowsmith.testing import BackgroundServer

    store = open_store(tmp_path / "api.db")
    ta, tb = "a" * 24, "b" * 24
    ea = ws.Engine("gpt-4o", store=store, tenant="team-a")
    a = fill(ea, "api-a")
    ea.close()
    try:
        app = create_app(ServerConfig(store=store, tokens={ta: "team-a", tb: "team-b"}))
        with BackgroundServer(app) as srv:
            def get(path: str, tok: str) -> Any:
                return httpx.get(srv.url + path, headers={"Authorization": "Bearer " + tok}, timeout=30)

            assert [s["id"] for s in get("/api/sessions", ta).json()] == ["api-a"]
            assert get("/api/sessions", tb).json() == []
            assert get("/api/sessions/api-a", tb).status_code == 404
            assert get("/api/sessions/api-a/packs", tb).status_code == 404
            for pid in a["packs"]:
                assert get(f"/api/packs/{pid}", tb).status_code == 404
                assert get(f"/api/packs/{pid}", ta).status_code == 200
            p0, p1 = a["packs"][:2]
            assert get(f"/api/diff?a={p0}&b={p1}", tb).status_code == 404
            assert httpx.post(srv.url + "/api/sessions/api-a/compact", headers={"Authorization": "Bearer " + tb},
                              timeout=30).status_code == 404
            assert "api-a" not in httpx.get(srv.url + "/?token=" + tb, timeout=30).text
            assert "api-a" in httpx.get(srv.url + "/?token=" + ta, timeout=30).text
    finally:
        store.close()


def test_tenant_names_are_validated(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="tenant"):
        ws.Engine("gpt-4o", store=tmp_path / "x.db", tenant=" bad\n")
    with pytest.raises(ws.ConfigError, match="artifacts"):
        ws.Engine("gpt-4o", store=tmp_path / "x.db", tenant="t", artifacts=ws.artifacts.FileArtifacts(tmp_path / "a"))



# -- retrieval (m009_retrieval_tenants): memory, knowledge, recall over history, the search_history tool --

MARKS = {"a": "alpha-", "b": "bravo-"}  # every text a tenant writes (session ids included) carries its mark


@pytest.mark.slow
def test_retrieval_never_crosses_tenants(store: Store) -> None:
    """Both tenants use the same project and user names (so the same memory and knowledge scopes) and
    index the same document: only the tenant keeps them apart. With vectors on, the vector ranking
    (every chunk of a scope, nearest first) runs too, so an item of the other tenant would surface."""
    pytest.importorskip("wordllama")
    from windowsmith.memory import Memory, MemoryConfig
    from windowsmith.retrieval import WordLlamaEmbedder
    from windowsmith.retrieval.recall import recall
    from windowsmith.retrieval.search import Retriever

    emb = WordLlamaEmbedder()
    cfg = MemoryConfig(project="shop", user="ann")
    engines = {t: ws.Engine("claude-sonnet-4-5", store=store, tenant=f"team-{t}", window=6000, memory=cfg,
                            embedder=emb) for t in "ab"}
    try:
        filled = {t: fill(engines[t], f"{MARKS[t]}s1") for t in "ab"}
        shared_doc = "# Refunds\nRefunds over 500 EUR need a second approver.\n"
        for t, mark in MARKS.items():
            e, s = engines[t], filled[t]["session"]
            s.remember(f"The staging database is {mark}db-02 on port 5433", scope="project")
            s.remember(f"Ann prefers {mark}pytest -x -q over the full suite", scope="user")
            s.remember(f"ticket {mark}ZFA04Y is the one to fix first")
            # the same document in both tenants: keys are unique per tenant, so both index it
            assert e.knowledge.add(shared_doc, name="policy.md") > 0
            assert e.knowledge.add(f"# Deploys\nDeploy {mark}service with make release on friday.\n", name="deploy.md") > 0
        leaks: dict[str, int] = {}  # per read path: items of the other tenant it returned
        own: dict[str, int] = {}  # per read path: items of my own tenant (so the reads are not vacuous)
        for me, other in (("a", "b"), ("b", "a")):
            e, s = engines[me], filled[me]["session"]
            osid = filled[other]["session"].id

            def count(path: str, texts: list[str], me: str = me, other: str = other) -> None:
                leaks[path] = leaks.get(path, 0) + sum(MARKS[other] in t for t in texts)
                own[path] = own.get(path, 0) + sum(MARKS[me] in t for t in texts)

            queries = ["staging database port 5433", "alpha-db-02 bravo-db-02", "pytest full suite",
                       "alpha-ZFA04Y bravo-ZFA04Y ticket"]
            # memory: list and search, from my session and from a Memory bound to the other's session id
            count("memory.list", [m.text for m in s.memory.list()])
            for q in queries:
                count("memory.search", [m.text for m in s.memory.search(q)])
            stray = Memory(e.store, osid, cfg, embedder=emb)
            assert [m for m in stray.list() if m.scope == f"session:{osid}"] == []
            for q in queries:
                count("memory.search", [m.text for m in stray.search(q)])
            # knowledge: search and the indexed rows (the shared document once per tenant)
            mine = e.store.list_chunks("knowledge", [e.knowledge.scope])
            assert sum("second approver" in c.text for c in mine) == 1
            assert len(mine) == len(engines[other].store.list_chunks("knowledge", [e.knowledge.scope]))
            for q in ("Deploy service with make release", "alpha-service bravo-service", "refund approver"):
                count("knowledge.search", [h.chunk.text for h in e.knowledge.search(q)])
            # recall over history and the search_history tool, with the other's words in the query
            for q in ("test_mod_3 FAILED AssertionError", f"{osid} AssertionError expected got"):
                count("recall", [h.chunk.text for h in recall(s, q)])
            count("search_history", [s.search_history("test_mod_3 FAILED AssertionError expected")])
            # the other session's history scope, asked for directly
            leaks["history scope"] = leaks.get("history scope", 0) + len(
                e.store.list_chunks("history", [f"session:{osid}"])) + len(
                e.store.search_chunks("history", [f"session:{osid}"], ["AssertionError"])) + len(
                Retriever(e.store, emb).search("history", [f"session:{osid}"], [["AssertionError"], ["FAILED"]],
                                               texts=["AssertionError"]))
            # the built request: its MEMORY, KNOWLEDGE and RECALL sections
            s.user("the staging database on port 5433, the refund policy; deploy with make release")
            count("build", [json.dumps(s.build().request)])
            # writes aimed at the other tenant's rows change nothing
            theirs = engines[other].store.list_chunks("memory", [f"project:{cfg.project}"])
            ids = [c.id for c in theirs]
            assert ids
            assert e.store.delete_chunks("memory", [f"project:{cfg.project}"], ids) == 0
            assert not e.store.update_chunk("memory", f"project:{cfg.project}", ids[0], text="x", meta={})
            e.store.touch_chunks(ids)
            after = engines[other].store.list_chunks("memory", [f"project:{cfg.project}"])
            assert [(c.text, c.uses) for c in after] == [(c.text, c.uses) for c in theirs]
        assert leaks == dict.fromkeys(leaks, 0)
        assert all(own[path] > 0 for path in ("memory.list", "memory.search", "knowledge.search", "recall",
                                              "search_history", "build")), own
        # the default tenant has no retrieval rows at all
        assert store.list_chunks("memory", ["project:shop", "user:ann"]) == []
        assert store.list_chunks("knowledge", ["project:shop"]) == []
    finally:
        for e in engines.values():
            e.close()


def _store_before_m009(kind: str, tmp_path: Path) -> Iterator[tuple[Callable[[str, tuple[Any, ...]], None], Callable[[], Store]]]:
    """A store as the retrieval branch left it (migrations up to m007_retrieval, no tenants): yields a
    function running SQL on it and one opening it with this windowsmith (which applies m008, m009)."""
    if kind == "sqlite":
        import sqlite3

        from windowsmith.store.sqlite import MIGRATIONS_TABLE, migration

        path = tmp_path / "old.db"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(f"CREATE TABLE {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        for name, fn in migration:
            if name > "m007_retrieval":
                break
            conn.execute("BEGIN")
            fn(conn)
            conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (?, '2026-11-01T00:00:00')", (name,))
            conn.execute("COMMIT")

        def run(q: str, params: tuple[Any, ...]) -> None:
            conn.execute(q, params)

        def reopen() -> Store:
            conn.close()
            return open_store(path)

        try:
            yield run, reopen
        finally:
            conn.close()
        return
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    from windowsmith.store.postgres import MIGRATIONS_TABLE as PG_TABLE
    from windowsmith.store.postgres import migration as pg_migration

    gen = _pg_store()
    make = next(gen)
    schema = make.url.rsplit("schema=", 1)[1]  # type: ignore[attr-defined]
    conn = psycopg.connect(f"host=127.0.0.1 port=5432 user={APP_ROLE} dbname=test", autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    conn.execute(f"CREATE TABLE {PG_TABLE} (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
    for name, fn in pg_migration:
        if name > "m007_retrieval":
            break
        with conn.transaction(), conn.cursor() as cur:
            fn(cur)
            cur.execute(f"INSERT INTO {PG_TABLE} (name) VALUES (%s)", (name,))

    def run_pg(q: str, params: tuple[Any, ...]) -> None:
        conn.execute(q.replace("?", "%s"), params)

    try:
        yield run_pg, make
    finally:
        conn.close()
        with contextlib.suppress(StopIteration):
            next(gen)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_m009_keeps_existing_chunks_and_makes_keys_unique_per_tenant(kind: str, tmp_path: Path) -> None:
    from windowsmith.store.chunks import NewChunk

    gen = _store_before_m009(kind, tmp_path)
    run, open_it = next(gen)
    try:
        cols = "(namespace, scope, key, doc, source, text, meta, session_id, created_at)"
        run("INSERT INTO sessions (id, meta, created_at) VALUES ('s1', '{}', '2026-11-01T00:00:00')", ())
        run(f"INSERT INTO chunks {cols} VALUES ('history', 'session:s1', 'h1', 'd', 'transcript', "
            "'IntegrityError in models.py line 404', '{}', 's1', '2026-11-01T00:00:00')", ())
        run(f"INSERT INTO chunks {cols} VALUES ('memory', 'project:p', 'm1', 'm1', 'user', "
            "'the staging database is db-staging-02', '{}', NULL, '2026-11-01T00:00:00')", ())
        st = open_it()
        applied = st.applied_migrations()
        assert applied[applied.index("m008_tenants"):][:2] == ["m008_tenants", "m009_retrieval_tenants"]
        # the rows are the default tenant's, and the rebuilt lexical index finds them
        assert [c.key for c in st.search_chunks("history", ["session:s1"], ["IntegrityError"])] == ["h1"]
        [m1] = st.search_chunks("memory", ["project:p"], ["db-staging-02"])
        assert m1.key == "m1" and m1.text.endswith("db-staging-02")
        x = st.for_tenant("team-x")
        try:
            assert x.list_chunks("memory", ["project:p"]) == [] and x.search_chunks("memory", ["project:p"], ["staging"]) == []
            assert x.list_chunks("history", ["session:s1"]) == []
            # the same key in another tenant is a new row; in the same tenant it is kept as it was
            assert x.add_chunks("memory", "project:p", [NewChunk("m1", "team-x staging is db-x-01")]) == 1
            assert st.add_chunks("memory", "project:p", [NewChunk("m1", "other text")]) == 0
            assert [c.text for c in x.search_chunks("memory", ["project:p"], ["staging"])] == ["team-x staging is db-x-01"]
            assert [c.key for c in st.search_chunks("memory", ["project:p"], ["staging"])] == ["m1"]
        finally:
            x.close()
        # the index triggers work on the rebuilt table: a deleted session's chunks leave the search
        assert st.delete_session("s1")
        assert st.search_chunks("history", ["session:s1"], ["IntegrityError"]) == []
        assert st.update_chunk("memory", "project:p", m1.id, text="the staging database moved to db-staging-03", meta={})
        assert st.search_chunks("memory", ["project:p"], ["db-staging-02"]) == []
        assert [c.id for c in st.search_chunks("memory", ["project:p"], ["db-staging-03"])] == [m1.id]
        st.close()
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)
