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

The other queries are :class:`~windowsmith.store.Store`'s (``sql.py``), translated by :class:`PostgresDialect`:
``%(name)s`` placeholders, the server's clock, arrays for lists and an English ``tsvector`` for search.
Tenants: every query filters by the store's tenant, and row-level security checks it again (see
:class:`PostgresStore` and ``docs/guides/tenants-security.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..errors import StoreError, UsageError
from ..model import Event
from .base import MIGRATIONS_TABLE, PreparedEvent, check_tenant, event_from_row, moved_on, unknown_session
from .blobs import keep_blobs
from .chunks import tsquery
from .dialect import Dialect, Params
from .postgres_schema import ADVISORY_KEY, TENANT_ROLES, TENANT_SETTING, TENANT_TABLES, migration
from .sql import Store

if TYPE_CHECKING:
    import psycopg



def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as e:
        raise UsageError(
            "a PostgreSQL store needs psycopg 3, which is not installed; "
            "install it with: pip install 'windowsmith[postgres]'"
        ) from e
    return psycopg


_PARAM = re.compile(r"(?<![:\w]):(\w+)")


@lru_cache(maxsize=1024)
def _translate(text: str) -> str:
    return _PARAM.sub(lambda m: "clock_timestamp()" if m[1] == "now" else f"%({m[1]})s", text)


class PostgresDialect(Dialect):
    """PostgreSQL's spelling of the shared SQL: psycopg's ``%(name)s`` placeholders, the server's clock,
    arrays for lists, an English ``tsvector`` for search. The shared SQL's tenant checks stay as written:
    row-level security is a second wall behind them, not a replacement."""

    compress_text = False  # TOAST compresses rows over about 2 KB by itself
    # EXCLUSIVE blocks put_blobs (which inserts into blobs before it adds references) but not readers,
    # so no reference can be added to a blob between the delete's snapshot and the delete.
    lock_blobs = "LOCK TABLE blobs IN EXCLUSIVE MODE"
    lock_blob_writes = "LOCK TABLE blobs IN ROW EXCLUSIVE MODE"  # conflicts with the EXCLUSIVE above only
    search_sql = (
        "SELECT {cols}, ts_rank_cd(c.tsv, q) AS r FROM chunks c, to_tsquery('english', :match) q "
        "WHERE c.tsv @@ q AND c.tenant = :tenant AND c.namespace = :namespace AND {scopes} ORDER BY r DESC, c.id LIMIT :limit"
    )

    def sql(self, text: str) -> str:
        return _translate(text)

    def now(self) -> Any:
        return None  # :now is the server's clock_timestamp()

    def timestamp(self, when: datetime) -> Any:
        return when

    def to_datetime(self, value: Any) -> Any:
        return value  # timestamptz comes back as a datetime

    def in_list(self, column: str, name: str, values: Sequence[Any], params: Params) -> str:
        params[name] = list(values)
        return f"{column} = ANY(:{name})"

    def match(self, terms: Sequence[str]) -> str | None:
        return tsquery(terms)

    def score(self, raw: Any) -> float:
        return float(raw)

    def is_foreign_key_error(self, error: BaseException | None) -> bool:
        import psycopg

        return isinstance(error, psycopg.errors.ForeignKeyViolation)


#: held by the transaction that applies a migration: workers opening the same schema together apply it once
_MIGRATIONS_LOCK = f"SELECT pg_advisory_xact_lock(hashtext('{ADVISORY_KEY}' || current_schema()))"

#: creates the table of applied migrations unless it is there (a plain CREATE TABLE IF NOT EXISTS needs the
#: privilege to create tables, which an application role migrated by an owner does not have)
_RECORD_TABLE = f"""DO $$ BEGIN
    IF to_regclass('{MIGRATIONS_TABLE}') IS NULL THEN
        CREATE TABLE {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());
    END IF;
END $$"""

_APPEND_SQL = """
WITH h AS (
    UPDATE sessions SET head_hash = %(new_head)s, head_seq = head_seq + %(n)s
    WHERE id = %(sid)s AND tenant = %(tenant)s AND head_hash IS NOT DISTINCT FROM %(expected)s
    RETURNING head_seq - %(n)s AS base
)
INSERT INTO events (tenant, session_id, seq, kind, data, hash, parent)
SELECT %(tenant)s, %(sid)s, h.base + t.ord, t.kind, t.data, t.hash, t.parent
FROM h, unnest(%(kinds)s::text[], %(datas)s::text[], %(hashes)s::text[], %(parents)s::text[])
     WITH ORDINALITY AS t(kind, data, hash, parent, ord)
RETURNING seq
"""


