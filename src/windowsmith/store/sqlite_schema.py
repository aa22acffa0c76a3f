"""The SQLite store's schema: named, forward-only migrations, applied in order when a store opens.

Each ``@migration def mNNN_name(conn)`` runs once, in its own transaction together with the row in
``_windowsmith_migrations`` that records it (:class:`~windowsmith.store.base.Migrations`). A new one
sorts after the last; an applied one is never edited.
"""

from __future__ import annotations

import sqlite3

from . import codec, packs
from .base import Migrations

migration: Migrations[sqlite3.Connection] = Migrations()


def _create_chunks_fts(conn: sqlite3.Connection) -> None:
    """The stemmed full-text index over ``chunks`` and the triggers that keep it in step, built from the rows
    already there. m009 and m011 both (re)build it with exactly this: a later change to the index is a new
    migration, never an edit here."""
    conn.execute(
        "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id', "
        "tokenize='porter unicode61 remove_diacritics 2')"
    )
    conn.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild')")
    conn.execute("CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN "
                 "INSERT INTO chunks_fts (rowid, text) VALUES (new.id, new.text); END")
    conn.execute("CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN "
                 "INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END")
    conn.execute("CREATE TRIGGER chunks_au AFTER UPDATE OF text ON chunks BEGIN "
                 "INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); "
                 "INSERT INTO chunks_fts (rowid, text) VALUES (new.id, new.text); END")


@migration
def m001_initial(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            meta TEXT NOT NULL,
            created_at TEXT NOT NULL,
            head_hash TEXT,
            head_seq INTEGER NOT NULL DEFAULT -1
        )"""
    )
    conn.execute(
        """CREATE TABLE events (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            hash TEXT NOT NULL,
            parent TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (session_id, seq),
            UNIQUE (session_id, hash)
        )"""
    )


@migration
def m002_packs(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE packs (
            ord INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            manifest TEXT NOT NULL,
            created_at TEXT NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX packs_by_session ON packs (session_id, ord)")


@migration
def m003_blobs(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE blobs (
            sha TEXT PRIMARY KEY,
            data BLOB NOT NULL,
            size INTEGER NOT NULL,
            created_at TEXT NOT NULL
        )"""
    )
    conn.execute(
        """CREATE TABLE blob_refs (
            sha TEXT NOT NULL REFERENCES blobs(sha),
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            PRIMARY KEY (sha, session_id)
        ) WITHOUT ROWID"""
    )
    conn.execute("CREATE INDEX blob_refs_by_session ON blob_refs (session_id)")


