"""Artifact stores: content-addressed blobs for offloaded tool results.

Every blob is stored once under the sha256 of its bytes (``artifact://<sha256>``), with a reference
per session that uses it; garbage collection deletes blobs that no live session references.

* :class:`EmbeddedArtifacts` — inside the session store (SQLite or PostgreSQL ``blobs`` table); the
  default. References are rows that cascade when a session is deleted.
* :class:`FileArtifacts` — a folder: ``blobs/ab/<sha>`` written atomically, ``refs/<sha>/<session>``.
  Collection is safe while other processes write (see :class:`_KeyedArtifacts`).
* :class:`ObjectArtifacts` — any object store through obstore (S3-compatible services, GCS, Azure,
  local or in-memory stores), same layout as the folder; ``pip install 'windowsmith[s3]'``.

Reads re-check the hash, so a corrupt blob is reported, never returned.

**Garbage collection never deletes what an event names.** A blob is put before the event naming it is
appended (an offloaded tool result, a compaction's folded results), and a collection with no grace
sees, in between, a reference no event names. So each store remembers, in memory, the blobs it put for
a session that no appended event has named yet, and :meth:`ArtifactStore.append` (what the session log
appends through) writes them again with the events that name them: in the same transaction for
:class:`EmbeddedArtifacts` (``Store.append_many(blobs=...)``), right after the append for the folder and
object stores, whose collection keeps every reference written after it started. Either the collection
finished before (and the blobs are back) or it sees the events.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from .errors import StoreError, UsageError
from .model import Event
from .refs import ARTIFACT_RE
from .store import Store
from .store.base import check_session_id
from .unnamed_blobs import UnnamedBlobs

SHA_RE = re.compile(r"[0-9a-f]{64}")


def parse_ref(ref: str) -> str:
    """The sha256 of an ``artifact://<sha256>`` reference; UsageError if it is anything else."""
    if not isinstance(ref, str):
        raise UsageError("an artifact reference must be a string like 'artifact://<64 hex chars>'")
    m = ARTIFACT_RE.fullmatch(ref.strip())
    if not m:
        raise UsageError(f"{ref[:80]!r} is not an artifact reference; expected 'artifact://' followed by 64 hex chars")
    return m.group(1)


def _check_sha(sha: str) -> str:
    if not isinstance(sha, str) or not SHA_RE.fullmatch(sha):
        raise UsageError(f"{str(sha)[:80]!r} is not a sha256 hex digest")
    return sha


def _verify(sha: str, data: bytes, where: str) -> bytes:
    if hashlib.sha256(data).hexdigest() != sha:
        raise StoreError(f"artifact {sha} in {where} is corrupt (its bytes no longer match its hash)")
    return data


#: How long garbage collection leaves a fresh reference alone by default (seconds): the append that
#: names its blob may still be on its way (an LLM summary is written between the two, for example).
GC_GRACE_SECONDS = 3600.0

#: Live sessions for :meth:`ArtifactStore.gc`: their ids, or a mapping of each id to the shas its
#: events name (then references a session holds to blobs none of its events name are dropped too).
LiveSessions = Iterable[str] | Mapping[str, Collection[str]]


def _check_grace(grace_seconds: Any) -> float:
    if not isinstance(grace_seconds, int | float) or isinstance(grace_seconds, bool) or grace_seconds < 0:
        raise UsageError(f"grace_seconds must be a number of seconds >= 0, got {grace_seconds!r}")
    return float(grace_seconds)




