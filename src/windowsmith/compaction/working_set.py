"""The working set: an old file read the agent is still working on stays verbatim through a mask batch.

A mask batch folds every exchange older than the newest ``keep_turns`` into one line. For most of them
that is right: a listing, a test run, a search are done with. A file the agent read long ago and is still
editing is not: its edits quote the read's exact text and its line numbers (``view_range``, ``insert_line``,
``sed -i '317s/…/'``), and a fold line keeps a dozen names of it. So the old reads of each file that the
kept exchanges name (an edit's ``path``, a path in a command) stay out of the batch, newest first, in the room
the kept exchanges leave of the verbatim share (``CompactionConfig.keep_ratio``; no ratio of their own); a kept
read of the same file at least as large supersedes them. Opt-in: ``CompactionConfig(working_set=True)``. A read whose file the agent stopped naming is folded by the next batch (folds never
nest: the unit simply was not folded yet).

    ws = WorkingSet()
    ws.scan(state.units)                            # incremental: each unit is read once
    keep = ws.protected(state.units, limit, lo, counts, budget_raw)   # unit indices left out of the batch
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..ingest.compress import detect_kind, path_of
from ..model import ToolCall
from ..text import identifier_kinds, leaf_values

if TYPE_CHECKING:
    from ..units import Unit


def _norm(path: str) -> str:
    p = path.strip()
    while p.startswith("./"):
        p = p[2:]
    return p.rstrip("/")


def _calls(u: Unit) -> list[ToolCall]:
    if not u.messages or u.messages[0].role != "assistant":
        return []
    return [b for b in u.messages[0].content if isinstance(b, ToolCall)]


def read_paths(u: Unit) -> frozenset[str]:
    """The files the exchange ``u`` reads (a file viewer's path, ``cat``/``head`` of one file), by its calls."""
    out = set()
    for c in _calls(u):
        args = c.arguments if isinstance(c.arguments, dict) else None
        if detect_kind("", c.name, args) != "file_read":
            continue
        p = path_of(c.name, args)
        if p:
            out.add(_norm(p))
    return frozenset(out)


def named_paths(u: Unit) -> frozenset[str]:
    """The paths the calls of ``u`` name: a path argument, and every path in the argument values (a command's)."""
    out = set()
    for c in _calls(u):
        args = c.arguments if isinstance(c.arguments, dict) else None
        p = path_of(c.name, args)
        if p:
            out.add(_norm(p))
        for v in leaf_values(dict(c.arguments)):
            if "/" in v or "." in v:
                out.update(_norm(k) for k, (kind, _) in identifier_kinds(v).items() if kind in ("path", "dotted"))
    return frozenset(x for x in out if x)


def _tail(p: str) -> str:
    return p.rsplit("/", 1)[-1]


class WorkingSet:
    """Which files each exchange reads, indexed incrementally (units only grow; an exchange's calls are fixed
    by its first message)."""

    def __init__(self) -> None:
        self._next = 0
        self.reads: dict[str, list[int]] = {}  # file → indices of the exchange units that read it, ascending
        self._by_tail: dict[str, set[str]] = {}  # last part of a path → the read paths ending in it
        self._named: dict[int, frozenset[str]] = {}  # unit index → the paths its calls name (closed units)

    def scan(self, units: Sequence[Unit]) -> None:
        for i in range(self._next, len(units)):
            for p in read_paths(units[i]):
                self.reads.setdefault(p, []).append(i)
                self._by_tail.setdefault(_tail(p), set()).add(p)
        self._next = len(units)

    def _names(self, units: Sequence[Unit], i: int) -> frozenset[str]:
        got = self._named.get(i)
        if got is None:
            got = named_paths(units[i])
            if not units[i].is_open:
                self._named[i] = got
        return got

    def _matching(self, name: str) -> list[str]:
        """The read paths that ``name`` stands for: the same path, or one of them a suffix of the other at a
        ``/`` (a relative and an absolute path of one file)."""
        out = []
        for p in self._by_tail.get(_tail(name), ()):
            if p == name or p.endswith("/" + name) or name.endswith("/" + p):
                out.append(p)
        return out

    def protected(self, units: Sequence[Unit], limit: int, lo: int, counts: Sequence[int], budget_raw: float
                  ) -> frozenset[int]:
        """Units before ``limit`` (the first exchange the mask keeps) and from ``lo`` (the first visible unit)
        to leave out of a fold batch: for each file named by the calls of the units from ``limit`` on, its
        newest read before ``limit`` that is not folded, unless a read from ``limit`` on is at least as large;
        newest first, while their raw tokens fit ``budget_raw``."""
        self.scan(units)
        if budget_raw <= 0 or not self.reads:
            return frozenset()
        names: set[str] = set()
        for i in range(limit, len(units)):
            names |= self._names(units, i)
        candidates: dict[int, int] = {}  # unit → its raw tokens
        for name in names:
            for p in self._matching(name):
                idx = self.reads[p]
                cut = bisect.bisect_left(idx, limit)
                kept = max((counts[i] for i in idx[cut:] if i < len(counts)), default=0)
                for i in idx[bisect.bisect_left(idx, lo):cut]:
                    u = units[i]
                    n = counts[i] if i < len(counts) else 0
                    if not (u.folded or u.pinned or u.is_open) and n > kept:
                        candidates[i] = n
        keep: set[int] = set()
        used = 0
        for i in sorted(candidates, reverse=True):
            if used + candidates[i] <= budget_raw:
                keep.add(i)
                used += candidates[i]
        return frozenset(keep)


__all__ = ["WorkingSet", "named_paths", "read_paths"]