def split_schema(dsn: str) -> tuple[str, str | None]:
    """``(dsn without it, schema)`` for a ``postgresql://`` URL with a ``schema=`` query parameter
    (``postgresql://host/db?schema=agents``); libpq does not know the parameter, so it is removed.
    Other DSNs come back unchanged with None."""
    dsn, found = _split_params(dsn, "schema")
    return dsn, found.get("schema")


def _split_params(dsn: str, *names: str) -> tuple[str, dict[str, str]]:
    """``(dsn without them, {name: value})`` for the windowsmith parameters ``names`` of a ``postgresql://``
    URL's query (libpq does not know them, so they are removed); other DSNs come back unchanged."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if not isinstance(dsn, str) or not dsn.startswith(("postgresql://", "postgres://")):
        return dsn, {}
    parts = urlsplit(dsn)
    params = parse_qsl(parts.query, keep_blank_values=True)
    found: dict[str, str] = {}
    for name in names:
        values = [v for k, v in params if k == name]
        if not values:
            continue
        if len(values) > 1 or not values[0]:
            raise UsageError(f"give one non-empty {name}= in the store URL, got {values!r}")
        found[name] = values[0]
    if not found:
        return dsn, {}
    rest = urlencode([(k, v) for k, v in params if k not in found])
    return urlunsplit(parts._replace(query=rest)), found


def _flag(value: str | None, name: str) -> bool:
    if value is None:
        return False
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{name}= in the store URL takes true or false, got {value!r}")


#: whether the connection's role skips row-level security (a superuser, or a role with BYPASSRLS)
_BYPASSES_RLS = "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"


class PostgresStore(Store):
    """A :class:`~windowsmith.store.Store` in a PostgreSQL database.

    ``dsn``: a ``postgresql://`` URL or a libpq connection string. ``schema``: keep the tables in
    this schema (created if missing) instead of the connection's default ``search_path``; a URL can
    name it too, as ``postgresql://host/db?schema=agents`` (what ``--store`` takes on the command line).
    ``create=False``: open an existing store only (no schema or tables are created; ``UsageError``).

    **Tenants** (``tenant=``, :meth:`for_tenant`). Every query of the store names the tenant it reads or
    writes (the filter the shared SQL writes), and the tables' row-level security policies check the same
    tenant again, so a query without its filter (a bug) still returns no other tenant's rows. Neither wall
    holds for a role that skips row-level security (a superuser, or a role with BYPASSRLS), so such a role
    is refused ``tenant=`` (``UsageError``) unless ``allow_bypass_rls=True`` (or ``?allow_bypass_rls=true``
    in the URL) says the store's own filter is enough.

    ``owner_url``: apply the migrations as this role (the owner of the tables) instead of the connection's
    role, and grant the connection's role only what the store needs (read and write rows), so the
    application role cannot ``ALTER TABLE ... DISABLE ROW LEVEL SECURITY``, drop a policy or change the
    tenant pinning (``_windowsmith_tenant_roles``). See ``docs/guides/tenants-security.md``.
    """

    dialect = PostgresDialect()

    def __init__(self, dsn: str, *, schema: str | None = None, connect_timeout: int = 10, create: bool = True,
                 tenant: str = "", allow_bypass_rls: bool | None = None, owner_url: str | None = None) -> None:
        pg = _psycopg()
        super().__init__(tenant)
        self._connect_timeout = connect_timeout
        self._pg = pg
        dsn, params = _split_params(dsn, "schema", "allow_bypass_rls")
        url_schema = params.get("schema")
        if allow_bypass_rls is None:
            allow_bypass_rls = _flag(params.get("allow_bypass_rls"), "allow_bypass_rls")
        self.allow_bypass_rls = bool(allow_bypass_rls)
        if schema is not None and url_schema is not None and schema != url_schema:
            raise UsageError(f"schema={schema!r} and the URL's schema={url_schema!r} disagree; give one of them")
        schema = schema if schema is not None else url_schema
        if schema is not None and (not isinstance(schema, str) or not schema.strip() or "\x00" in schema):
            raise UsageError(f"schema= must be a non-empty name or None, got {schema!r}")
        self.dsn = dsn
        self.schema = schema
        self._conn: psycopg.Connection[Any] | None = None
        try:
            conn = pg.connect(dsn, autocommit=True, connect_timeout=connect_timeout)
        except pg.Error as e:
            raise StoreError(
                f"cannot connect to the PostgreSQL store at {self._location()}: {str(e).strip()}; "
                "check the URL and that the server is running"
            ) from None
        self._conn = conn
        try:
            self._refuse_bypass()
            conn.execute("SELECT set_config(%s, %s, false)", (TENANT_SETTING, self.tenant))
            if owner_url is not None:
                self._migrate_as_owner(owner_url, create=create)
            if schema is not None:
                self._use_schema(schema, create=create)
            if not create and not self._read("SELECT to_regclass(%s)", (MIGRATIONS_TABLE,))[0][0]:
                raise UsageError(
                    f"no windowsmith store at {self._location()}: the database{' schema' if schema else ''} has no "
                    "windowsmith tables; check --store for a typo (a URL names its schema with ?schema=NAME)"
                )
            self._migrate()
            self._check_pinning()
        except BaseException as e:
            conn.close()
            self._conn = None
            if isinstance(e, pg.Error):
                raise StoreError(f"cannot open the PostgreSQL store at {self._location()}: {str(e).strip()}") from None
            raise

    def _refuse_bypass(self) -> None:
        """UsageError if this store serves a tenant through a role that skips row-level security, unless
        the caller allowed it."""
        if not self.tenant or self.allow_bypass_rls or not self._read(_BYPASSES_RLS)[0][0]:
            return
        (role,) = self._read("SELECT current_user")[0]
        raise UsageError(
            f"the PostgreSQL role {role!r} is a superuser or has BYPASSRLS, so row-level security does not apply "
            f"to it: tenant {self.tenant!r} would be kept apart by the store's own query filter only. Connect as "
            "an ordinary role (CREATE ROLE app LOGIN NOSUPERUSER NOBYPASSRLS; see docs/guides/tenants-security.md), "
            "or pass allow_bypass_rls=True (?allow_bypass_rls=true in the URL) to accept the filter alone"
        )

    def _check_pinning(self) -> None:
        """UsageError if the tables' owner pinned this login role to tenants and this store's is not one of
        them (its every query would find nothing and every write be refused)."""
        if self.tenant and not self._read("SELECT windowsmith_tenant_allowed()")[0][0]:
            (role,) = self._read("SELECT session_user")[0]
            raise UsageError(
                f"the PostgreSQL role {role!r} is pinned to other tenants than {self.tenant!r} (the owner's "
                f"{TENANT_ROLES} table); connect as the role of that tenant, or ask the owner to add "
                f"({role!r}, {self.tenant!r}) there"
            )

    @property
    def role(self) -> str:
        """The database role this store's queries run as (``current_user``)."""
        return str(self._read("SELECT current_user")[0][0])

    def pin_role(self, role: str, tenants: Sequence[str]) -> None:
        """Pin the login ``role`` to ``tenants``: from now on its connections see and write only those
        tenants' rows, whatever they set ``windowsmith.tenant`` to. Only the owner of the tables can (this
        store must be connected as the owner); to undo, delete the role's rows of ``_windowsmith_tenant_roles``."""
        if not isinstance(role, str) or not role or isinstance(tenants, str) or not tenants:
            raise UsageError("pin_role takes a role name and a non-empty list of tenants")
        for t in tenants:
            check_tenant(t)
        with self._transaction() as cur:
            cur.executemany(f"INSERT INTO {TENANT_ROLES} (role, tenant) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                            [(role, t) for t in tenants])

    def _migrate_as_owner(self, owner_url: str, *, create: bool) -> None:
        """Apply the migrations through ``owner_url`` (the role that owns the tables) and grant this
        connection's role what the store needs: rows, not the tables."""
        from psycopg import sql

        with PostgresStore(owner_url, schema=self.schema, connect_timeout=self._connect_timeout, create=create) as owner:
            me = self.role
            (them, schema) = owner._read("SELECT current_user, current_schema()")[0]
            if me == them:
                return
            with owner._transaction() as cur:
                role, where = sql.Identifier(me), sql.Identifier(schema)
                cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(where, role))
                tables = sql.SQL(", ").join(sql.Identifier(schema, t) for t in TENANT_TABLES)
                cur.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(tables, role))
                cur.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(schema, MIGRATIONS_TABLE), role))
                cur.execute(sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}").format(where, role))

    def _use_schema(self, schema: str, *, create: bool = True) -> None:
        """Create ``schema`` if missing (once, however many workers open it at the same moment: ``CREATE
        SCHEMA IF NOT EXISTS`` alone races on the catalog's unique index) and put it on the search path."""
        from psycopg import sql

        exists = "SELECT 1 FROM pg_namespace WHERE nspname = %s"
        if not self._read(exists, (schema,)):  # creating needs a privilege that using does not
            if not create:
                raise UsageError(
                    f"no windowsmith store at {self._location()}: there is no schema {schema!r}; "
                    "check --store for a typo"
                )
            with self._transaction() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s || %s))", (ADVISORY_KEY, schema))
                if not cur.execute(exists, (schema,)).fetchone():
                    cur.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        self._db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))

    def _location(self) -> str:
        try:
            from psycopg.conninfo import conninfo_to_dict

            info = conninfo_to_dict(self.dsn)
            where = f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"
        except Exception:
            where = "the given DSN"
        return where + (f" (schema {self.schema})" if self.schema else "")

    def __repr__(self) -> str:
        return f"PostgresStore({self._location()!r}" + (f", tenant={self.tenant!r})" if self.tenant else ")")

    def for_tenant(self, tenant: str) -> PostgresStore:
        """This store as ``tenant`` sees it: a new connection whose ``windowsmith.tenant`` setting the
        row-level security policies of every table check."""
        return PostgresStore(self.dsn, schema=self.schema, connect_timeout=self._connect_timeout, create=False,
                             tenant=tenant, allow_bypass_rls=self.allow_bypass_rls)

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def _db(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            raise UsageError(f"the store at {self._location()} is closed; open a new PostgresStore")
        return self._conn

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except self._pg.Error as e:
            raise StoreError(f"the PostgreSQL store at {self._location()} failed: {str(e).strip()}") from e

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        with self._lock, self._errors():
            db = self._db
            with db.transaction(), db.cursor() as cur:
                yield cur

    def _read(self, query: str, params: Any = ()) -> list[Any]:
        with self._lock, self._errors():
            return self._db.execute(query, params).fetchall()

    def _migrate(self) -> None:
        """Apply the PostgreSQL store's migrations (``postgres_schema.py``) this schema has not recorded yet,
        each in a transaction under an advisory lock, so workers opening a new schema together apply each once."""
        with self._transaction() as cur:
            cur.execute(_MIGRATIONS_LOCK)
            cur.execute(_RECORD_TABLE)
            applied = {r[0] for r in cur.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}
        migration.apply(applied, f"the PostgreSQL store at {self._location()}", self._write, self.dialect.now,
                        lock=_MIGRATIONS_LOCK)

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this database, in the order they were applied."""
        return [r[0] for r in self._read(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY applied_at, name")]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- log --------------------------------------------------------------------------------------

    def _write_events(self, session_id: str, prepared: list[PreparedEvent], expected_parent: str | None,
                      blobs: Mapping[str, bytes]) -> list[Event]:
        params = {
            "sid": session_id,
            "tenant": self.tenant,
            "expected": expected_parent,
            "new_head": prepared[-1].hash,
            "n": len(prepared),
            "kinds": [p.kind for p in prepared],
            "datas": [p.data_json for p in prepared],
            "hashes": [p.hash for p in prepared],
            "parents": [p.parent for p in prepared],
        }
        with self._lock, self._errors(), (self._write() if blobs else nullcontext()) as tx:
            if tx is not None:  # the blobs the events name, in the same transaction (Store.append_many)
                keep_blobs(tx, self.dialect, self.tenant, session_id, blobs)
            db = self._db if tx is None else tx.cursor
            seqs = [r[0] for r in db.execute(_APPEND_SQL, params).fetchall()]
            if not seqs:
                row = db.execute("SELECT head_hash FROM sessions WHERE id = %s AND tenant = %s",
                                 (session_id, self.tenant)).fetchone()
                if row is None:
                    raise unknown_session(session_id)
                raise moved_on(session_id, row[0], expected_parent)
        seqs.sort()
        return [event_from_row(s, p.kind, p.data_json, p.hash, p.parent) for s, p in zip(seqs, prepared, strict=True)]

    def _clock(self) -> datetime:
        return self._read("SELECT clock_timestamp()")[0][0]  # type: ignore[no-any-return]

    # -- upkeep -----------------------------------------------------------------------------------

    def vacuum(self) -> None:
        # plain VACUUM (no exclusive lock, workers keep running): dead rows become reusable space and are
        # no longer visible; VACUUM FULL, which also returns the space to the OS, is left to the operator
        with self._lock, self._errors():
            self._db.execute("VACUUM " + ", ".join(TENANT_TABLES))

    def size_bytes(self) -> int:
        rows = self._read(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
            "AND c.relname = ANY(%s)",
            (list(TENANT_TABLES),),
        )
        return int(rows[0][0])
