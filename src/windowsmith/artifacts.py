"""Artifact stores: content-addressed blobs for offloaded tool results.

Every blob is stored once under the sha256 of its bytes (``artifact://<sha256>``), with a reference
per session that uses it; garbage collection deletes blobs that no live session references.

* :class:`EmbeddedArtifacts` — inside the session store (SQLite or PostgreSQL ``blobs`` table); the
  default. References are rows that cascade when a session is deleted.
* :class:`FileArtifacts` — a folder: ``blobs/ab/<sha>`` written atomically, ``refs/<sha>/<session>``.
* :class:`ObjectArtifacts` — any object store through obstore (S3-compatible services, GCS, Azure,
  local or in-memory stores), same layout as the folder; ``pip install 'windowsmith[s3]'``.

Reads re-check the hash, so a corrupt blob is reported, never returned.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from .errors import StoreError, UsageError
from .store import Store

SHA_RE = re.compile(r"[0-9a-f]{64}")
REF_RE = re.compile(r"artifact://([0-9a-f]{64})")


def artifact_uri(sha: str) -> str:
    return f"artifact://{sha}"


def parse_ref(ref: str) -> str:
    """The sha256 of an ``artifact://<sha256>`` reference; UsageError if it is anything else."""
    if not isinstance(ref, str):
        raise UsageError("an artifact reference must be a string like 'artifact://<64 hex chars>'")
    m = REF_RE.fullmatch(ref.strip())
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


class ArtifactStore(ABC):
    """Content-addressed blob storage with per-session references."""

    @abstractmethod
    def put(self, data: bytes, *, session_id: str) -> str:
        """Store ``data`` (once) and record that ``session_id`` references it; return its sha256."""

    @abstractmethod
    def get(self, sha: str) -> bytes | None:
        """The bytes stored under ``sha`` (hash-checked), or None."""

    @abstractmethod
    def refs(self, sha: str) -> list[str]:
        """Sessions referencing the blob, sorted."""

    @abstractmethod
    def gc(self, live_sessions: Iterable[str] | None = None) -> int:
        """Delete references of sessions not in ``live_sessions`` (when given), then every blob with no
        reference left; return how many blobs were deleted."""

    def references(self, ref: str, session_id: str) -> bool:
        """Whether ``session_id`` references the blob behind ``ref`` (a reference or a sha)."""
        sha = parse_ref(ref) if ref.startswith("artifact://") else _check_sha(ref)
        return session_id in self.refs(sha)


class EmbeddedArtifacts(ArtifactStore):
    """Blobs inside the session store (the default)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def put(self, data: bytes, *, session_id: str) -> str:
        return self.store.put_blob(bytes(data), session_id=session_id)

    def get(self, sha: str) -> bytes | None:
        return self.store.get_blob(_check_sha(sha))

    def refs(self, sha: str) -> list[str]:
        return self.store.blob_refs(_check_sha(sha))

    def gc(self, live_sessions: Iterable[str] | None = None) -> int:
        # references cascade when a session is deleted, so the live set is implied
        return self.store.gc_blobs()


class _KeyedArtifacts(ArtifactStore):
    """Shared layout for folder and object stores: ``blobs/ab/<sha>`` and ``refs/<sha>/<session>``."""

    @staticmethod
    def _blob_key(sha: str) -> str:
        return f"blobs/{sha[:2]}/{sha}"

    @staticmethod
    def _ref_key(sha: str, session_id: str) -> str:
        return f"refs/{sha}/{quote(session_id, safe='')}"

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _write(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def _read(self, key: str) -> bytes | None: ...

    @abstractmethod
    def _list(self, prefix: str) -> list[str]: ...

    @abstractmethod
    def _delete(self, key: str) -> None: ...

    def put(self, data: bytes, *, session_id: str) -> str:
        if not isinstance(session_id, str) or not session_id:
            raise UsageError("put() needs the id of the session that references the artifact")
        data = bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        key = self._blob_key(sha)
        if not self._exists(key):
            self._write(key, data)
        self._write(self._ref_key(sha, session_id), b"")
        return sha

    def get(self, sha: str) -> bytes | None:
        data = self._read(self._blob_key(_check_sha(sha)))
        return None if data is None else _verify(sha, data, repr(self))

    def refs(self, sha: str) -> list[str]:
        prefix = f"refs/{_check_sha(sha)}/"
        return sorted(unquote(k[len(prefix):]) for k in self._list(prefix))

    def gc(self, live_sessions: Iterable[str] | None = None) -> int:
        live = None if live_sessions is None else set(live_sessions)
        referenced: set[str] = set()
        for key in self._list("refs/"):
            _, sha, sess = key.split("/", 2)
            if live is not None and unquote(sess) not in live:
                self._delete(key)
            else:
                referenced.add(sha)
        deleted = 0
        for key in self._list("blobs/"):
            sha = key.rsplit("/", 1)[-1]
            if sha not in referenced:
                self._delete(key)
                deleted += 1
        return deleted


class FileArtifacts(_KeyedArtifacts):
    """Blobs in a folder (for a shared volume, or to keep a SQLite store small)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"FileArtifacts({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root / key

    def _exists(self, key: str) -> bool:
        return self._path(key).exists()

    def _write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # atomic: a reader never sees half a blob
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def _list(self, prefix: str) -> list[str]:
        base = self.root / prefix
        if not base.exists():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*")
                      if p.is_file() and not p.name.startswith(".tmp-"))

    def _delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


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


__all__ = [
    "ArtifactStore",
    "EmbeddedArtifacts",
    "FileArtifacts",
    "ObjectArtifacts",
    "artifact_uri",
    "parse_ref",
]
