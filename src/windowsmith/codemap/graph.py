"""The file graph of a code base and its personalized PageRank.

Edges: file A → file B when A references a name B defines (weight √count, spread over the files defining
that name, so a name defined in many places counts little; private ``_names`` count a tenth) and when A
imports B (resolved per language: Python modules and relative imports, JS/TS relative paths, Go package
directories, Java classes, Rust ``mod``/``use crate::`` paths). PageRank is a plain power iteration over
these weights, personalized to the focus files and identifiers (no graph library needed).
"""

from __future__ import annotations

import math
import posixpath
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .parse import FileInfo


def _module_index(files: Iterable[str]) -> dict[str, str]:
    """Python dotted module → file (``a/b/c.py`` → ``a.b.c``, ``a/b/__init__.py`` → ``a.b``), every suffix."""
    out: dict[str, str] = {}
    for f in files:
        if not f.endswith((".py", ".pyi")):
            continue
        parts = f.rsplit(".", 1)[0].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        for i in range(len(parts)):
            out.setdefault(".".join(parts[i:]), f)
    return out


def _python_imports(spec: str, path: str, modules: Mapping[str, str]) -> list[str]:
    out = []
    spec = " ".join(spec.split())
    if spec.startswith("from "):
        head, _, names = spec[5:].partition(" import ")
        level = len(head) - len(head.lstrip("."))
        mod = head.lstrip(".")
        if level:
            base = path.split("/")[:-1]
            base = base[: len(base) - (level - 1)] if level > 1 else base
            mod = ".".join([*base, mod] if mod else base)
        for n in names.strip("() ").split(","):
            n = n.strip().split(" as ")[0].strip()
            if n and n != "*" and f"{mod}.{n}" in modules:
                out.append(modules[f"{mod}.{n}"])
        if mod in modules:
            out.append(modules[mod])
    elif spec.startswith("import "):
        for n in spec[7:].split(","):
            n = n.strip().split(" as ")[0].strip()
            while n and n not in modules and "." in n:
                n = n.rsplit(".", 1)[0]
            if n in modules:
                out.append(modules[n])
    return out


def resolve_imports(info: FileInfo, files: set[str], modules: Mapping[str, str],
                    by_dir: Mapping[str, list[str]]) -> list[str]:
    """The repository files ``info`` imports."""
    out: list[str] = []
    here = posixpath.dirname(info.path)
    for spec in info.imports:
        if info.language == "python":
            out += _python_imports(spec, info.path, modules)
        elif info.language in ("javascript", "typescript", "tsx"):
            s = spec.strip("'\"`")
            if s.startswith("."):
                base = posixpath.normpath(posixpath.join(here, s))
                for cand in (base, *(base + e for e in (".ts", ".tsx", ".js", ".jsx", ".mjs")),
                             *(f"{base}/index{e}" for e in (".ts", ".tsx", ".js"))):
                    if cand in files:
                        out.append(cand)
                        break
        elif info.language == "go":
            s = spec.strip('"')
            for d, fs in by_dir.items():
                if d and (s == d or s.endswith("/" + d)):
                    out += [f for f in fs if f.endswith(".go")]
        elif info.language == "java":
            s = spec.replace("import", "").replace("static", "").strip(" ;").replace(".", "/")
            out += [f for f in files if f.endswith(s + ".java")]
        elif info.language == "rust":
            if spec.startswith("use "):
                parts = spec[4:].strip(" ;").split("::")
                if parts and parts[0] in ("crate", "self", "super"):
                    parts = parts[1:]
                for k in range(len(parts), 0, -1):
                    stem = "/".join(parts[:k])
                    hit = [f for f in files if f.endswith((f"{stem}.rs", f"{stem}/mod.rs"))]
                    if hit:
                        out += hit[:1]
                        break
            else:  # `mod name;`: name.rs or name/mod.rs next to this file
                for cand in (posixpath.join(here, f"{spec}.rs"), posixpath.join(here, spec, "mod.rs")):
                    if cand in files:
                        out.append(cand)
    return [f for f in dict.fromkeys(out) if f != info.path]


@dataclass
class FileGraph:
    files: dict[str, FileInfo]
    defines: dict[str, set[str]] = field(default_factory=dict)  # name → files defining it
    edges: dict[str, dict[str, float]] = field(default_factory=dict)  # file → {file: weight}
    name_edges: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)  # file → {(file, name): w}
    imports: dict[str, list[str]] = field(default_factory=dict)  # file → files it imports

    @classmethod
    def build(cls, files: Mapping[str, FileInfo], focus_names: Iterable[str] = ()) -> FileGraph:
        g = cls(dict(files))
        focus = set(focus_names)
        for path, info in files.items():
            for d in info.definitions:
                g.defines.setdefault(d.name, set()).add(path)
        paths = set(files)
        modules = _module_index(paths)
        by_dir: dict[str, list[str]] = defaultdict(list)
        for p in paths:
            by_dir[posixpath.dirname(p)].append(p)
        for path, info in files.items():
            out: dict[str, float] = defaultdict(float)
            named: dict[tuple[str, str], float] = defaultdict(float)
            for name, count in info.references.items():
                targets = g.defines.get(name)
                if not targets:
                    continue
                w = math.sqrt(count) / len(targets)
                if len(targets) > 2:  # a common name (get, text, run): who is meant is a guess
                    w *= 0.1
                if name.startswith("_"):
                    w *= 0.1
                if name in focus:
                    w *= 10
                for t in targets:
                    if t != path:
                        out[t] += w
                        named[(t, name)] += w
            imps = resolve_imports(info, paths, modules, by_dir)
            g.imports[path] = imps
            for t in imps:
                out[t] += 1.0
            g.edges[path] = dict(out)
            g.name_edges[path] = dict(named)
        return g

    def import_chain(self, start: Iterable[str], depth: int = 2) -> dict[str, int]:
        """Files reachable from ``start`` by imports within ``depth`` steps → their distance (start: 0)."""
        dist = {f: 0 for f in start if f in self.files}
        frontier = list(dist)
        for d in range(1, depth + 1):
            nxt = []
            for f in frontier:
                for t in self.imports.get(f, ()):
                    if t not in dist:
                        dist[t] = d
                        nxt.append(t)
            frontier = nxt
        return dist

    def pagerank(self, personalization: Mapping[str, float] | None = None, damping: float = 0.85,
                 tol: float = 1e-8, max_iter: int = 100) -> dict[str, float]:
        """Personalized PageRank by power iteration; dangling files give their rank to the personalization."""
        nodes = sorted(self.files)
        if not nodes:
            return {}
        p = {n: personalization.get(n, 0.0) for n in nodes} if personalization else {}
        total = sum(p.values())
        if total <= 0:
            p = {n: 1.0 / len(nodes) for n in nodes}
        else:
            p = {n: v / total for n, v in p.items()}
        out_w = {n: sum(self.edges.get(n, {}).values()) for n in nodes}
        rank = dict(p)
        for _ in range(max_iter):
            nxt = {n: (1 - damping) * p[n] for n in nodes}
            dangling = sum(rank[n] for n in nodes if out_w[n] <= 0)
            for n in nodes:
                if dangling:
                    nxt[n] += damping * dangling * p[n]
            for src in nodes:
                w = out_w[src]
                if w <= 0:
                    continue
                share = damping * rank[src] / w
                for dst, ew in self.edges[src].items():
                    nxt[dst] += share * ew
            err = sum(abs(nxt[n] - rank[n]) for n in nodes)
            rank = nxt
            if err < tol * len(nodes):
                break
        return rank


__all__ = ["FileGraph", "resolve_imports"]
