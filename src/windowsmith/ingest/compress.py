"""Content-aware compression of tool results into a token budget.

``detect_kind`` names what a tool result is (from the tool's name and arguments, then its content);
``compress`` shrinks it into ``budget_tokens`` with a compressor for that kind, keeping what an agent
needs: failing tests and every error line of a command, the outline of a file, the shape of a JSON
response, the titles and URLs of search results, the text of an HTML page, the header and size of a
table. Whatever the kind, the result is verified with the caller's ``count_tokens`` and falls back to
``head_tail`` (head + tail with a marker that states exactly how many lines and characters were cut).

Outputs are deterministic. Inputs of any size are accepted: structure is analysed on bounded slices,
and token counts of very large inputs are estimated from samples (the note says so).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from ..errors import ConfigError
from ..text import EXACT_COUNT_LIMIT, NOT_JSON, SAMPLE_CHARS, CountTokens, elision_marker, head_tail, try_json
from .compressors import COMPRESSORS as _BY_STRUCTURE
from .compressors import NUMBERED_LINE, Context
from .web import find_results, html_page, json_shape, search_results

__all__ = ["KINDS", "Compressed", "CountTokens", "compress", "detect_kind", "elision_marker", "head_tail"]

KINDS: tuple[str, ...] = ("search_results", "file_read", "command_output", "json", "html", "table", "text")

#: one compressor per kind (``text`` has none: ``head_tail`` is the text compressor)
COMPRESSORS = {**_BY_STRUCTURE, "json": json_shape, "search_results": search_results, "html": html_page}

SNIFF_CHARS = 65_536  # how much of the content detect_kind looks at


@dataclass(frozen=True)
class Compressed:
    """A compressed tool result: ``tokens <= budget_tokens`` by ``count_tokens``."""

    text: str
    kind: str
    original_tokens: int
    tokens: int
    notes: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------------
# Kind detection
# ---------------------------------------------------------------------------------------------------

_FILE_TOOLS = re.compile(
    r"^(?:read|read_?file|file_?read|cat|view|view_?file|open_?file|get_?file(?:_contents)?|read_?text_?file"
    r"|fs_?read|readfile|read_?many_?files)$"
)
_EDITOR_TOOLS = re.compile(r"^(?:str_replace_editor|str_replace_based_edit_tool|text_editor|editor|edit_file)$")
_COMMAND_TOOLS = re.compile(
    r"^(?:bash|sh|zsh|shell|terminal|exec|execute|execute_?(?:bash|command|shell|code)|run|run_?(?:command|shell"
    r"|shell_?command|terminal_?cmd|bash|tests?|code)|command|cmd|powershell|local_shell|computer_terminal)$"
)
_SEARCH_TOOLS = re.compile(
    r"^(?:search|web_?search|websearch|google(?:_search)?|bing(?:_search)?|brave(?:_web)?_search|tavily(?:_search)?"
    r"|exa_search|duckduckgo(?:_search)?|ddg_search|serp(?:er|api)?(?:_search)?|search_?web|internet_search)$"
)
_READ_COMMANDS = frozenset({"cat", "head", "tail", "less", "more", "nl", "bat"})
_PATH_ARGS = ("path", "file_path", "filepath", "filename", "file", "target_file", "absolute_path", "relative_path")
_COMMAND_ARGS = ("command", "cmd", "script", "code")

_COMMAND_MARKERS = re.compile(
    r"(?m)^(?:Exit code:|exit code:|\[exit code|Process exited|Command exited|\$ |Traceback \(most recent call last\)"
    r"|={5,} (?:FAILURES|ERRORS|test session starts|short test summary)|--- FAIL|npm ERR!|error\[E\d+\]|FAIL\b"
    r"|Ran \d+ tests? in|PASS |ok  \t|\+ )"
)
_HTML_TAG = re.compile(r"<(?:!doctype html|html|head|body|div|p|span|a |table|ul|li|script|style|meta|link|h[1-6])\b", re.I)
_MD_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)+\|?\s*$", re.M)


def _norm_tool(name: str | None) -> str:
    if not name:
        return ""
    base = name.strip().lower().replace("-", "_")
    return base.rsplit(".", 1)[-1].rsplit("__", 1)[-1]  # mcp__server__tool, functions.bash


def _command_of(arguments: Mapping[str, Any] | None) -> str | None:
    if not arguments:
        return None
    for key in _COMMAND_ARGS:
        v = arguments.get(key)
        if isinstance(v, str):
            return v
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return " ".join(v)
    return None


def _read_command_path(command: str) -> str | None:
    """``cat -n src/app.py`` → ``src/app.py``; None unless the command only reads one file."""
    if any(c in command for c in "|;&><`$\n"):
        return None
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if not argv or argv[0].rsplit("/", 1)[-1] not in _READ_COMMANDS:
        return None
    files = [a for a in argv[1:] if not a.startswith("-") and not a.isdigit()]
    return files[0] if len(files) == 1 else None


def path_of(tool_name: str | None, arguments: Mapping[str, Any] | None) -> str | None:
    """The file path a tool call reads, when its arguments say."""
    if arguments:
        for key in _PATH_ARGS:
            v = arguments.get(key)
            if isinstance(v, str) and v:
                return v
        command = _command_of(arguments)
        if command:
            return _read_command_path(command)
    return None


def detect_kind(text: str, tool_name: str | None = None, arguments: Mapping[str, Any] | None = None) -> str:
    """One of :data:`KINDS`, from the tool's name and arguments first, then from the content."""
    name = _norm_tool(tool_name)
    if name:
        if _FILE_TOOLS.match(name):
            return "file_read"
        if _EDITOR_TOOLS.match(name):
            command = (arguments or {}).get("command")
            if command in (None, "view", "read"):
                return "file_read"
            return "command_output"
        if _SEARCH_TOOLS.match(name):
            return "search_results"
        if _COMMAND_TOOLS.match(name):
            command = _command_of(arguments)
            if command and _read_command_path(command):
                return "file_read"
            sniffed = _sniff(text)
            return sniffed if sniffed in ("json", "html", "search_results") else "command_output"
    return _sniff(text)


