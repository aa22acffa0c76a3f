"""How a store keeps the blobs its events name and collects the others (:meth:`Store.append_many` with
``blobs=``, :meth:`Store.gc`): the two transactions whose order makes "gc never deletes what an event
names" hold under concurrent writers, at any grace.

A blob is put (with a reference of its session) before the event naming it is appended. A collection
looks at the references older than its cutoff and at the events of their sessions; a reference no event
names is dropped, and then every blob no reference holds. Two things keep a named blob:

* the append that names blobs (``keep_blobs``) first takes the dialect's ``lock_blob_writes`` (SQLite:
  the write lock its transaction holds anyway), stores again any of them a collection deleted since they
  were put, and renews the session's references to them, in the transaction of its events;
* the collection (``collect_blobs``) drops references and deletes blobs in one transaction that first
  takes ``lock_blobs`` (which waits for such appends) and reads again the events appended since it first
  looked: an append either committed before (its events are read) or runs after (and stores the blobs again).

The reads a collection makes before its transaction may be stale (on SQLite each is its own snapshot): they
only pick candidates. What it drops is decided inside the transaction, which sees every committed append
(SQLite's ``BEGIN IMMEDIATE`` takes the write lock first, so its snapshot is the newest; PostgreSQL reads
each statement after ``lock_blobs``). A session's seqs only grow, so the events after the last seq it read
are all that can be new (a session deleted and created again meanwhile holds references newer than the
cutoff). tests/test_artifacts.py drives every order of these steps against another writer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from .base import SHA_IN_TEXT
from .codec import pack_blob, unpack_text
from .dialect import Dialect, Rows, Tx

#: deletes the blobs of ``:tenant`` no reference holds
DELETE_UNREFERENCED = ("DELETE FROM blobs WHERE tenant = :tenant AND NOT EXISTS "
                       "(SELECT 1 FROM blob_refs r WHERE r.tenant = blobs.tenant AND r.sha = blobs.sha)")


def keep_blobs(tx: Tx, dialect: Dialect, tenant: str, session_id: str, blobs: Mapping[str, bytes]) -> None:
    """In the transaction of the events naming ``blobs`` (sha → bytes): store the ones a collection deleted
    since they were put, and renew the session's references to all of them."""
    if dialect.lock_blob_writes:  # a collection under way finishes first; a later one waits for this
        tx.run(dialect.lock_blob_writes, {})
    now = dialect.now()
    p: dict[str, Any] = {"tenant": tenant}
    have = {r[0] for r in tx.rows(f"SELECT sha FROM blobs WHERE tenant = :tenant AND "
                                  f"{dialect.in_list('sha', 'sha', list(blobs), p)}", p)}
    tx.many("INSERT INTO blobs (tenant, sha, data, size, created_at) VALUES (:tenant, :sha, :data, :size, :now) "
            "ON CONFLICT (tenant, sha) DO NOTHING",
            [{"tenant": tenant, "sha": sha, "data": pack_blob(raw), "size": len(raw), "now": now}
             for sha, raw in blobs.items() if sha not in have])
    tx.many("INSERT INTO blob_refs (tenant, sha, session_id, created_at) VALUES (:tenant, :sha, :sid, :now) "
            "ON CONFLICT (tenant, sha, session_id) DO UPDATE SET created_at = excluded.created_at",
            [{"tenant": tenant, "sha": sha, "sid": session_id, "now": now} for sha in blobs])


def named_since(rows: Rows, tenant: str, session_id: str, after: int) -> tuple[set[str], int]:
    """The shas the session's events after seq ``after`` name, and the last seq read (``after`` if none)."""
    found = rows("SELECT seq, data FROM events WHERE tenant = :tenant AND session_id = :sid AND seq > :after",
                 {"tenant": tenant, "sid": session_id, "after": after})
    named: set[str] = set()
    for seq, data in found:
        named.update(SHA_IN_TEXT.findall(data if type(data) is str else unpack_text(data)))
        after = max(after, seq)
    return named, after


def collect_blobs(rows: Rows, write: Callable[[], AbstractContextManager[Tx]], dialect: Dialect, tenant: str,
                  cutoff: datetime) -> tuple[int, int]:
    """Drop the references older than ``cutoff`` that no event of their session names, then delete the blobs
    no reference holds; ``(references dropped, blobs deleted)``."""
    when = dialect.timestamp(cutoff)
    stale = rows("SELECT sha, session_id FROM blob_refs WHERE tenant = :tenant AND created_at < :cutoff "
                 "ORDER BY session_id, sha", {"tenant": tenant, "cutoff": when})
    named: dict[str, tuple[set[str], int]] = {}
    orphans: dict[str, list[str]] = {}
    for sha, sid in stale:
        if sid not in named:
            named[sid] = named_since(rows, tenant, sid, -1)
        if sha not in named[sid][0]:
            orphans.setdefault(sid, []).append(sha)
    with write() as tx:
        if dialect.lock_blobs:  # appends keeping blobs have committed (their events are read below) or wait
            tx.run(dialect.lock_blobs, {})
        drop = []
        for sid, shas in orphans.items():
            later = named_since(tx.rows, tenant, sid, named[sid][1])[0]
            drop += [{"tenant": tenant, "sha": sha, "sid": sid, "cutoff": when} for sha in shas if sha not in later]
        dropped = tx.many("DELETE FROM blob_refs WHERE tenant = :tenant AND sha = :sha AND session_id = :sid "
                          "AND created_at < :cutoff", drop) if drop else 0
        return dropped, tx.run(DELETE_UNREFERENCED, {"tenant": tenant})


__all__ = ["DELETE_UNREFERENCED", "collect_blobs", "keep_blobs", "named_since"]
