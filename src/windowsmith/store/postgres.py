"""The PostgreSQL store, for fleets of agent workers sharing sessions.

Same tables and semantics as :mod:`windowsmith.store.sqlite`, with psycopg 3 imported lazily
(``pip install 'windowsmith[postgres]'``). Text keys use the ``"C"`` collation so ids sort and
prefix-match bytewise, as in SQLite. Event data and manifests are stored as canonical JSON *text*
(not ``jsonb``, which would reorder keys and renormalize numbers and so change what was hashed).

An append is one statement: a conditional ``UPDATE sessions ... WHERE head_hash IS NOT DISTINCT
FROM expected`` feeding the ``INSERT`` of the events through a CTE. The update locks the session row;
a concurrent writer waits, re-checks the condition against the new head and updates nothing, so at
most one of two racing appends wins, in one round trip and without an explicit transaction.

Migrations (``postgres_schema.py``) are the same named, forward-only steps recorded in ``_windowsmith_migrations``, each in
its own transaction under an advisory lock so workers starting together apply them once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import StoreError, UsageError
from ..model import Event
from . import packs
from .base import (
    EventRow,
    PreparedEvent,
    SessionRecord,
    Store,
    blob_sha,
    check_blob,
    check_kv_args,
    check_pack_args,
    check_session_id,
    check_tenant,
    event_from_row,
    moved_on,
    pack_prefix_upper,
    session_kv_scopes,
    taken_session_id,
    to_json,
    unknown_session,
)
from .chunks import Chunk, NewChunk, check_namespace, check_scope, check_scopes, tsquery
from .codec import pack_blob, unpack_blob
from .postgres_schema import ADVISORY_KEY, MIGRATIONS_TABLE, TENANT_SETTING, migration

if TYPE_CHECKING:
    import psycopg

_TABLES = ("sessions", "events", "packs", "blobs", "blob_refs", "kv", "chunks")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as e:
        raise UsageError(
            "a PostgreSQL store needs psycopg 3, which is not installed; "
            "install it with: pip install 'windowsmith[postgres]'"
        ) from e
    return psycopg


_APPEND_SQL = """
WITH h AS (
    UPDATE sessions SET head_hash = %(new_head)s, head_seq = head_seq + %(n)s
    WHERE id = %(sid)s AND head_hash IS NOT DISTINCT FROM %(expected)s
    RETURNING head_seq - %(n)s AS base
)
INSERT INTO events (session_id, seq, kind, data, hash, parent)
SELECT %(sid)s, h.base + t.ord, t.kind, t.data, t.hash, t.parent
FROM h, unnest(%(kinds)s::text[], %(datas)s::text[], %(hashes)s::text[], %(parents)s::text[])
     WITH ORDINALITY AS t(kind, data, hash, parent, ord)
