"""``CODEMAP``: the code map of a repository in the dynamic tail, focused on what the session works on.

Focus comes from the session itself: files named in the task and in the last ``recent`` messages (text and
tool-call arguments, matched against the map's files by path suffix), the files being *edited* (tool calls
whose name says edit/write/replace/patch/create, with a path argument: their import chain is followed), and
identifiers from the same text that the code base defines. The map is updated (mtime + hash) before each
build, so edits show up; it sits in the tail, so it never touches the cached prefix (the price: its tokens
are re-sent uncached each turn, within the layer's ``budget_tokens``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..layers.base import BuildContext, Item, Layer
from ..model import Message, Text, ToolResult
from .map import CodeMap

if TYPE_CHECKING:
    from ..tokens import TokenCounter

_PATHLIKE = re.compile(r"[\w./-]+\.(?:py|pyi|js|jsx|mjs|cjs|ts|tsx|go|java|rs)\b")
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{2,}\b")
_EDIT = re.compile(r"edit|write|replace|patch|create|insert|apply|modify", re.I)


class CodeMapLayer(Layer):
    name = "codemap"

    def __init__(self, root: str | Path, budget_tokens: int = 1024, *, recent: int = 8, cache: str | Path | None = None,
                 max_names: int = 20) -> None:
        self.map = CodeMap(root, cache=cache)
        self.budget_tokens = budget_tokens
        self.recent = recent
        self.max_names = max_names
        self._report: dict[str, Any] | None = None
        self._last: tuple[tuple[Any, ...], str] | None = None  # (focus key, map text): no re-render when unchanged

    def _texts(self, messages: Iterable[Message]) -> tuple[list[str], list[str]]:
        """(all text of the messages, the paths their edit-like tool calls name)."""
        texts: list[str] = []
        edited: list[str] = []
        for m in messages:
            for b in m.content:
                if isinstance(b, Text):
                    texts.append(b.text)
                elif isinstance(b, ToolResult):
                    texts.append(b.text[:4000])
            for c in m.tool_calls:
                args = " ".join(str(v) for v in c.arguments.values())
                texts.append(args)
                if _EDIT.search(c.name) or _EDIT.search(str(c.arguments.get("command", ""))):
                    edited += _PATHLIKE.findall(args)
        return texts, edited

    def _match(self, names: Iterable[str]) -> list[str]:
        files = self.map.files
        out = []
        for n in names:
            n = n.lstrip("./")
            # a mention matches a file when one path ends with the other ("/repo/pkg/a.py" ~ "pkg/a.py")
            hits = [f for f in files if f == n or n.endswith("/" + f) or f.endswith("/" + n)]
            hit = max(hits, key=len) if hits else None
            if hit and hit not in out:
                out.append(hit)
        return out

    def focus(self, ctx: BuildContext) -> tuple[list[str], list[str], list[str]]:
        """(focus files, edited files, focus identifiers) from the task and the recent messages."""
        state = ctx.state
        task = state.task
        texts, edited = self._texts(state.messages[-self.recent:] if self.recent else ())
        texts += [task.goal or "", task.step or "", *(a for a, _ in task.acceptance)]
        joined = "\n".join(texts)
        edited_files = self._match(edited)
        files = edited_files + [f for f in self._match(_PATHLIKE.findall(joined)) if f not in edited_files]
        defined = self.map.graph().defines
        names: list[str] = []
        for w in _IDENT.findall(joined):
            if w in defined and w not in names and len(defined[w]) <= 3:
                names.append(w)
                if len(names) >= self.max_names:
                    break
        return files, edited_files, names

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        stats = self.map.update()
        files, edited, names = self.focus(ctx)
        # the import chain follows the edited files when there are any, else every focus file
        chain_from = edited or files
        key = (tuple(chain_from), tuple(names), self.budget_tokens)
        if self._last is not None and self._last[0] == key and not stats.parsed and not stats.removed:
            text = self._last[1]
        else:
            text = self.map.render(self.budget_tokens, chain_from, names)
            self._last = (key, text)
        self._report = {"files": stats.files, "parsed": stats.parsed, "focus_files": files, "edited": edited,
                        "focus_names": names, "budget_tokens": self.budget_tokens}
        if not text:
            return

        def shrink(item: Item, cap: int, counter: TokenCounter) -> Item | None:
            if cap < 64:
                return None
            return replace(item, content=self.map.render(max(16, int(cap / counter.scale) - 8), chain_from, names))

        yield Item(self.name, "tail", "dynamic", text, priority=15, provenance=f"codemap:{self.map.root.name}",
                   header="CODEMAP", shrink=shrink)

    def report(self) -> dict[str, Any] | None:
        return self._report


__all__ = ["CodeMapLayer"]
