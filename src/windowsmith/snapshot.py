"""``Snapshot``: an immutable sequence over a window of a list that is only ever appended to.

A long session's history and part digests grow by a few entries per build. A build that copied them into a
new tuple would touch every message of the session; a snapshot keeps a reference to the list and the window
it saw (``items[start:stop]``, between a short ``head`` and ``extra``), which appends never change. Length,
indexing and short slices cost O(what they return); iterating, comparing or hashing makes the tuple once.
Slices are tuples, and a snapshot equals the tuple of its items.

The owner of the list must only append to it while a snapshot may be alive (``SessionState`` starts a new
view list when a compaction record rewrites it; the renderer a new digest list when its body is rebuilt).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar, overload

T = TypeVar("T")


class Snapshot(Sequence[T], Generic[T]):
    """``(*head, *items[start:stop], *extra)`` without copying ``items``."""

    __slots__ = ("_extra", "_head", "_items", "_start", "_stop", "_tuple")

    def __init__(self, head: tuple[T, ...], items: list[T], start: int, stop: int, extra: tuple[T, ...] = ()) -> None:
        self._head, self._items, self._start, self._stop, self._extra = head, items, start, stop, extra
        self._tuple: tuple[T, ...] | None = None

    def __len__(self) -> int:
        return len(self._head) + self._stop - self._start + len(self._extra)

    def as_tuple(self) -> tuple[T, ...]:
        t = self._tuple
        if t is None:
            out = list(self._head)
            out += self._items[self._start: self._stop]
            out += self._extra
            t = self._tuple = tuple(out)
        return t

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[T, ...]: ...

    def __getitem__(self, i: int | slice) -> T | tuple[T, ...]:
        if self._tuple is not None:
            return self._tuple[i]
        h, n, s0 = len(self._head), self._stop - self._start, self._start
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return self.as_tuple()[i]
            out = list(self._head[start:stop]) if start < h else []
            if stop > h and start < h + n:
                out += self._items[s0 + max(0, start - h): s0 + min(n, stop - h)]
            if stop > h + n:
                out += self._extra[max(0, start - h - n): stop - h - n]
            return tuple(out)
        k = i + len(self) if i < 0 else i
        if not 0 <= k < len(self):
            raise IndexError("snapshot index out of range")
        if k < h:
            return self._head[k]
        if k < h + n:
            return self._items[s0 + k - h]
        return self._extra[k - h - n]

    def __iter__(self) -> Iterator[T]:
        return iter(self.as_tuple())

    def __reversed__(self) -> Iterator[T]:
        return reversed(self.as_tuple())

    def __contains__(self, x: object) -> bool:
        return x in self.as_tuple()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Snapshot):
            return self.as_tuple() == other.as_tuple()
        if isinstance(other, tuple):
            return self.as_tuple() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __add__(self, other: tuple[T, ...]) -> tuple[T, ...]:
        return self.as_tuple() + tuple(other)

    def __radd__(self, other: tuple[T, ...]) -> tuple[T, ...]:
        return tuple(other) + self.as_tuple()

    def __repr__(self) -> str:
        return repr(self.as_tuple())


__all__ = ["Snapshot"]
