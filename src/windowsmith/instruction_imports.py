"""``@path`` imports in instruction files, as Claude Code reads them.

A ``@path`` mention (``@docs/style.md``, ``@../shared/RULES.md``, ``@~/team/AGENTS.md``) outside code (fenced
blocks and backtick spans) pulls the named file in: its text follows the line that mentions it, marked with the
path. Relative paths are relative to the file that mentions them; ``~/`` is the home folder. A mention of
something that is not a file (an e-mail address, a decorator, ``@someone``) is left as it is. Imports nest at most
:data:`MAX_DEPTH` levels; a file that imports itself, directly or through others, is refused with a
:class:`~windowsmith.errors.UsageError` naming the chain. The result is capped and deduplicated like any
instruction file (:func:`windowsmith.instructions.discover`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from .errors import UsageError

#: How many levels of imports are followed (Claude Code's limit); deeper mentions are left as text.
MAX_DEPTH = 5
_MENTION = re.compile(r"(?<![\w@`/.])@((?:~/|\.{1,2}/|/)?[\w.-]+(?:/[\w.-]+)*)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _target(spec: str, base: Path, home: Path) -> Path:
    if spec.startswith("~/"):
        return home / spec[2:]
    p = Path(spec)
    return p if p.is_absolute() else base / p


def _mentions(line: str) -> list[str]:
    outside = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)  # not in code spans
    return [m.group(1).rstrip(".") for m in _MENTION.finditer(outside)]


def expand_imports(text: str, path: Path, *, read: Callable[[Path], str | None], home: Path | None = None,
                   chain: tuple[Path, ...] = ()) -> str:
    """``text`` (the file at ``path``) with each ``@path`` import's text after the line that mentions it."""
    home = home if home is not None else Path.home()
    here = path.resolve()
    chain = (*chain, here)
    if len(chain) > MAX_DEPTH + 1:
        return text
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        out.append(line)
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or "@" not in line:
            continue
        for spec in _mentions(line):
            target = _target(spec, here.parent, home)
            if not target.is_file():
                continue
            resolved = target.resolve()
            if resolved in chain:
                names = " -> ".join(p.name for p in (*chain, resolved))
                raise UsageError(f"instruction file imports form a cycle ({names}); remove the @{spec} import "
                                 f"from {here}")
            if len(chain) > MAX_DEPTH:
                continue  # past the depth limit: the mention stays as text
            body = read(resolved)
            if body is None or not body.strip():
                continue
            out.append(f"[imported from @{spec}]")
            out.append(expand_imports(body.strip(), resolved, read=read, home=home, chain=chain))
    return "\n".join(out)


__all__ = ["MAX_DEPTH", "expand_imports"]
