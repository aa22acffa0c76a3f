"""The code map: every source file's definitions, ranked for the task, rendered within a token budget.

    cm = CodeMap("path/to/repo")            # scans and parses (tree-sitter)
    cm.update()                              # later: re-parses only files whose mtime/size and hash changed
    text = cm.render(budget_tokens=1024, focus_files=["src/app.py"], focus_names=["parse_date"])

Ranking: PageRank over the file graph (:mod:`.graph`), personalized to the focus files, the files defining
the focus identifiers, and the import chain of the focus files (what they import, two levels deep, at
decreasing weight). A definition's rank is the rank that flows to its file through references to its name.
The render lists the focus files and their import chain first, then files by rank; each file shows its top
definitions as ``line: signature``, indented by nesting. The number of definitions shown is the largest that
fits the budget (binary search over the ranked list, counted with the o200k tokenizer).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..tokens import count_text
from .graph import FileGraph
from .parse import FileInfo, language_of, parse_source

SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache",
                       ".ruff_cache", ".pytest_cache", "build", "dist", "target", ".windowsmith", "site-packages"})
MAX_FILE_BYTES = 1_000_000


@dataclass(frozen=True)
class UpdateStats:
    files: int
    parsed: int  # new or changed (hash differs)
    touched: int  # mtime/size changed but the content hash is the same (not re-parsed)
    removed: int

    def to_dict(self) -> dict[str, int]:
        return {"files": self.files, "parsed": self.parsed, "touched": self.touched, "removed": self.removed}


@dataclass
class _Entry:
    mtime_ns: int
    size: int
    sha: str
    info: FileInfo


class CodeMap:
    """An incrementally updated map of the source files under ``root``."""

    def __init__(self, root: str | Path, *, cache: str | Path | None = None,
                 on_file: Callable[[], None] | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise ConfigError(f"code map root {str(root)!r} is not a directory")
        self.cache_path = Path(cache) if cache is not None else None
        self._entries: dict[str, _Entry] = {}
        self._graph: FileGraph | None = None
        self._graph_key: tuple[str, ...] | None = None
        if self.cache_path is not None and self.cache_path.is_file():
            self._load()
        self.last_update = self.update(on_file)

    # ------------------------------------------------------------------ scanning

    def source_files(self) -> list[str]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
            rel_dir = os.path.relpath(dirpath, self.root)
            for fn in sorted(filenames):
                if language_of(fn) is not None:
                    out.append(fn if rel_dir == "." else f"{rel_dir}/{fn}".replace(os.sep, "/"))
        return out

    def update(self, on_file: Callable[[], None] | None = None) -> UpdateStats:
        """Re-scan: parse new files and files whose content hash changed; drop deleted files. ``on_file`` is
        called once per source file looked at (a command's progress)."""
        parsed = touched = 0
        seen = set()
        for rel in self.source_files():
            if on_file is not None:
                on_file()
            p = self.root / rel
            try:
                st = p.stat()
            except OSError:
                continue
            if st.st_size > MAX_FILE_BYTES:
                continue
            seen.add(rel)
            e = self._entries.get(rel)
            if e is not None and e.mtime_ns == st.st_mtime_ns and e.size == st.st_size:
                continue
            data = p.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            if e is not None and e.sha == sha:
                e.mtime_ns, e.size = st.st_mtime_ns, st.st_size
                touched += 1
                continue
            self._entries[rel] = _Entry(st.st_mtime_ns, st.st_size, sha, parse_source(rel, data))
            parsed += 1
        removed = [r for r in self._entries if r not in seen]
        for r in removed:
            del self._entries[r]
        if parsed or removed:
            self._graph = None
        if self.cache_path is not None and (parsed or removed or touched):
            self._save()
        self.last_update = UpdateStats(len(self._entries), parsed, touched, len(removed))
        return self.last_update

    @property
    def files(self) -> dict[str, FileInfo]:
        return {k: e.info for k, e in self._entries.items()}

    def graph(self, focus_names: Iterable[str] = ()) -> FileGraph:
        key = tuple(sorted(set(focus_names)))
        if self._graph is None or self._graph_key != key:
            self._graph = FileGraph.build(self.files, key)
            self._graph_key = key
        return self._graph

    # ------------------------------------------------------------------ ranking and rendering

    def rank(self, focus_files: Sequence[str] = (), focus_names: Sequence[str] = ()) -> tuple[
            dict[str, float], list[tuple[float, str, int]], dict[str, int]]:
        """File ranks, definitions ranked (rank, file, index into the file's definitions), the import chain."""
        focus_files = [self._rel(f) for f in focus_files]
        missing = [f for f in focus_files if f not in self._entries]
        if missing:
            raise ConfigError(f"focus file(s) {missing} are not source files under {str(self.root)!r}")
        g = self.graph(focus_names)
        chain = g.import_chain(focus_files)
        pers: dict[str, float] = defaultdict(float)
        for f, d in chain.items():
            pers[f] += 1.0 if d == 0 else 0.5 / d
        for n in focus_names:
            for f in g.defines.get(n, ()):
                pers[f] += 0.5
        ranks = g.pagerank(pers or None)
        def_rank: dict[tuple[str, str], float] = defaultdict(float)
        for src, named in g.name_edges.items():
            total = sum(g.edges.get(src, {}).values()) or 1.0
            for (dst, name), w in named.items():
                def_rank[(dst, name)] += ranks.get(src, 0.0) * w / total
        focus_set = set(focus_names)
        ranked = []
        boost = {0: 4.0, 1: 2.0, 2: 1.5}
        for path, info in self.files.items():
            base = ranks.get(path, 0.0) * 0.2  # a highly ranked file shows its own definitions too
            mult = boost.get(chain.get(path, -1), 1.0)
            for i, dfn in enumerate(info.definitions):
                r = (def_rank.get((path, dfn.name), 0.0) + base / (1 + dfn.depth)) * mult
                if dfn.name in focus_set:
                    r *= 10
                if dfn.name.startswith("_") and not dfn.name.startswith("__"):
                    r *= 0.3
                if dfn.depth and len(dfn.name) <= 8 and dfn.name not in focus_set:
                    r *= 0.3  # short member names (id, key, get, text) are referenced everywhere by accident
                if chain.get(path) == 0:  # the files being worked on: their own outline first
                    r += 1.0 + 1.0 / (1 + dfn.depth)
                ranked.append((r, path, i))
        ranked.sort(key=lambda x: (-x[0], x[1], x[2]))
        return ranks, ranked, chain

    def render(self, budget_tokens: int = 1024, focus_files: Sequence[str] = (), focus_names: Sequence[str] = ()) -> str:
        """The map within ``budget_tokens`` (o200k tokens)."""
        if budget_tokens < 16:
            raise ConfigError(f"budget_tokens must be at least 16, got {budget_tokens}")
        _, ranked, chain = self.rank(focus_files, focus_names)
        lo, hi = 0, len(ranked)
        best = self._text(ranked[:0], chain)
        while lo <= hi:
            mid = (lo + hi) // 2
            text = self._text(ranked[:mid], chain)
            if count_text(text) <= budget_tokens:
                best = text
                lo = mid + 1
            else:
                hi = mid - 1
        return best

    def _text(self, picked: Sequence[tuple[float, str, int]], chain: dict[str, int]) -> str:
        by_file: dict[str, list[int]] = defaultdict(list)
        order: dict[str, float] = {}
        for r, path, i in picked:
            defs = self._entries[path].info.definitions
            want = [i]
            depth = defs[i].depth
            for j in range(i - 1, -1, -1):  # a nested definition is shown under its enclosing ones
                if depth == 0:
                    break
                if defs[j].depth < depth:
                    want.append(j)
                    depth = defs[j].depth
            for k in want:
                if k not in by_file[path]:
                    by_file[path].append(k)
            order[path] = max(order.get(path, 0.0), r)
        for f, dist in chain.items():
            if dist <= 1:  # the edited files and what they import are named even without definitions shown
                by_file.setdefault(f, [])
        files = sorted(by_file, key=lambda f: (min(chain.get(f, 99), 2), -order.get(f, 0.0), f))
        lines = []
        for f in files:
            info = self._entries[f].info
            lines.append(f"{f}:" if by_file[f] else f"{f}")
            for i in sorted(by_file[f]):
                d = info.definitions[i]
                lines.append(f"{'  ' * (d.depth + 1)}{d.line}: {d.signature}")
        return "\n".join(lines)

    def _rel(self, f: str) -> str:
        p = Path(f)
        if p.is_absolute():
            try:
                p = p.resolve().relative_to(self.root.resolve())
            except ValueError as e:
                raise ConfigError(f"focus file {f!r} is outside the code map root {str(self.root)!r}") from e
        return p.as_posix()

    # ------------------------------------------------------------------ the cache file

    def _save(self) -> None:
        assert self.cache_path is not None
        data = {"version": 1, "files": {k: {"mtime_ns": e.mtime_ns, "size": e.size, "sha": e.sha, "info": e.info.to_dict()}
                                        for k, e in self._entries.items()}}
        tmp = self.cache_path.with_suffix(self.cache_path.suffix + ".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data))
        tmp.replace(self.cache_path)  # atomic: never a half-written cache

    def _load(self) -> None:
        assert self.cache_path is not None
        try:
            data: dict[str, Any] = json.loads(self.cache_path.read_text())
            if data.get("version") != 1:
                return
            self._entries = {k: _Entry(v["mtime_ns"], v["size"], v["sha"], FileInfo.from_dict(v["info"]))
                             for k, v in data["files"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            self._entries = {}  # a broken cache is rebuilt, never trusted


__all__ = ["CodeMap", "UpdateStats"]
