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


def big(tag: str) -> str:
    return "\n".join(f"tests/{tag}/test_mod_{i}.py::test_case_{i} FAILED AssertionError: expected {i} got {i + 1}"
                     for i in range(600))


def _roles(admin: Any, *names: str) -> None:
    from psycopg import sql

    for name in names:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(name)))


def _drop_roles(admin: Any, *names: str) -> None:
    from psycopg import sql

    for name in names:
        admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _pg_store(owner_split: bool = True) -> Iterator[Callable[[], Store]]:
    """``make()`` opens the store of a fresh schema as an ordinary application role created for the test
    (dropped after it). ``owner_split``: the tables belong to a second role that applied the migrations
    (``owner_url``), so the application role only reads and writes rows (the documented deployment);
    otherwise the application role owns the schema and migrates it itself."""
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    try:
        admin = psycopg.connect(PG_DSN, autocommit=True)
    except psycopg.OperationalError as e:
        pytest.skip(f"PostgreSQL is not reachable at {PG_DSN!r} ({' '.join(str(e).split())[:100]})")
    tag = uuid.uuid4().hex[:10]
    schema, app, owner = f"ws_tenant_{tag}", f"ws_app_{tag}", f"ws_owner_{tag}"
    _roles(admin, app, owner)
    admin.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(sql.Identifier(schema),
                                                                      sql.Identifier(owner if owner_split else app)))
    url = f"postgresql://{app}@127.0.0.1:5432/test?schema={schema}"
    owner_url = f"postgresql://{owner}@127.0.0.1:5432/test?schema={schema}"
    opened: list[Store] = []

    def make() -> Store:
        st = open_store(url)
        opened.append(st)
        return st

    make.url = url  # type: ignore[attr-defined]
    make.owner_url = owner_url  # type: ignore[attr-defined]
    make.app, make.owner, make.schema = app, owner, schema  # type: ignore[attr-defined]
    try:
        if owner_split:
            from windowsmith.store.postgres import PostgresStore

            PostgresStore(url, owner_url=owner_url).close()  # migrates as the owner, grants the app its rows
        yield make
    finally:
        for st in opened:
            st.close()
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        _drop_roles(admin, app, owner)
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
            # nor delete it, nor drop its blobs' references
            assert not st.delete_session(other["session"].id)
            assert st.gc(grace_seconds=0, vacuum=False)["refs_dropped"] == 0
            # the other tenant's session id is free in mine: a new, empty session of my own, never theirs
            same = me.session(other["session"].id)
            assert same.state.messages == [] and same.state.seq == -1 and not same.packs()
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