def _sniff(text: str) -> str:
    head = text[:SNIFF_CHARS]
    stripped = head.lstrip()
    if stripped[:1] in ("{", "["):
        parsed = try_json(text)
        if parsed is not NOT_JSON:
            return "search_results" if find_results(parsed) else "json"
    lines = head.splitlines()[:60]
    if "\x00" in head:
        return "text"
    lower = stripped[:2048].lower()
    if lower.startswith(("<!doctype html", "<html")) or len(_HTML_TAG.findall(head)) >= 8:
        return "html"
    if _COMMAND_MARKERS.search(head) or _COMMAND_MARKERS.search(text[-SNIFF_CHARS:]):
        return "command_output"
    if len(lines) >= 5 and _numbered(lines):
        return "file_read"
    if _looks_like_table(lines, head):
        return "table"
    return "text"


def _numbered(lines: list[str]) -> bool:
    """``cat -n`` / editor view output: most lines start with consecutive line numbers."""
    nums = [int(m.group(1)) for m in map(NUMBERED_LINE.match, lines) if m]
    if len(nums) < 0.8 * len(lines):
        return False
    return sum(1 for a, b in pairwise(nums) if b == a + 1) >= 0.8 * (len(nums) - 1)


def _looks_like_table(lines: list[str], head: str) -> bool:
    if len(lines) >= 3 and lines[0].lstrip().startswith("|") and _MD_TABLE_SEP.search(head):
        return True
    rows = [ln for ln in lines[:40] if ln.strip()]
    if len(rows) < 3:
        return False
    for delim in ("\t", ",", ";", "|"):
        counts = [ln.count(delim) for ln in rows]
        first = counts[0]
        if first >= 1 and sum(1 for c in counts if c == first) >= 0.9 * len(counts):
            if delim == "," and sum(len(ln) for ln in rows) / len(rows) > 80 * (first + 1):
                continue  # prose with commas, not CSV
            return True
    return False


# ---------------------------------------------------------------------------------------------------
# compress
# ---------------------------------------------------------------------------------------------------


def _original_tokens(text: str, count_tokens: CountTokens) -> tuple[int, bool]:
    if len(text) <= EXACT_COUNT_LIMIT:
        return count_tokens(text), True
    step = len(text) // 4
    samples = [text[i * step : i * step + SAMPLE_CHARS] for i in range(4)]
    sampled = sum(map(len, samples))
    return round(len(text) * sum(map(count_tokens, samples)) / max(1, sampled)), False


_HEAD_FRACTION = {"command_output": 0.35, "file_read": 0.7, "text": 0.5}


def compress(
    text: str,
    *,
    kind: str | None,
    budget_tokens: int,
    count_tokens: CountTokens,
    tool_name: str | None = None,
    arguments: Mapping[str, Any] | None = None,
) -> Compressed:
    """Compress a tool result into ``budget_tokens`` (counted with ``count_tokens``).

    ``kind`` is one of :data:`KINDS` or None to detect it. A text that already fits is returned unchanged.
    """
    if not isinstance(budget_tokens, int) or budget_tokens < 1:
        raise ConfigError(f"budget_tokens must be a positive integer, got {budget_tokens!r}")
    if kind is None:
        kind = detect_kind(text, tool_name, arguments)
    elif kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}; use one of {', '.join(KINDS)} or None to detect it")
    original, exact = _original_tokens(text, count_tokens)
    notes = [f"kind={kind}"]
    if not exact:
        notes.append("original_tokens estimated from samples")
    if original <= budget_tokens and (exact or count_tokens(text) <= budget_tokens):
        return Compressed(text, kind, original, original, (*notes, "fits: unchanged"))
    ctx = Context(
        budget=budget_tokens,
        count=count_tokens,
        tool_name=tool_name,
        arguments=arguments,
        path=path_of(tool_name, arguments),
        notes=notes,
    )
    out: str | None = None
    compressor = COMPRESSORS.get(kind)
    if compressor is not None:
        try:
            out = compressor(text, ctx)
        except (ValueError, TypeError, KeyError, IndexError, RecursionError, UnicodeError) as e:
            notes.append(f"{kind} compressor failed ({type(e).__name__}); fell back to head_tail")
            out = None
    if out is not None:
        used = count_tokens(out)
        if used <= budget_tokens:
            return Compressed(out, kind, original, used, tuple(notes))
        notes.append(f"{kind} summary did not fit ({used} > {budget_tokens} tokens)")
    if kind != "text":
        notes.append("fallback: head_tail")
    out = head_tail(text, budget_tokens, count_tokens, head_fraction=_HEAD_FRACTION.get(kind, 0.5))
    return Compressed(out, kind, original, count_tokens(out), tuple(notes))
