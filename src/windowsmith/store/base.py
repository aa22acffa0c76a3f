"""What every store shares before any SQL runs: its value types, the checks of every argument and the
migration registry.

Validation (event kind, JSON-ability, unicode, ids) happens here, before a store opens a transaction
(:mod:`windowsmith.store.sql` holds the :class:`~windowsmith.store.Store` itself and its port). Errors follow
:mod:`windowsmith.errors`: a bad call raises a :class:`~windowsmith.errors.UsageError` subclass, a failure
of the store itself a ``StoreError``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from ..errors import ConflictError, InvalidMessageError, StoreError, UsageError
from ..hashing import HASH_SCHEME, canonical_json, chain_hash
from ..model import EVENT_KINDS, Event

#: a sha256 hex standing alone in text (``artifact://<sha>``, a bare sha in a compaction record)
SHA_IN_TEXT = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")

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


def check_chain(record: SessionRecord, events: Sequence[Event]) -> None:
    """Recompute every hash and parent link of a session's ``events``; raise ``StoreError`` naming the first
    bad seq, or saying the session's ``record`` (its head and count) does not match the log."""
    session_id = record.id
    parent: str | None = None
    expected_seq = 0
    for e in events:
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


# ---------------------------------------------------------------------------------------------------
# Migrations
# ---------------------------------------------------------------------------------------------------

C = TypeVar("C")

#: The table recording the applied migrations (name, applied_at), in every engine.
MIGRATIONS_TABLE = "_windowsmith_migrations"


class Migrations(Generic[C]):
    """An ordered registry of named, forward-only migrations (``@migrations`` on ``def m001_x(conn)``).

    :meth:`apply` runs each unapplied migration in its own transaction together with the row that
    records it in :data:`MIGRATIONS_TABLE`, and refuses a database that records a migration this code
    does not know (it was written by a newer windowsmith).
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

    def apply(self, applied: set[str], where: str, write: Callable[[], AbstractContextManager[Any]],
              now: Callable[[], Any], lock: str | None = None) -> None:
        """Apply the migrations not in ``applied`` (what the database recorded when the store opened), each
        in a transaction of ``write()`` (a store's, yielding its :class:`~windowsmith.store.dialect.Tx`) that
        first runs ``lock`` if given (writers starting together apply each once), with ``now()`` as the
        recorded ``applied_at``. ``where`` names the database in the error for an unknown migration."""
        self.check_known(applied, where)
        for name, fn in self:
            if name in applied:
                continue
            with write() as tx:
                if lock:
                    tx.run(lock, {})
                # Another process may have applied it since we looked; re-check under the write lock.
                if tx.one(f"SELECT 1 FROM {MIGRATIONS_TABLE} WHERE name = :name", {"name": name}):
                    continue
                fn(tx.cursor)
                tx.run(f"INSERT INTO {MIGRATIONS_TABLE} (name, applied_at) VALUES (:name, :now)",
                       {"name": name, "now": now()})


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