def _store_before_m009(kind: str, tmp_path: Path, last: str = "m007_retrieval",
                       ) -> Iterator[tuple[Callable[[str, tuple[Any, ...]], None], Callable[[], Store]]]:
    """A store as the retrieval branch left it (migrations up to ``last``, by default m007_retrieval: no
    tenants): yields a function running SQL on it and one opening it with this windowsmith (which applies
    the migrations after ``last``)."""
    if kind == "sqlite":
        import sqlite3

        from windowsmith.store.sqlite import MIGRATIONS_TABLE, migration

        path = tmp_path / "old.db"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(f"CREATE TABLE {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        for name, fn in migration:
            if name > last:
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

    gen = _pg_store(owner_split=False)
    make = next(gen)
    schema = make.schema  # type: ignore[attr-defined]
    conn = psycopg.connect(f"host=127.0.0.1 port=5432 user={make.app} dbname=test", autocommit=True)  # type: ignore[attr-defined]
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    conn.execute(f"CREATE TABLE {PG_TABLE} (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
    for name, fn in pg_migration:
        if name > last:
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


# -- issue 56: tenants as a boundary on PostgreSQL, session ids per tenant ---------------------------------


@pytest.mark.postgres
def test_roles_that_skip_row_level_security_are_refused_tenants_unless_opted_in(pg_schema: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    from windowsmith.store.postgres import PostgresStore

    with PostgresStore(PG_DSN, schema=pg_schema) as base:  # a superuser without a tenant: allowed (no boundary asked)
        base.create_session("s", {})
        with pytest.raises(UsageError, match="allow_bypass_rls=True") as e:
            base.for_tenant("team-a")
        assert "superuser or has BYPASSRLS" in str(e.value)
    with pytest.raises(UsageError, match="allow_bypass_rls"):
        PostgresStore(PG_DSN, schema=pg_schema, tenant="team-a")
    # the CLI says the same (the store URL is what --store takes)
    from click.testing import CliRunner

    from windowsmith.cli import main

    url = f"postgresql://postgres@127.0.0.1:5432/test?schema={pg_schema}"
    r = CliRunner().invoke(main, ["sessions", "--store", url, "--tenant", "team-a"])
    assert r.exit_code != 0 and "allow_bypass_rls" in r.output, r.output
    # the explicit opt-in: the keyword, or the URL parameter; the store's own filter still applies
    with PostgresStore(PG_DSN, schema=pg_schema, tenant="team-a", allow_bypass_rls=True) as a:
        assert a.list_sessions() == []
        a.create_session("s", {"t": "a"})
        assert [r.meta for r in a.list_sessions()] == [{"t": "a"}]
    with open_store(url + "&allow_bypass_rls=true") as base, base.for_tenant("team-a") as a:  # views inherit it
        assert [r.meta for r in a.list_sessions()] == [{"t": "a"}]
    # a role with BYPASSRLS (not a superuser) is refused too
    admin = psycopg.connect(PG_DSN, autocommit=True)
    role = f"ws_bypass_{uuid.uuid4().hex[:8]}"
    try:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER BYPASSRLS").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(pg_schema), sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(sql.Identifier(pg_schema),
                                                                                   sql.Identifier(role)))
        with pytest.raises(UsageError, match="BYPASSRLS"):
            PostgresStore(f"postgresql://{role}@127.0.0.1:5432/test?schema={pg_schema}", tenant="team-a", create=False)
    finally:
        _drop_roles(admin, role)
        admin.close()


@pytest.mark.postgres
def test_the_application_role_cannot_turn_security_off_or_move_its_tenant() -> None:
    gen = _pg_store()
    make = next(gen)
    try:
        from windowsmith.store.postgres import PostgresStore

        owner = PostgresStore(make.owner_url)  # type: ignore[attr-defined]
        app = make()
        with owner.for_tenant("team-a") as oa, owner.for_tenant("team-b") as ob:
            oa.create_session("a-1", {"t": "a"})
            ob.create_session("b-1", {"t": "b"})
            ob.put_blob(b"team-b secret", session_id="b-1")
        # the application role owns nothing: it cannot switch row-level security off, drop or replace a policy,
        # take the tables over, or change the pinning
        for attempt in ("ALTER TABLE sessions DISABLE ROW LEVEL SECURITY",
                        "ALTER TABLE blobs NO FORCE ROW LEVEL SECURITY",
                        "DROP POLICY tenant_isolation ON events",
                        "CREATE POLICY everything ON sessions USING (true)",
                        f"ALTER TABLE sessions OWNER TO {make.app}",  # type: ignore[attr-defined]
                        "CREATE OR REPLACE FUNCTION windowsmith_tenant_allowed() RETURNS boolean LANGUAGE sql AS 'SELECT true'",
                        "INSERT INTO _windowsmith_tenant_roles (role, tenant) VALUES (session_user, 'team-b')",
                        "DELETE FROM _windowsmith_tenant_roles",
                        "SELECT * FROM _windowsmith_tenant_roles"):
            with pytest.raises(ws.StoreError):
                app._read(attempt)  # type: ignore[attr-defined]
        # unpinned, the role's own SQL can still name another tenant (the store never does: its queries
        # carry its tenant): the owner pins the application role to team-a
        owner.pin_role(make.app, ["team-a"])  # type: ignore[attr-defined]
        with pytest.raises(UsageError, match="pinned"):
            app.for_tenant("team-b")
        a = app.for_tenant("team-a")
        try:
            assert [r.id for r in a.list_sessions()] == ["a-1"]
            # the caller's SQL sets the tenant to team-b on the store's own connection: still nothing of team-b
            a._read("SELECT set_config('windowsmith.tenant', 'team-b', false)")  # type: ignore[attr-defined]
            for table in ("sessions", "blobs", "blob_refs"):
                assert a._read(f"SELECT count(*) FROM {table}") == [(0,)], table  # type: ignore[attr-defined]
            assert a.list_sessions() == [] and a.get_session("b-1") is None
            with pytest.raises(ws.StoreError):  # nor can it write rows as team-b
                a._read("INSERT INTO kv (tenant, scope, key, value) VALUES ('team-b', 's', 'k', '1') RETURNING 1")  # type: ignore[attr-defined]
            a._read("SELECT set_config('windowsmith.tenant', 'team-a', false)")  # type: ignore[attr-defined]
            assert [r.id for r in a.list_sessions()] == ["a-1"]
        finally:
            a.close()
            owner.close()
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)


