"""The embedded default store: one SQLite file.

The file is opened in WAL mode with ``synchronous=NORMAL`` (a commit is an append to the WAL, no
fsync per turn; a power loss can drop the last commits but never corrupts the file), a busy timeout
so several processes can share it, and foreign keys on. Every write runs in ``BEGIN IMMEDIATE``,
taking the write lock up front, so the optimistic head check and the insert cannot interleave with
another writer's. One connection per store, guarded by a lock, so a store can be shared by threads.

The schema is built by named, forward-only migrations (``sqlite_schema.py``: ``@migration def m001_initial(conn)``),
each applied in its own transaction with the row recording it in ``_windowsmith_migrations``.
They run once, when the store opens; nothing checks the schema per call.
"""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from operator import itemgetter
from pathlib import Path
from typing import Any

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
    now_utc,
    pack_prefix_upper,
    session_kv_scopes,
    taken_session_id,
    to_json,
    unknown_session,
)
from .chunks import Chunk, NewChunk, check_namespace, check_scope, check_scopes, fts5_query
from .codec import EVENT_MIN_BYTES, pack_blob, pack_text, unpack_blob, unpack_text
from .sqlite_schema import MIGRATIONS_TABLE, migration

_DATA = itemgetter(2)  # an event row's data

_WRITABLE_HINT = (
    "the store needs a writable folder: pass --store (or Engine(store=...)) with a path on a writable "
    "file system, or set WINDOWSMITH_HOME to one"
)


def _open_error(path: str, e: BaseException) -> str:
    """What went wrong opening the SQLite file at ``path``, and what to do about it."""
    text = str(e)
    low = text.lower()
    if "not a database" in low or "malformed" in low or "encrypted" in low:
        return (f"{path} is not a windowsmith store (SQLite says: {text}); check --store, "
                "or move the file away to start a new store there")
    if "readonly" in low or "read-only" in low or "unable to open" in low or "disk i/o" in low:
        return f"cannot open the SQLite store at {path} for writing (SQLite says: {text}); {_WRITABLE_HINT}"
    return f"cannot open the SQLite store at {path}: {text}"


def _ts() -> str:
    return now_utc().isoformat(timespec="microseconds")


