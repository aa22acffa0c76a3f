"""Tenants: two teams on one store read none of each other's rows, on SQLite (checked by the store)
and PostgreSQL (row-level security, connected as an ordinary role), through every read path: sessions,
events, packs (by id and prefix), blobs via read_result / search_result / reconstruct, key-value
(calibration, proxy sync), and the server's JSON API."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import windowsmith as ws
from windowsmith.compaction import CompactionConfig
from windowsmith.errors import UsageError
from windowsmith.store import Store, open_store

PG_DSN = os.environ.get(
    "WINDOWSMITH_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"
)
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
    shas = {a.removeprefix("artifact://") for a in pack.manifest.artifacts}
    shas |= set(engine.store.named_artifacts(sid))
    return {"session": s, "pack": pack, "shas": sorted(shas), "packs": [m.pack_id for m in s.packs()]}


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
            for table in ("sessions", "events", "packs", "blobs", "blob_refs", "kv"):
                (n,) = b._read(f"SELECT count(*) FROM {table}")[0]  # type: ignore[attr-defined]
                assert n == 0, table
            a = base.for_tenant("team-a")
            try:
                (n,) = a._read("SELECT count(*) FROM events")[0]  # type: ignore[attr-defined]
                assert n > 10
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


def test_json_api_scopes_every_route_to_the_token_tenant(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    httpx = pytest.importorskip("httpx")
    from windowsmith.server import ServerConfig, create_app
    from windowsmith.server.fake_upstream import BackgroundServer

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
