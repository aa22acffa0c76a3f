"""Per-session locks of the proxy: one turn of a session at a time, in one process or across worker processes.

A turn (ingest what is new, build, call upstream, record the reply) must not interleave with another turn of the
same session: the second would build from a log the first is still appending to. In one process an
:class:`asyncio.Lock` per session does it. ``windowsmith serve --workers N`` runs N processes over one store, and a
session's requests may reach any of them, so there the lock is also an exclusive ``flock`` on a file of a lock
directory all the workers share (:data:`LOCK_STRIPES` files, a session hashed to one: a bounded directory, at the
price of two sessions of the same stripe waiting for each other now and then). The file lock is taken without
blocking a thread (a non-blocking attempt, then short sleeps), so a cancelled request never leaves a lock behind.
POSIX only (``fcntl``): on other systems the server runs one worker.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

from ..errors import UsageError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: lock files in a lock directory (a session is hashed to one)
LOCK_STRIPES = 256
#: seconds between two attempts at a file lock another worker holds (doubling up to the second figure)
POLL_FIRST, POLL_MAX = 0.002, 0.05


def cross_process_locks() -> bool:
    """Whether this system has the file locks several workers need."""
    return fcntl is not None


def stripe_path(lock_dir: Path, tenant: str | None, session_id: str) -> Path:
    """The lock file of a session in ``lock_dir``."""
    h = hashlib.sha256(f"{tenant or ''}\0{session_id}".encode()).digest()
    return lock_dir / f"{int.from_bytes(h[:4], 'big') % LOCK_STRIPES:03d}.lock"


class SessionLock:
    """One session's lock: ``await acquire()``, then ``release()`` (the interface of :class:`asyncio.Lock`).

    ``path``: the session's lock file (:func:`stripe_path`) when workers share the store, else None (this
    process's lock only)."""

    def __init__(self, path: Path | None = None) -> None:
        if path is not None and fcntl is None:  # pragma: no cover - Windows
            raise UsageError("several workers need POSIX file locks (fcntl); run one worker on this system")
        self._local = asyncio.Lock()
        self.path = path
        self._fd: int | None = None

    def locked(self) -> bool:
        return self._local.locked()

    async def acquire(self) -> bool:
        await self._local.acquire()
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
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            delay = POLL_FIRST
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    await asyncio.sleep(delay)
                    delay = min(POLL_MAX, delay * 2)
        except BaseException:
            os.close(fd)  # (closing the descriptor drops any lock it holds)
            raise

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # releases the flock
        self._local.release()


__all__ = ["LOCK_STRIPES", "SessionLock", "cross_process_locks", "stripe_path"]
