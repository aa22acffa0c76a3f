"""The :class:`Store`: every operation of a session store, its SQL written once for every engine.

What a store holds, and the narrow port a new backend implements (a dialect, a transaction, a read,
its migrations, its upkeep), are described in :mod:`windowsmith.store`. The SQL here is SQLite's
spelling with named parameters; each engine's :class:`~windowsmith.store.dialect.Dialect` translates it.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any, ClassVar, Self

from ..errors import StoreError, UsageError
from ..hashing import canonical_json
from ..model import Event
from . import packs
from .base import (
    SHA_IN_TEXT,
    EventRow,
    PreparedEvent,
    SessionRecord,
    blob_sha,
    check_blob,
    check_chain,
    check_kv_args,
    check_pack_args,
    check_session_id,
    check_tenant,
    event_from_row,
    moved_on,
    now_utc,
    pack_prefix_upper,
    prepare_events,
    session_kv_scopes,
    to_json,
    unknown_session,
)
from .blobs import DELETE_UNREFERENCED, collect_blobs, keep_blobs
from .chunks import Chunk, NewChunk, check_chunks, check_namespace, check_scope, check_scopes
from .codec import EVENT_MIN_BYTES, MIN_BYTES, pack_blob, unpack_blob, unpack_text
from .dialect import Dialect, Params, Rows, Tx

_DATA = itemgetter(2)  # an event row's data
_EVENT_COLS = "seq, kind, data, hash, parent"
_SESSION_COLS = "id, meta, created_at, head_hash, head_seq"
_CHUNK_COLS = "c.id, c.namespace, c.scope, c.key, c.doc, c.source, c.text, c.meta, c.created_at, c.used_at, c.uses, c.vector"

class Store(ABC):
    """A session store. See the module docstring for what it holds, its guarantees and its port.

    Stores are context managers; leaving the ``with`` block closes them.

    **Tenants.** Every row belongs to a tenant (``''`` by default). :meth:`for_tenant` returns the
    store as one tenant sees it: sessions, events, packs, blobs, key-value rows and retrieval chunks
    (memory, knowledge, history index) of other tenants are invisible to it (every query of the store checks
    the tenant column, on every engine; PostgreSQL adds row-level security policies as a second wall, see
    :class:`~windowsmith.store.postgres.PostgresStore`).
    Session and pack ids are unique per tenant: two tenants may use the same id, and nothing a store
    answers tells one tenant which ids another uses.
    """

    dialect: ClassVar[Dialect] = Dialect()
    tenant: str = ""

    def __init__(self, tenant: str = "") -> None:
        self.tenant = check_tenant(tenant)
        self._lock = threading.RLock()
        self._pack_heads = packs.PackCache()

    # -- the port ---------------------------------------------------------------------------------

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """A write transaction (see the module docstring) yielding a cursor of the engine's driver."""

    @abstractmethod
    def _read(self, sql: str, params: Any = ()) -> list[Any]:
        """The rows of one statement (in the driver's own SQL) outside a transaction."""

    @abstractmethod
    def _migrate(self) -> None:
        """Apply the migrations this database has not recorded yet (once, however many processes open it)."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection. Idempotent."""

    @abstractmethod
    def vacuum(self) -> None:
        """Give the space of deleted rows back (SQLite: ``VACUUM`` and a WAL checkpoint, so deleted
        content is gone from the file; PostgreSQL: ``VACUUM`` of the store's tables)."""

    @abstractmethod
    def size_bytes(self) -> int:
        """Bytes the store takes on disk (SQLite: the file and its WAL; PostgreSQL: its tables)."""

    def for_tenant(self, tenant: str) -> Store:
        """The store as ``tenant`` sees it (see the class docstring). Close it when done; the view of
        a SQLite store shares this store's connection, a PostgreSQL view has its own."""
        raise UsageError(f"{type(self).__name__} does not support tenants; use SQLiteStore or PostgresStore")

    def _location(self) -> str:
        """Where the store is, as messages name it."""
        return type(self).__name__

    # -- plumbing ---------------------------------------------------------------------------------

    def _rows(self, sql: str, params: Params) -> list[Any]:
        return self._read(self.dialect.sql(sql), params)

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        with self._transaction() as cursor:
            yield Tx(cursor, self.dialect)

    def _params(self, **params: Any) -> Params:
        params["tenant"] = self.tenant
        return params

    def _require_session(self, session_id: str, rows: Rows | None = None) -> None:
        sql = "SELECT 1 FROM sessions WHERE id = :sid AND tenant = :tenant"
        if not (rows or self._rows)(sql, self._params(sid=session_id)):
            raise unknown_session(session_id)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------------------------------

    def create_session(self, session_id: str, meta: Mapping[str, Any] | None = None) -> None:
        """Create a session. Idempotent when the session exists with equal ``meta``; a different
        ``meta`` raises :class:`~windowsmith.errors.UsageError`."""
        check_session_id(session_id)
        meta_json = to_json(dict(meta or {}), f"the meta of session {session_id!r}")
        p = self._params(sid=session_id, meta=meta_json, now=self.dialect.now())
        with self._write() as tx:
            if tx.run("INSERT INTO sessions (id, meta, created_at, tenant) VALUES (:sid, :meta, :now, :tenant) "
                      "ON CONFLICT (tenant, id) DO NOTHING", p):
                return
            row = tx.one("SELECT meta FROM sessions WHERE id = :sid AND tenant = :tenant", p)
            if row is None:  # deleted between the insert and this read (ids are per tenant: never another's)
                raise StoreError(f"session {session_id!r} was deleted while it was being created; create it again")
            (existing,) = row
            if existing != meta_json:
                raise UsageError(
                    f"session {session_id!r} already exists with different meta ({existing:.200}); "
                    "use a new session id, or pass the same meta to reuse it"
                )

    def _record(self, row: Sequence[Any]) -> SessionRecord:
        sid, meta, created_at, head, head_seq = row
        return SessionRecord(sid, json.loads(meta), self.dialect.to_datetime(created_at), head, head_seq + 1)

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session's record, or None if there is no such session."""
        rows = self._rows(f"SELECT {_SESSION_COLS} FROM sessions WHERE id = :sid AND tenant = :tenant",
                          self._params(sid=check_session_id(session_id)))
        return self._record(rows[0]) if rows else None

    def list_sessions(self) -> list[SessionRecord]:
        """Every session, oldest first."""
        rows = self._rows(f"SELECT {_SESSION_COLS} FROM sessions WHERE tenant = :tenant ORDER BY created_at, id",
                          self._params())
        return [self._record(r) for r in rows]

    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its events, packs, chunks, blob references and per-session key-value
        rows (blobs stay until :meth:`gc_blobs`). Returns whether it existed."""
        check_session_id(session_id)
        p = self._params(sid=session_id)
        with self._write() as tx:
            gone = tx.run("DELETE FROM sessions WHERE id = :sid AND tenant = :tenant", p) > 0
            if gone:
                scopes = self.dialect.in_list("scope", "scope", session_kv_scopes(session_id), p)
                tx.run(f"DELETE FROM kv WHERE tenant = :tenant AND {scopes}", p)
            return gone

    # -- log --------------------------------------------------------------------------------------

    def append(self, session_id: str, kind: str, data: Mapping[str, Any], *, expected_parent: str | None) -> Event:
        """Append one event after ``expected_parent`` (the head hash the caller last saw; None for
        an empty session). Raises ``ConflictError`` if the session moved on, ``InvalidMessageError``
        for a bad kind or non-JSON data, ``UsageError`` for an unknown session."""
        return self.append_many(session_id, [(kind, data)], expected_parent=expected_parent)[0]

    def append_many(self, session_id: str, items: Sequence[tuple[str, Mapping[str, Any]]], *,
                    expected_parent: str | None, blobs: Mapping[str, bytes] | None = None) -> list[Event]:
        """Append several events in one transaction: all are written or none.

        ``blobs`` (sha256 → bytes, put earlier with :meth:`put_blobs`): the artifacts these events name.
        The same transaction stores them again where a :meth:`gc` took them since, and renews the
        session's references to them, so a collection either finished before (and they are back) or
        sees the events that name them: ``gc`` never deletes what an event names."""
        check_session_id(session_id)
        if isinstance(items, tuple) and len(items) == 2 and isinstance(items[0], str):
            raise UsageError("append_many takes a list of (kind, data) pairs; for one event use append()")
        prepared = prepare_events(items, expected_parent)
        if not prepared:
            return []
        if any(blob_sha(raw) != (raw, sha) for sha, raw in (blobs or {}).items()):
            raise UsageError("append_many(blobs=...) maps each sha256 to its bytes; one of them does not match")
        try:
            return self._write_events(session_id, prepared, expected_parent, dict(blobs or {}))
        except StoreError as e:
            if blobs and self.dialect.is_foreign_key_error(e.__cause__):
                raise unknown_session(session_id) from None  # the session was deleted meanwhile
            raise

    def _write_events(self, session_id: str, prepared: list[PreparedEvent], expected_parent: str | None,
                      blobs: Mapping[str, bytes]) -> list[Event]:
        """Atomically: check the head is ``expected_parent``, keep ``blobs`` (:meth:`_keep_blobs`), insert
        ``prepared`` with the next seqs."""
        now, store_text, tenant = self.dialect.now(), self.dialect.store_text, self.tenant
        with self._write() as tx:
            row = tx.one("SELECT head_hash, head_seq FROM sessions WHERE id = :sid AND tenant = :tenant",
                         self._params(sid=session_id))
            if row is None:
                raise unknown_session(session_id)
            head, head_seq = row
            if head != expected_parent:
                raise moved_on(session_id, head, expected_parent)
            if blobs:
                keep_blobs(tx, self.dialect, self.tenant, session_id, blobs)
            tx.many(
                "INSERT INTO events (session_id, seq, kind, data, hash, parent, created_at, tenant) "
                "VALUES (:sid, :seq, :kind, :data, :hash, :parent, :now, :tenant)",
                [{"sid": session_id, "seq": head_seq + 1 + i, "kind": p.kind, "data": store_text(p.data_json, EVENT_MIN_BYTES),
                  "hash": p.hash, "parent": p.parent, "now": now, "tenant": tenant} for i, p in enumerate(prepared)],
            )
            tx.run("UPDATE sessions SET head_hash = :head, head_seq = :seq WHERE id = :sid AND tenant = :tenant",
                   {"head": prepared[-1].hash, "seq": head_seq + len(prepared), "sid": session_id, "tenant": tenant})
        return [event_from_row(head_seq + 1 + i, p.kind, p.data_json, p.hash, p.parent) for i, p in enumerate(prepared)]

    def events(self, session_id: str, since_seq: int = 0) -> list[Event]:
        """Events with ``seq >= since_seq``, in seq order."""
        return [event_from_row(*r) for r in self.event_rows(session_id, since_seq)]

    def event_rows(self, session_id: str, since_seq: int = 0) -> list[EventRow]:
        """The events as stored, unparsed: ``(seq, kind, data_json, hash, parent)`` in seq order (for a replay
        that parses them in bulk and checks each against its chain hash; see :mod:`windowsmith.resume`)."""
        check_session_id(session_id)
        with self._lock:
            rows = self._rows(f"SELECT {_EVENT_COLS} FROM events WHERE session_id = :sid AND tenant = :tenant "
                              "AND seq >= :since ORDER BY seq", self._params(sid=session_id, since=since_seq))
            if not rows:
                self._require_session(session_id)
        if set(map(type, map(_DATA, rows))) <= {str}:  # all plain text (C-level passes): the rows as read
            return rows
        # (most rows are plain text: no call for them)
        return [(seq, kind, data if type(data) is str else unpack_text(data), h, parent)
                for seq, kind, data, h, parent in rows]

    def head(self, session_id: str) -> Event | None:
        """The last event of the session, or None if it has none."""
        check_session_id(session_id)
        with self._lock:
            rows = self._rows(f"SELECT {_EVENT_COLS} FROM events WHERE session_id = :sid AND tenant = :tenant "
                              "ORDER BY seq DESC LIMIT 1", self._params(sid=session_id))
            if not rows:
                self._require_session(session_id)
        if not rows:
            return None
        seq, kind, data, h, parent = rows[0]
        return event_from_row(seq, kind, unpack_text(data), h, parent)

    def verify(self, session_id: str) -> None:
        """Recompute every hash and parent link; raise ``StoreError`` naming the first bad seq."""
        record = self.get_session(session_id)
        if record is None:
            raise unknown_session(session_id)
        check_chain(record, self.events(session_id))

    # -- packs ------------------------------------------------------------------------------------

    def save_pack(self, pack_id: str, session_id: str, seq: int, manifest: Mapping[str, Any], *,
                  exist_ok: bool = False) -> None:
        """Record a pack built from the session's log up to ``seq``. Saving the same id with an
        equal manifest again is a no-op (rebuilds are deterministic); a different one raises, unless
        ``exist_ok`` (the builder's: its pack ids derive from the log head and the request, so an id saved
        already is this pack), which makes any second save a no-op without reading the first back."""
        check_pack_args(pack_id, session_id, seq, manifest, serialize=False)
        p = self._params(id=pack_id, sid=session_id, seq=seq, now=self.dialect.now())
        try:
            with self._write() as tx:
                # the session (of this tenant) and its newest pack, in one statement
                found = tx.rows("SELECT p.ord, p.id FROM (SELECT 1 AS one FROM sessions WHERE id = :sid AND tenant = "
                                ":tenant) s LEFT JOIN (SELECT ord, id FROM packs WHERE session_id = :sid AND tenant = "
                                ":tenant ORDER BY ord DESC LIMIT 1) p ON 1 = 1", p)
                if not found:
                    raise unknown_session(session_id)
                head = self._pack_heads.get(session_id)
                last = None if found[0][0] is None else found[0]
                if head is not None and (last is None or tuple(last) != (head.ord, head.pack_id)):
                    head = None  # another writer saved a pack since, or the session was deleted: a new chain
                text, delta, n = packs.encode(head, manifest, lambda: check_pack_args(pack_id, session_id, seq, manifest))
                chained = head if delta else None
                p.update(manifest=self.dialect.store_text(text, MIN_BYTES), base=None if chained is None else chained.ord,
                         snap=None if chained is None else chained.snap_ord)
                got = tx.rows(
                    "INSERT INTO packs (id, session_id, seq, manifest, created_at, base_ord, snap_ord, tenant) "
                    "VALUES (:id, :sid, :seq, :manifest, :now, :base, :snap, :tenant) ON CONFLICT (tenant, id) DO NOTHING "
                    "RETURNING ord", p)
                if not got:
                    if not exist_ok:
                        self._check_same_pack(tx, pack_id, session_id, seq, manifest)
                    return
                o = got[0][0]
                if chained is None:
                    tx.run("UPDATE packs SET snap_ord = :ord WHERE ord = :ord AND tenant = :tenant", self._params(ord=o))
        except StoreError as e:
            if self.dialect.is_foreign_key_error(e.__cause__):  # the session was deleted meanwhile
                raise unknown_session(session_id) from None
            raise
        self._pack_heads.put(session_id, packs.next_head(head, delta, o, pack_id, seq, manifest, n))

    def _check_same_pack(self, tx: Tx, pack_id: str, session_id: str, seq: int, manifest: Mapping[str, Any]) -> None:
        """Raise unless the pack already saved as ``pack_id`` is this one (ids are unique per tenant)."""
        row = tx.one("SELECT session_id, seq FROM packs WHERE id = :id AND tenant = :tenant", self._params(id=pack_id))
        old = self._rebuild_pack(tx.rows, pack_id) if row is not None else None
        if row is None or tuple(row) != (session_id, seq) or to_json(old, "") != check_pack_args(
                pack_id, session_id, seq, manifest):
            raise UsageError(
                f"pack {pack_id!r} is already saved with a different session, seq or manifest; "
                "pack ids must be unique (derive them from the manifest checksum)"
            )

    def _rebuild_pack(self, rows: Rows, pack_id: str) -> dict[str, Any] | None:
        found = rows("SELECT ord, session_id, base_ord, snap_ord, manifest FROM packs WHERE id = :id AND tenant = :tenant",
                     self._params(id=pack_id))
        if not found:
            return None
        o, sid, base, snap, text = found[0]
        if base is None:
            return json.loads(unpack_text(text))  # type: ignore[no-any-return]
        chain = rows("SELECT ord, base_ord, manifest FROM packs WHERE session_id = :sid AND tenant = :tenant "
                     "AND ord >= :snap AND ord <= :ord ORDER BY ord", self._params(sid=sid, snap=snap, ord=o))
        return packs.rebuild(chain, o)

    def get_pack(self, pack_id: str) -> dict[str, Any] | None:
        """The manifest saved under ``pack_id`` or under the one id that starts with it."""
        full = self.resolve_pack_id(pack_id)
        if full is None:
            return None
        with self._lock:
            return self._rebuild_pack(self._rows, full)

    def has_pack(self, pack_id: str) -> bool:
        """Whether a pack is saved under exactly ``pack_id`` (an index lookup; the manifest is not read)."""
        return self._pack_ids_with_prefix(pack_id, limit=1) == [pack_id]

    def resolve_pack_id(self, prefix: str) -> str | None:
        """The full pack id that ``prefix`` names (exactly or as the unique prefix), or None.
        An ambiguous prefix raises ``UsageError`` listing the candidates."""
        if not isinstance(prefix, str) or not prefix:
            raise UsageError(f"a pack id or prefix must be a non-empty string, got {prefix!r}")
        ids = self._pack_ids_with_prefix(prefix, limit=6)
        if prefix in ids or len(ids) == 1:
            return prefix if prefix in ids else ids[0]
        if not ids:
            return None
        shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        raise UsageError(f"pack prefix {prefix!r} is ambiguous: it matches {shown}; give more characters")

    def _pack_ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        rows = self._rows("SELECT id FROM packs WHERE id >= :low AND id < :high AND tenant = :tenant ORDER BY id LIMIT :limit",
                          self._params(low=prefix, high=pack_prefix_upper(prefix), limit=limit))
        return [r[0] for r in rows]

    def list_packs(self, session_id: str) -> list[dict[str, Any]]:
        """The session's manifests in build order."""
        check_session_id(session_id)
        rows = self._rows("SELECT ord, base_ord, manifest FROM packs WHERE session_id = :sid AND tenant = :tenant "
                          "ORDER BY ord", self._params(sid=session_id))
        return packs.rebuild_all(rows)

    # -- blobs ------------------------------------------------------------------------------------

    def put_blob(self, data: bytes, *, session_id: str | None = None) -> str:
        """Store ``data`` once under its sha256 hex and return it; record that ``session_id`` uses it.
        A blob stored without a session is unreferenced and the next :meth:`gc_blobs` removes it."""
        return self.put_blobs([data], session_id=session_id)[0]

    def put_blobs(self, datas: Sequence[bytes], *, session_id: str | None = None) -> list[str]:
        """:meth:`put_blob` for each of ``datas``, in one transaction (a compaction stores hundreds of
        folded results at once); returns their sha256 in order."""
        hashed = [blob_sha(d) for d in datas]
        if session_id is not None:
            check_session_id(session_id)
        if not hashed:
            return []
        now, tenant = self.dialect.now(), self.tenant
        try:
            with self._write() as tx:
                if session_id is not None:
                    self._require_session(session_id, tx.rows)
                tx.many("INSERT INTO blobs (tenant, sha, data, size, created_at) VALUES (:tenant, :sha, :data, :size, :now) "
                        "ON CONFLICT (tenant, sha) DO NOTHING",
                        [{"tenant": tenant, "sha": sha, "data": pack_blob(raw), "size": len(raw), "now": now}
                         for raw, sha in hashed])
                if session_id is not None:
                    tx.many("INSERT INTO blob_refs (tenant, sha, session_id, created_at) VALUES (:tenant, :sha, :sid, :now) "
                            "ON CONFLICT (tenant, sha, session_id) DO UPDATE SET created_at = excluded.created_at",
                            [{"tenant": tenant, "sha": sha, "sid": session_id, "now": now} for _, sha in hashed])
        except StoreError as e:
            if session_id is not None and self.dialect.is_foreign_key_error(e.__cause__):
                raise unknown_session(session_id) from None  # the session was deleted meanwhile
            raise
        return [sha for _, sha in hashed]

    def get_blob(self, sha: str) -> bytes | None:
        """The bytes stored under ``sha``, checked against it, or None."""
        rows = self._rows("SELECT data, size FROM blobs WHERE tenant = :tenant AND sha = :sha", self._params(sha=sha))
        return check_blob(sha, unpack_blob(rows[0][0], rows[0][1]), self._location()) if rows else None

    def blob_refs(self, sha: str) -> list[str]:
        """Ids of the sessions that reference the blob, sorted."""
        rows = self._rows("SELECT session_id FROM blob_refs WHERE tenant = :tenant AND sha = :sha ORDER BY session_id",
                          self._params(sha=sha))
        return [r[0] for r in rows]

    def gc_blobs(self) -> int:
        """Delete every blob no session references; return how many were deleted."""
        with self._write() as tx:
            if self.dialect.lock_blobs:
                tx.run(self.dialect.lock_blobs, {})
            return tx.run(DELETE_UNREFERENCED, self._params())

    def named_artifacts(self, session_id: str) -> set[str]:
        """Every sha256 the session's events name (``artifact://<sha>`` in text, bare shas in
        compaction records): the blobs the session really uses."""
        named: set[str] = set()
        for e in self.events(session_id):
            named.update(SHA_IN_TEXT.findall(canonical_json(e.data)))
        return named

    def _clock(self) -> datetime:
        """Now, by the clock that stamps the store's rows (the database server's, where it stamps them)."""
        return now_utc()

    def gc(self, *, grace_seconds: float = 3600.0, vacuum: bool = True) -> dict[str, int]:
        """Collect garbage: drop blob references no event of their session names (an append that lost
        a race, or a process killed between storing a blob and appending the event that names it),
        then every blob no session references, then (``vacuum``) shrink the store.

        References younger than ``grace_seconds`` are kept: an append may be on its way. At any grace, a blob
        an event names is never deleted (``store/blobs.py``: with ``append_many(blobs=...)``). Returns
        ``{"refs_dropped", "blobs_deleted", "bytes_before", "bytes_after"}``."""
        if not isinstance(grace_seconds, int | float) or isinstance(grace_seconds, bool) or grace_seconds < 0:
            raise UsageError(f"grace_seconds must be a number of seconds >= 0, got {grace_seconds!r}")
        before = self.size_bytes()
        dropped, deleted = collect_blobs(self._rows, self._write, self.dialect, self.tenant,
                                         self._clock() - timedelta(seconds=grace_seconds))
        if vacuum:
            self.vacuum()
        return {"refs_dropped": dropped, "blobs_deleted": deleted, "bytes_before": before,
                "bytes_after": self.size_bytes()}

    # -- key-value --------------------------------------------------------------------------------

    def get_kv(self, scope: str, key: str) -> Any | None:
        """The JSON value stored under (scope, key), or None."""
        check_kv_args(scope, key)
        rows = self._rows("SELECT value FROM kv WHERE tenant = :tenant AND scope = :scope AND key = :key",
                          self._params(scope=scope, key=key))
        return json.loads(rows[0][0]) if rows else None

    def set_kv(self, scope: str, key: str, value: Any) -> None:
        """Store a JSON-able value under (scope, key), replacing any previous one."""
        check_kv_args(scope, key)
        p = self._params(scope=scope, key=key, value=to_json(value, f"the kv value for ({scope!r}, {key!r})"),
                         now=self.dialect.now())
        with self._write() as tx:
            tx.run("INSERT INTO kv (tenant, scope, key, value, updated_at) VALUES (:tenant, :scope, :key, :value, :now) "
                   "ON CONFLICT (tenant, scope, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                   p)

    # -- retrieval (memory, knowledge, history index; see store/chunks.py) -------------------------

    def _chunk(self, row: Sequence[Any], score: float = 0.0) -> Chunk:
        to_datetime, vector = self.dialect.to_datetime, row[11]
        return Chunk(int(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], json.loads(row[7]),
                     to_datetime(row[8]), to_datetime(row[9]) if row[9] else None, int(row[10]), score,
                     bytes(vector) if vector is not None else None)

    def add_chunks(self, namespace: str, scope: str, chunks: Sequence[NewChunk], *,
                   session_id: str | None = None) -> int:
        """Index ``chunks`` under (namespace, scope) in one transaction; a key already there is kept as it
        is. ``session_id`` ties the chunks to a session (deleted with it). Returns how many were new."""
        check_namespace(namespace)
        check_scope(scope)
        check_chunks(chunks)
        if session_id is not None:
            check_session_id(session_id)
        if not chunks:
            return 0
        now, tenant = self.dialect.now(), self.tenant
        rows = [{"tenant": tenant, "namespace": namespace, "scope": scope, "key": c.key, "doc": c.doc,
                 "source": c.source, "text": c.text, "meta": to_json(dict(c.meta), f"chunk {c.key!r} meta"),
                 "sid": session_id, "vector": c.vector, "now": now} for c in chunks]
        with self._write() as tx:
            if session_id is not None:
                self._require_session(session_id, tx.rows)
            return tx.many(
                "INSERT INTO chunks (tenant, namespace, scope, key, doc, source, text, meta, session_id, vector, "
                "created_at) VALUES (:tenant, :namespace, :scope, :key, :doc, :source, :text, :meta, :sid, :vector, "
                ":now) ON CONFLICT (tenant, namespace, scope, key) DO NOTHING", rows)

    def search_chunks(self, namespace: str, scopes: Sequence[str], terms: Sequence[str], *,
                      limit: int = 20) -> list[Chunk]:
        """Lexical search: the chunks of ``scopes`` matching any term (a phrase of its words), best first."""
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        match = self.dialect.match(terms)
        if match is None or limit <= 0:
            return []
        p = self._params(match=match, namespace=namespace, limit=int(limit))
        sql = self.dialect.search_sql.format(cols=_CHUNK_COLS, scopes=self.dialect.in_list("c.scope", "scope", scopes, p))
        return [self._chunk(r, self.dialect.score(r[12])) for r in self._rows(sql, p)]

    def has_chunks(self, namespace: str, scopes: Sequence[str]) -> bool:
        """Whether ``scopes`` hold any chunk (an index lookup): a search of scopes that hold none finds nothing,
        and a build asks before it searches."""
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        p = self._params(namespace=namespace)
        sql = (f"SELECT 1 FROM chunks c WHERE c.tenant = :tenant AND c.namespace = :namespace "
               f"AND {self.dialect.in_list('c.scope', 'scope', scopes, p)} LIMIT 1")
        return bool(self._rows(sql, p))

    def list_chunks(self, namespace: str, scopes: Sequence[str], *, doc: str | None = None,
                    limit: int | None = None) -> list[Chunk]:
        """The chunks of ``scopes`` (of one ``doc`` if given), oldest first."""
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        p = self._params(namespace=namespace)
        sql = (f"SELECT {_CHUNK_COLS} FROM chunks c WHERE c.tenant = :tenant AND c.namespace = :namespace "
               f"AND {self.dialect.in_list('c.scope', 'scope', scopes, p)}")
        if doc is not None:
            sql += " AND c.doc = :doc"
            p["doc"] = doc
        sql += " ORDER BY c.id"
        if limit is not None:
            sql += " LIMIT :limit"
            p["limit"] = int(limit)
        return [self._chunk(r) for r in self._rows(sql, p)]

    def indexed_docs(self, namespace: str, scope: str) -> set[str]:
        """The docs already indexed under (namespace, scope)."""
        check_namespace(namespace)
        check_scope(scope)
        rows = self._rows("SELECT DISTINCT doc FROM chunks WHERE tenant = :tenant AND namespace = :namespace "
                          "AND scope = :scope", self._params(namespace=namespace, scope=scope))
        return {r[0] for r in rows}

    def delete_chunks(self, namespace: str, scopes: Sequence[str], ids: Sequence[int]) -> int:
        """Delete the chunks with these ids, but only those in ``scopes``; returns how many went."""
        check_namespace(namespace)
        scopes = check_scopes(scopes)
        ids = [int(i) for i in ids]
        if not ids:
            return 0
        p = self._params(namespace=namespace)
        in_scopes, in_ids = self.dialect.in_list("scope", "scope", scopes, p), self.dialect.in_list("id", "id", ids, p)
        with self._write() as tx:
            return tx.run(f"DELETE FROM chunks WHERE tenant = :tenant AND namespace = :namespace AND {in_scopes} "
                          f"AND {in_ids}", p)

    def update_chunk(self, namespace: str, scope: str, chunk_id: int, *, text: str,
                     meta: Mapping[str, Any]) -> bool:
        """Replace a chunk's text and metadata (a merge of near-duplicates); False if it is not there."""
        check_namespace(namespace)
        check_scope(scope)
        p = self._params(text=text, meta=to_json(dict(meta), f"chunk {chunk_id} meta"), id=int(chunk_id),
                         namespace=namespace, scope=scope)
        with self._write() as tx:
            return tx.run("UPDATE chunks SET text = :text, meta = :meta WHERE id = :id AND tenant = :tenant "
                          "AND namespace = :namespace AND scope = :scope", p) > 0

    def touch_chunks(self, ids: Sequence[int]) -> None:
        """Mark chunks used now (``used_at``, ``uses + 1``): what decay reads."""
        ids = [int(i) for i in ids]
        if not ids:
            return
        p = self._params(now=self.dialect.now())
        in_ids = self.dialect.in_list("id", "id", ids, p)
        with self._write() as tx:
            tx.run(f"UPDATE chunks SET used_at = :now, uses = uses + 1 WHERE tenant = :tenant AND {in_ids}", p)


__all__ = ["Store"]