class ArtifactStore(ABC):
    """Content-addressed blob storage with per-session references."""

    @property
    def _unnamed(self) -> UnnamedBlobs:
        found: UnnamedBlobs | None = self.__dict__.get("_unnamed_blobs")
        if found is None:
            found = self.__dict__.setdefault("_unnamed_blobs", UnnamedBlobs())
        return found

    def append(self, store: Store, session_id: str, items: Sequence[tuple[str, Mapping[str, Any]]], *,
               expected_parent: str | None) -> list[Event]:
        """``store.append_many(session_id, items, ...)``, writing again with them the blobs this store put for
        the session that they name (see the module docstring): what the session log appends through."""
        named = self._unnamed.named_by(session_id, items)
        if not named:
            return store.append_many(session_id, items, expected_parent=expected_parent)
        try:
            return self._append_naming(store, session_id, items, expected_parent, named)
        except BaseException:
            for sha, data in named.items():  # not appended: they stay unnamed
                self._unnamed.add(session_id, sha, data)
            raise

    def _append_naming(self, store: Store, session_id: str, items: Sequence[tuple[str, Mapping[str, Any]]],
                       expected_parent: str | None, named: Mapping[str, bytes]) -> list[Event]:
        """Append ``items`` and make sure the blobs ``named`` (sha → bytes) they name are stored and referenced."""
        events = store.append_many(session_id, items, expected_parent=expected_parent)
        self._keep(named, session_id)
        return events

    def _keep(self, named: Mapping[str, bytes], session_id: str) -> None:
        """Store ``named`` again for ``session_id`` (their references renewed), without remembering them
        (a store of its own that does not remember what it puts gets no blobs here)."""
        for data in named.values():
            self.put(data, session_id=session_id)

    @abstractmethod
    def put(self, data: bytes, *, session_id: str) -> str:
        """Store ``data`` (once) and record that ``session_id`` references it; return its sha256."""

    def put_many(self, datas: Sequence[bytes], *, session_id: str) -> list[str]:
        """:meth:`put` for each of ``datas`` (one transaction in a session store); their sha256 in order."""
        return [self.put(d, session_id=session_id) for d in datas]

    @abstractmethod
    def get(self, sha: str) -> bytes | None:
        """The bytes stored under ``sha`` (hash-checked), or None."""

    @abstractmethod
    def refs(self, sha: str) -> list[str]:
        """Sessions referencing the blob, sorted."""

    @abstractmethod
    def gc(self, live_sessions: LiveSessions | None = None, *, grace_seconds: float = GC_GRACE_SECONDS,
           started: float | None = None) -> int:
        """Delete references of sessions not in ``live_sessions`` (when given; a mapping also drops a
        live session's references to blobs its events do not name), then every blob with no reference
        left; return how many blobs were deleted. References younger than ``grace_seconds`` stay, counted
        from ``started`` (``time.time()`` when ``live_sessions`` was read; default now), so no reference
        written after the mapping was read is dropped on its account.
        Safe while other processes ``put()``: a blob that gains a reference during the collection is kept."""

    def clock(self) -> float:
        """The store's own "now", on the clock its write times are read from (``time.time()`` here): what
        :func:`collect_garbage` passes to :meth:`gc` as ``started``, so a reference written after it is never
        taken for an older one (a file's modification time comes from the kernel's coarse clock, which lags
        ``time.time()`` by up to a tick)."""
        return time.time()

    def references(self, ref: str, session_id: str) -> bool:
        """Whether ``session_id`` references the blob behind ``ref`` (a reference or a sha)."""
        sha = parse_ref(ref) if ref.startswith("artifact://") else _check_sha(ref)
        return session_id in self.refs(sha)

    def scoped(self, session_id: str) -> SessionArtifacts:
        """A read-only view of the blobs ``session_id`` references (what every reader on behalf of a
        session goes through: a reference found in text is not a permission)."""
        return SessionArtifacts(self, session_id)


