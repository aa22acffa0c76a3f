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
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from pathlib import Path

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


class SessionLock:
    """One session's lock: ``await acquire()``, then ``release()`` (the interface of :class:`asyncio.Lock`).

    ``path``: the session's lock file (:func:`lock_path`) when workers share the store, else None (this
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
        fd, self._fd = self._fd, None
        if fd is not None and self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # (still held: a process that opened it meanwhile sees it gone and retries)
            os.close(fd)  # releases the flock
        self._local.release()


__all__ = ["SessionLock", "cross_process_locks", "lock_path"]