def _error(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except ws.WindowsmithError as e:
        return str(e)
    return "no error"


def test_the_same_session_id_in_two_tenants_and_refusals_reveal_nothing(store: Store) -> None:
    a, b = store.for_tenant("team-a"), store.for_tenant("team-b")
    try:
        a.create_session("shared", {"t": "a"})
        a.create_session("only-a", {"t": "a"})
        ea = a.append("shared", "message", {"text": "a's"}, expected_parent=None)
        b.create_session("shared", {"t": "b"})  # the same id: another session, never a refusal
        eb = b.append("shared", "message", {"text": "b's"}, expected_parent=None)
        assert [e.data for e in a.events("shared")] == [{"text": "a's"}]
        assert [e.data for e in b.events("shared")] == [{"text": "b's"}]
        assert a.get_session("shared").meta == {"t": "a"} and b.get_session("shared").meta == {"t": "b"}  # type: ignore[union-attr]
        # the same pack id in both tenants, and blobs per tenant
        manifest = {"pack_id": "p" * 16, "seq": 0}
        a.save_pack("p" * 16, "shared", ea.seq, manifest)
        b.save_pack("p" * 16, "shared", eb.seq, manifest)
        assert a.get_pack("p" * 16) == b.get_pack("p" * 16) == manifest
        # every answer about an id only team-a uses reads, for team-b, exactly as for an id nobody uses
        for probe in (lambda sid: b.events(sid), lambda sid: b.head(sid), lambda sid: b.verify(sid),
                      lambda sid: b.append(sid, "message", {"x": 1}, expected_parent=None),
                      lambda sid: b.put_blob(b"x", session_id=sid), lambda sid: b.save_pack("q" * 16, sid, 0, {}),
                      lambda sid: b.get_session(sid), lambda sid: b.list_packs(sid), lambda sid: b.delete_session(sid)):
            assert _error(lambda p=probe: p("only-a")).replace("only-a", "ID") == \
                _error(lambda p=probe: p("nobody-x")).replace("nobody-x", "ID")
        # creating it in team-b works (it is free there) and changes nothing of team-a's
        b.create_session("only-a", {"t": "b"})
        assert a.get_session("only-a").meta == {"t": "a"}  # type: ignore[union-attr]
        assert b.delete_session("shared") and [e.data for e in a.events("shared")] == [{"text": "a's"}]
        assert a.get_pack("p" * 16) == manifest
    finally:
        a.close()
        b.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_m011_keys_sessions_per_tenant_in_place(kind: str, tmp_path: Path) -> None:
    gen = _store_before_m009(kind, tmp_path, last="m010_compact_rows")
    run, open_it = next(gen)
    try:
        if kind == "postgres":  # the rows are team-a's: row-level security wants the connection to say so
            run("SELECT set_config('windowsmith.tenant', 'team-a', false)", ())
        run("INSERT INTO sessions (id, meta, created_at, tenant) VALUES ('s1', '{}', '2026-11-01T00:00:00', 'team-a')", ())
        run("INSERT INTO events (session_id, seq, kind, data, hash, parent, created_at, tenant) VALUES "
            "('s1', 0, 'meta', '{}', 'h0', NULL, '2026-11-01T00:00:00', 'team-a')", ())
        run("UPDATE sessions SET head_hash = 'h0', head_seq = 0 WHERE id = 's1'", ())
        run("INSERT INTO packs (id, session_id, seq, manifest, created_at, tenant) VALUES "
            "('pk1', 's1', 0, '{\"a\": 1}', '2026-11-01T00:00:00', 'team-a')", ())
        run("INSERT INTO chunks (tenant, namespace, scope, key, doc, source, text, meta, session_id, created_at) VALUES "
            "('team-a', 'history', 'session:s1', 'h1', 'd', 'transcript', 'IntegrityError in models.py', '{}', 's1', "
            "'2026-11-01T00:00:00')", ())
        st = open_it()
        try:
            assert "m011_session_keys_per_tenant" in st.applied_migrations()
            a, b = st.for_tenant("team-a"), st.for_tenant("team-b")
            try:
                assert [r.id for r in a.list_sessions()] == ["s1"] and a.get_session("s1").head == "h0"  # type: ignore[union-attr]
                assert [e.seq for e in a.events("s1")] == [0] and a.get_pack("pk1") == {"a": 1}
                assert [c.key for c in a.search_chunks("history", ["session:s1"], ["IntegrityError"])] == ["h1"]
                b.create_session("s1", {"t": "b"})  # the id is free in another tenant now
                b.save_pack("pk1", "s1", 0, {"b": 2})
                assert a.get_pack("pk1") == {"a": 1} and b.get_pack("pk1") == {"b": 2}
                assert a.delete_session("s1")  # cascades within team-a only
                assert a.search_chunks("history", ["session:s1"], ["IntegrityError"]) == [] and a.get_pack("pk1") is None
                assert b.get_session("s1") is not None and b.get_pack("pk1") == {"b": 2}
            finally:
                a.close()
                b.close()
        finally:
            st.close()
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)


