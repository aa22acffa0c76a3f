"""The embedded default store: one SQLite file.

The file is opened in WAL mode with ``synchronous=NORMAL`` (a commit is an append to the WAL, no
fsync per turn; a power loss can drop the last commits but never corrupts the file), a busy timeout
so several processes can share it, and foreign keys on. Every write runs in ``BEGIN IMMEDIATE``,
taking the write lock up front, so the optimistic head check and the insert cannot interleave with
another writer's. One connection per store, guarded by a lock, so a store can be shared by threads.

The schema is built by named, forward-only migrations (``sqlite_schema.py``: ``@migration def m001_initial(conn)``),
each applied in its own transaction with the row recording it in ``_windowsmith_migrations``.
They run once, when the store opens; nothing checks the schema per call.

The queries are :class:`~windowsmith.store.Store`'s (``sql.py``), written in SQLite's spelling: this module
holds only the connection, its transactions, the migrations' runner and the file's upkeep.
"""

from __future__ import annotations

import copy
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import StoreError, UsageError
from .base import MIGRATIONS_TABLE, check_tenant
from .sql import Store
from .sqlite_schema import migration

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


class SQLiteStore(Store):
    """A :class:`~windowsmith.store.Store` in one SQLite file (``":memory:"`` for a throwaway one)."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0, create: bool = True,
                 tenant: str = "") -> None:
        """Open (``create=True``: create if missing, with its folder) the SQLite file at ``path``.
        ``create=False`` opens an existing store only and raises ``UsageError`` if there is none, so a
        typo in a path never leaves an empty database behind. ``tenant``: see :meth:`for_tenant`."""
        super().__init__(tenant)
        self.path = str(path)
        self._owns_conn = True
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

    def _location(self) -> str:
        return self.path

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
    def _transaction(self) -> Iterator[sqlite3.Connection]:
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

    def _read(self, sql: str, params: Any = ()) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def _migrate(self) -> None:
        """Apply the SQLite store's migrations (``sqlite_schema.py``) this file has not recorded yet, each in a
        write transaction (``BEGIN IMMEDIATE``), so processes opening a new file together apply each once."""
        db = self._db
        db.execute(f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        applied = {r[0] for r in db.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}
        migration.apply(applied, f"the SQLite store at {self.path}", self._write, self.dialect.now)

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
