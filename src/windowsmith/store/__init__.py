"""Session stores: the append-only log, pack manifests, blobs and calibration values.

``open_store(None)`` opens the embedded SQLite default (:meth:`SQLiteStore.default_path`);
``open_store("sqlite:///path.db")`` or a plain path opens that file; ``open_store("postgresql://...")``
opens a :class:`PostgresStore` (needs ``pip install 'windowsmith[postgres]'``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .base import SessionRecord, Store
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
