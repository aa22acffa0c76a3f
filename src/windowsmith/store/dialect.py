"""What the SQL of the stores says differently per engine: a small :class:`Dialect` object.

The shared SQL (:mod:`windowsmith.store.sql`) is written once, in SQLite's spelling with named
parameters (``:name``), and each engine's dialect turns it into what its driver runs:

* **placeholders**: ``:name`` (sqlite3) or ``%(name)s`` (psycopg);
* **the clock**: ``:now`` is bound to the store's own UTC time (SQLite keeps ISO text) or replaced by
  the server's ``clock_timestamp()`` (PostgreSQL keeps ``timestamptz``); :meth:`Dialect.now`,
  :meth:`Dialect.timestamp` and :meth:`Dialect.to_datetime` convert between them;
* **tenants**: a ``tenant = :tenant`` predicate is checked by the query (SQLite), or left to the
  database's row-level security policies (PostgreSQL: the predicate becomes ``true``);
* **lists**: ``col IN (:a0, :a1)`` or ``col = ANY(%(a)s)`` (:meth:`Dialect.in_list`);
* **full-text search**: FTS5 with BM25 or a ``tsvector`` with ``ts_rank_cd`` (:attr:`Dialect.search_sql`);
* **stored text**: event JSON and manifests compressed where zlib pays, or left to the engine (TOAST);
* **locking**: the statement that keeps writers out while unreferenced blobs are deleted;
* **errors**: which driver error is a foreign-key violation.

Upserts (``ON CONFLICT ... DO NOTHING / DO UPDATE``, ``excluded.col``) and ``RETURNING`` are spelled the
same by both engines, so they need no entry here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from .base import now_utc
from .chunks import fts5_query
from .codec import pack_text

#: query parameters by name
Params = dict[str, Any]


class Dialect:
    """The SQLite spelling (the default) of everything the shared SQL leaves open; an engine whose
    SQL differs subclasses it and overrides what differs (see :class:`~windowsmith.store.postgres.PostgresDialect`)."""

    #: compress event JSON and pack manifests where zlib pays (``store/codec.py``); False: store them as text
    compress_text = True
    #: run before deleting unreferenced blobs, in the same transaction, so no reference is added meanwhile
    #: (None: the transaction already holds the write lock)
    lock_blobs: str | None = None
    #: run first by an append that keeps the blobs its events name (``Store._keep_blobs``), so no blob
    #: deletion runs between its check for them and its commit (None: the transaction holds the write lock)
    lock_blob_writes: str | None = None
    #: the lexical search over chunks; ``{cols}`` the chunk columns, ``{scopes}`` the scope condition;
    #: the last column is the raw score (see :meth:`score`); ``:match`` is :meth:`match`'s expression
    search_sql = (
        "SELECT {cols}, bm25(chunks_fts) FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
        "WHERE chunks_fts MATCH :match AND c.tenant = :tenant AND c.namespace = :namespace AND {scopes} "
        "ORDER BY bm25(chunks_fts), c.id LIMIT :limit"
    )

    def sql(self, text: str) -> str:
        """``text`` (shared SQL) as this engine's driver takes it."""
        return text

    def now(self) -> Any:
        """The value bound to ``:now`` (ignored where :meth:`sql` replaces ``:now`` by the server's clock)."""
        return now_utc().isoformat(timespec="microseconds")

    def timestamp(self, when: datetime) -> Any:
        """``when`` as a parameter compared with a stored time column."""
        return when.isoformat(timespec="microseconds")

    def to_datetime(self, value: Any) -> datetime:
        """A stored time column's (non-NULL) value as a ``datetime``."""
        return datetime.fromisoformat(value)

    def in_list(self, column: str, name: str, values: Sequence[Any], params: Params) -> str:
        """The condition ``column`` is one of ``values``, binding them in ``params`` under ``name``."""
        marks = []
        for i, v in enumerate(values):
            params[f"{name}{i}"] = v
            marks.append(f":{name}{i}")
        return f"{column} IN ({', '.join(marks)})"

    def match(self, terms: Sequence[str]) -> str | None:
        """The full-text expression bound to ``:match`` for ``terms`` (None when none is left)."""
        return fts5_query(terms)

    def score(self, raw: Any) -> float:
        """A search row's raw score as :attr:`Chunk.score` (higher is better)."""
        return -float(raw)

    def store_text(self, text: str, min_bytes: int) -> str | bytes:
        """What to store for a JSON text of at least ``min_bytes`` worth compressing."""
        return pack_text(text, min_bytes) if self.compress_text else text

    def is_foreign_key_error(self, error: BaseException | None) -> bool:
        """Whether ``error`` (a driver error) is a violated foreign key."""
        return isinstance(error, sqlite3.IntegrityError) and "FOREIGN KEY" in str(error)


#: reads rows of shared SQL: a store's own reads, or a transaction's
Rows = Callable[[str, Params], list[Any]]


class Tx:
    """The statements of one write transaction, in shared SQL (the dialect translates each)."""

    __slots__ = ("cursor", "sql")

    def __init__(self, cursor: Any, dialect: Dialect) -> None:
        self.cursor = cursor
        self.sql = dialect.sql

    def rows(self, sql: str, params: Params) -> list[Any]:
        return self.cursor.execute(self.sql(sql), params).fetchall()  # type: ignore[no-any-return]

    def one(self, sql: str, params: Params) -> Any:
        return self.cursor.execute(self.sql(sql), params).fetchone()

    def run(self, sql: str, params: Params) -> int:
        """Run a statement; how many rows it changed."""
        return self.cursor.execute(self.sql(sql), params).rowcount  # type: ignore[no-any-return]

    def many(self, sql: str, rows: Sequence[Params]) -> int:
        """Run a statement once per parameter set; how many rows they changed together."""
        result = self.cursor.executemany(self.sql(sql), rows)  # sqlite3 returns its cursor, psycopg None
        return max(0, (self.cursor if result is None else result).rowcount)


__all__ = ["Dialect", "Params", "Rows", "Tx"]
