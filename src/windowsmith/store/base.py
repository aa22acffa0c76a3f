"""The session store interface every storage engine implements.

A store holds four things, all keyed by session where it matters:

* **the log**: per session, an append-only chain of :class:`~windowsmith.model.Event` rows. Each
  event's ``hash`` is ``chain_hash(parent, canonical_json({"kind": kind, "data": data}))`` and its
  ``seq`` counts from 0. Appends are optimistic: the caller names the head it last saw
  (``expected_parent``) and the append fails with :class:`~windowsmith.errors.StoreError` if another
  writer moved the session on. ``created_at`` is stored but is not part of any hash.
* **packs**: the manifest of every context pack built for a session, in build order, addressable by
  a unique prefix of their id (like git).
* **blobs**: content-addressed bytes (sha256 hex), stored once, with a reference per session that
  uses them; :meth:`Store.gc_blobs` removes blobs no session references.
* **key-value**: small JSON values per scope (calibration data).

Validation (event kind, JSON-ability, unicode) happens here, before a backend opens a transaction;
backends only write prepared rows. Errors follow :mod:`windowsmith.errors`: a bad call raises a
:class:`~windowsmith.errors.UsageError` subclass, a failure of the store itself a ``StoreError``.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Self, TypeVar

from ..errors import ConflictError, InvalidMessageError, StoreError, UsageError
from ..hashing import HASH_SCHEME, canonical_json, chain_hash
from ..model import EVENT_KINDS, Event
from .chunks import Chunk, NewChunk, check_chunks, check_namespace, check_scope

_SHA_IN_TEXT = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")

#: Highest U+ code point; ``prefix <= id < prefix + _MAX_CHAR`` selects the ids starting with prefix.
_MAX_CHAR = "\U0010ffff"


@dataclass(frozen=True)
class SessionRecord:
    """A session as the store knows it: its metadata and where its log stands."""

    id: str
    meta: Mapping[str, Any]
    created_at: datetime
    head: str | None  # hash of the last event, None for an empty session
    event_count: int


@dataclass(frozen=True)
class PreparedEvent:
    """An event validated and hashed before any transaction opens (seq is assigned by the backend)."""

    kind: str
    data_json: str
    hash: str
    parent: str | None


def now_utc() -> datetime:
    return datetime.now(UTC)


#: The longest session id any store accepts (characters). Every backend and artifact store takes the
#: same ids: a folder store keeps one as a file name (255 bytes on most file systems).
MAX_SESSION_ID = 200


def check_session_id(session_id: Any) -> str:
    """``session_id`` if it is a valid session id, else ``UsageError`` saying why.

    Valid everywhere (SQLite, PostgreSQL, folder and object artifact stores): a non-empty string of
    at most :data:`MAX_SESSION_ID` printable characters (no control characters such as NUL or newline,
    no lone surrogates, no leading or trailing whitespace)."""
    if not isinstance(session_id, str) or not session_id:
        raise UsageError(f"a session id must be a non-empty string, got {session_id!r:.80}")
    if len(session_id) > MAX_SESSION_ID:
        raise UsageError(
            f"session id {session_id[:40]!r}... is {len(session_id)} characters; the limit is {MAX_SESSION_ID}: "
            "use a shorter id (a hash of a long key, for example)"
        )
    if any(0xD800 <= ord(c) <= 0xDFFF for c in session_id):
        raise UsageError(f"session id {session_id!r:.80} contains a lone surrogate; pass valid Unicode text")
    if not session_id.isprintable():
        bad = next(c for c in session_id if not c.isprintable())
        raise UsageError(
            f"session id {session_id!r:.80} contains the non-printable character {bad!r} (U+{ord(bad):04X}); "
            "session ids must be printable text (no NUL, newline, tab or other control characters)"
        )
    if session_id != session_id.strip():
        raise UsageError(f"session id {session_id!r:.80} starts or ends with whitespace; strip it")
    return session_id


#: The longest tenant name a store accepts.
MAX_TENANT = 100


def check_tenant(tenant: Any) -> str:
    """``tenant`` if it is a valid tenant name ('' is the default tenant), else ``UsageError``."""
    if not isinstance(tenant, str):
        raise UsageError(f"a tenant must be a string ('' for the default tenant), got {tenant!r:.80}")
    if len(tenant) > MAX_TENANT or not tenant.isprintable() or tenant != tenant.strip():
        raise UsageError(
            f"tenant {tenant[:40]!r} is not a valid tenant name: use at most {MAX_TENANT} printable characters "
            "without leading or trailing whitespace (e.g. 'team-a')"
        )
    return tenant


def taken_session_id(session_id: str) -> UsageError:
    return UsageError(
        f"cannot create session {session_id!r}: the id is in use in this store (by another tenant); "
        "session ids are unique per store, so choose another one (prefix it with your tenant, for example)"
    )


def to_json(value: Any, what: str, error: type[UsageError] = UsageError) -> str:
    """``canonical_json(value)``, turning every way it can fail into ``error`` naming ``what``."""
    try:
        text = canonical_json(value)
        text.encode("utf-8")
    except UnicodeEncodeError:  # before ValueError, its base class
        raise error(
            f"{what} contains a lone surrogate and is not valid UTF-8; clean its text with "
            "windowsmith.jsonvalues.clean_text before storing it"
        ) from None
    except (TypeError, ValueError) as e:  # unserializable type, NaN/Infinity, circular reference
        raise error(
            f"{what} is not JSON-serializable: {e}; pass plain dicts, lists, str, int, float, bool, None"
        ) from None
    return text


def prepare_events(items: Sequence[tuple[str, Mapping[str, Any]]], parent: str | None) -> list[PreparedEvent]:
    """Validate ``items`` and hash them as a chain starting after ``parent``.

    Hashing before the transaction is sound because the backend refuses the write unless the
    session's head *is* ``parent``; the lock is then held only for the head check and the inserts.
    """
    out: list[PreparedEvent] = []
    for i, item in enumerate(items):
        try:
            kind, data = item
        except (TypeError, ValueError):
            raise InvalidMessageError(f"item {i} must be a (kind, data) pair, got {item!r:.80}") from None
        if kind not in EVENT_KINDS:
            raise InvalidMessageError(f"item {i} has unknown event kind {kind!r}; use one of {', '.join(EVENT_KINDS)}")
        if not isinstance(data, Mapping):
            raise InvalidMessageError(f"item {i} ({kind}) data must be a JSON object (dict), got {type(data).__name__}")
        data_json = to_json(data, f"item {i} ({kind}) data", InvalidMessageError)
        # == canonical_json({"kind": kind, "data": data}): keys sort as "data" < "kind"; saves a 2nd dump.
        payload = '{"data":' + data_json + ',"kind":' + canonical_json(kind) + "}"
        h = chain_hash(parent, payload)
        out.append(PreparedEvent(kind, data_json, h, parent))
        parent = h
    return out


def moved_on(session_id: str, head: str | None, expected: str | None) -> ConflictError:
    return ConflictError(
        f"session {session_id!r} moved on: head is {head}, expected {expected} (ConflictError: another "
        "writer appended first; nothing was written); catch up with session.refresh() (or re-read "
        "store.head()) and retry the call",
        session_id=session_id, head=head, expected=expected,
    )


def unknown_session(session_id: str) -> UsageError:
    return UsageError(
        f"no session {session_id!r} in this store; create it with store.create_session({session_id!r}, meta) "
        "or check the id against store.list_sessions()"
    )


#: an event as stored: (seq, kind, data as canonical JSON text, hash, parent hash)
EventRow = tuple[int, str, str, str, "str | None"]


def event_from_row(seq: int, kind: str, data_json: str, hash_: str, parent: str | None) -> Event:
    return Event(seq=seq, kind=kind, data=json.loads(data_json), hash=hash_, parent=parent)


# ---------------------------------------------------------------------------------------------------
# Migrations
# ---------------------------------------------------------------------------------------------------

C = TypeVar("C")


class Migrations(Generic[C]):
    """An ordered registry of named, forward-only migrations (``@migrations`` on ``def m001_x(conn)``).

    A backend applies each unapplied migration in its own transaction together with the row that
    records it, and refuses a database that records a migration this code does not know (it was
    written by a newer windowsmith).
    """

    def __init__(self) -> None:
        self._items: dict[str, Callable[[C], None]] = {}

    def __call__(self, fn: Callable[[C], None]) -> Callable[[C], None]:
        name = fn.__name__
        if name in self._items:
            raise RuntimeError(f"migration {name} registered twice")
        if self._items and name <= list(self._items)[-1]:
            raise RuntimeError(f"migration {name} must sort after {list(self._items)[-1]}")
        self._items[name] = fn
        return fn

    def __iter__(self) -> Iterator[tuple[str, Callable[[C], None]]]:
        return iter(self._items.items())

    @property
    def names(self) -> list[str]:
        return list(self._items)

    def check_known(self, applied: set[str], where: str) -> None:
        unknown = sorted(applied - set(self._items))
        if unknown:
            raise StoreError(
                f"{where} was written by a newer windowsmith (unknown migrations: {', '.join(unknown)}); "
                "upgrade windowsmith (pip install -U windowsmith) to open it"
            )


# ---------------------------------------------------------------------------------------------------
# The interface
# ---------------------------------------------------------------------------------------------------


class Store(ABC):
    """Abstract session store. See the module docstring for what it holds and its guarantees.

    Stores are context managers; leaving the ``with`` block closes them.

    **Tenants.** Every row belongs to a tenant (``''`` by default). :meth:`for_tenant` returns the
    store as one tenant sees it: sessions, events, packs, blobs, key-value rows and retrieval chunks
    (memory, knowledge, history index) of other tenants are invisible to it (SQLite: every query checks the tenant column; PostgreSQL: row-level security
    policies keyed by a per-connection setting). Session ids stay unique per store.
    """

    tenant: str = ""

    def for_tenant(self, tenant: str) -> Store:
        """The store as ``tenant`` sees it (see the class docstring). Close it when done; the view of
        a SQLite store shares this store's connection, a PostgreSQL view has its own."""
        raise UsageError(f"{type(self).__name__} does not support tenants; use SQLiteStore or PostgresStore")

    # -- sessions ---------------------------------------------------------------------------------

    @abstractmethod
    def create_session(self, session_id: str, meta: Mapping[str, Any] | None = None) -> None:
        """Create a session. Idempotent when the session exists with equal ``meta``; a different
        ``meta`` raises :class:`~windowsmith.errors.UsageError`."""

    @abstractmethod
    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session's record, or None if there is no such session."""

    @abstractmethod
    def list_sessions(self) -> list[SessionRecord]:
        """Every session, oldest first."""

    @abstractmethod
    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its events, packs and blob references (blobs stay until
        :meth:`gc_blobs`). Returns whether it existed."""

    # -- log --------------------------------------------------------------------------------------

    def append(self, session_id: str, kind: str, data: Mapping[str, Any], *, expected_parent: str | None) -> Event:
        """Append one event after ``expected_parent`` (the head hash the caller last saw; None for
        an empty session). Raises ``StoreError`` if the session moved on, ``InvalidMessageError``
        for a bad kind or non-JSON data, ``UsageError`` for an unknown session."""
        return self.append_many(session_id, [(kind, data)], expected_parent=expected_parent)[0]

    def append_many(
        self,
        session_id: str,
        items: Sequence[tuple[str, Mapping[str, Any]]],
        *,
        expected_parent: str | None,
    ) -> list[Event]:
        """Append several events in one transaction: all are written or none."""
        check_session_id(session_id)
        if isinstance(items, tuple) and len(items) == 2 and isinstance(items[0], str):
            raise UsageError("append_many takes a list of (kind, data) pairs; for one event use append()")
        prepared = prepare_events(items, expected_parent)
        if not prepared:
            return []
        return self._write_events(session_id, prepared, expected_parent)

    @abstractmethod
    def _write_events(self, session_id: str, prepared: list[PreparedEvent], expected_parent: str | None) -> list[Event]:
        """Atomically: check the head is ``expected_parent``, insert ``prepared`` with the next seqs."""

    @abstractmethod
    def events(self, session_id: str, since_seq: int = 0) -> list[Event]:
        """Events with ``seq >= since_seq``, in seq order."""

    def event_rows(self, session_id: str, since_seq: int = 0) -> list[EventRow]:
        """The events as stored, unparsed: ``(seq, kind, data_json, hash, parent)`` in seq order (for a replay
        that parses them in bulk and checks each against its chain hash; see :mod:`windowsmith.resume`)."""
        return [(e.seq, e.kind, canonical_json(e.data), e.hash, e.parent) for e in self.events(session_id, since_seq)]

    @abstractmethod
    def head(self, session_id: str) -> Event | None:
        """The last event of the session, or None if it has none."""

    def verify(self, session_id: str) -> None:
        """Recompute every hash and parent link; raise ``StoreError`` naming the first bad seq."""
        record = self.get_session(session_id)
        if record is None:
            raise unknown_session(session_id)
        parent: str | None = None
        expected_seq = 0
        for e in self.events(session_id):
            where = f"session {session_id!r} is corrupt at seq {e.seq}"
            if e.seq != expected_seq:
                raise StoreError(f"{where}: expected seq {expected_seq} (a row is missing or renumbered)")
            if e.parent != parent:
                raise StoreError(f"{where}: parent is {e.parent}, but the previous event's hash is {parent}")
            scheme = e.hash.split(":", 1)[0]
            if scheme != HASH_SCHEME:
                raise StoreError(
                    f"{where}: hash scheme {scheme!r} is not {HASH_SCHEME!r}; "
                    "a newer windowsmith wrote it (upgrade) or the row was edited"
                )
            recomputed = chain_hash(parent, e.payload_json())
            if recomputed != e.hash:
                raise StoreError(
                    f"{where}: stored hash {e.hash} != recomputed {recomputed}; the row was changed outside windowsmith"
                )
            parent = e.hash
            expected_seq += 1
        if record.head != parent or record.event_count != expected_seq:
            raise StoreError(
                f"session {session_id!r} is corrupt: its record says head {record.head} after "
                f"{record.event_count} events, the log ends at {parent} after {expected_seq}"
            )

    # -- packs ------------------------------------------------------------------------------------

    @abstractmethod
    def save_pack(self, pack_id: str, session_id: str, seq: int, manifest: Mapping[str, Any]) -> None:
        """Record a pack built from the session's log up to ``seq``. Saving the same id with an
        equal manifest again is a no-op (rebuilds are deterministic); a different one raises."""

    def get_pack(self, pack_id: str) -> dict[str, Any] | None:
        """The manifest saved under ``pack_id`` or under the one id that starts with it."""
        full = self.resolve_pack_id(pack_id)
        return None if full is None else self._get_pack_exact(full)

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

    @abstractmethod
    def _pack_ids_with_prefix(self, prefix: str, limit: int) -> list[str]: ...

    @abstractmethod
    def _get_pack_exact(self, pack_id: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def list_packs(self, session_id: str) -> list[dict[str, Any]]:
        """The session's manifests in build order."""

    # -- blobs ------------------------------------------------------------------------------------

    @abstractmethod
    def put_blob(self, data: bytes, *, session_id: str | None = None) -> str:
        """Store ``data`` once under its sha256 hex and return it; record that ``session_id`` uses it.
        A blob stored without a session is unreferenced and the next :meth:`gc_blobs` removes it."""

    def put_blobs(self, datas: Sequence[bytes], *, session_id: str | None = None) -> list[str]:
        """:meth:`put_blob` for each of ``datas``, in one transaction where the store has them (a
        compaction stores hundreds of folded results at once); returns their sha256 in order."""
        return [self.put_blob(d, session_id=session_id) for d in datas]

    @abstractmethod
    def get_blob(self, sha: str) -> bytes | None:
        """The bytes stored under ``sha``, checked against it, or None."""

    @abstractmethod
    def blob_refs(self, sha: str) -> list[str]:
        """Ids of the sessions that reference the blob, sorted."""

    @abstractmethod
    def gc_blobs(self) -> int:
        """Delete every blob no session references; return how many were deleted."""

    def named_artifacts(self, session_id: str) -> set[str]:
        """Every sha256 the session's events name (``artifact://<sha>`` in text, bare shas in
        compaction records): the blobs the session really uses."""
        named: set[str] = set()
        for e in self.events(session_id):
            named.update(_SHA_IN_TEXT.findall(canonical_json(e.data)))
        return named

    @abstractmethod
    def _stale_refs(self, cutoff: datetime) -> list[tuple[str, str]]:
        """(sha, session id) of the blob references recorded (or last re-recorded) before ``cutoff``."""

    @abstractmethod
    def _drop_refs(self, pairs: Sequence[tuple[str, str]], cutoff: datetime) -> int:
        """Delete the references in ``pairs`` that are still older than ``cutoff``; return how many."""

    @abstractmethod
    def vacuum(self) -> None:
        """Give the space of deleted rows back (SQLite: ``VACUUM`` and a WAL checkpoint, so deleted
        content is gone from the file; PostgreSQL: ``VACUUM`` of the store's tables)."""

    @abstractmethod
    def size_bytes(self) -> int:
        """Bytes the store takes on disk (SQLite: the file and its WAL; PostgreSQL: its tables)."""

    def gc(self, *, grace_seconds: float = 3600.0, vacuum: bool = True) -> dict[str, int]:
        """Collect garbage: drop blob references no event of their session names (an append that lost
        a race, or a process killed between storing a blob and appending the event that names it),
        then every blob no session references, then (``vacuum``) shrink the store.

        References younger than ``grace_seconds`` are kept: an append may be on its way. Returns
        ``{"refs_dropped", "blobs_deleted", "bytes_before", "bytes_after"}``."""
        if not isinstance(grace_seconds, int | float) or isinstance(grace_seconds, bool) or grace_seconds < 0:
            raise UsageError(f"grace_seconds must be a number of seconds >= 0, got {grace_seconds!r}")
        before = self.size_bytes()
        cutoff = now_utc() - timedelta(seconds=grace_seconds)
        stale = self._stale_refs(cutoff)
        named: dict[str, set[str]] = {}
        orphans: list[tuple[str, str]] = []
        for sha, sid in stale:
            if sid not in named:
                named[sid] = self.named_artifacts(sid)
            if sha not in named[sid]:
                orphans.append((sha, sid))
        dropped = self._drop_refs(orphans, cutoff) if orphans else 0
        deleted = self.gc_blobs()
        if vacuum:
            self.vacuum()
        return {"refs_dropped": dropped, "blobs_deleted": deleted, "bytes_before": before,
                "bytes_after": self.size_bytes()}

    # -- key-value --------------------------------------------------------------------------------

    @abstractmethod
    def get_kv(self, scope: str, key: str) -> Any | None:
        """The JSON value stored under (scope, key), or None."""

    @abstractmethod
    def set_kv(self, scope: str, key: str, value: Any) -> None:
        """Store a JSON-able value under (scope, key), replacing any previous one."""

    # -- retrieval (memory, knowledge, history index; see store/chunks.py) -------------------------

    def add_chunks(self, namespace: str, scope: str, chunks: Sequence[NewChunk], *,
                   session_id: str | None = None) -> int:
        """Index ``chunks`` under (namespace, scope) in one transaction; a key already there is kept as it
        is. ``session_id`` ties the chunks to a session (deleted with it). Returns how many were new."""
        check_namespace(namespace)
        check_scope(scope)
        check_chunks(chunks)
        if session_id is not None:
            check_session_id(session_id)
        return self._add_chunks(namespace, scope, list(chunks), session_id) if chunks else 0

    @abstractmethod
    def _add_chunks(self, namespace: str, scope: str, chunks: list[NewChunk], session_id: str | None) -> int: ...

    @abstractmethod
    def search_chunks(self, namespace: str, scopes: Sequence[str], terms: Sequence[str], *,
                      limit: int = 20) -> list[Chunk]:
        """Lexical search: the chunks of ``scopes`` matching any term (a phrase of its words), best first."""

    @abstractmethod
    def list_chunks(self, namespace: str, scopes: Sequence[str], *, doc: str | None = None,
                    limit: int | None = None) -> list[Chunk]:
        """The chunks of ``scopes`` (of one ``doc`` if given), oldest first."""

    @abstractmethod
    def indexed_docs(self, namespace: str, scope: str) -> set[str]:
        """The docs already indexed under (namespace, scope)."""

    @abstractmethod
    def delete_chunks(self, namespace: str, scopes: Sequence[str], ids: Sequence[int]) -> int:
        """Delete the chunks with these ids, but only those in ``scopes``; returns how many went."""

    @abstractmethod
    def update_chunk(self, namespace: str, scope: str, chunk_id: int, *, text: str,
                     meta: Mapping[str, Any]) -> bool:
        """Replace a chunk's text and metadata (a merge of near-duplicates); False if it is not there."""

    @abstractmethod
    def touch_chunks(self, ids: Sequence[int]) -> None:
        """Mark chunks used now (``used_at``, ``uses + 1``): what decay reads."""

    # -- lifecycle --------------------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Release the connection. Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def blob_sha(data: Any) -> tuple[bytes, str]:
    import hashlib

    if not isinstance(data, bytes | bytearray | memoryview):
        raise UsageError(f"put_blob takes bytes, got {type(data).__name__}; encode text first (text.encode('utf-8'))")
    raw = bytes(data)
    return raw, hashlib.sha256(raw).hexdigest()


