"""PostgreSQL-specific store behaviour: migrations, tampering, URLs, the missing-extra message."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from conftest import PG_DSN, new_pg_schema
from windowsmith.errors import StoreError, UsageError
from windowsmith.store import open_store


def test_missing_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # makes `import psycopg` raise ImportError
    with pytest.raises(UsageError, match=r"pip install 'windowsmith\[postgres\]'"):
        open_store("postgresql://postgres@127.0.0.1:5432/test")


def test_unreachable_server_is_a_store_error() -> None:
    pytest.importorskip("psycopg")
    from windowsmith.store.postgres import PostgresStore

    with pytest.raises(StoreError, match=r"cannot connect to the PostgreSQL store at 127\.0\.0\.1:1/test"):
        PostgresStore("host=127.0.0.1 port=1 user=postgres dbname=test", connect_timeout=2)


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema for one test, dropped afterwards; skips if the server is unreachable."""
    yield from new_pg_schema()


def raw_execute(schema: str, query: str, params: tuple[object, ...] = ()) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(query, params)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.postgres
def test_migrations_recorded_once_and_idempotent_on_reopen(schema: str) -> None:
    from windowsmith.store.postgres import PostgresStore, migration

    with PostgresStore(PG_DSN, schema=schema) as s:
        assert s.applied_migrations() == migration.names
        s.create_session("s", {})
        s.append("s", "message", {"n": 1}, expected_parent=None)
    with PostgresStore(PG_DSN, schema=schema) as s:
        assert s.applied_migrations() == migration.names
        assert [e.data for e in s.events("s")] == [{"n": 1}]


@pytest.mark.slow
@pytest.mark.postgres
def test_newer_database_is_refused_with_upgrade_hint(schema: str) -> None:
    from windowsmith.store.postgres import MIGRATIONS_TABLE, PostgresStore

    PostgresStore(PG_DSN, schema=schema).close()
    raw_execute(schema, f"INSERT INTO {MIGRATIONS_TABLE} (name) VALUES ('m999_from_the_future')")
    with pytest.raises(StoreError, match=r"newer windowsmith .*m999_from_the_future.*upgrade"):
        PostgresStore(PG_DSN, schema=schema)


@pytest.mark.slow
@pytest.mark.postgres
def test_tampered_row_is_detected_at_its_seq(schema: str) -> None:
    from windowsmith.store.postgres import PostgresStore

    # a superuser skips row-level security: tenant views need the explicit opt-in (the query filter alone)
    with PostgresStore(PG_DSN, schema=schema, allow_bypass_rls=True) as s:
        s.create_session("s", {})
        head = None
        for i in range(4):
            head = s.append("s", "message", {"i": i}, expected_parent=head).hash
        s.verify("s")
        raw_execute(schema, """UPDATE events SET data = '{"i":99}' WHERE session_id = 's' AND seq = 1""")
        with pytest.raises(StoreError, match=r"session 's' is corrupt at seq 1: stored hash .* != recomputed"):
            s.verify("s")


@pytest.mark.slow
@pytest.mark.postgres
def test_open_store_with_a_url(schema: str) -> None:
    import psycopg
    from psycopg import sql

    from windowsmith.store.postgres import PostgresStore

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    url = f"postgresql://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    with open_store(url) as s:
        assert isinstance(s, PostgresStore)
        s.create_session("via-url", {"ok": True})
    with PostgresStore(PG_DSN, schema=schema) as s:
        assert s.get_session("via-url").meta == {"ok": True}  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.postgres
def test_database_errors_become_store_errors(schema: str) -> None:
    from windowsmith.store.postgres import PostgresStore

    # a superuser skips row-level security: tenant views need the explicit opt-in (the query filter alone)
    with PostgresStore(PG_DSN, schema=schema, allow_bypass_rls=True) as s:
        s.create_session("s", {})
        raw_execute(
            schema,
            "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'usage refused'; END $$ "
            "LANGUAGE plpgsql; CREATE TRIGGER no_usage BEFORE INSERT ON events FOR EACH ROW "
            "WHEN (NEW.kind = 'usage') EXECUTE FUNCTION refuse()",
        )
        with pytest.raises(StoreError, match="usage refused"):
            s.append_many("s", [("message", {"a": 1}), ("usage", {"b": 2})], expected_parent=None)
        assert s.events("s") == []
        assert s.get_session("s").head is None  # type: ignore[union-attr]
        s.append("s", "message", {"a": 1}, expected_parent=None)
        s.verify("s")


