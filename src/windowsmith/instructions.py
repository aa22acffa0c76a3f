"""Instruction files: ``AGENTS.md``, ``CLAUDE.md`` and ``.windowsmith/instructions/*.md``.

Discovery (:func:`discover`) reads the **user-global** folder (``user_dir``: its ``AGENTS.md``,
``CLAUDE.md`` and ``instructions/*.md``), then the project **root** and every folder under it
(hidden folders, ``node_modules``, virtualenvs and build output skipped). A file in the root applies
to the whole session; a file in a subfolder is **scoped**: it applies once the session touches a path
under that folder (a tool call's arguments or a tool result name it).

The order is stable: user files, then root files, then scoped files by depth and path; within a
folder ``AGENTS.md``, ``CLAUDE.md``, then ``.windowsmith/instructions/*.md`` by name. Files with the
same text (after whitespace normalisation) are kept once (the first). ``@path`` imports are expanded in place
(:mod:`windowsmith.instruction_imports`: relative and ``~/`` paths, at most 5 levels, cycles refused). Each file is capped at
:data:`PER_FILE_CHARS` and the set at :data:`TOTAL_CHARS`, cut on a line with a ``[truncated]`` marker.

``Session.instructions(root=..., user_dir=...)`` records the set (redacted text, hashes, scopes) as a
``meta`` event, so the log alone rebuilds every pack. :class:`InstructionsLayer` puts the files in
scope in the session-context slot, after the system prompt and before the history (cached), except a
scoped file that came into scope after the last compaction: it goes in the dynamic tail (INSTRUCTIONS)
until the next compaction moves it into the cached slot, so entering a folder never rewrites the
cached prefix.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .instruction_imports import expand_imports
from .layers.base import BuildContext, Item, Layer, shrink_text

if TYPE_CHECKING:
    from .state import SessionState

FILE_NAMES: tuple[str, ...] = ("AGENTS.md", "CLAUDE.md")
RULES_DIR = ".windowsmith/instructions"
PER_FILE_CHARS = 4000
TOTAL_CHARS = 12000
TRUNCATED = "[truncated]"
MAX_FILES = 200
_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "venv", "env", "build", "dist", "target", "site-packages"})
_PATHISH = re.compile(r"(?:\.{0,2}/)?[\w.~-]+(?:/[\w.~-]+)+|[\w-]+\.[A-Za-z0-9]{1,8}")


@dataclass(frozen=True)
class InstructionFile:
    """One instruction file as loaded: where it is, the folder it applies to, its (capped) text."""

    path: str  # as shown: relative to the root, or ``~user/<name>`` for user-global files
    scope: str  # "" for the whole session, else the folder (relative to the root, posix) it applies under
    origin: str  # "user", "root" or "scoped"
    text: str
    chars: int  # characters of the file before capping
    sha: str  # sha256 of the normalised full text (the dedup key)
    truncated: bool = False
    duplicate_of: str | None = None  # the earlier file with the same text (this one is not loaded)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "scope": self.scope, "origin": self.origin, "text": self.text,
                "chars": self.chars, "sha": self.sha, "truncated": self.truncated}


def _read(p: Path) -> str | None:
    try:
        data = p.read_bytes()
    except OSError:
        return None
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\x00", "")


def _folder_files(folder: Path, *, user: bool = False) -> list[Path]:
    out = [folder / n for n in FILE_NAMES if (folder / n).is_file()]
    rules = folder / ("instructions" if user else RULES_DIR)
    if rules.is_dir():
        out += sorted(p for p in rules.glob("*.md") if p.is_file())
    return out


def _walk(root: Path) -> Iterator[Path]:
    """Folders under ``root`` (not root itself) that may hold instruction files, sorted, bounded."""
    for dirpath, dirnames, _files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        if Path(dirpath) != root:
            yield Path(dirpath)


def cap(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` characters on a line boundary, with the ``[truncated]`` marker."""
    if len(text) <= limit:
        return text, False
    room = max(0, limit - len(TRUNCATED) - 1)
    cut = text.rfind("\n", 0, room)
    cut = cut if cut > room // 2 else room
    return text[:cut].rstrip() + "\n" + TRUNCATED, True