@pytest.mark.postgres
def test_migrate_command_applies_as_the_owner_and_pins_roles() -> None:
    psycopg = pytest.importorskip("psycopg")
    from click.testing import CliRunner
    from psycopg import sql

    from windowsmith.cli import main

    try:
        admin = psycopg.connect(PG_DSN, autocommit=True)
    except psycopg.OperationalError as e:
        pytest.skip(f"PostgreSQL is not reachable ({e})")
    tag = uuid.uuid4().hex[:10]
    schema, app, owner = f"ws_mig_{tag}", f"ws_app_{tag}", f"ws_owner_{tag}"
    _roles(admin, app, owner)
    try:
        admin.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(sql.Identifier(schema), sql.Identifier(owner)))
        url = f"postgresql://{{}}@127.0.0.1:5432/test?schema={schema}"
        # the application role cannot create the tables itself (the schema is the owner's)
        r = CliRunner().invoke(main, ["sessions", "--store", url.format(app), "--tenant", "team-a"])
        assert r.exit_code != 0 and "Traceback" not in r.output, r.output
        r = CliRunner().invoke(main, ["migrate", "--store", url.format(app), "--owner-url", url.format(owner),
                                      "--pin", f"{app}=team-a"])
        assert r.exit_code == 0 and "pinned to 'team-a'" in r.output, r.output
        with ws.Engine("gpt-4o", store=url.format(app), tenant="team-a") as e:
            e.session("t-1").user("hello")
            assert e.sessions() == ["t-1"]
        with pytest.raises(UsageError, match="pinned"):
            ws.Engine("gpt-4o", store=url.format(app), tenant="team-b")
        r = CliRunner().invoke(main, ["sessions", "--store", url.format(app), "--tenant", "team-a"])
        assert r.exit_code == 0 and "t-1" in r.output, r.output
        # the application role owns nothing it could turn security off with
        (owners,) = admin.execute("SELECT array_agg(DISTINCT tableowner) FROM pg_tables WHERE schemaname = %s",
                                  (schema,)).fetchone()  # type: ignore[misc]
        assert owners == [owner]
        r = CliRunner().invoke(main, ["migrate", "--store", "x.db", "--owner-url", url.format(owner)])
        assert r.exit_code != 0 and "PostgreSQL" in r.output
    finally:
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        _drop_roles(admin, app, owner)
        admin.close()
