"""Session stores: the append-only log, pack manifests, blobs, key-value rows and retrieval chunks.

``open_store(None)`` opens the embedded SQLite default (:meth:`SQLiteStore.default_path`);
``open_store("sqlite:///path.db")`` or a plain path opens that file; ``open_store("postgresql://...")``
opens a :class:`PostgresStore` (needs ``pip install 'windowsmith[postgres]'``).

What a store holds:

* **the log**: per session, an append-only chain of :class:`~windowsmith.model.Event` rows. Each
  event's ``hash`` is ``chain_hash(parent, canonical_json({"kind": kind, "data": data}))`` and its
  ``seq`` counts from 0. Appends are optimistic: the caller names the head it last saw
  (``expected_parent``) and the append fails with :class:`~windowsmith.errors.ConflictError` if another
  writer moved the session on. ``created_at`` is stored but is not part of any hash.
* **packs**: the manifest of every context pack built for a session, in build order, addressable by
  a unique prefix of their id (like git), stored as delta chains (``packs.py``).
* **blobs**: content-addressed bytes (sha256 hex), stored once, with a reference per session that
  uses them; :meth:`Store.gc_blobs` removes blobs no session references.
* **key-value** rows (calibration data) and retrieval **chunks** (memory, knowledge, history; ``chunks.py``).

The modules: ``base.py`` value types, argument checks and the migration registry; ``sql.py`` the
:class:`Store`, every operation written once in SQL; ``dialect.py`` what that SQL says differently per
engine; ``sqlite.py`` / ``postgres.py`` the two engines; ``*_schema.py`` their migrations; ``packs.py``
and ``codec.py`` how manifests and large values are kept.

**A new backend** subclasses :class:`Store` and implements only this port:

1. ``dialect``: a :class:`~windowsmith.store.dialect.Dialect` subclass where its SQL differs from SQLite's
   (placeholders, the clock, tenant checks, lists, full-text search, stored text, locking, errors);
2. ``_transaction()``: a write transaction yielding a DB-API cursor, holding ``self._lock``, committing on
   success, rolling back and raising ``StoreError`` (the driver's error as ``__cause__``) on failure;
3. ``_read(sql, params)``: the rows of one statement outside a transaction, under ``self._lock``;
4. ``_migrate()``: its schema as named, forward-only migrations (:class:`~windowsmith.store.base.Migrations`)
   with the tables and columns of ``sqlite_schema.py``;
5. ``close()``, ``vacuum()``, ``size_bytes()``: the connection's end and the engine's own upkeep.

It may override ``for_tenant`` (tenant views), ``_location`` (how messages name it) and
``_write_events`` (PostgreSQL appends in one statement). A new operation is one method of :class:`Store`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .base import SessionRecord
from .sql import Store
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore


def open_store(url_or_path: str | os.PathLike[str] | None = None, *, create: bool = True) -> Store:
    """Open the store that ``url_or_path`` names: None → SQLite at the default path;
    ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or a plain path → SQLite;
    ``postgresql://...`` (or ``postgres://...``) → PostgreSQL, with an optional ``schema=`` query
    parameter naming the schema to keep the tables in (``postgresql://host/db?schema=agents``).

    ``create=False`` opens an existing store only (``UsageError`` if the file, or the PostgreSQL schema
    and tables, are missing), so read-only tools never leave an empty store behind a mistyped path."""
    if url_or_path is None:
        return SQLiteStore(SQLiteStore.default_path(), create=create)
    target = os.fspath(url_or_path)
    if not isinstance(target, str) or not target:
        raise UsageError(f"open_store takes a path or a URL, got {url_or_path!r}")
    if target.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore(target, create=create)
    if target.startswith("sqlite://"):
        path = target[len("sqlite://") :]
        if not path.startswith("/") or path == "/":
            raise UsageError(
                f"a SQLite URL needs a path after 'sqlite:///', got {target!r}; "
                "use sqlite:///relative.db or sqlite:////absolute/path.db"
            )
        return SQLiteStore(path[1:], create=create)
    if "://" in target:
        scheme = target.split("://", 1)[0]
        raise UsageError(f"unknown store URL scheme {scheme!r}; use a file path, sqlite:///path or postgresql://...")
    return SQLiteStore(target, create=create)


def __getattr__(name: str) -> Any:  # PostgresStore imports psycopg lazily
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PostgresStore", "SQLiteStore", "SessionRecord", "Store", "open_store"]