def discover(root: str | os.PathLike[str] | None = None, user_dir: str | os.PathLike[str] | None = None, *,
             per_file: int = PER_FILE_CHARS, total: int = TOTAL_CHARS,
             home_dir: str | os.PathLike[str] | None = None,
             cwd: str | os.PathLike[str] | None = None) -> list[InstructionFile]:
    """The instruction files under ``root`` and in ``user_dir``, in load order, deduplicated and capped
    (duplicates are listed with ``duplicate_of`` and no text). ``@path`` imports are expanded
    (:mod:`windowsmith.instruction_imports`; ``~/`` is ``home_dir``, default the home folder). ``cwd``: the agent's
    working directory; the files of every folder from the root (default: the repository root above ``cwd``) down
    to it apply to the whole session, as Claude Code loads them."""
    if root is None and user_dir is None and cwd is None:
        raise UsageError("give a project root, a working directory (cwd) and/or a user_dir to look for instruction "
                         "files in")
    found: list[tuple[str, str, str, Path]] = []  # (path shown, scope, origin, file)
    on_path: set[Path] = set()  # the folders from the root down to cwd: their files apply to the whole session
    if cwd is not None:
        here = Path(cwd).resolve()
        if not here.is_dir():
            raise UsageError(f"cwd {str(here)!r} is not a folder; pass the agent's working directory")
        root = root if root is not None else repository_root(here)
        top = Path(root).resolve()
        if here != top and top not in here.parents:
            raise UsageError(f"cwd {str(here)!r} is not under the root {str(top)!r}")
        on_path = {p for p in (here, *here.parents) if top in p.parents}
    home = Path(home_dir) if home_dir is not None else Path.home()
    if user_dir is not None:
        ud = Path(user_dir)
        if not ud.is_dir():
            raise UsageError(f"user_dir {str(ud)!r} is not a folder")
        found += [(f"~user/{p.relative_to(ud).as_posix()}", "", "user", p) for p in _folder_files(ud, user=True)]
    if root is not None:
        r = Path(root)
        if not r.is_dir():
            raise UsageError(f"root {str(r)!r} is not a folder; pass the project folder")
        found += [(p.relative_to(r).as_posix(), "", "root", p) for p in _folder_files(r)]
        for folder in sorted(on_path, key=lambda f: len(f.parts)):  # root to cwd, as Claude Code walks it
            found += [(p.relative_to(r.resolve()).as_posix(), "", "root", p) for p in _folder_files(folder)]
        scoped = []
        for folder in _walk(r):
            if folder.resolve() in on_path:
                continue
            rel = folder.relative_to(r).as_posix()
            scoped += [(p.relative_to(r).as_posix(), rel, "scoped", p) for p in _folder_files(folder)]
            if len(scoped) > MAX_FILES:
                break
        scoped.sort(key=lambda e: (e[1].count("/"), e[1], e[0]))
        found += scoped
    out: list[InstructionFile] = []
    seen: dict[str, str] = {}
    left = total
    for shown, scope, origin, p in found[:MAX_FILES]:
        text = _read(p)
        if text is None or not text.strip():
            continue
        if "@" in text:
            text = expand_imports(text, p, read=_read, home=home)
        sha = hashlib.sha256(" ".join(text.split()).encode()).hexdigest()
        if sha in seen:
            out.append(InstructionFile(shown, scope, origin, "", len(text), sha, duplicate_of=seen[sha]))
            continue
        seen[sha] = shown
        if left < 64:  # the set is full: listed, not loaded
            out.append(InstructionFile(shown, scope, origin, "", len(text), sha, True))
            continue
        body, cut = cap(text.strip(), min(per_file, left))
        left -= len(body)
        out.append(InstructionFile(shown, scope, origin, body, len(text), sha, cut))
    return out


def repository_root(folder: Path) -> Path:
    """The nearest folder at or above ``folder`` holding ``.git`` (a folder or a worktree's file), else ``folder``."""
    for f in (folder, *folder.parents):
        if (f / ".git").exists():
            return f
    return folder


def touched_paths(text: str) -> Iterator[str]:
    for m in _PATHISH.finditer(text[:65536]):
        yield m.group(0)


def in_scope(path: str, scope: str, root: str) -> bool:
    """Whether ``path`` (absolute under ``root``, or relative to it) lies under the folder ``scope``."""
    p = path
    if root and p.startswith(root.rstrip("/") + "/"):
        p = p[len(root.rstrip("/")) + 1:]
    p = str(PurePosixPath(p.lstrip("./") if p.startswith("./") else p))
    return p == scope or p.startswith(scope + "/") or ("/" + scope + "/") in ("/" + p + "/")


class InstructionsLayer(Layer):
    """The session's instruction files in scope: cached session context, newly scoped ones in the tail."""

    name = "instructions"

    def __init__(self) -> None:
        self._scanned = 0
        self._touch: dict[str, int] = {}  # scope -> log seq of the first message touching it
        self._for: tuple[int, int] = (-1, -1)

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        state = ctx.state
        sets = state.notes_for("instruction-files")
        if not sets:
            return
        latest = sets[-1]
        files = [f for f in latest.get("files", []) if f.get("text")]
        root = str(latest.get("root") or "")
        scopes = sorted({f["scope"] for f in files if f.get("scope")})
        if scopes:
            self._scan(state, scopes, root)
        boundary = state.records[-1].seq if state.records else -1
        tail_n = 0
        for i, f in enumerate(files):
            scope = f.get("scope") or ""
            text = f"[instructions from {f['path']}" + (f", for files under {scope}/]" if scope else "]") + "\n" + f["text"]
            if not scope:
                yield Item(self.name, "session", "session", text, priority=80, provenance=f"instructions:{f['path']}",
                           order=100 + i, shrink=shrink_text, meta={"listed": True})
                continue
            seq = self._touch.get(scope)
            if seq is None:
                continue
            if seq < boundary:
                yield Item(self.name, "session", "session", text, priority=70, provenance=f"instructions:{f['path']}",
                           order=100 + i, shrink=shrink_text, meta={"listed": True})
            else:
                yield Item(self.name, "tail", "dynamic", text, priority=70, header="INSTRUCTIONS", order=tail_n,
                           provenance=f"instructions:{f['path']} (in scope since seq {seq}, cached at the next compaction)",
                           shrink=shrink_text, meta={"listed": True})
                tail_n += 1

    def _scan(self, state: SessionState, scopes: Sequence[str], root: str) -> None:
        key = (id(state), len(scopes))
        if key != self._for or len(state.messages) < self._scanned:
            self._scanned, self._touch, self._for = 0, {}, key
        msgs = state.messages
        for i in range(self._scanned, len(msgs)):
            m = msgs[i]
            texts = [str(c.arguments) for c in m.tool_calls] + [r.text for r in m.tool_results]
            for t in texts:
                for p in touched_paths(t):
                    for sc in scopes:
                        if sc not in self._touch and in_scope(p, sc, root):
                            self._touch[sc] = state.message_seqs[i]
        self._scanned = len(msgs)


__all__ = ["FILE_NAMES", "PER_FILE_CHARS", "TOTAL_CHARS", "TRUNCATED", "InstructionFile", "InstructionsLayer",
           "cap", "discover", "in_scope"]