def check_blob(sha: str, raw: bytes, where: str) -> bytes:
    import hashlib

    if hashlib.sha256(raw).hexdigest() != sha:
        raise StoreError(f"blob {sha} in {where} does not match its hash; the row was changed outside windowsmith")
    return raw


def check_pack_args(pack_id: Any, session_id: Any, seq: Any, manifest: Any, *, serialize: bool = True) -> str:
    """Validate a pack's arguments; the manifest's canonical JSON (or "" when not ``serialize``)."""
    if not isinstance(pack_id, str) or not pack_id or "\x00" in pack_id:
        raise UsageError(f"a pack id must be a non-empty string without NUL characters, got {pack_id!r:.80}")
    check_session_id(session_id)
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < -1:
        raise UsageError(f"a pack's seq must be the int seq of the last event it covers (-1 for none), got {seq!r}")
    if not isinstance(manifest, Mapping):
        raise UsageError(f"a pack manifest must be a dict, got {type(manifest).__name__}")
    if not serialize:
        return ""
    return to_json(manifest, f"the manifest of pack {pack_id!r}")


#: key-value scopes that belong to one session (``<prefix><session id>``): ``delete_session`` removes them
#: with the session (``counts:``: the token counts and digests a resume reads, ``unit_counts.py``)
SESSION_KV_PREFIXES = ("counts:",)


def session_kv_scopes(session_id: str) -> list[str]:
    return [prefix + session_id for prefix in SESSION_KV_PREFIXES]


def check_kv_args(scope: Any, key: Any) -> None:
    for name, v in (("scope", scope), ("key", key)):
        if not isinstance(v, str) or not v:
            raise UsageError(f"a kv {name} must be a non-empty string, got {v!r}")
        if "\x00" in v:  # PostgreSQL text cannot hold NUL: refuse it on every backend alike
            raise UsageError(f"a kv {name} must not contain NUL characters, got {v!r:.80}")


def pack_prefix_upper(prefix: str) -> str:
    return prefix + _MAX_CHAR