@pytest.mark.slow
@pytest.mark.postgres
def test_m006_rewrites_the_packs_of_an_older_store_as_deltas(schema: str) -> None:
    import json

    from windowsmith.hashing import canonical_json
    from windowsmith.store.postgres import MIGRATIONS_TABLE, PostgresStore

    # a superuser skips row-level security: tenant views need the explicit opt-in (the query filter alone)
    with PostgresStore(PG_DSN, schema=schema, allow_bypass_rls=True) as s:
        s.create_session("s", {})
    # the store as m001..m005 left it: no delta columns, full manifests
    raw_execute(schema, "ALTER TABLE packs DROP COLUMN base_ord, DROP COLUMN snap_ord")
    raw_execute(schema, f"DELETE FROM {MIGRATIONS_TABLE} WHERE name = 'm006_pack_deltas'")
    made = [{"id": f"p{i}", "parts": "".join(f"{k:012x}" for k in range(50 + 4 * i)), "tokens": i} for i in range(60)]
    for i, m in enumerate(made):
        raw_execute(schema, "INSERT INTO packs (id, session_id, seq, manifest) VALUES (%s, 's', %s, %s)",
                    (m["id"], i, canonical_json(m)))
    before = sum(len(canonical_json(m)) for m in made)
    with PostgresStore(PG_DSN, schema=schema) as s:
        assert "m006_pack_deltas" in s.applied_migrations()
        assert s.list_packs("s") == made
        assert s.get_pack("p59") == made[59]
        rows = s._read("SELECT manifest, base_ord FROM packs")
        assert sum(len(r[0]) for r in rows) < before / 5
        assert sum(r[1] is not None for r in rows) >= 50  # most rows are deltas now
        assert all(isinstance(json.loads(r[0]), dict) for r in rows)
        s.save_pack("p60", "s", 60, {"id": "p60", "parts": made[59]["parts"] + "x" * 12, "tokens": 60})
        assert s.list_packs("s")[-1]["tokens"] == 60


@pytest.mark.slow
@pytest.mark.postgres
def test_m010_drops_the_hash_index_and_compresses_the_artifacts_of_an_older_store(schema: str) -> None:
    import hashlib

    from windowsmith.store.postgres import MIGRATIONS_TABLE, PostgresStore

    result = "".join(f"line {k:03d}: value={k * 7919 % 10007:05d} status=ok\n" for k in range(30))
    noise = b"".join(hashlib.sha256(bytes([i])).digest() for i in range(32))
    # a superuser skips row-level security: tenant views need the explicit opt-in (the query filter alone)
    with PostgresStore(PG_DSN, schema=schema, allow_bypass_rls=True) as s:
        s.create_session("s", {})
        s.append_many("s", [("message", {"text": result}), ("message", {"text": "hi"})], expected_parent=None)
        shas = s.put_blobs([result.encode(), noise], session_id="s")
        with s.for_tenant("acme") as acme:
            acme.create_session("t", {})
            tenant_sha = acme.put_blob(result.encode() * 2, session_id="t")
        events = s.events("s")
    # the store as m001..m009 left it: the UNIQUE (session_id, hash) constraint, every artifact plain
    raw_execute(schema, "ALTER TABLE events ADD CONSTRAINT events_session_id_hash_key UNIQUE (session_id, hash)")
    for data in (result.encode(), noise, result.encode() * 2):
        raw_execute(schema, "UPDATE blobs SET data = %s WHERE sha = %s", (data, hashlib.sha256(data).hexdigest()))
    raw_execute(schema, f"DELETE FROM {MIGRATIONS_TABLE} WHERE name = 'm010_compact_rows'")
    with PostgresStore(PG_DSN, schema=schema, allow_bypass_rls=True) as s:
        assert s.applied_migrations()[-1] == "m010_compact_rows"
        assert s._read("SELECT count(*) FROM pg_constraint WHERE conrelid = 'events'::regclass "  # type: ignore[attr-defined]
                       "AND contype = 'u'") == [(0,)]
        assert s.events("s") == events
        s.verify("s")
        assert [s.get_blob(sha) for sha in shas] == [result.encode(), noise]
        with s.for_tenant("acme") as acme:
            assert acme.get_blob(tenant_sha) == result.encode() * 2
        stored = dict(s._read("SELECT sha, octet_length(data) FROM blobs WHERE sha = ANY(%s)", (shas,)))  # type: ignore[attr-defined]
        assert stored[shas[0]] < len(result) // 3 and stored[shas[1]] == len(noise)
        s.append("s", "message", {"text": "after"}, expected_parent=events[-1].hash)
        s.verify("s")
