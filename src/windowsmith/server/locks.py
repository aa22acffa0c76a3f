"""Per-session locks of the proxy: one turn of a session at a time, in one process or across worker processes.

A turn (ingest what is new, build, call upstream, record the reply) must not interleave with another turn of the
same session: the second would build from a log the first is still appending to. In one process an
:class:`asyncio.Lock` per session does it. ``windowsmith serve --workers N`` runs N processes over one store, and a
session's requests may reach any of them, so there the lock is also an exclusive ``flock`` on the session's own file
in a lock directory all the workers share (named by a hash of tenant and session id). A lock file is removed by the
holder that releases it, and a process that locked a file some holder had removed meanwhile (the path now missing, or
another file) lets it go and tries the path again: so the directory holds a file only for the sessions in a turn, and
two sessions never wait for each other (a few hashed to a fixed set of files did: a session waited for another's
whole turn, upstream call included). The file lock is taken without blocking a thread (a non-blocking attempt, then
short sleeps), so a cancelled request never leaves a lock behind. POSIX only (``fcntl``): on other systems the server
runs one worker.

With a PostgreSQL store no directory is shared: the lock is a PostgreSQL advisory lock keyed by (tenant, session)
(:class:`AdvisoryLock`), so ``serve`` processes on different machines over one database serialize a session's turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any

from ..errors import UsageError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: seconds between two attempts at a file lock another worker holds (doubling up to the second figure)
POLL_FIRST, POLL_MAX = 0.002, 0.05


def cross_process_locks() -> bool:
    """Whether this system has the file locks several workers need."""
    return fcntl is not None


def lock_path(lock_dir: Path, tenant: str | None, session_id: str) -> Path:
    """The lock file of a session in ``lock_dir``."""
    key = f"{tenant or ''}\0{session_id}".encode()
    return lock_dir / f"{hashlib.sha256(key).hexdigest()[:40]}.lock"


def advisory_key(tenant: str | None, session_id: str) -> int:
    """The signed 64-bit PostgreSQL advisory-lock key of a session (a hash of tenant and session id)."""
    digest = hashlib.sha256(f"windowsmith\0{tenant or ''}\0{session_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class AdvisoryLock:
    """A session's turn serialized across hosts by a PostgreSQL advisory lock on the store's database: any number of
    ``serve`` processes on any number of machines that share one PostgreSQL take turns, and a process that dies
    releases its locks with its connection. One connection per turn in flight (opened at acquire, closed at
    release)."""

    def __init__(self, dsn: str, key: int) -> None:
        self.dsn = dsn
        self.key = key
        self._conn: Any = None

    async def acquire(self) -> None:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        try:
            await conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))
        except BaseException:
            await conn.close()
            raise
        self._conn = conn

    def release(self) -> None:
        """Unlock (in a task: the caller's ``release()`` is synchronous; the connection is taken now, so the next
        ``acquire`` opens its own)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            task = asyncio.get_running_loop().create_task(self._unlock(conn, self.key))
            _UNLOCKING.add(task)
            task.add_done_callback(_UNLOCKING.discard)

    @staticmethod
    async def _unlock(conn: Any, key: int) -> None:
        try:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        except Exception:  # the connection broke: closing it drops the lock all the same
            pass
        finally:
            await conn.close()


#: unlock tasks in flight (kept referenced until they finish)
_UNLOCKING: set[asyncio.Task[None]] = set()


class SessionLock:
    """One session's lock: ``await acquire()``, then ``release()`` (the interface of :class:`asyncio.Lock`).

    ``path``: the session's lock file (:func:`lock_path`) when workers share the store, else None (this
    process's lock only)."""

    def __init__(self, path: Path | None = None, advisory: AdvisoryLock | None = None) -> None:
        if path is not None and fcntl is None:  # pragma: no cover - Windows
            raise UsageError("several workers need POSIX file locks (fcntl); run one worker on this system")
        self._local = asyncio.Lock()
        self.advisory = advisory  # a PostgreSQL store's: the lock every host sharing the database takes
        self.path = path
        self._fd: int | None = None

    def locked(self) -> bool:
        return self._local.locked()

    async def acquire(self) -> bool:
        await self._local.acquire()
        if self.advisory is not None:
            try:
                await self.advisory.acquire()
            except BaseException:
                self._local.release()
                raise
            return True
        if self.path is None:
            return True
        try:
            self._fd = await self._flock(self.path)
        except BaseException:
            self._local.release()
            raise
        return True

    @staticmethod
    async def _flock(path: Path) -> int:
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                delay = POLL_FIRST
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        await asyncio.sleep(delay)
                        delay = min(POLL_MAX, delay * 2)
                held, now = os.fstat(fd), os.stat(path)
                if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                    return fd
            except FileNotFoundError:
                pass  # its holder removed the file after we opened it: lock the path again
            except BaseException:
                os.close(fd)  # (closing the descriptor drops any lock it holds)
                raise
            os.close(fd)

    def release(self) -> None:
        if self.advisory is not None:
            self.advisory.release()
        fd, self._fd = self._fd, None
        if fd is not None and self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # (still held: a process that opened it meanwhile sees it gone and retries)
            os.close(fd)  # releases the flock
        self._local.release()


__all__ = ["AdvisoryLock", "SessionLock", "advisory_key", "cross_process_locks", "lock_path"]