RETURNING seq
"""


def split_schema(dsn: str) -> tuple[str, str | None]:
    """``(dsn without it, schema)`` for a ``postgresql://`` URL with a ``schema=`` query parameter
    (``postgresql://host/db?schema=agents``); libpq does not know the parameter, so it is removed.
    Other DSNs come back unchanged with None."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if not isinstance(dsn, str) or not dsn.startswith(("postgresql://", "postgres://")):
        return dsn, None
    parts = urlsplit(dsn)
    params = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in params if k == "schema"]
    if not schemas:
        return dsn, None
    if len(schemas) > 1 or not schemas[0]:
        raise UsageError(f"give one non-empty schema= in the store URL, got {schemas!r}")
    rest = urlencode([(k, v) for k, v in params if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schemas[0]


class PostgresStore(Store):
    """A :class:`~windowsmith.store.Store` in a PostgreSQL database.

    ``dsn``: a ``postgresql://`` URL or a libpq connection string. ``schema``: keep the tables in
    this schema (created if missing) instead of the connection's default ``search_path``; a URL can
    name it too, as ``postgresql://host/db?schema=agents`` (what ``--store`` takes on the command line).
    ``create=False``: open an existing store only (no schema or tables are created; ``UsageError``).
    """

    def __init__(self, dsn: str, *, schema: str | None = None, connect_timeout: int = 10, create: bool = True,
                 tenant: str = "") -> None:
        pg = _psycopg()
        self.tenant = check_tenant(tenant)
        self._connect_timeout = connect_timeout
        self._pg = pg
        dsn, url_schema = split_schema(dsn)
        if schema is not None and url_schema is not None and schema != url_schema:
            raise UsageError(f"schema={schema!r} and the URL's schema={url_schema!r} disagree; give one of them")
        schema = schema if schema is not None else url_schema
        if schema is not None and (not isinstance(schema, str) or not schema.strip() or "\x00" in schema):
            raise UsageError(f"schema= must be a non-empty name or None, got {schema!r}")
        self.dsn = dsn
        self.schema = schema
        self._lock = threading.RLock()
        self._pack_heads = packs.PackCache()
        self._conn: psycopg.Connection[Any] | None = None
        try:
            conn = pg.connect(dsn, autocommit=True, connect_timeout=connect_timeout)
        except pg.Error as e:
            raise StoreError(
                f"cannot connect to the PostgreSQL store at {self._where()}: {str(e).strip()}; "
                "check the URL and that the server is running"
            ) from None
        self._conn = conn
        try:
            conn.execute("SELECT set_config(%s, %s, false)", (TENANT_SETTING, self.tenant))
            if schema is not None:
                self._use_schema(schema, create=create)
            if not create and not self._read("SELECT to_regclass(%s)", (MIGRATIONS_TABLE,))[0][0]:
                raise UsageError(
                    f"no windowsmith store at {self._where()}: the database{' schema' if schema else ''} has no "
                    "windowsmith tables; check --store for a typo (a URL names its schema with ?schema=NAME)"
                )
            self._migrate()
        except BaseException as e:
            conn.close()
            self._conn = None
            if isinstance(e, pg.Error):
                raise StoreError(f"cannot open the PostgreSQL store at {self._where()}: {str(e).strip()}") from None
            raise

    def _use_schema(self, schema: str, *, create: bool = True) -> None:
        """Create ``schema`` if missing (once, however many workers open it at the same moment: ``CREATE
        SCHEMA IF NOT EXISTS`` alone races on the catalog's unique index) and put it on the search path."""
        from psycopg import sql

        exists = "SELECT 1 FROM pg_namespace WHERE nspname = %s"
        if not self._read(exists, (schema,)):  # creating needs a privilege that using does not
            if not create:
                raise UsageError(
                    f"no windowsmith store at {self._where()}: there is no schema {schema!r}; "
                    "check --store for a typo"
                )
            with self._tx() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s || %s))", (ADVISORY_KEY, schema))
                if not cur.execute(exists, (schema,)).fetchone():
                    cur.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        self._db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))

    def _where(self) -> str:
        try:
            from psycopg.conninfo import conninfo_to_dict

            info = conninfo_to_dict(self.dsn)
            where = f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"
        except Exception:
            where = "the given DSN"
        return where + (f" (schema {self.schema})" if self.schema else "")

    def __repr__(self) -> str:
        return f"PostgresStore({self._where()!r}" + (f", tenant={self.tenant!r})" if self.tenant else ")")

    def for_tenant(self, tenant: str) -> PostgresStore:
        """This store as ``tenant`` sees it: a new connection whose ``windowsmith.tenant`` setting the
        row-level security policies of every table check."""
        return PostgresStore(self.dsn, schema=self.schema, connect_timeout=self._connect_timeout, create=False,
                             tenant=tenant)

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def _db(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            raise UsageError(f"the store at {self._where()} is closed; open a new PostgresStore")
        return self._conn

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except self._pg.Error as e:
            raise StoreError(f"the PostgreSQL store at {self._where()} failed: {str(e).strip()}") from e

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Cursor[Any]]:
        with self._lock, self._errors():
            db = self._db
            with db.transaction(), db.cursor() as cur:
                yield cur

    def _read(self, query: str, params: Mapping[str, Any] | tuple[Any, ...] = ()) -> list[Any]:
        with self._lock, self._errors():
            return self._db.execute(query, params).fetchall()

    def _migrate(self) -> None:
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s || current_schema()))", (ADVISORY_KEY,))
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
                "(name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
            )
            applied = {r[0] for r in cur.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}
        migration.check_known(applied, f"the PostgreSQL store at {self._where()}")
        for name, fn in migration:
            if name in applied:
                continue
            with self._tx() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s || current_schema()))", (ADVISORY_KEY,))
                if cur.execute(f"SELECT 1 FROM {MIGRATIONS_TABLE} WHERE name = %s", (name,)).fetchone():
                    continue
                fn(cur)
                cur.execute(f"INSERT INTO {MIGRATIONS_TABLE} (name) VALUES (%s)", (name,))

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this database, in the order they were applied."""
        return [r[0] for r in self._read(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY applied_at, name")]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- sessions ---------------------------------------------------------------------------------

    def create_session(self, session_id: str, meta: Mapping[str, Any] | None = None) -> None:
        check_session_id(session_id)
        meta_json = to_json(dict(meta or {}), f"the meta of session {session_id!r}")
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO sessions (id, meta) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING", (session_id, meta_json)
            )
            if cur.rowcount == 0:
                row = cur.execute("SELECT meta FROM sessions WHERE id = %s", (session_id,)).fetchone()
                if row is None:  # the id belongs to a row this tenant cannot see
                    raise taken_session_id(session_id)
                (existing,) = row
                if existing != meta_json:
                    raise UsageError(
                        f"session {session_id!r} already exists with different meta ({existing:.200}); "
                        "use a new session id, or pass the same meta to reuse it"
                    )

    @staticmethod
    def _record(row: tuple[Any, ...]) -> SessionRecord:
        sid, meta, created_at, head, head_seq = row
        return SessionRecord(sid, json.loads(meta), created_at, head, head_seq + 1)

    def get_session(self, session_id: str) -> SessionRecord | None:
        check_session_id(session_id)
        rows = self._read("SELECT id, meta, created_at, head_hash, head_seq FROM sessions WHERE id = %s", (session_id,))
        return self._record(rows[0]) if rows else None

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._read("SELECT id, meta, created_at, head_hash, head_seq FROM sessions ORDER BY created_at, id")
        return [self._record(r) for r in rows]

    def delete_session(self, session_id: str) -> bool:
        check_session_id(session_id)
        with self._tx() as cur:
            gone = cur.execute("DELETE FROM sessions WHERE id = %s", (session_id,)).rowcount > 0
            if gone:  # the tenant's policy scopes the kv rows as it scopes the session
                cur.execute("DELETE FROM kv WHERE scope = ANY(%s)", (session_kv_scopes(session_id),))
            return gone

    # -- log --------------------------------------------------------------------------------------

    def _write_events(self, session_id: str, prepared: list[PreparedEvent], expected_parent: str | None) -> list[Event]:
        params = {
            "sid": session_id,
            "expected": expected_parent,
            "new_head": prepared[-1].hash,
            "n": len(prepared),
            "kinds": [p.kind for p in prepared],
            "datas": [p.data_json for p in prepared],
            "hashes": [p.hash for p in prepared],
            "parents": [p.parent for p in prepared],
        }
        with self._lock, self._errors():
            seqs = [r[0] for r in self._db.execute(_APPEND_SQL, params).fetchall()]
            if not seqs:
                row = self._db.execute("SELECT head_hash FROM sessions WHERE id = %s", (session_id,)).fetchone()
                if row is None:
                    raise unknown_session(session_id)
                raise moved_on(session_id, row[0], expected_parent)
        seqs.sort()
        return [event_from_row(s, p.kind, p.data_json, p.hash, p.parent) for s, p in zip(seqs, prepared, strict=True)]

    def _require_session(self, session_id: str) -> None:
        if not self._read("SELECT 1 FROM sessions WHERE id = %s", (session_id,)):
            raise unknown_session(session_id)

    def events(self, session_id: str, since_seq: int = 0) -> list[Event]:
        return [event_from_row(*r) for r in self.event_rows(session_id, since_seq)]

    def event_rows(self, session_id: str, since_seq: int = 0) -> list[EventRow]:
        check_session_id(session_id)
        rows = self._read(
            "SELECT seq, kind, data, hash, parent FROM events WHERE session_id = %s AND seq >= %s ORDER BY seq",
            (session_id, since_seq),
        )
        if not rows:
            self._require_session(session_id)
        return [(int(r[0]), r[1], r[2], r[3], r[4]) for r in rows]

    def head(self, session_id: str) -> Event | None:
        check_session_id(session_id)
        rows = self._read(
            "SELECT seq, kind, data, hash, parent FROM events WHERE session_id = %s ORDER BY seq DESC LIMIT 1",
            (session_id,),
        )
        if not rows:
            self._require_session(session_id)
        return event_from_row(*rows[0]) if rows else None

    # -- packs ------------------------------------------------------------------------------------

    def save_pack(self, pack_id: str, session_id: str, seq: int, manifest: Mapping[str, Any]) -> None:
        check_pack_args(pack_id, session_id, seq, manifest, serialize=False)
        if self.tenant:  # a foreign key sees every tenant's sessions; the policies do not
            self._require_session(session_id)
        try:
            with self._tx() as cur:
                head = self._pack_heads.get(session_id)
                cur.execute("SELECT ord, id FROM packs WHERE session_id = %s ORDER BY ord DESC LIMIT 1", (session_id,))
                last = cur.fetchone()
                if head is not None and (last is None or tuple(last) != (head.ord, head.pack_id)):
                    head = None  # another writer saved a pack since, or the session was deleted: a new chain
                text, delta, n = packs.encode(head, manifest, lambda: check_pack_args(pack_id, session_id, seq, manifest))
                base = head.ord if delta and head is not None else None
                snap = head.snap_ord if delta and head is not None else None
                cur.execute(
                    "INSERT INTO packs (id, session_id, seq, manifest, base_ord, snap_ord) VALUES (%s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (id) DO NOTHING RETURNING ord",
                    (pack_id, session_id, seq, text, base, snap),
                )
                got = cur.fetchone()
                if got is None:
                    cur.execute("SELECT session_id, seq FROM packs WHERE id = %s", (pack_id,))
                    row = cur.fetchone()
                    old = self._rebuild_pack(cur, pack_id)
                    if row is None or (row[0], row[1]) != (session_id, seq) or to_json(old, "") != check_pack_args(
                            pack_id, session_id, seq, manifest):
                        raise UsageError(
                            f"pack {pack_id!r} is already saved with a different session, seq or manifest; "
                            "pack ids must be unique (derive them from the manifest checksum)"
                        )
                    return
                o = got[0]
                if snap is None:
                    cur.execute("UPDATE packs SET snap_ord = %s WHERE ord = %s", (o, o))
        except StoreError as e:
            if isinstance(e.__cause__, self._pg.errors.ForeignKeyViolation):
                raise unknown_session(session_id) from None
            raise
        self._pack_heads.put(session_id, packs.next_head(head, delta, o, pack_id, seq, manifest, n))

    def _rebuild_pack(self, cur: psycopg.Cursor[Any], pack_id: str) -> dict[str, Any] | None:
        cur.execute("SELECT ord, session_id, base_ord, snap_ord, manifest FROM packs WHERE id = %s", (pack_id,))
        row = cur.fetchone()
        if row is None:
            return None
        o, sid, base, snap, text = row
        if base is None:
            return json.loads(text)  # type: ignore[no-any-return]
        cur.execute("SELECT ord, base_ord, manifest FROM packs WHERE session_id = %s AND ord >= %s AND ord <= %s "
                    "ORDER BY ord", (sid, snap, o))
        return packs.rebuild(cur.fetchall(), o)

    def _pack_ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        rows = self._read(
            "SELECT id FROM packs WHERE id >= %s AND id < %s ORDER BY id LIMIT %s",
            (prefix, pack_prefix_upper(prefix), limit),
        )
        return [r[0] for r in rows]

    def _get_pack_exact(self, pack_id: str) -> dict[str, Any] | None:
        with self._tx() as cur:
            return self._rebuild_pack(cur, pack_id)

    def list_packs(self, session_id: str) -> list[dict[str, Any]]:
        check_session_id(session_id)
        rows = self._read("SELECT ord, base_ord, manifest FROM packs WHERE session_id = %s ORDER BY ord", (session_id,))
        return packs.rebuild_all(rows)

    # -- blobs ------------------------------------------------------------------------------------

    def put_blob(self, data: bytes, *, session_id: str | None = None) -> str:
        return self.put_blobs([data], session_id=session_id)[0]

    def put_blobs(self, datas: Sequence[bytes], *, session_id: str | None = None) -> list[str]:
        hashed = [blob_sha(d) for d in datas]
        if session_id is not None:
            check_session_id(session_id)
            if self.tenant:  # a foreign key sees every tenant's sessions; the policies do not
                self._require_session(session_id)
        if not hashed:
            return []
        try:
            with self._tx() as cur:
                cur.executemany(
                    "INSERT INTO blobs (sha, data, size) VALUES (%s, %s, %s) ON CONFLICT (tenant, sha) DO NOTHING",
                    [(sha, pack_blob(raw), len(raw)) for raw, sha in hashed],
                )
                if session_id is not None:
                    cur.executemany(
                        "INSERT INTO blob_refs (sha, session_id) VALUES (%s, %s) ON CONFLICT (tenant, sha, session_id) "
                        "DO UPDATE SET created_at = clock_timestamp()",
                        [(sha, session_id) for _, sha in hashed],
                    )
        except StoreError as e:
            if isinstance(e.__cause__, self._pg.errors.ForeignKeyViolation) and session_id is not None:
                self._require_session(session_id)
            raise
        return [sha for _, sha in hashed]

    def get_blob(self, sha: str) -> bytes | None:
        rows = self._read("SELECT data, size FROM blobs WHERE sha = %s", (sha,))
        return check_blob(sha, unpack_blob(rows[0][0], rows[0][1]), self._where()) if rows else None

    def blob_refs(self, sha: str) -> list[str]:
        rows = self._read("SELECT session_id FROM blob_refs WHERE sha = %s ORDER BY session_id", (sha,))
        return [r[0] for r in rows]

    def gc_blobs(self) -> int:
        with self._tx() as cur:
            # EXCLUSIVE blocks put_blob (whose first statement inserts into blobs) but not readers, so no
            # reference can be added to a blob between our snapshot and its deletion.
            cur.execute("LOCK TABLE blobs IN EXCLUSIVE MODE")
            cur.execute("DELETE FROM blobs b WHERE NOT EXISTS "
                        "(SELECT 1 FROM blob_refs r WHERE r.tenant = b.tenant AND r.sha = b.sha)")
            return cur.rowcount

    def _stale_refs(self, cutoff: datetime) -> list[tuple[str, str]]:
        rows = self._read("SELECT sha, session_id FROM blob_refs WHERE created_at < %s ORDER BY session_id, sha",
                          (cutoff,))
        return [(r[0], r[1]) for r in rows]

    def _drop_refs(self, pairs: Sequence[tuple[str, str]], cutoff: datetime) -> int:
        with self._tx() as cur:
            cur.execute(
                "DELETE FROM blob_refs r USING unnest(%s::text[], %s::text[]) AS p(sha, sid) "
                "WHERE r.sha = p.sha AND r.session_id = p.sid AND r.created_at < %s",
                ([p[0] for p in pairs], [p[1] for p in pairs], cutoff),
            )
            return cur.rowcount

    def vacuum(self) -> None:
        # plain VACUUM (no exclusive lock, workers keep running): dead rows become reusable space and are
        # no longer visible; VACUUM FULL, which also returns the space to the OS, is left to the operator
        with self._lock, self._errors():
            self._db.execute("VACUUM " + ", ".join(_TABLES))

    def size_bytes(self) -> int:
        rows = self._read(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
            "AND c.relname = ANY(%s)",
            (list(_TABLES),),
        )
        return int(rows[0][0])

    # -- key-value --------------------------------------------------------------------------------

    def get_kv(self, scope: str, key: str) -> Any | None:
        check_kv_args(scope, key)
        rows = self._read("SELECT value FROM kv WHERE scope = %s AND key = %s", (scope, key))
        return json.loads(rows[0][0]) if rows else None

    def set_kv(self, scope: str, key: str, value: Any) -> None:
        check_kv_args(scope, key)
        value_json = to_json(value, f"the kv value for ({scope!r}, {key!r})")
        with self._lock, self._errors():
            self._db.execute(
                "INSERT INTO kv (scope, key, value) VALUES (%s, %s, %s) ON CONFLICT (tenant, scope, key) "
                "DO UPDATE SET value = EXCLUDED.value, updated_at = clock_timestamp()",
                (scope, key, value_json),
            )

    # -- retrieval --------------------------------------------------------------------------------

    _CHUNK_COLS = "c.id, c.namespace, c.scope, c.key, c.doc, c.source, c.text, c.meta, c.created_at, c.used_at, c.uses, c.vector"

    @staticmethod
    def _chunk(row: Sequence[Any], score: float = 0.0) -> Chunk:
        vec = row[11]
        return Chunk(int(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], json.loads(row[7]), row[8], row[9],
                     int(row[10]), score, bytes(vec) if vec is not None else None)

    def _add_chunks(self, namespace: str, scope: str, chunks: list[NewChunk], session_id: str | None) -> int:
        rows = [(namespace, scope, c.key, c.doc, c.source, c.text, to_json(dict(c.meta), f"chunk {c.key!r} meta"),
                 session_id, c.vector) for c in chunks]
        if session_id is not None:
            self._require_session(session_id)
        with self._tx() as cur:
            added = 0
            cur.executemany(
                "INSERT INTO chunks (namespace, scope, key, doc, source, text, meta, session_id, vector) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, namespace, scope, key) DO NOTHING "
                "RETURNING id", rows, returning=True)
            while True:
                added += len(cur.fetchall())
                if not cur.nextset():
                    break
            return added

    def search_chunks(self, namespace: str, scopes: Sequence[str], terms: Sequence[str], *,
                      limit: int = 20) -> list[Chunk]:
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        q = tsquery(terms)
        if q is None or limit <= 0:
            return []
        rows = self._read(
            f"SELECT {self._CHUNK_COLS}, ts_rank_cd(c.tsv, q) AS r FROM chunks c, to_tsquery('english', %s) q "
            "WHERE c.tsv @@ q AND c.namespace = %s AND c.scope = ANY(%s) ORDER BY r DESC, c.id LIMIT %s",
            (q, namespace, scopes, int(limit)),
        )
        return [self._chunk(r, float(r[12])) for r in rows]

    def list_chunks(self, namespace: str, scopes: Sequence[str], *, doc: str | None = None,
                    limit: int | None = None) -> list[Chunk]:
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        rows = self._read(
            f"SELECT {self._CHUNK_COLS} FROM chunks c WHERE c.namespace = %s AND c.scope = ANY(%s) "
            "AND (%s::text IS NULL OR c.doc = %s) ORDER BY c.id LIMIT %s",
            (namespace, scopes, doc, doc, limit),
        )
        return [self._chunk(r) for r in rows]

    def indexed_docs(self, namespace: str, scope: str) -> set[str]:
        check_namespace(namespace)
        check_scope(scope)
        return {r[0] for r in self._read("SELECT DISTINCT doc FROM chunks WHERE namespace = %s AND scope = %s",
                                         (namespace, scope))}

    def delete_chunks(self, namespace: str, scopes: Sequence[str], ids: Sequence[int]) -> int:
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        ids = [int(i) for i in ids]
        if not ids:
            return 0
        with self._tx() as cur:
            cur.execute("DELETE FROM chunks WHERE namespace = %s AND scope = ANY(%s) AND id = ANY(%s)",
                        (namespace, scopes, ids))
            return cur.rowcount

    def update_chunk(self, namespace: str, scope: str, chunk_id: int, *, text: str,
                     meta: Mapping[str, Any]) -> bool:
        check_namespace(namespace)
        check_scope(scope)
        meta_json = to_json(dict(meta), f"chunk {chunk_id} meta")
        with self._tx() as cur:
            cur.execute("UPDATE chunks SET text = %s, meta = %s WHERE id = %s AND namespace = %s AND scope = %s",
                        (text, meta_json, int(chunk_id), namespace, scope))
            return cur.rowcount > 0

    def touch_chunks(self, ids: Sequence[int]) -> None:
        ids = [int(i) for i in ids]
        if not ids:
            return
        with self._tx() as cur:
            cur.execute("UPDATE chunks SET used_at = clock_timestamp(), uses = uses + 1 WHERE id = ANY(%s)", (ids,))
