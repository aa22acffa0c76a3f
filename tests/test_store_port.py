"""The store's port: what a new backend implements, and that it is enough for a whole store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from windowsmith.errors import ConflictError, StoreError, UsageError
from windowsmith.store import Store
from windowsmith.store.chunks import NewChunk
from windowsmith.store.dialect import Dialect
from windowsmith.store.sqlite_schema import migration


def test_the_port_is_a_few_primitives() -> None:
    assert Store.__abstractmethods__ == {"_transaction", "_read", "_migrate", "close", "vacuum", "size_bytes"}


class MemoryStore(Store):
    """A third backend written against the port alone: SQLite in memory, the shared SQL and migrations."""

    def __init__(self) -> None:
        super().__init__()
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException as e:
                self.conn.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise StoreError(f"the memory store failed: {e}") from e
                raise
            self.conn.execute("COMMIT")

    def _read(self, sql: str, params: Any = ()) -> list[Any]:
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    def _migrate(self) -> None:
        for _, fn in migration:
            with self._transaction() as conn:
                fn(conn)

    def close(self) -> None:
        self.conn.close()

    def vacuum(self) -> None:
        self.conn.execute("VACUUM")

    def size_bytes(self) -> int:
        return int(self._read("PRAGMA page_count")[0][0] * self._read("PRAGMA page_size")[0][0])


def test_a_backend_from_the_port_alone_is_a_whole_store() -> None:
    with MemoryStore() as s:
        s.create_session("s", {"a": 1})
        e0 = s.append("s", "message", {"role": "user", "text": "hello " * 100}, expected_parent=None)
        e1 = s.append("s", "message", {"role": "assistant", "text": "hi"}, expected_parent=e0.hash)
        with pytest.raises(ConflictError):
            s.append("s", "message", {"x": 1}, expected_parent=e0.hash)
        assert [e.hash for e in s.events("s")] == [e0.hash, e1.hash]
        assert s.head("s") == e1
        s.verify("s")
        record = s.get_session("s")
        assert record is not None and record.event_count == 2 and record.created_at.tzinfo is not None
        for i in range(3):
            s.save_pack(f"p{i}", "s", 1, {"checksum": f"c{i}", "parts": "x" * 100 + str(i)})
        assert s.get_pack("p2") == {"checksum": "c2", "parts": "x" * 100 + "2"}
        with pytest.raises(UsageError, match="ambiguous"):
            s.get_pack("p")
        sha = s.put_blob(b"data" * 100, session_id="s")
        assert s.get_blob(sha) == b"data" * 100 and s.blob_refs(sha) == ["s"]
        s.set_kv("calibration", "k", {"v": 1})
        assert s.get_kv("calibration", "k") == {"v": 1}
        chunks = [NewChunk(key=f"k{i}", text=f"the fox number {i}", doc="d") for i in range(3)]
        assert s.add_chunks("memory", "session:s", chunks, session_id="s") == 3
        assert [c.key for c in s.search_chunks("memory", ["session:s"], ["number 1"])] == ["k1"]
        collected = s.gc(grace_seconds=0)  # no event names the blob: its reference and then the blob go
        assert (collected["refs_dropped"], collected["blobs_deleted"]) == (1, 1) and s.get_blob(sha) is None
        assert s.delete_session("s") and s.list_sessions() == []
        with pytest.raises(UsageError, match="does not support tenants"):
            s.for_tenant("team-a")


def test_the_default_dialect_is_sqlite_spelling() -> None:
    d = Dialect()
    sql = "SELECT 1 FROM t WHERE tenant = :tenant AND x = :x"
    assert d.sql(sql) is sql
    params: dict[str, Any] = {}
    assert d.in_list("c.scope", "scope", ["a", "b"], params) == "c.scope IN (:scope0, :scope1)"
    assert params == {"scope0": "a", "scope1": "b"}
    when = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert d.to_datetime(d.timestamp(when)) == when
    assert d.store_text("x" * 10, 0) == "x" * 10


def test_postgres_dialect_translates_the_shared_sql() -> None:
    from windowsmith.store.postgres import PostgresDialect

    d = PostgresDialect()
    assert d.sql("INSERT INTO kv (tenant, v, at) VALUES (:tenant, :v, :now)") == (
        "INSERT INTO kv (tenant, v, at) VALUES (%(tenant)s, %(v)s, clock_timestamp())"
    )
    # the query's own tenant check stays (row-level security is a second wall behind it, not a replacement)
    assert d.sql("SELECT 1 FROM chunks c WHERE c.tenant = :tenant AND tenant = :tenant AND r.tenant = b.tenant") == (
        "SELECT 1 FROM chunks c WHERE c.tenant = %(tenant)s AND tenant = %(tenant)s AND r.tenant = b.tenant"
    )
    assert d.sql("SELECT %(a)s::text[], x::int") == "SELECT %(a)s::text[], x::int"  # casts are left alone
    params: dict[str, Any] = {}
    assert d.in_list("id", "id", (1, 2), params) == "id = ANY(:id)" and params == {"id": [1, 2]}
    assert d.now() is None and d.store_text("x" * 1000, 0) == "x" * 1000