class SessionArtifacts:
    """Read-only view of an :class:`ArtifactStore` limited to the blobs one session references:
    ``get`` answers None for any other blob, as if it did not exist."""

    def __init__(self, store: ArtifactStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id

    def get(self, sha: str) -> bytes | None:
        return self.store.get(sha) if self.store.references(sha, self.session_id) else None


class EmbeddedArtifacts(ArtifactStore):
    """Blobs inside the session store (the default)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def put(self, data: bytes, *, session_id: str) -> str:
        return self.put_many([data], session_id=session_id)[0]

    def put_many(self, datas: Sequence[bytes], *, session_id: str) -> list[str]:
        raws = [bytes(d) for d in datas]
        shas = self.store.put_blobs(raws, session_id=session_id)
        for sha, raw in zip(shas, raws, strict=True):
            self._unnamed.add(session_id, sha, raw)
        return shas

    def _append_naming(self, store: Store, session_id: str, items: Sequence[tuple[str, Mapping[str, Any]]],
                       expected_parent: str | None, named: Mapping[str, bytes]) -> list[Event]:
        if store is not self.store:
            return super()._append_naming(store, session_id, items, expected_parent, named)
        return store.append_many(session_id, items, expected_parent=expected_parent, blobs=named)  # one transaction

    def _keep(self, named: Mapping[str, bytes], session_id: str) -> None:
        self.store.put_blobs(list(named.values()), session_id=session_id)

    def get(self, sha: str) -> bytes | None:
        return self.store.get_blob(_check_sha(sha))

    def refs(self, sha: str) -> list[str]:
        return self.store.blob_refs(_check_sha(sha))

    def gc(self, live_sessions: LiveSessions | None = None, *, grace_seconds: float = GC_GRACE_SECONDS,
           started: float | None = None) -> int:
        # references cascade when a session is deleted, so the live set is implied; orphan references
        # and the blobs are collected by the store in its own transactions
        return self.store.gc(grace_seconds=_check_grace(grace_seconds), vacuum=False)["blobs_deleted"]


class _KeyedArtifacts(ArtifactStore):
    """Shared layout for folder and object stores: ``blobs/ab/<sha>`` and ``refs/<sha>/<session>``.

    A reference's name is the session id, percent-quoted; one whose quoted form is too long for a file
    name is stored as ``%h-<sha256 of the id>`` holding the id as its content.

    Collection races with ``put()`` safely: ``put`` records the reference *before* it checks for the
    blob, and ``gc`` first moves a blob it found unreferenced aside (``<key>.gc-<token>``), then looks
    for references again, and puts it back if one appeared. Either ``gc`` sees the new reference, or
    ``put`` finds the blob gone and writes it again."""

    _MAX_REF_NAME = 200  # bytes; file systems allow 255

    @staticmethod
    def _blob_key(sha: str) -> str:
        return f"blobs/{sha[:2]}/{sha}"

    @classmethod
    def _ref_name(cls, session_id: str) -> str:
        name = quote(session_id, safe="")
        if name.startswith("."):  # ".", ".." and hidden names (".tmp-" is ours) are not file names for an id
            name = "%2E" + name[1:]
        if len(name) > cls._MAX_REF_NAME:
            name = "%h-" + hashlib.sha256(session_id.encode("utf-8")).hexdigest()
        return name

    @classmethod
    def _ref_key(cls, sha: str, session_id: str) -> str:
        return f"refs/{sha}/{cls._ref_name(session_id)}"

    def _ref_session(self, key: str) -> str | None:
        name = key.rsplit("/", 1)[-1]
        if name.startswith("%h-"):
            data = self._read(key)
            return None if data is None else data.decode("utf-8", "replace")
        return unquote(name)

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _write(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def _read(self, key: str) -> bytes | None: ...

    @abstractmethod
    def _list(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix`` (a folder or a partial name), sorted."""

    @abstractmethod
    def _delete(self, key: str) -> None: ...

    @abstractmethod
    def _move(self, key: str, to: str) -> bool:
        """Move ``key`` to ``to`` (replacing it); False if ``key`` was gone."""

    @abstractmethod
    def _mtime(self, key: str) -> float | None:
        """When ``key`` was last written, on the store's own clock (see :meth:`clock`), or None if it is gone."""

    def clock(self) -> float:
        """A marker written and read back: its write time is "now" on the clock the store stamps keys with."""
        marker = f"clock/{uuid.uuid4().hex}"
        self._write(marker, b"")
        try:
            stamp = self._mtime(marker)
        finally:
            self._delete(marker)
        return time.time() if stamp is None else stamp

    #: Whether ``_move`` keeps a key's age (a rename does; an object store's copy + delete does not).
    _MOVE_KEEPS_AGE = False

    def _old(self, key: str, grace: float, t0: float) -> bool:
        """Whether ``key`` was written more than ``grace`` seconds before ``t0`` (strictly: a key written in the
        same clock tick as ``t0`` is young). False if it is gone."""
        written = self._mtime(key)
        return written is not None and written < t0 - grace

    def _drop_ref(self, key: str, grace: float, t0: float) -> bool:
        """Delete an old reference; False if a ``put()`` renewed it meanwhile (then it stays).

        Where a move keeps the age, the reference is moved aside first (``%gc-`` never appears in a
        quoted name) and its age checked again there, so a renewal that lands just before the move is
        seen. An object store deletes it directly: a renewal within that instant is lost."""
        if not self._MOVE_KEEPS_AGE:
            self._delete(key)
            return True
        aside = f"{key}%gc-{uuid.uuid4().hex}"
        if not self._move(key, aside):
            return True
        if self._mtime(aside) is not None and not self._old(aside, grace, t0):  # renewed meanwhile: back, unless a newer one exists
            if self._exists(key):
                self._delete(aside)
            else:
                self._move(aside, key)
            return False
        self._delete(aside)
        return True

    def put(self, data: bytes, *, session_id: str) -> str:
        data = bytes(data)
        sha = self._put(data, session_id)
        self._unnamed.add(session_id, sha, data)
        return sha

    def _keep(self, named: Mapping[str, bytes], session_id: str) -> None:
        for data in named.values():
            self._put(data, session_id)

    def _put(self, data: bytes, session_id: str) -> str:
        check_session_id(session_id)  # the id of the session that references the artifact
        sha = hashlib.sha256(data).hexdigest()
        key = self._blob_key(sha)
        ref_key = self._ref_key(sha, session_id)
        # the reference first, so a concurrent gc() that finds the blob unreferenced sees it on its re-check
        self._write(ref_key, session_id.encode("utf-8") if ref_key.rsplit("/", 1)[-1].startswith("%h-") else b"")
        if not self._exists(key):
            self._write(key, data)
        return sha

    def get(self, sha: str) -> bytes | None:
        key = self._blob_key(_check_sha(sha))
        data = self._read(key)
        if data is None:  # a gc() may have moved it aside for a moment: read that copy, then look again
            for moved in self._list(key + ".gc-"):
                data = self._read(moved)
                if data is not None:
                    break
            else:
                data = self._read(key)
        return None if data is None else _verify(sha, data, repr(self))

    def refs(self, sha: str) -> list[str]:
        out = (self._ref_session(k) for k in self._list(f"refs/{_check_sha(sha)}/") if "%gc-" not in k)
        return sorted({sid for sid in out if sid is not None})  # an older '.name' ref and its '%2Ename' are one

    def gc(self, live_sessions: LiveSessions | None = None, *, grace_seconds: float = GC_GRACE_SECONDS,
           started: float | None = None) -> int:
        grace = _check_grace(grace_seconds)
        t0 = self.clock() if started is None else float(started)
        named: Mapping[str, Collection[str]] | None = None
        live: set[str] | None = None
        if isinstance(live_sessions, Mapping):
            named = live_sessions
            live = set(live_sessions)
        elif live_sessions is not None:
            if isinstance(live_sessions, str):
                raise UsageError("live_sessions takes a collection of session ids, not one string")
            live = set(live_sessions)

        def old(key: str) -> bool:  # written before t0 - grace
            return self._old(key, grace, t0)

        referenced: set[str] = set()
        for key in self._list("refs/"):
            parts = key.split("/")
            if len(parts) != 3 or not SHA_RE.fullmatch(parts[1]):
                continue
            sha = parts[1]
            if "%gc-" in parts[2]:  # moved aside by a gc() that did not finish: it was about to go
                if old(key):
                    self._delete(key)
                continue
            sid = self._ref_session(key)
            dead = live is not None and sid not in live
            orphan = named is not None and sid is not None and sid in named and sha not in named[sid]
            if not ((dead or orphan) and old(key) and self._drop_ref(key, grace, t0)):
                referenced.add(sha)
        deleted = 0
        for key in self._list("blobs/"):
            name = key.rsplit("/", 1)[-1]
            sha = name.split(".", 1)[0]
            if not SHA_RE.fullmatch(sha):
                continue
            if name != sha:  # moved aside by a gc() that did not finish: put it back or drop it
                if old(key):
                    if self.refs(sha) and not self._exists(self._blob_key(sha)):
                        self._move(key, self._blob_key(sha))
                    else:
                        self._delete(key)
                continue
            if sha in referenced:
                continue
            aside = f"{key}.gc-{uuid.uuid4().hex}"
            if not self._move(key, aside):
                continue
            if self.refs(sha):  # a put() came in: its blob stays
                if self._exists(key):
                    self._delete(aside)
                else:
                    self._move(aside, key)
                continue
            self._delete(aside)
            deleted += 1
        return deleted


class FileArtifacts(_KeyedArtifacts):
    """Blobs in a folder (for a shared volume, or to keep a SQLite store small)."""

    _MOVE_KEEPS_AGE = True  # os.replace keeps the file's mtime

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"FileArtifacts({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root / key

    def _fail(self, what: str, key: str, e: OSError) -> StoreError:
        return StoreError(f"cannot {what} {self._path(key)} in {self!r}: {e.strerror or e}; check the folder "
                          "exists, is writable and has free space")

    def _exists(self, key: str) -> bool:
        return self._path(key).exists()

    def _write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        except OSError as e:
            raise self._fail("write", key, e) from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # atomic: a reader never sees half a blob
        except BaseException as e:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise self._fail("write", key, e) from None
            raise

    def _read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self._fail("read", key, e) from None

    def _list(self, prefix: str) -> list[str]:
        folder = prefix if prefix.endswith("/") else prefix.rsplit("/", 1)[0] + "/"
        base = self.root / folder
        if not base.is_dir():
            return []
        keys = (p.relative_to(self.root).as_posix() for p in base.rglob("*")
                if p.is_file() and not p.name.startswith(".tmp-"))
        return sorted(k for k in keys if k.startswith(prefix))

    def _delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def _move(self, key: str, to: str) -> bool:
        try:
            os.replace(self._path(key), self._path(to))
            return True
        except FileNotFoundError:
            return False

    def _mtime(self, key: str) -> float | None:
        try:
            return self._path(key).stat().st_mtime
        except FileNotFoundError:
            return None


class ObjectArtifacts(_KeyedArtifacts):
    """Blobs in an object store through obstore (``obstore.store.S3Store``, ``GCSStore``, ``LocalStore``,
    ``MemoryStore``, …), optionally under a key ``prefix``."""

    def __init__(self, store: Any, prefix: str = "") -> None:
        try:
            import obstore
        except ImportError:  # pragma: no cover - depends on the environment
            raise UsageError("ObjectArtifacts needs obstore: pip install 'windowsmith[s3]'") from None
        self._obs = obstore
        self.store = store
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def __repr__(self) -> str:
        return f"ObjectArtifacts({self.store!r}, prefix={self.prefix!r})"

    def _exists(self, key: str) -> bool:
        try:
            self._obs.head(self.store, self.prefix + key)
            return True
        except FileNotFoundError:
            return False

    def _write(self, key: str, data: bytes) -> None:
        self._obs.put(self.store, self.prefix + key, data)  # object stores write whole objects atomically

    def _read(self, key: str) -> bytes | None:
        try:
            return bytes(self._obs.get(self.store, self.prefix + key).bytes())
        except FileNotFoundError:
            return None

    def _list(self, prefix: str) -> list[str]:
        out: list[str] = []
        for batch in self._obs.list(self.store, prefix=self.prefix + prefix):
            for meta in batch:
                out.append(meta["path"][len(self.prefix):])
        return sorted(out)

    def _delete(self, key: str) -> None:
        self._obs.delete(self.store, self.prefix + key)

    def _move(self, key: str, to: str) -> bool:
        try:  # rename is copy + delete on most object stores: gc() re-checks references after it
            self._obs.rename(self.store, self.prefix + key, self.prefix + to)
            return True
        except FileNotFoundError:
            return False

    def _mtime(self, key: str) -> float | None:
        try:
            meta = self._obs.head(self.store, self.prefix + key)
        except FileNotFoundError:
            return None
        return float(meta["last_modified"].timestamp())


def collect_garbage(store: Store, artifacts: ArtifactStore | None = None, *,
                    grace_seconds: float = GC_GRACE_SECONDS, vacuum: bool = True) -> dict[str, int]:
    """Collect garbage in ``store`` and, when it keeps its blobs elsewhere, in ``artifacts``: references
    of deleted sessions, references no event names (older than ``grace_seconds``), unreferenced blobs;
    then shrink the store (``vacuum``). Returns ``{"refs_dropped", "blobs_deleted", "bytes_before",
    "bytes_after"}`` (``blobs_deleted`` counts both stores)."""
    grace = _check_grace(grace_seconds)
    external = 0
    if artifacts is not None and not isinstance(artifacts, EmbeddedArtifacts):
        started = artifacts.clock()  # before the events are read: what an append names after this, gc keeps
        live = {r.id: store.named_artifacts(r.id) for r in store.list_sessions()}
        external = artifacts.gc(live, grace_seconds=grace, started=started)
    report = store.gc(grace_seconds=grace, vacuum=vacuum)
    report["blobs_deleted"] += external
    return report


__all__ = [
    "ArtifactStore",
    "EmbeddedArtifacts",
    "FileArtifacts",
    "ObjectArtifacts",
    "SessionArtifacts",
    "collect_garbage",
    "parse_ref",
]
