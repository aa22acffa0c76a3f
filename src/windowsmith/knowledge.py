"""Knowledge: documents and code indexed for retrieval, chunked on their structure.

``engine.knowledge.add(path_or_text)`` indexes a file, a folder (its ``.md``/``.rst``/``.txt`` and source
files; hidden folders, virtualenvs and build output skipped) or a text, in the project's scope
(``project:<MemoryConfig.project or "default">``). Chunking follows the structure:

* **Markdown**: one chunk per heading section, prefixed with its heading path (``A > B``); a long
  section is split on paragraphs.
* **Python**: one chunk per top-level function or class (a long class: per method), found with
  :mod:`ast`, with the module's docstring and imports as their own chunk; other languages by a
  regular expression for top-level ``def``/``class``/``function``/``fn``/``func`` lines.
* anything else: windows of whole paragraphs.

Every chunk is redacted before it is stored and carries its source (``path#Lfirst-last``). Re-adding a
changed file replaces its chunks; an unchanged one adds nothing.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError
from .ingest.redact import redact
from .retrieval.history import chunk_lines
from .retrieval.search import Embedder, Hit, Retriever, with_vectors
from .retrieval.terms import query_terms
from .store import Store
from .store.chunks import NewChunk

MAX_CHUNK = 1500
MAX_FILE_BYTES = 2_000_000
TEXT_EXT = frozenset({".md", ".markdown", ".rst", ".txt"})
CODE_EXT = frozenset({".py", ".pyi", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".rb",
                      ".php", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".swift", ".scala", ".sh", ".toml",
                      ".yaml", ".yml", ".cfg", ".ini", ".sql"})
_SKIP = frozenset({"node_modules", "__pycache__", "venv", "env", "build", "dist", "target", "site-packages"})
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_TOP_SYMBOL = re.compile(r"^(?:export\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?"
                         r"(?:def|class|function|fn|func|interface|struct|enum|impl|trait|type|module)\b")


def _is_path(text: str) -> bool:
    """Whether a string names an existing file or folder (a text that cannot be a path, e.g. a line longer
    than the file system allows, is not one: it is indexed as text)."""
    if "\n" in text or "\x00" in text or len(text) >= 4096:
        return False
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # ENAMETOOLONG and the like: not a path
        return False


@dataclass(frozen=True)
class Section:
    first: int  # 1-based first line
    last: int
    title: str  # heading path or symbol name
    text: str


def _windows(first: int, title: str, text: str) -> Iterator[Section]:
    """A section split into pieces of at most MAX_CHUNK characters on line boundaries."""
    if len(text) <= MAX_CHUNK:
        yield Section(first, first + text.count("\n"), title, text)
        return
    for a, b, body in chunk_lines(text, max_chars=MAX_CHUNK, blocks=False):
        yield Section(first + a, first + b - 1, title, body)


def chunk_markdown(text: str) -> list[Section]:
    lines = text.split("\n")
    out: list[Section] = []
    path: list[tuple[int, str]] = []
    start, buf = 1, list[str]()
    fence = False

    def flush(end: int) -> None:
        body = "\n".join(buf).strip()
        if body:
            title = " > ".join(t for _, t in path)
            out.extend(_windows(start, title, body))

    for i, line in enumerate(lines, start=1):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        m = None if fence else _HEADING.match(line)
        if m:
            flush(i - 1)
            level = len(m.group(1))
            path = [(lv, t) for lv, t in path if lv < level] + [(level, m.group(2))]
            start, buf = i, [line]
        else:
            buf.append(line)
    flush(len(lines))
    return out


def chunk_python(text: str) -> list[Section]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return chunk_code(text)
    lines = text.split("\n")
    out: list[Section] = []
    covered_to = 0
    head_end = 0
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        last = node.end_lineno or node.lineno
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if head_end == 0 and first > 1:
                head_end = first - 1
            body = "\n".join(lines[first - 1:last])
            if isinstance(node, ast.ClassDef) and len(body) > MAX_CHUNK:
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
                top_end = (methods[0].lineno - 1) if methods else last
                out.extend(_windows(first, node.name, "\n".join(lines[first - 1:top_end])))
                for mth in methods:
                    mf = min([mth.lineno, *(d.lineno for d in mth.decorator_list)])
                    out.extend(_windows(mf, f"{node.name}.{mth.name}", "\n".join(lines[mf - 1:mth.end_lineno or mf])))
            else:
                out.extend(_windows(first, node.name, body))
            covered_to = last
    head = "\n".join(lines[:head_end or (covered_to if covered_to else len(lines))]).strip()
    if head and (head_end or not out):
        out.insert(0, next(iter(_windows(1, "module", head))))
    return out


def chunk_code(text: str) -> list[Section]:
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if _TOP_SYMBOL.match(line)]
    if not starts:
        return chunk_text(text)
    bounds = ([0] if starts[0] > 0 else []) + starts + [len(lines)]
    out: list[Section] = []
    for a, b in itertools.pairwise(bounds):
        body = "\n".join(lines[a:b]).strip()
        if body:
            title = lines[a].strip()[:80] if a in starts else "header"
            out.extend(_windows(a + 1, title, body))
    return out


def chunk_text(text: str) -> list[Section]:
    return [Section(a + 1, b, "", body) for a, b, body in chunk_lines(text, max_chars=MAX_CHUNK, blocks=False)]


def chunk_file(name: str, text: str) -> list[Section]:
    ext = os.path.splitext(name)[1].lower()
    if ext in (".md", ".markdown"):
        return chunk_markdown(text)
    if ext in (".py", ".pyi"):
        return chunk_python(text)
    if ext in CODE_EXT:
        return chunk_code(text)
    return chunk_text(text)


def _files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP)
        for f in sorted(files):
            p = Path(dirpath) / f
            if p.suffix.lower() in TEXT_EXT | CODE_EXT and not f.startswith("."):
                yield p


class Knowledge:
    """The knowledge of one project scope."""

    def __init__(self, store: Store, project: str | None = None, *, redact_text: bool = True,
                 embedder: Embedder | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.scope = f"project:{project or 'default'}"
        self.redact = redact_text
        self.retriever = Retriever(store, embedder)

    def add(self, path_or_text: str | os.PathLike[str], *, name: str | None = None) -> int:
        """Index a file, a folder or a text (``name`` names a text; default: its digest). Returns the number
        of chunks added."""
        if isinstance(path_or_text, os.PathLike) or (isinstance(path_or_text, str) and _is_path(path_or_text)):
            p = Path(path_or_text)
            if p.is_dir():
                return sum(self._add_doc(f.relative_to(p).as_posix(), f) for f in _files(p))
            return self._add_doc(name or p.name, p)
        if not isinstance(path_or_text, str) or not path_or_text.strip():
            raise UsageError("knowledge.add takes a path to a file or folder, or a non-empty text")
        text = path_or_text
        return self._index(name or "text:" + hashlib.sha256(text.encode()).hexdigest()[:16], name or "text.md", text)

    def _add_doc(self, doc: str, p: Path) -> int:
        try:
            data = p.read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read {p}: {e.strerror or e}") from None
        if len(data) > MAX_FILE_BYTES or b"\x00" in data[:8192]:
            return 0  # binary or huge: not knowledge
        return self._index(doc, p.name, data.decode("utf-8", errors="replace"))

    def _index(self, doc: str, filename: str, text: str) -> int:
        text = text.replace("\r\n", "\n").replace("\x00", "")
        if self.redact:
            text = redact(text).text
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        old = self.store.list_chunks("knowledge", [self.scope], doc=doc)
        if old and all(c.meta.get("sha") == digest for c in old):
            return 0
        if old:
            self.store.delete_chunks("knowledge", [self.scope], [c.id for c in old])
        chunks = []
        for i, s in enumerate(chunk_file(filename, text)):
            body = (f"[{s.title}]\n" if s.title else "") + s.text
            chunks.append(NewChunk(key=f"{doc}#{digest}#{i}", text=body, doc=doc, source=f"{doc}#L{s.first}-{s.last}",
                                   meta={"sha": digest, "title": s.title, "lines": [s.first, s.last]}))
        return self.store.add_chunks("knowledge", self.scope, with_vectors(chunks, self.embedder))

    def search(self, query: str | list[str], *, limit: int = 5) -> list[Hit]:
        texts = [query] if isinstance(query, str) else list(query)
        queries = [q for q in (query_terms(t) for t in texts) if q]
        if not queries:
            return []
        return self.retriever.search("knowledge", [self.scope], queries, limit=limit, texts=texts)

    def docs(self) -> set[str]:
        return self.store.indexed_docs("knowledge", self.scope)


__all__ = ["Knowledge", "Section", "chunk_code", "chunk_file", "chunk_markdown", "chunk_python", "chunk_text"]