class SQLiteStore(Store):
    """A :class:`~windowsmith.store.Store` in one SQLite file (``":memory:"`` for a throwaway one)."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0, create: bool = True,
                 tenant: str = "") -> None:
        """Open (``create=True``: create if missing, with its folder) the SQLite file at ``path``.
        ``create=False`` opens an existing store only and raises ``UsageError`` if there is none, so a
        typo in a path never leaves an empty database behind. ``tenant``: see :meth:`for_tenant`."""
        self.path = str(path)
        self.tenant = check_tenant(tenant)
        self._owns_conn = True
        self._lock = threading.RLock()
        self._pack_heads = packs.PackCache()
        memory = self.path == ":memory:" or self.path.startswith("file::memory:")
        if not memory and not create and not Path(self.path).is_file():
            what = "is a folder, not a store file" if Path(self.path).is_dir() else "does not exist"
            raise UsageError(
                f"no windowsmith store at {self.path}: the path {what}; check --store for a typo "
                "(the default is ./.windowsmith/windowsmith.db, or $WINDOWSMITH_HOME/windowsmith.db)"
            )
        if not memory and create:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(
                    f"cannot create the folder for the store at {self.path}: {e.strerror or e}; "
                    f"{_WRITABLE_HINT}"
                ) from None
        try:
            target = self.path if memory or create else Path(self.path).resolve().as_uri() + "?mode=rw"
            conn = sqlite3.connect(target, timeout=busy_timeout, isolation_level=None, check_same_thread=False,
                                   uri=not (memory or create))
        except sqlite3.Error as e:
            raise StoreError(_open_error(self.path, e)) from None
        self._conn: sqlite3.Connection | None = conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if not create and not memory and not conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
            ).fetchone():
                raise UsageError(
                    f"{self.path} is not a windowsmith store (a SQLite file without windowsmith's tables); "
                    "check --store, or create a store there by running a command that writes (demo, replay)"
                )
            if not memory:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(f"the SQLite store at {self.path} cannot use WAL mode (got {mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA secure_delete = ON")  # deleted content is zeroed, not left in free pages
            self._migrate()
        except BaseException as e:
            conn.close()
            self._conn = None
            if isinstance(e, sqlite3.Error):
                raise StoreError(_open_error(self.path, e)) from None
            if isinstance(e, StoreError) and isinstance(e.__cause__, sqlite3.Error):
                raise StoreError(_open_error(self.path, e.__cause__)) from None
            raise

    @staticmethod
    def default_path() -> Path:
        """``$WINDOWSMITH_HOME/windowsmith.db`` if the variable is set, else ``./.windowsmith/windowsmith.db``."""
        home = os.environ.get("WINDOWSMITH_HOME")
        return Path(home) / "windowsmith.db" if home else Path(".windowsmith") / "windowsmith.db"

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}" + (f", tenant={self.tenant!r})" if self.tenant else ")")

    def for_tenant(self, tenant: str) -> SQLiteStore:
        """This store as ``tenant`` sees it: the same file and connection, every row read or written
        checked against the tenant column. Closing the view leaves this store open."""
        view = copy.copy(self)
        view.tenant = check_tenant(tenant)
        view._owns_conn = False
        return view

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise UsageError(f"the store at {self.path} is closed; open a new SQLiteStore")
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the database's write lock from its first statement."""
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                raise StoreError(
                    f"cannot lock the SQLite store at {self.path} for writing: {e}; another process "
                    "held it longer than the busy timeout (raise SQLiteStore(..., busy_timeout=))"
                ) from None
            try:
                yield db
            except BaseException as e:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise StoreError(f"write to the SQLite store at {self.path} failed: {e}") from e
                raise
            try:
                db.execute("COMMIT")
            except sqlite3.Error as e:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise StoreError(f"commit to the SQLite store at {self.path} failed: {e}") from None

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def _migrate(self) -> None:
        db = self._db
        db.execute(f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        applied = {r[0] for r in db.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}
        migration.check_known(applied, f"the SQLite store at {self.path}")
        for name, fn in migration:
            if name in applied:
                continue
            with self._write():
                # Another process may have applied it since we looked; re-check under the write lock.
                if db.execute(f"SELECT 1 FROM {MIGRATIONS_TABLE} WHERE name = ?", (name,)).fetchone():
                    continue
                fn(db)
                db.execute(f"INSERT INTO {MIGRATIONS_TABLE} (name, applied_at) VALUES (?, ?)", (name, _ts()))

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this file, in the order they were applied."""
        return [r[0] for r in self._read(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY rowid")]

    def close(self) -> None:
        if not self._owns_conn:
            return
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- sessions ---------------------------------------------------------------------------------

    def create_session(self, session_id: str, meta: Mapping[str, Any] | None = None) -> None:
        check_session_id(session_id)
        meta_json = to_json(dict(meta or {}), f"the meta of session {session_id!r}")
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO sessions (id, meta, created_at, tenant) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (session_id, meta_json, _ts(), self.tenant),
            )
            if cur.rowcount == 0:
                row = db.execute("SELECT meta FROM sessions WHERE id = ? AND tenant = ?", (session_id, self.tenant)).fetchone()
                if row is None:
                    raise taken_session_id(session_id)
                (existing,) = row
                if existing != meta_json:
                    raise UsageError(
                        f"session {session_id!r} already exists with different meta ({existing:.200}); "
                        "use a new session id, or pass the same meta to reuse it"
                    )

    def _record(self, row: tuple[Any, ...]) -> SessionRecord:
        sid, meta, created_at, head, head_seq = row
        return SessionRecord(sid, json.loads(meta), datetime.fromisoformat(created_at), head, head_seq + 1)

    def get_session(self, session_id: str) -> SessionRecord | None:
        rows = self._read(
            "SELECT id, meta, created_at, head_hash, head_seq FROM sessions WHERE id = ? AND tenant = ?",
            (check_session_id(session_id), self.tenant),
        )
        return self._record(rows[0]) if rows else None

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._read("SELECT id, meta, created_at, head_hash, head_seq FROM sessions WHERE tenant = ? "
                          "ORDER BY created_at, id", (self.tenant,))
        return [self._record(r) for r in rows]

    def delete_session(self, session_id: str) -> bool:
        check_session_id(session_id)
        with self._write() as db:
            gone = db.execute("DELETE FROM sessions WHERE id = ? AND tenant = ?", (session_id, self.tenant)).rowcount > 0
            if gone:
                db.executemany("DELETE FROM kv WHERE tenant = ? AND scope = ?",
                               [(self.tenant, sc) for sc in session_kv_scopes(session_id)])
            return gone

    # -- log --------------------------------------------------------------------------------------

    def _write_events(self, session_id: str, prepared: list[PreparedEvent], expected_parent: str | None) -> list[Event]:
        ts = _ts()
        with self._write() as db:
            row = db.execute("SELECT head_hash, head_seq FROM sessions WHERE id = ? AND tenant = ?",
                             (session_id, self.tenant)).fetchone()
            if row is None:
                raise unknown_session(session_id)
            head, head_seq = row
            if head != expected_parent:
                raise moved_on(session_id, head, expected_parent)
            db.executemany(
                "INSERT INTO events (session_id, seq, kind, data, hash, parent, created_at, tenant) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (session_id, head_seq + 1 + i, p.kind, pack_text(p.data_json, EVENT_MIN_BYTES), p.hash, p.parent, ts, self.tenant)
                    for i, p in enumerate(prepared)
                ],
            )
            db.execute(
                "UPDATE sessions SET head_hash = ?, head_seq = ? WHERE id = ?",
                (prepared[-1].hash, head_seq + len(prepared), session_id),
            )
        return [event_from_row(head_seq + 1 + i, p.kind, p.data_json, p.hash, p.parent) for i, p in enumerate(prepared)]

    def _require_session(self, session_id: str) -> None:
        if not self._read("SELECT 1 FROM sessions WHERE id = ? AND tenant = ?", (session_id, self.tenant)):
            raise unknown_session(session_id)

    def events(self, session_id: str, since_seq: int = 0) -> list[Event]:
        return [event_from_row(*r) for r in self.event_rows(session_id, since_seq)]

    def event_rows(self, session_id: str, since_seq: int = 0) -> list[EventRow]:
        check_session_id(session_id)
        with self._lock:
            rows = self._read(
                "SELECT seq, kind, data, hash, parent FROM events WHERE session_id = ? AND tenant = ? AND seq >= ? "
                "ORDER BY seq",
                (session_id, self.tenant, since_seq),
            )
            if not rows:
                self._require_session(session_id)
        if set(map(type, map(_DATA, rows))) <= {str}:  # all plain text (C-level passes): the rows as read
            return rows
        # (most rows are plain text: no call for them)
        return [(seq, kind, data if type(data) is str else unpack_text(data), h, parent)
                for seq, kind, data, h, parent in rows]

    def head(self, session_id: str) -> Event | None:
        check_session_id(session_id)
        with self._lock:
            rows = self._read(
                "SELECT seq, kind, data, hash, parent FROM events WHERE session_id = ? AND tenant = ? "
                "ORDER BY seq DESC LIMIT 1",
                (session_id, self.tenant),
            )
            if not rows:
                self._require_session(session_id)
        if not rows:
            return None
        seq, kind, data, h, parent = rows[0]
        return event_from_row(seq, kind, unpack_text(data), h, parent)

    # -- packs ------------------------------------------------------------------------------------

    def save_pack(self, pack_id: str, session_id: str, seq: int, manifest: Mapping[str, Any]) -> None:
        check_pack_args(pack_id, session_id, seq, manifest, serialize=False)
        with self._write() as db:
            if not db.execute("SELECT 1 FROM sessions WHERE id = ? AND tenant = ?", (session_id, self.tenant)).fetchone():
                raise unknown_session(session_id)
            head = self._pack_heads.get(session_id)
            last = db.execute("SELECT ord, id FROM packs WHERE session_id = ? AND tenant = ? ORDER BY ord DESC LIMIT 1",
                              (session_id, self.tenant)).fetchone()
            if head is not None and (last is None or tuple(last) != (head.ord, head.pack_id)):
                head = None  # another writer saved a pack since, or the session was deleted: a new chain
            text, delta, n = packs.encode(head, manifest, lambda: check_pack_args(pack_id, session_id, seq, manifest))
            snap = head.snap_ord if delta and head is not None else None
            try:
                cur = db.execute(
                    "INSERT INTO packs (id, session_id, seq, manifest, created_at, base_ord, snap_ord, tenant) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                    (pack_id, session_id, seq, pack_text(text), _ts(), head.ord if delta and head is not None else None, snap,
                     self.tenant),
                )
            except sqlite3.IntegrityError:  # the foreign key: no such session
                raise unknown_session(session_id) from None
            if cur.rowcount == 0:
                row = db.execute("SELECT session_id, seq, tenant FROM packs WHERE id = ?", (pack_id,)).fetchone()
                old = self._rebuild_pack(db, pack_id) if row[2] == self.tenant else None
                if (row[0], row[1], row[2]) != (session_id, seq, self.tenant) or to_json(old, "") != check_pack_args(
                        pack_id, session_id, seq, manifest):
                    raise UsageError(
                        f"pack {pack_id!r} is already saved with a different session, seq or manifest; "
                        "pack ids must be unique (derive them from the manifest checksum)"
                    )
                return
            o = cur.lastrowid
            assert o is not None
            if snap is None:
                db.execute("UPDATE packs SET snap_ord = ? WHERE ord = ?", (o, o))
        self._pack_heads.put(session_id, packs.next_head(head, delta, o, pack_id, seq, manifest, n))

    def _rebuild_pack(self, db: sqlite3.Connection, pack_id: str) -> dict[str, Any] | None:
        row = db.execute("SELECT ord, session_id, base_ord, snap_ord, manifest FROM packs WHERE id = ? AND tenant = ?",
                         (pack_id, self.tenant)).fetchone()
        if row is None:
            return None
        o, sid, base, snap, text = row
        if base is None:
            return json.loads(unpack_text(text))  # type: ignore[no-any-return]
        rows = db.execute("SELECT ord, base_ord, manifest FROM packs WHERE session_id = ? AND tenant = ? AND ord >= ? "
                          "AND ord <= ? ORDER BY ord", (sid, self.tenant, snap, o)).fetchall()
        return packs.rebuild(rows, o)

    def _pack_ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        rows = self._read(
            "SELECT id FROM packs WHERE id >= ? AND id < ? AND tenant = ? ORDER BY id LIMIT ?",
            (prefix, pack_prefix_upper(prefix), self.tenant, limit),
        )
        return [r[0] for r in rows]

    def _get_pack_exact(self, pack_id: str) -> dict[str, Any] | None:
        with self._lock:
            return self._rebuild_pack(self._db, pack_id)

    def list_packs(self, session_id: str) -> list[dict[str, Any]]:
        check_session_id(session_id)
        rows = self._read("SELECT ord, base_ord, manifest FROM packs WHERE session_id = ? AND tenant = ? ORDER BY ord",
                          (session_id, self.tenant))
        return packs.rebuild_all(rows)

    # -- blobs ------------------------------------------------------------------------------------

    def put_blob(self, data: bytes, *, session_id: str | None = None) -> str:
        return self.put_blobs([data], session_id=session_id)[0]

    def put_blobs(self, datas: Sequence[bytes], *, session_id: str | None = None) -> list[str]:
        hashed = [blob_sha(d) for d in datas]
        if session_id is not None:
            check_session_id(session_id)
        if not hashed:
            return []
        with self._write() as db:
            if session_id is not None and not db.execute(
                    "SELECT 1 FROM sessions WHERE id = ? AND tenant = ?", (session_id, self.tenant)).fetchone():
                raise unknown_session(session_id)
            ts = _ts()
            db.executemany(
                "INSERT INTO blobs (tenant, sha, data, size, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (tenant, sha) DO NOTHING",
                [(self.tenant, sha, pack_blob(raw), len(raw), ts) for raw, sha in hashed],
            )
            if session_id is not None:
                db.executemany(
                    "INSERT INTO blob_refs (tenant, sha, session_id, created_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (tenant, sha, session_id) DO UPDATE SET created_at = excluded.created_at",
                    [(self.tenant, sha, session_id, ts) for _, sha in hashed],
                )
        return [sha for _, sha in hashed]

    def get_blob(self, sha: str) -> bytes | None:
        rows = self._read("SELECT data, size FROM blobs WHERE tenant = ? AND sha = ?", (self.tenant, sha))
        return check_blob(sha, unpack_blob(rows[0][0], rows[0][1]), self.path) if rows else None

    def blob_refs(self, sha: str) -> list[str]:
        return [r[0] for r in self._read("SELECT session_id FROM blob_refs WHERE tenant = ? AND sha = ? ORDER BY session_id",
                                         (self.tenant, sha))]

    def gc_blobs(self) -> int:
        with self._write() as db:
            return db.execute(
                "DELETE FROM blobs WHERE tenant = ? AND NOT EXISTS "
                "(SELECT 1 FROM blob_refs r WHERE r.tenant = blobs.tenant AND r.sha = blobs.sha)", (self.tenant,)
            ).rowcount

    def _stale_refs(self, cutoff: datetime) -> list[tuple[str, str]]:
        rows = self._read("SELECT sha, session_id FROM blob_refs WHERE tenant = ? AND created_at < ? "
                          "ORDER BY session_id, sha", (self.tenant, cutoff.isoformat(timespec="microseconds")))
        return [(r[0], r[1]) for r in rows]

    def _drop_refs(self, pairs: Sequence[tuple[str, str]], cutoff: datetime) -> int:
        with self._write() as db:
            return sum(
                db.execute("DELETE FROM blob_refs WHERE tenant = ? AND sha = ? AND session_id = ? AND created_at < ?",
                           (self.tenant, sha, sid, cutoff.isoformat(timespec="microseconds"))).rowcount
                for sha, sid in pairs
            )

    def vacuum(self) -> None:
        with self._lock:
            db = self._db
            try:
                db.execute("VACUUM")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as e:
                raise StoreError(
                    f"VACUUM of the SQLite store at {self.path} failed: {e}; it needs free disk space about the "
                    "size of the file, and no other process writing (retry when it is idle)"
                ) from None

    def size_bytes(self) -> int:
        memory = self.path == ":memory:" or self.path.startswith("file::memory:")
        if memory:
            page_count, page_size = (self._read(f"PRAGMA {p}")[0][0] for p in ("page_count", "page_size"))
            return int(page_count * page_size)
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))

    # -- key-value --------------------------------------------------------------------------------

    def get_kv(self, scope: str, key: str) -> Any | None:
        check_kv_args(scope, key)
        rows = self._read("SELECT value FROM kv WHERE tenant = ? AND scope = ? AND key = ?", (self.tenant, scope, key))
        return json.loads(rows[0][0]) if rows else None

    def set_kv(self, scope: str, key: str, value: Any) -> None:
        check_kv_args(scope, key)
        value_json = to_json(value, f"the kv value for ({scope!r}, {key!r})")
        with self._write() as db:
            db.execute(
                "INSERT INTO kv (tenant, scope, key, value, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (tenant, scope, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                (self.tenant, scope, key, value_json, _ts()),
            )

    # -- retrieval --------------------------------------------------------------------------------

    _CHUNK_COLS = "c.id, c.namespace, c.scope, c.key, c.doc, c.source, c.text, c.meta, c.created_at, c.used_at, c.uses, c.vector"

    @staticmethod
    def _chunk(row: Sequence[Any], score: float = 0.0) -> Chunk:
        return Chunk(int(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], json.loads(row[7]),
                     datetime.fromisoformat(row[8]), datetime.fromisoformat(row[9]) if row[9] else None,
                     int(row[10]), score, row[11])

    def _add_chunks(self, namespace: str, scope: str, chunks: list[NewChunk], session_id: str | None) -> int:
        ts = _ts()
        rows = [(self.tenant, namespace, scope, c.key, c.doc, c.source, c.text,
                 to_json(dict(c.meta), f"chunk {c.key!r} meta"), session_id, c.vector, ts) for c in chunks]
        with self._write() as db:
            if session_id is not None:
                self._require_session(session_id)
            cur = db.executemany(
                "INSERT INTO chunks (tenant, namespace, scope, key, doc, source, text, meta, session_id, vector, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, namespace, scope, key) DO NOTHING", rows)
            return max(0, cur.rowcount)  # executemany sums the rows each insert added

    def search_chunks(self, namespace: str, scopes: Sequence[str], terms: Sequence[str], *,
                      limit: int = 20) -> list[Chunk]:
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        match = fts5_query(terms)
        if match is None or limit <= 0:
            return []
        marks = ", ".join("?" * len(scopes))
        rows = self._read(
            f"SELECT {self._CHUNK_COLS}, bm25(chunks_fts) FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
            f"WHERE chunks_fts MATCH ? AND c.tenant = ? AND c.namespace = ? AND c.scope IN ({marks}) "
            "ORDER BY bm25(chunks_fts), c.id LIMIT ?",
            (match, self.tenant, namespace, *scopes, int(limit)),
        )
        return [self._chunk(r, -float(r[12])) for r in rows]

    def list_chunks(self, namespace: str, scopes: Sequence[str], *, doc: str | None = None,
                    limit: int | None = None) -> list[Chunk]:
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        marks = ", ".join("?" * len(scopes))
        sql = f"SELECT {self._CHUNK_COLS} FROM chunks c WHERE c.tenant = ? AND c.namespace = ? AND c.scope IN ({marks})"
        params: list[Any] = [self.tenant, namespace, *scopes]
        if doc is not None:
            sql += " AND c.doc = ?"
            params.append(doc)
        sql += " ORDER BY c.id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [self._chunk(r) for r in self._read(sql, tuple(params))]

    def indexed_docs(self, namespace: str, scope: str) -> set[str]:
        check_namespace(namespace)
        check_scope(scope)
        return {r[0] for r in self._read("SELECT DISTINCT doc FROM chunks WHERE tenant = ? AND namespace = ? AND scope = ?",
                                         (self.tenant, namespace, scope))}

    def delete_chunks(self, namespace: str, scopes: Sequence[str], ids: Sequence[int]) -> int:
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        ids = [int(i) for i in ids]
        if not ids:
            return 0
        with self._write() as db:
            cur = db.execute(
                f"DELETE FROM chunks WHERE tenant = ? AND namespace = ? AND scope IN ({', '.join('?' * len(scopes))}) "
                f"AND id IN ({', '.join('?' * len(ids))})", (self.tenant, namespace, *scopes, *ids))
            return cur.rowcount

    def update_chunk(self, namespace: str, scope: str, chunk_id: int, *, text: str,
                     meta: Mapping[str, Any]) -> bool:
        check_namespace(namespace)
        check_scope(scope)
        meta_json = to_json(dict(meta), f"chunk {chunk_id} meta")
        with self._write() as db:
            cur = db.execute("UPDATE chunks SET text = ?, meta = ? WHERE id = ? AND tenant = ? AND namespace = ? AND scope = ?",
                             (text, meta_json, int(chunk_id), self.tenant, namespace, scope))
            return cur.rowcount > 0

    def touch_chunks(self, ids: Sequence[int]) -> None:
        ids = [int(i) for i in ids]
        if not ids:
            return
        with self._write() as db:
            db.execute(f"UPDATE chunks SET used_at = ?, uses = uses + 1 WHERE tenant = ? AND id IN ({', '.join('?' * len(ids))})",
                       (_ts(), self.tenant, *ids))