@migration
def m004_kv(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE kv (
            scope TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (scope, key)
        ) WITHOUT ROWID"""
    )


@migration
def m005_blob_ref_time(conn: sqlite3.Connection) -> None:
    # when each reference was (last) recorded: GC keeps young ones, an append naming them may be on its way
    conn.execute("ALTER TABLE blob_refs ADD COLUMN created_at TEXT NOT NULL DEFAULT ''")


@migration
def m006_pack_deltas(conn: sqlite3.Connection) -> None:
    # a pack row holds a delta against the session's previous pack (base_ord) in a chain starting at a
    # full manifest (snap_ord): storage grows with what changed, not with the session (store/packs.py)
    conn.execute("ALTER TABLE packs ADD COLUMN base_ord INTEGER")
    conn.execute("ALTER TABLE packs ADD COLUMN snap_ord INTEGER")
    sessions = [r[0] for r in conn.execute("SELECT DISTINCT session_id FROM packs")]
    for sid in sessions:
        rows = conn.execute("SELECT ord, manifest FROM packs WHERE session_id = ? ORDER BY ord", (sid,)).fetchall()
        for o, base, snap, text in packs.chain_rows(rows):
            conn.execute("UPDATE packs SET base_ord = ?, snap_ord = ?, manifest = ? WHERE ord = ?", (base, snap, text, o))


@migration
def m007_retrieval(conn: sqlite3.Connection) -> None:
    # memory items, knowledge chunks and the history index, with an FTS5 index kept by triggers
    conn.execute(
        """CREATE TABLE chunks (
            id INTEGER PRIMARY KEY,
            namespace TEXT NOT NULL,
            scope TEXT NOT NULL,
            key TEXT NOT NULL,
            doc TEXT NOT NULL,
            source TEXT NOT NULL,
            text TEXT NOT NULL,
            meta TEXT NOT NULL,
            session_id TEXT REFERENCES sessions(id) ON DELETE CASCADE,
            vector BLOB,
            created_at TEXT NOT NULL,
            used_at TEXT,
            uses INTEGER NOT NULL DEFAULT 0,
            UNIQUE (namespace, scope, key)
        )"""
    )
    conn.execute("CREATE INDEX chunks_by_doc ON chunks (namespace, scope, doc)")
    conn.execute("CREATE INDEX chunks_by_session ON chunks (session_id)")
    conn.execute(
        "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id', "
        "tokenize='porter unicode61 remove_diacritics 2')"
    )
    conn.execute("CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN "
                 "INSERT INTO chunks_fts (rowid, text) VALUES (new.id, new.text); END")
    conn.execute("CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN "
                 "INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END")
    conn.execute("CREATE TRIGGER chunks_au AFTER UPDATE OF text ON chunks BEGIN "
                 "INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); "
                 "INSERT INTO chunks_fts (rowid, text) VALUES (new.id, new.text); END")


@migration
def m008_tenants(conn: sqlite3.Connection) -> None:
    # Tenants (Engine(tenant=...)): a tenant column on every table, checked by every query of the store.
    # Blobs and key-value rows become per tenant (their keys gain the tenant), so no content is shared
    # or deduplicated across tenants. Existing rows belong to the default tenant ''.
    for table in ("sessions", "events", "packs"):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN tenant TEXT NOT NULL DEFAULT ''")
    conn.execute("CREATE INDEX sessions_by_tenant ON sessions (tenant, created_at, id)")
    conn.execute(
        """CREATE TABLE blobs_t (
            tenant TEXT NOT NULL,
            sha TEXT NOT NULL,
            data BLOB NOT NULL,
            size INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (tenant, sha)
        )"""
    )
    conn.execute("INSERT INTO blobs_t (tenant, sha, data, size, created_at) SELECT '', sha, data, size, created_at FROM blobs")
    conn.execute(
        """CREATE TABLE blob_refs_t (
            tenant TEXT NOT NULL,
            sha TEXT NOT NULL,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            created_at TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (tenant, sha, session_id),
            FOREIGN KEY (tenant, sha) REFERENCES blobs_t(tenant, sha)
        ) WITHOUT ROWID"""
    )
    conn.execute("INSERT INTO blob_refs_t (tenant, sha, session_id, created_at) "
                 "SELECT '', sha, session_id, created_at FROM blob_refs")
    conn.execute("DROP TABLE blob_refs")
    conn.execute("DROP TABLE blobs")
    conn.execute("ALTER TABLE blobs_t RENAME TO blobs")
    conn.execute("ALTER TABLE blob_refs_t RENAME TO blob_refs")
    conn.execute("CREATE INDEX blob_refs_by_session ON blob_refs (session_id)")
    conn.execute(
        """CREATE TABLE kv_t (
            tenant TEXT NOT NULL,
            scope TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (tenant, scope, key)
        ) WITHOUT ROWID"""
    )
    conn.execute("INSERT INTO kv_t (tenant, scope, key, value, updated_at) SELECT '', scope, key, value, updated_at FROM kv")
    conn.execute("DROP TABLE kv")
    conn.execute("ALTER TABLE kv_t RENAME TO kv")


@migration
def m009_retrieval_tenants(conn: sqlite3.Connection) -> None:
    # The retrieval rows per tenant: a tenant column on chunks, keys unique per tenant (so two tenants can
    # index the same memory item or document), checked by every chunk query of the store. SQLite cannot
    # change a UNIQUE constraint: the table is rebuilt (ids kept), then its FTS index and triggers.
    # A chunk of a session belongs to the session's tenant; the others (project/user memory, knowledge)
    # to the default tenant ''.
    for trigger in ("chunks_ai", "chunks_ad", "chunks_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute("DROP TABLE IF EXISTS chunks_fts")
    conn.execute(
        """CREATE TABLE chunks_t (
            id INTEGER PRIMARY KEY,
            tenant TEXT NOT NULL,
            namespace TEXT NOT NULL,
            scope TEXT NOT NULL,
            key TEXT NOT NULL,
            doc TEXT NOT NULL,
            source TEXT NOT NULL,
            text TEXT NOT NULL,
            meta TEXT NOT NULL,
            session_id TEXT REFERENCES sessions(id) ON DELETE CASCADE,
            vector BLOB,
            created_at TEXT NOT NULL,
            used_at TEXT,
            uses INTEGER NOT NULL DEFAULT 0,
            UNIQUE (tenant, namespace, scope, key)
        )"""
    )
    conn.execute(
        "INSERT INTO chunks_t (id, tenant, namespace, scope, key, doc, source, text, meta, session_id, vector, "
        "created_at, used_at, uses) SELECT c.id, coalesce(s.tenant, ''), c.namespace, c.scope, c.key, c.doc, c.source, "
        "c.text, c.meta, c.session_id, c.vector, c.created_at, c.used_at, c.uses "
        "FROM chunks c LEFT JOIN sessions s ON s.id = c.session_id"
    )
    conn.execute("DROP TABLE chunks")
    conn.execute("ALTER TABLE chunks_t RENAME TO chunks")
    conn.execute("CREATE INDEX chunks_by_doc ON chunks (tenant, namespace, scope, doc)")
    conn.execute("CREATE INDEX chunks_by_session ON chunks (session_id)")
    _create_chunks_fts(conn)


@migration
def m010_compact_rows(conn: sqlite3.Connection) -> None:
    # Leaner rows: event JSON, pack manifests and artifacts compressed where zlib pays (store/codec.py),
    # and the events table without its UNIQUE (session_id, hash) index (the chain hash covers the parent,
    # so a session never holds one twice, and nothing looks an event up by hash). Rewrites existing rows;
    # the file shrinks at the next VACUUM (`windowsmith gc`).
    codec.compact_sqlite(conn)


_SESSION_FK = "FOREIGN KEY (tenant, session_id) REFERENCES sessions_t (tenant, id) ON DELETE CASCADE"

#: m011's tables, keyed by (tenant, id) and referring to their session by (tenant, session_id), with the
#: columns copied from the old table of the same name
_M011_TABLES = {
    "sessions": ("""CREATE TABLE sessions_t (
        tenant TEXT NOT NULL DEFAULT '',
        id TEXT NOT NULL,
        meta TEXT NOT NULL,
        created_at TEXT NOT NULL,
        head_hash TEXT,
        head_seq INTEGER NOT NULL DEFAULT -1,
        PRIMARY KEY (tenant, id)
    )""", "tenant, id, meta, created_at, head_hash, head_seq"),
    "events": (f"""CREATE TABLE events_t (
        tenant TEXT NOT NULL DEFAULT '',
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        data TEXT NOT NULL,
        hash TEXT NOT NULL,
        parent TEXT,
        created_at TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, seq),
        {_SESSION_FK}
    )""", "tenant, session_id, seq, kind, data, hash, parent, created_at"),
    "packs": (f"""CREATE TABLE packs_t (
        ord INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL DEFAULT '',
        id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        manifest TEXT NOT NULL,
        created_at TEXT NOT NULL,
        base_ord INTEGER,
        snap_ord INTEGER,
        UNIQUE (tenant, id),
        {_SESSION_FK}
    )""", "ord, tenant, id, session_id, seq, manifest, created_at, base_ord, snap_ord"),
    "blob_refs": (f"""CREATE TABLE blob_refs_t (
        tenant TEXT NOT NULL,
        sha TEXT NOT NULL,
        session_id TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (tenant, sha, session_id),
        FOREIGN KEY (tenant, sha) REFERENCES blobs (tenant, sha),
        {_SESSION_FK}
    ) WITHOUT ROWID""", "tenant, sha, session_id, created_at"),
    "chunks": (f"""CREATE TABLE chunks_t (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL,
        namespace TEXT NOT NULL,
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        doc TEXT NOT NULL,
        source TEXT NOT NULL,
        text TEXT NOT NULL,
        meta TEXT NOT NULL,
        session_id TEXT,
        vector BLOB,
        created_at TEXT NOT NULL,
        used_at TEXT,
        uses INTEGER NOT NULL DEFAULT 0,
        UNIQUE (tenant, namespace, scope, key),
        {_SESSION_FK}
    )""", "id, tenant, namespace, scope, key, doc, source, text, meta, session_id, vector, created_at, used_at, uses"),
}


@migration
def m011_session_keys_per_tenant(conn: sqlite3.Connection) -> None:
    # Session and pack ids unique per tenant, not per store: the keys become (tenant, id), and every table
    # naming a session refers to it by (tenant, session_id), so two tenants may use the same id and no
    # refusal tells one tenant which ids another uses. SQLite cannot change a key or a foreign key in place:
    # each table is rebuilt (rows, ordinals and chunk ids kept) next to the old one, the old ones dropped
    # children first (so no cascade fires), and the new ones renamed (which rewrites their references).
    for trigger in ("chunks_ai", "chunks_ad", "chunks_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute("DROP TABLE IF EXISTS chunks_fts")
    for table, (create, cols) in _M011_TABLES.items():
        conn.execute(create)
        conn.execute(f"INSERT INTO {table}_t ({cols}) SELECT {cols} FROM {table}")
    for table in ("chunks", "blob_refs", "packs", "events", "sessions"):  # children first: nothing cascades
        conn.execute(f"DROP TABLE {table}")
    for table in _M011_TABLES:
        conn.execute(f"ALTER TABLE {table}_t RENAME TO {table}")
    conn.execute("CREATE INDEX sessions_by_tenant ON sessions (tenant, created_at, id)")
    conn.execute("CREATE INDEX packs_by_session ON packs (tenant, session_id, ord)")
    conn.execute("CREATE INDEX blob_refs_by_session ON blob_refs (tenant, session_id)")
    conn.execute("CREATE INDEX chunks_by_doc ON chunks (tenant, namespace, scope, doc)")
    conn.execute("CREATE INDEX chunks_by_session ON chunks (tenant, session_id)")
    _create_chunks_fts(conn)
