"""Retrieval tools the agent uses to read offloaded tool results.

    read_result(ref, offset=0, limit=200)          lines [offset, offset+limit) of the stored result
                                                   (a line over 2,000 chars continues on lines that
                                                   start with "↪", so nothing is ever cut)
    search_result(ref, pattern, context_lines=2)   regex matches with surrounding lines

``RESULT_TOOLS`` are neutral :class:`~windowsmith.model.ToolSpec` s, so they render for every provider
format like any other tool. :class:`ResultTools` executes a call locally and always returns bounded
text: a bad call (unknown ref, another session's ref, a malformed ref, negative or huge offsets, an
invalid or too slow regex) gets an explanatory error string the model can act on — never an exception,
never a read outside the session's artifacts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import regex

from .artifacts import ArtifactStore
from .errors import ConfigError
from .model import ToolSpec
from .refs import ARTIFACT_RE

MAX_LIMIT = 2_000  # lines per read_result call
MAX_CHARS = 40_000  # characters returned per call (at most: a session lowers it to its window, page_chars)
MIN_CHARS = 2_000  # the least a session's page is lowered to
MAX_LINE_CHARS = 2_000  # longer lines are split into numbered continuation lines starting with CONT
MAX_MATCHES = 100
MAX_CONTEXT = 20
MAX_PATTERN = 500
REGEX_TIMEOUT = 2.0  # seconds per search (the `regex` module supports timeouts)

READ_RESULT = ToolSpec(
    name="read_result",
    description=(
        "Read lines of a stored tool result that was shortened in the conversation. Pass the artifact:// "
        "reference shown with the shortened result. Lines are numbered from 0; a very long line continues "
        "on the next numbered lines, which start with ↪."
    ),
    parameters={
        "type": "object",
        "properties": {
            "ref": {"type": "string", "description": "The reference, e.g. artifact://3f2a…"},
            "offset": {"type": "integer", "minimum": 0, "description": "First line to read (0-based). Default 0."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                      "description": f"How many lines to read. Default 200, at most {MAX_LIMIT}."},
        },
        "required": ["ref"],
        "additionalProperties": False,
    },
)

SEARCH_RESULT = ToolSpec(
    name="search_result",
    description=(
        "Search a stored tool result with a regular expression and return the matching lines with context. "
        "Pass the artifact:// reference shown with the shortened result."
    ),
    parameters={
        "type": "object",
        "properties": {
            "ref": {"type": "string", "description": "The reference, e.g. artifact://3f2a…"},
            "pattern": {"type": "string", "description": "A regular expression (Python syntax)."},
            "context_lines": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT,
                              "description": "Lines of context around each match. Default 2."},
        },
        "required": ["ref", "pattern"],
        "additionalProperties": False,
    },
)

RESULT_TOOLS: tuple[ToolSpec, ...] = (READ_RESULT, SEARCH_RESULT)


def _int_arg(args: Mapping[str, Any], name: str, default: int) -> int | str:
    v = args.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            return int(v)
        return f"error: {name} must be an integer, got {v!r}"
    return v


def _wrap(physical: list[str]) -> list[str]:
    """Lines as the tools number them: a line longer than ``MAX_LINE_CHARS`` is split into chunks, and
    each continuation chunk starts with ``CONT`` so a reader can join them back exactly."""
    out: list[str] = []
    for line in physical:
        if len(line) <= MAX_LINE_CHARS:
            out.append(line)
            continue
        out.append(line[:MAX_LINE_CHARS])
        for i in range(MAX_LINE_CHARS, len(line), MAX_LINE_CHARS):
            out.append(CONT + line[i: i + MAX_LINE_CHARS])
    return out


#: Marks a numbered line that continues the previous one (a long line split for reading).
CONT = "\u21aa"


def page_chars(available: int) -> int:
    """Characters one answer of the tools may return for a window with ``available`` input tokens: a quarter
    of them at three characters a token (code and logs run 3-4), within [``MIN_CHARS``, ``MAX_CHARS``]. At an
    8K window (5,840 available) that is 4,380 characters, not 40,000: a default read would otherwise be
    larger than the whole window, so the next build would have to offload the read again."""
    return max(MIN_CHARS, min(MAX_CHARS, available * 3 // 4))


class ResultTools:
    """Executes ``read_result`` and ``search_result`` for one session's artifacts. ``max_chars``: the most an
    answer returns (a read ends early with a ``continue with offset=`` footer, a search says it was cut)."""

    def __init__(self, artifacts: ArtifactStore, session_id: str, max_chars: int = MAX_CHARS) -> None:
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ConfigError(f"max_chars must be a positive number of characters, got {max_chars!r}")
        self.artifacts = artifacts
        self.session_id = session_id
        self.max_chars = max_chars
        self._lines: dict[str, list[str]] = {}

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return RESULT_TOOLS

    def handles(self, name: str) -> bool:
        return name in ("read_result", "search_result")

    def __call__(self, name: str, arguments: Mapping[str, Any] | None) -> str:
        """Run a call; always returns text (an ``error: …`` string for a bad call)."""
        args = arguments if isinstance(arguments, Mapping) else {}
        if name == "read_result":
            return self.read_result(args.get("ref"), args.get("offset", 0), args.get("limit", 200))
        if name == "search_result":
            return self.search_result(args.get("ref"), args.get("pattern"), args.get("context_lines", 2))
        return f"error: unknown tool {name!r}; the result tools are read_result and search_result"

    def _load(self, ref: Any) -> list[str] | str:
        if not isinstance(ref, str) or not ref:
            return "error: ref is required: pass the artifact:// reference shown with the shortened result"
        m = ARTIFACT_RE.fullmatch(ref.strip())
        if not m:
            return (f"error: {ref[:100]!r} is not a valid reference; it must look like artifact:// followed by "
                    "64 hex characters, exactly as shown with the shortened result")
        sha = m.group(1)
        cached = self._lines.get(sha)
        if cached is not None:
            return cached
        if self.session_id not in self.artifacts.refs(sha):
            return (f"error: {ref} is not a result of this session; use a reference that appeared in this "
                    "conversation")
        data = self.artifacts.get(sha)
        if data is None:
            return f"error: {ref} is no longer stored (it may have been garbage-collected)"
        lines = _wrap(data.decode("utf-8", "replace").split("\n"))
        if len(self._lines) > 32:
            self._lines.clear()
        self._lines[sha] = lines
        return lines

    @staticmethod
    def _cut(line: str) -> str:
        return line  # lines are already split at MAX_LINE_CHARS by _wrap

    def read_result(self, ref: Any, offset: Any = 0, limit: Any = 200) -> str:
        lines = self._load(ref)
        if isinstance(lines, str):
            return lines
        off = _int_arg({"offset": offset}, "offset", 0)
        lim = _int_arg({"limit": limit}, "limit", 200)
        if isinstance(off, str):
            return off
        if isinstance(lim, str):
            return lim
        n = len(lines)
        if off < 0:
            return f"error: offset must be >= 0 (lines are numbered from 0; the result has {n:,} lines)"
        if lim < 1:
            return f"error: limit must be at least 1 (at most {MAX_LIMIT})"
        if off >= n:
            return f"error: offset {off:,} is past the end; the result has {n:,} lines (0 to {n - 1:,})"
        lim = min(lim, MAX_LIMIT)
        out: list[str] = []
        size = 0
        end = off
        for i in range(off, min(n, off + lim)):
            line = f"{i}: {self._cut(lines[i])}"
            if size + len(line) > self.max_chars and out:
                break
            out.append(line)
            size += len(line) + 1
            end = i + 1
        footer = f"[lines {off:,}-{end - 1:,} of {n:,}" + (
            f"; continue with offset={end}]" if end < n else "; end of result]")
        return "\n".join([*out, footer])

    def search_result(self, ref: Any, pattern: Any, context_lines: Any = 2) -> str:
        lines = self._load(ref)
        if isinstance(lines, str):
            return lines
        if not isinstance(pattern, str) or not pattern:
            return "error: pattern is required: pass a regular expression, e.g. 'Error|FAILED'"
        if len(pattern) > MAX_PATTERN:
            return f"error: pattern is too long ({len(pattern)} chars; at most {MAX_PATTERN})"
        ctx = _int_arg({"context_lines": context_lines}, "context_lines", 2)
        if isinstance(ctx, str):
            return ctx
        if ctx < 0:
            return "error: context_lines must be >= 0"
        ctx = min(ctx, MAX_CONTEXT)
        try:
            rx = regex.compile(pattern)
        except regex.error as e:
            return f"error: invalid regular expression {pattern!r}: {e}"
        hits: list[int] = []
        try:
            for i, line in enumerate(lines):
                if rx.search(line, timeout=REGEX_TIMEOUT):
                    hits.append(i)
                    if len(hits) >= MAX_MATCHES:
                        break
        except TimeoutError:
            return f"error: the pattern {pattern!r} took too long to run; simplify it (avoid nested repeats)"
        if not hits:
            return f"no line matches {pattern!r} in {len(lines):,} lines"
        shown: list[str] = []
        size = 0
        last = -1
        truncated = False
        for h in hits:
            lo, hi = max(0, h - ctx), min(len(lines), h + ctx + 1)
            if lo > last + 1 and shown:
                shown.append("--")
            for i in range(max(lo, last + 1), hi):
                line = f"{i}{':' if i == h else '-'} {self._cut(lines[i])}"
                if size + len(line) > self.max_chars:
                    truncated = True
                    break
                shown.append(line)
                size += len(line) + 1
                last = i
            if truncated:
                break
        more = len(hits) >= MAX_MATCHES
        footer = f"[{len(hits)}{'+' if more else ''} matching line(s) of {len(lines):,}" + (
            "; output cut at the size limit, narrow the pattern" if truncated or more else "") + "]"
        return "\n".join([*shown, footer])


__all__ = ["CONT", "MAX_CHARS", "MAX_LIMIT", "MIN_CHARS", "page_chars", "READ_RESULT", "RESULT_TOOLS", "SEARCH_RESULT", "ResultTools"]
