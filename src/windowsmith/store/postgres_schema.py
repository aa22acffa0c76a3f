"""The PostgreSQL store's schema: named, forward-only migrations, applied in order when a store opens.

Each ``@migration def mNNN_name(cur)`` runs once, in its own transaction under an advisory lock,
together with the row in ``_windowsmith_migrations`` that records it
(:class:`~windowsmith.store.base.Migrations`). A new one sorts after the last; an applied one is never
edited. psycopg is imported only by the store that runs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import packs
from .base import Migrations

if TYPE_CHECKING:
    import psycopg

ADVISORY_KEY = "windowsmith.migrations"

migration: Migrations[psycopg.Cursor[Any]] = Migrations()


@migration
def m001_initial(cur: psycopg.Cursor[Any]) -> None:
    cur.execute(
        """CREATE TABLE sessions (
            id TEXT COLLATE "C" PRIMARY KEY,
            meta TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
            head_hash TEXT,
            head_seq BIGINT NOT NULL DEFAULT -1
        )"""
    )
    cur.execute(
        """CREATE TABLE events (
            session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            hash TEXT NOT NULL,
            parent TEXT,
            created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (session_id, seq),
            UNIQUE (session_id, hash)
        )"""
    )


@migration
def m002_packs(cur: psycopg.Cursor[Any]) -> None:
    cur.execute(
        """CREATE TABLE packs (
            ord BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id TEXT COLLATE "C" NOT NULL UNIQUE,
            session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            manifest TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
        )"""
    )
    cur.execute("CREATE INDEX packs_by_session ON packs (session_id, ord)")


@migration
def m003_blobs(cur: psycopg.Cursor[Any]) -> None:
    cur.execute(
        """CREATE TABLE blobs (
            sha TEXT COLLATE "C" PRIMARY KEY,
            data BYTEA NOT NULL,
            size BIGINT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
        )"""
    )
    cur.execute(
        """CREATE TABLE blob_refs (
            sha TEXT COLLATE "C" NOT NULL REFERENCES blobs(sha),
            session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            PRIMARY KEY (sha, session_id)
        )"""
    )
    cur.execute("CREATE INDEX blob_refs_by_session ON blob_refs (session_id)")


@migration
def m004_kv(cur: psycopg.Cursor[Any]) -> None:
    cur.execute(
        """CREATE TABLE kv (
            scope TEXT COLLATE "C" NOT NULL,
            key TEXT COLLATE "C" NOT NULL,
            value TEXT NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (scope, key)
        )"""
    )


@migration
def m005_blob_ref_time(cur: psycopg.Cursor[Any]) -> None:
    # when each reference was (last) recorded: GC keeps young ones, an append naming them may be on its way
    cur.execute("ALTER TABLE blob_refs ADD COLUMN created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()")


@migration
def m006_pack_deltas(cur: psycopg.Cursor[Any]) -> None:
    # a pack row holds a delta against the session's previous pack (base_ord) in a chain starting at a
    # full manifest (snap_ord): storage grows with what changed, not with the session (store/packs.py)
    cur.execute("ALTER TABLE packs ADD COLUMN base_ord BIGINT, ADD COLUMN snap_ord BIGINT")
    cur.execute("SELECT DISTINCT session_id FROM packs")
    sessions = [r[0] for r in cur.fetchall()]
    for sid in sessions:
        cur.execute("SELECT ord, manifest FROM packs WHERE session_id = %s ORDER BY ord", (sid,))
        for o, base, snap, text in packs.chain_rows(cur.fetchall()):
            cur.execute("UPDATE packs SET base_ord = %s, snap_ord = %s, manifest = %s WHERE ord = %s", (base, snap, text, o))


@migration
def m007_retrieval(cur: psycopg.Cursor[Any]) -> None:
    # memory items, knowledge chunks and the history index; lexical search over a generated tsvector
    cur.execute(
        """CREATE TABLE chunks (
            id BIGSERIAL PRIMARY KEY,
            namespace TEXT COLLATE "C" NOT NULL,
            scope TEXT COLLATE "C" NOT NULL,
            key TEXT COLLATE "C" NOT NULL,
            doc TEXT COLLATE "C" NOT NULL,
            source TEXT NOT NULL,
            text TEXT NOT NULL,
            meta TEXT NOT NULL,
            session_id TEXT COLLATE "C" REFERENCES sessions(id) ON DELETE CASCADE,
            vector BYTEA,
            created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
            used_at TIMESTAMPTZ,
            uses INTEGER NOT NULL DEFAULT 0,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
            UNIQUE (namespace, scope, key)
        )"""
    )
    cur.execute("CREATE INDEX chunks_by_doc ON chunks (namespace, scope, doc)")
    cur.execute("CREATE INDEX chunks_by_session ON chunks (session_id)")
    cur.execute("CREATE INDEX chunks_tsv ON chunks USING GIN (tsv)")


#: The tenant of a connection: ``set_config('windowsmith.tenant', ...)`` when the store opens.
TENANT_SETTING = "windowsmith.tenant"
_CURRENT_TENANT = f"coalesce(current_setting('{TENANT_SETTING}', true), '')"


@migration
def m008_tenants(cur: psycopg.Cursor[Any]) -> None:
    # Tenants: a tenant column on every table (filled from the connection's setting), blobs and kv keyed
    # per tenant, and row-level security so that no query of ours (or a bug in it) reads across tenants.
    # FORCE applies the policies to the tables' owner too; a role with BYPASSRLS (or a superuser) is
    # not subject to them: connect the store as an ordinary role.
    for table in ("sessions", "events", "packs", "blobs", "blob_refs", "kv"):
        cur.execute(f'ALTER TABLE {table} ADD COLUMN tenant TEXT COLLATE "C" NOT NULL DEFAULT {_CURRENT_TENANT}')
    cur.execute("CREATE INDEX sessions_by_tenant ON sessions (tenant, created_at, id)")
    cur.execute("ALTER TABLE blob_refs DROP CONSTRAINT blob_refs_sha_fkey")
    cur.execute("ALTER TABLE blob_refs DROP CONSTRAINT blob_refs_pkey")
    cur.execute("ALTER TABLE blobs DROP CONSTRAINT blobs_pkey")
    cur.execute("ALTER TABLE blobs ADD PRIMARY KEY (tenant, sha)")
    cur.execute("ALTER TABLE blob_refs ADD PRIMARY KEY (tenant, sha, session_id)")
    cur.execute("ALTER TABLE blob_refs ADD FOREIGN KEY (tenant, sha) REFERENCES blobs (tenant, sha)")
    cur.execute("ALTER TABLE kv DROP CONSTRAINT kv_pkey")
    cur.execute("ALTER TABLE kv ADD PRIMARY KEY (tenant, scope, key)")
    for table in ("sessions", "events", "packs", "blobs", "blob_refs", "kv"):
        cur.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        cur.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        cur.execute(f"CREATE POLICY tenant_isolation ON {table} USING (tenant = {_CURRENT_TENANT}) "
                    f"WITH CHECK (tenant = {_CURRENT_TENANT})")


@migration
def m009_retrieval_tenants(cur: psycopg.Cursor[Any]) -> None:
    # The retrieval rows per tenant, as m008 did for the other tables: a tenant column (filled from the
    # connection's setting), keys unique per tenant (two tenants may index the same memory item or
    # document), and the same forced row-level security policy. A chunk of a session belongs to the
    # session's tenant.
    from psycopg import sql

    cur.execute(f'ALTER TABLE chunks ADD COLUMN tenant TEXT COLLATE "C" NOT NULL DEFAULT {_CURRENT_TENANT}')
    cur.execute("UPDATE chunks c SET tenant = s.tenant FROM sessions s WHERE s.id = c.session_id AND c.tenant <> s.tenant")
    cur.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'chunks'::regclass AND contype = 'u'")
    for (name,) in cur.fetchall():
        cur.execute(sql.SQL("ALTER TABLE chunks DROP CONSTRAINT {}").format(sql.Identifier(name)))
    cur.execute("ALTER TABLE chunks ADD CONSTRAINT chunks_tenant_key UNIQUE (tenant, namespace, scope, key)")
    cur.execute("DROP INDEX chunks_by_doc")
    cur.execute("CREATE INDEX chunks_by_doc ON chunks (tenant, namespace, scope, doc)")
    cur.execute("ALTER TABLE chunks ENABLE ROW LEVEL SECURITY")
    cur.execute("ALTER TABLE chunks FORCE ROW LEVEL SECURITY")
    cur.execute(f"CREATE POLICY tenant_isolation ON chunks USING (tenant = {_CURRENT_TENANT}) "
                f"WITH CHECK (tenant = {_CURRENT_TENANT})")


@migration
def m010_compact_rows(cur: psycopg.Cursor[Any]) -> None:
    # As the SQLite store's m010: no UNIQUE (session_id, hash) on events (the chain hash covers the parent,
    # so a session never holds one twice, and nothing looks an event up by hash), and artifacts stored
    # compressed where zlib pays (a compressed one is shorter than its recorded size; store/codec.py).
    # Event and manifest text stays plain: TOAST compresses rows over about 2 KB by itself.
    from psycopg import sql

    from .codec import pack_blob

    cur.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'events'::regclass AND contype = 'u'")
    for (name,) in cur.fetchall():
        cur.execute(sql.SQL("ALTER TABLE events DROP CONSTRAINT {}").format(sql.Identifier(name)))
    cur.execute("ALTER TABLE blobs NO FORCE ROW LEVEL SECURITY")  # every tenant's blobs (the owner migrates)
    cur.execute("SELECT tenant, sha, data FROM blobs WHERE octet_length(data) = size")
    packed = [(z, t, sha) for t, sha, data in cur.fetchall() if len(z := pack_blob(bytes(data))) < len(data)]
    cur.executemany("UPDATE blobs SET data = %s WHERE tenant = %s AND sha = %s", packed)
    cur.execute("ALTER TABLE blobs FORCE ROW LEVEL SECURITY")


@migration
def m011_session_keys_per_tenant(cur: psycopg.Cursor[Any]) -> None:
    # As the SQLite store's m011: session and pack ids unique per tenant, not per store. The keys become
    # (tenant, id) and every table naming a session refers to it by (tenant, session_id), so two tenants
    # may use the same id and no refusal tells one tenant which ids another uses. Rows are kept in place.
    from psycopg import sql

    def drop(table: str, contype: str, referencing: bool = False) -> None:
        on = "confrelid = 'sessions'::regclass" if referencing else f"conrelid = '{table}'::regclass"
        cur.execute(f"SELECT c.relname, k.conname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
                    f"WHERE {on} AND k.contype = %s", (contype,))
        for rel, name in cur.fetchall():
            cur.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(sql.Identifier(rel), sql.Identifier(name)))

    drop("sessions", "f", referencing=True)  # events, packs, blob_refs and chunks name sessions(id)
    drop("sessions", "p")
    cur.execute("ALTER TABLE sessions ADD PRIMARY KEY (tenant, id)")
    drop("events", "p")
    cur.execute("ALTER TABLE events ADD PRIMARY KEY (tenant, session_id, seq)")
    drop("packs", "u")
    cur.execute("ALTER TABLE packs ADD CONSTRAINT packs_tenant_id_key UNIQUE (tenant, id)")
    for table in ("events", "packs", "blob_refs", "chunks"):
        cur.execute(f"ALTER TABLE {table} ADD FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) "
                    "ON DELETE CASCADE")
    cur.execute("DROP INDEX packs_by_session")
    cur.execute("CREATE INDEX packs_by_session ON packs (tenant, session_id, ord)")
    cur.execute("DROP INDEX blob_refs_by_session")
    cur.execute("CREATE INDEX blob_refs_by_session ON blob_refs (tenant, session_id)")
    cur.execute("DROP INDEX chunks_by_session")
    cur.execute("CREATE INDEX chunks_by_session ON chunks (tenant, session_id)")


#: login roles pinned to tenants (written by the owner of the tables only; see :func:`m012_tenant_roles`)
TENANT_ROLES = "_windowsmith_tenant_roles"
#: the tables whose rows belong to a tenant (each has a ``tenant`` column and the ``tenant_isolation`` policy)
TENANT_TABLES = ("sessions", "events", "packs", "blobs", "blob_refs", "kv", "chunks")


@migration
def m012_tenant_roles(cur: psycopg.Cursor[Any]) -> None:
    # Row-level security as a wall the application's own SQL cannot move. The policies now also ask
    # windowsmith_tenant_allowed(): a login role (session_user, which SET ROLE does not change) listed in
    # _windowsmith_tenant_roles sees only the tenants listed for it, whatever it sets windowsmith.tenant to;
    # a role not listed keeps the setting's tenant (as before). The mapping is written by the tables' owner
    # only (no privilege on it is granted) and read by a SECURITY DEFINER function with a fixed search_path.
    from psycopg import sql

    cur.execute("SELECT current_schema()")
    (schema,) = cur.fetchone() or ("public",)
    roles = sql.Identifier(schema, TENANT_ROLES)
    cur.execute(sql.SQL('CREATE TABLE {} (role TEXT COLLATE "C" NOT NULL, tenant TEXT COLLATE "C" NOT NULL, '
                        "PRIMARY KEY (role, tenant))").format(roles))
    cur.execute(sql.SQL("REVOKE ALL ON {} FROM PUBLIC").format(roles))
    cur.execute(sql.SQL(
        "CREATE FUNCTION {fn}() RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog "
        "AS $$ SELECT NOT EXISTS (SELECT 1 FROM {roles} WHERE role = session_user::text) OR EXISTS "
        "(SELECT 1 FROM {roles} WHERE role = session_user::text AND tenant = " + _CURRENT_TENANT + ") $$"
    ).format(fn=sql.Identifier(schema, "windowsmith_tenant_allowed"), roles=roles))
    for table in TENANT_TABLES:
        cur.execute(f"DROP POLICY tenant_isolation ON {table}")
        check = f"tenant = {_CURRENT_TENANT} AND (SELECT windowsmith_tenant_allowed())"
        cur.execute(f"CREATE POLICY tenant_isolation ON {table} USING ({check}) WITH CHECK ({check})")
