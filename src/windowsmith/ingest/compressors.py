"""One compressor per kind of tool result. Each returns a summary that fits ``ctx.budget`` or None.

Every compressor builds its summary at decreasing levels of detail and keeps the richest level that
fits (checked with the caller's token counter); ``compress`` falls back to head + tail when a
compressor returns None. Structure is analysed on bounded slices so inputs of any size are cheap.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..text import NUMBERED_LINE, CountTokens
from ..text_view import cap_line, render_pieces

#: the line a file-read view prints above its outline (``compaction.references.outline_keys`` reads what follows)
OUTLINE_TITLE = "Outline (lines: definition):"

__all__ = ["COMPRESSORS", "NUMBERED_LINE", "SCAN_LIMIT", "Context", "fit_levels"]

SCAN_LIMIT = 16_000_000  # chars of a file/HTML/table analysed for structure


@dataclass
class Context:
    budget: int
    count: CountTokens
    tool_name: str | None = None
    arguments: Mapping[str, Any] | None = None
    path: str | None = None
    notes: list[str] = field(default_factory=list)


def fit_levels(build: Callable[[int], str | None], levels: int, ctx: Context) -> str | None:
    """The richest ``build(level)`` (level 0 is richest, ``levels - 1`` poorest) that fits the budget.

    Assumes that poorer levels are shorter; binary search keeps the number of token counts logarithmic.
    """
    poorest = build(levels - 1)
    if poorest is None or ctx.count(poorest) > ctx.budget:
        return None
    best, lo, hi = poorest, 0, levels - 1  # answer in [lo, hi]; hi fits
    while lo < hi:
        mid = (lo + hi) // 2
        cand = build(mid)
        if cand is not None and ctx.count(cand) <= ctx.budget:
            best, hi = cand, mid
        else:
            lo = mid + 1
    return best


def _line_ends(text: str, start: int, n: int) -> int:
    """Position after the first ``n`` lines from ``start``."""
    pos = start
    for _ in range(n):
        k = text.find("\n", pos)
        if k < 0:
            return len(text)
        pos = k + 1
    return pos


def _line_starts_back(text: str, n: int) -> int:
    """Start position of the last ``n`` lines."""
    end = len(text) - 1 if text.endswith("\n") else len(text)
    pos = end
    for _ in range(n):
        k = text.rfind("\n", 0, pos)
        if k < 0:
            return 0
        pos = k
    return pos + 1 if n else len(text)


# ---------------------------------------------------------------------------------------------------
# command output
# ---------------------------------------------------------------------------------------------------

# Literal alternatives only (no anchors, no look-behind) so the scan runs at memchr-like speed.
_ERR_HIT = re.compile(
    r"Traceback \(most recent call last\)|rror|ERROR|CRITICAL|FAIL|panic:|fatal|FATAL|Exception|npm ERR!|✕|✗|●|\nE {3}"
    r"|Segmentation fault|Killed|Aborted|exit (?:code|status) [1-9]|\) (?:failed|error)"
)
_NOT_ERROR = re.compile(r"\b0 (?:errors?|failed|failures)\b|\berrors?=0\b|\bfailures?=0\b|\bno errors?\b", re.I)
_EXIT_CODE = re.compile(
    r"(?i)(?:exit(?:ed)?(?: with)?[ _](?:code|status)|return ?code|returncode|exit_code)\W{0,3}(-?\d{1,3})\b"
)
_FAILING_TEST = [
    re.compile(r"^(?:FAILED|ERROR) ([^\s]+::[^\s]+)"),  # pytest short summary
    re.compile(r"^([^\s]+::[^\s]+) (?:FAILED|ERROR)"),  # pytest -v
    re.compile(r"^(?:FAIL|ERROR): (\w+) \(([\w.]+)\)"),  # unittest
    re.compile(r"^\s*--- FAIL: (\S+)"),  # go test
    re.compile(r"^test (\S+) \.\.\. FAILED"),  # cargo test
    re.compile(r"^\s*(?:✕|\u00d7) (.+?)(?: \(\d+(?:\.\d+)? ?m?s\))?$"),  # jest / vitest
    re.compile(r"^\s*● (?!Console)(.+)$"),  # jest failure header
]
_ERROR_SCAN_CAP = 20_000  # error pieces collected


def _failing_test(line: str) -> str | None:
    for rx in _FAILING_TEST:
        m = rx.search(line)
        if m:
            return f"{m.group(2)}.{m.group(1)}" if rx.groups == 2 else m.group(1).strip()
    return None


def _error_pieces(text: str) -> tuple[list[tuple[int, int]], list[str], int]:
    """Error line ranges (tracebacks as whole blocks), failing test names, and how many error lines."""
    pieces: list[tuple[int, int]] = []
    tests: list[str] = []
    seen: set[str] = set()
    skip_to = 0
    total = 0
    for m in _ERR_HIT.finditer(text):
        p = m.start() + (1 if m.group(0).startswith("\n") else 0)
        if p < skip_to:
            continue
        a = text.rfind("\n", 0, p) + 1
        b = text.find("\n", p)
        b = len(text) if b < 0 else b + 1
        skip_to = b
        line = text[a:b].rstrip("\n")
        if _NOT_ERROR.search(line) and not line.startswith(("FAILED", "ERROR")):
            continue
        if m.group(0).startswith("Traceback"):
            b = _traceback_end(text, b)
            skip_to = b
        total += 1
        name = _failing_test(line[:2000])
        if name and name not in seen:
            seen.add(name)
            tests.append(name)
        if len(pieces) < _ERROR_SCAN_CAP:
            pieces.append((a, b))
    return pieces, tests, total


def _traceback_end(text: str, pos: int, max_lines: int = 400) -> int:
    """End of a Python traceback: indented frame lines up to the first unindented line (the exception)."""
    for _ in range(max_lines):
        if pos >= len(text):
            return pos
        k = text.find("\n", pos)
        k = len(text) if k < 0 else k + 1
        line = text[pos:k]
        pos = k
        if line.strip() and not line.startswith((" ", "\t")):
            return pos
    return pos


def _command_output(text: str, ctx: Context) -> str | None:
    pieces, tests, n_errors = _error_pieces(text)
    total_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    tail_slice = text[-65_536:]
    codes = _EXIT_CODE.findall(tail_slice) or _EXIT_CODE.findall(text[:4096])
    header = f"[command output: {total_lines:,} lines, {len(text):,} chars"
    if codes:
        header += f"; exit code {codes[-1]}"
    if tests:
        header += f"; {len(tests)} failing test{'s' if len(tests) != 1 else ''}"
    header += f"; {n_errors:,} error line{'s' if n_errors != 1 else ''}]"
    if n_errors > len(pieces):
        header += f"\n[only the first {len(pieces):,} error lines were collected]"
    ctx.notes.append(f"kept {len(tests)} failing tests, {min(n_errors, len(pieces))} error lines")
    test_line = ""
    if tests:
        shown = tests[:50]
        test_line = "Failing tests: " + ", ".join(shown) + (f" (+{len(tests) - 50} more)" if len(tests) > 50 else "")

    head_tail_levels = [(60, 100), (40, 60), (25, 40), (15, 25), (10, 15), (5, 8), (2, 4), (0, 1), (0, 0)]
    error_caps = [len(pieces), 400, 200, 100, 50, 25, 12, 6, 3, 1, 0]
    error_caps = sorted({c for c in error_caps if c <= len(pieces)}, reverse=True)
    levels = [(h, t, len(pieces)) for h, t in head_tail_levels] + [(0, 0, c) for c in error_caps[1:]]

    def build(i: int) -> str:
        h, t, cap = levels[i]
        chosen = pieces if cap >= len(pieces) else pieces[: (cap + 1) // 2] + pieces[len(pieces) - cap // 2 :]
        kept = list(chosen)
        if h:
            kept.append((0, _line_ends(text, 0, h)))
        if t:
            kept.append((_line_starts_back(text, t), len(text)))
        parts = [header]
        if test_line:
            parts.append(test_line)
        if cap < len(pieces):
            parts.append(f"[{len(pieces) - cap:,} of {len(pieces):,} error blocks not shown]")
        parts.append(render_pieces(text, kept))
        return "\n".join(parts)

    return fit_levels(build, len(levels), ctx)


# ---------------------------------------------------------------------------------------------------
# file read
# ---------------------------------------------------------------------------------------------------

_OUTLINE = {
    "py": r"[ \t]*(?:async[ \t]+def|def|class)[ \t]+\w+",
    "js": r"[ \t]*(?:export[ \t]+)?(?:default[ \t]+)?(?:async[ \t]+)?(?:function\*?[ \t]*\w*|(?:abstract[ \t]+)?class[ \t]+\w+"
    r"|interface[ \t]+\w+|type[ \t]+\w+[ \t]*=|enum[ \t]+\w+|(?:const|let|var)[ \t]+\w+[ \t]*=[ \t]*(?:async[ \t]*)?"
    r"(?:\([^()\n]{0,200}\)|\w+)[ \t]*=>)"
    r"|[ \t]+(?:(?:public|private|protected|static|async|readonly|get|set)[ \t]+){0,4}\w+[ \t]*\([^()\n]{0,200}\)"
    r"[ \t]*(?::[^{\n]{0,80})?\{[ \t]*$",
    "go": r"func[ \t]+(?:\([^()\n]{0,120}\)[ \t]*)?\w+|type[ \t]+\w+[ \t]+(?:struct|interface)",
    "rs": r"[ \t]*(?:pub(?:\([\w: ]{0,40}\))?[ \t]+)?(?:async[ \t]+|unsafe[ \t]+|const[ \t]+){0,2}"
    r"(?:fn|struct|enum|trait|impl|mod|macro_rules!)[ \t<]",
    "java": r"[ \t]*(?:@\w+[ \t]+)?(?:(?:public|private|protected|static|final|abstract|sealed|override|internal|open"
    r"|suspend|data|synchronized)[ \t]+){0,6}(?:class|interface|enum|record|object|fun)[ \t]+\w+"
    r"|[ \t]+(?:(?:public|private|protected|static|final|abstract|synchronized)[ \t]+){1,5}[\w<>\[\],.? ]{1,80}[ \t]+\w+"
    r"[ \t]*\(",
    # C/C++: definitions start at column 0 (a statement inside a body is indented); a line ending in ``;``
    # is a declaration or a call, not a definition
    "c": r"(?:template[ \t]*<[^<>\n]{0,120}>[ \t]*)?(?:[A-Za-z_][\w:<>,]*[ \t*&]+){1,6}[*&]*~?[A-Za-z_][\w:~]*[ \t]*\("
    r"(?![^\n]*;[ \t]*$)"
    r"|(?:typedef[ \t]+)?(?:struct|union|enum|class|namespace)[ \t]+\w+(?![^\n]*;[ \t]*$)|#[ \t]*define[ \t]+\w+",
}
_EXT = {
    "py": "py", "pyi": "py", "js": "js", "jsx": "js", "ts": "js", "tsx": "js", "mjs": "js", "cjs": "js",
    "go": "go", "rs": "rs", "java": "java", "kt": "java", "kts": "java", "scala": "java", "cs": "java",
    "c": "c", "h": "c", "cc": "c", "cpp": "c", "cxx": "c", "hpp": "c", "hh": "c", "hxx": "c",
}  # fmt: skip
_OUTLINE_BY_LANG = {k: re.compile(f"^(?:{p})", re.M) for k, p in _OUTLINE.items()}
# a file of unknown language: every pattern but C's (any column-0 ``word word(`` line would match it)
_OUTLINE_ALL = re.compile("^(?:" + "|".join(f"(?:{p})" for k, p in _OUTLINE.items() if k != "c") + ")", re.M)
_OUTLINE_CAP = 5_000


def _outline(text: str, path: str | None) -> list[tuple[int, int, str, int]]:
    """(line number, indent, stripped line, last line of its block) of every definition, in order."""
    ext = path.rsplit(".", 1)[-1].lower() if path and "." in path.rsplit("/", 1)[-1] else ""
    rx = _OUTLINE_BY_LANG.get(_EXT.get(ext, ""), _OUTLINE_ALL)
    scan = text[:SCAN_LIMIT]
    # cat -n / editor view output (under a header line or two, as OpenHands' and SWE-agent's viewers
    # print it): match after the number prefix
    numbered = any(NUMBERED_LINE.match(ln) for ln in scan[:600].split("\n", 3)[:3])
    if numbered:
        # (the gutter as NUMBERED_LINE matches it, then the definition)
        rx = re.compile(NUMBERED_LINE.pattern.removeprefix("(?m)") + "(?:" + rx.pattern.removeprefix("^(?:").removesuffix(")")
                        + ")", re.M)
    found: list[tuple[int, int, int, str]] = []  # (physical line index, shown number, indent, line)
    line_no, last = 1, 0
    for m in rx.finditer(scan):
        a = m.start()
        line_no += scan.count("\n", last, a)
        last = a
        b = scan.find("\n", a)
        line = scan[a : len(scan) if b < 0 else b]
        n = line_no
        if numbered:
            pm = NUMBERED_LINE.match(line)
            if pm:
                n = int(pm.group(1))
                line = line[pm.end() :]
        stripped = line.strip()
        found.append((line_no - 1, n, len(line) - len(line.lstrip()), cap_line(stripped.rstrip("{:").rstrip(), 160)))
        if len(found) >= _OUTLINE_CAP:
            break
    if not found:
        return []
    shown, body = _numbered_lines(scan, numbered)
    return [(n, indent, line, shown[_block_end(body, p, indent)]) for p, n, indent, line in found]


_BLOCK_SCAN = 5_000  # lines followed past a definition to find the end of its block


def _numbered_lines(scan: str, numbered: bool) -> tuple[list[int], list[str]]:
    """Each physical line's shown number (its ``cat -n`` prefix, else its position) and its text."""
    lines = scan.split("\n")
    shown = list(range(1, len(lines) + 1))
    if numbered:
        for k, ln in enumerate(lines):
            pm = NUMBERED_LINE.match(ln)
            if pm:
                shown[k] = int(pm.group(1))
                lines[k] = ln[pm.end() :]
    return shown, lines


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The last line of the block a definition at ``lines[start]`` opens: its closing ``}`` at the
    definition's indent, else the last line indented deeper (Python) before the next line that is not."""
    end = start
    for j in range(start + 1, min(len(lines), start + _BLOCK_SCAN)):
        st = lines[j].strip()
        if not st:
            continue
        if len(lines[j]) - len(lines[j].lstrip()) > indent or st[0] in "{)":  # the body, an opening brace
            end = j  # on its own line, or the rest of a signature
            continue
        return j if st[0] == "}" else end
    return end


#: a read's arguments that name the line it is about (SWE-agent's ``open(path, line_number)`` centres its window on it;
#: a ``view_range``'s first line starts one)
_FOCUS_ARGS = ("line_number", "line", "view_range", "start_line")
_FOCUS_CONTEXT = 5  # lines kept above the focus line


def _focus_start(text: str, arguments: Mapping[str, Any] | None) -> int:
    """Where the head of a file read's view starts: a few lines above the line its call asked for, when that line is
    in the listing's gutter and not among its first lines; else 0."""
    if not arguments:
        return 0
    want = None
    for key in _FOCUS_ARGS:
        v = arguments.get(key)
        if isinstance(v, list | tuple) and v:
            v = v[0]
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            want = v
            break
    if want is None:
        return 0
    for m in NUMBERED_LINE.finditer(text, 0, SCAN_LIMIT):
        if int(m.group(1)) == want:
            start = _line_starts_back(text[: m.start()], _FOCUS_CONTEXT) if m.start() else 0
            return start if text.count("\n", 0, start) > 1 else 0
    return 0


def _file_read(text: str, ctx: Context) -> str | None:
    total_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    focus = _focus_start(text, ctx.arguments)
    symbols = _outline(text, ctx.path)
    what = f"file: {ctx.path}" if ctx.path else "file"
    header = f"[{what} — {total_lines:,} lines, {len(text):,} chars; outline: {len(symbols):,} symbols]"
    ctx.notes.append(f"outline of {len(symbols)} symbols")
    heads = [80, 50, 30, 20, 12, 6, 3, 0]
    caps = sorted({c for c in (len(symbols), 1000, 500, 250, 120, 60, 30, 15, 5, 0) if c <= len(symbols)}, reverse=True)
    levels = [(h, len(symbols)) for h in heads] + [(0, c) for c in caps[1:]]
    min_indent = min((s[1] for s in symbols), default=0)

    def pick(cap: int) -> list[tuple[int, int, str, int]]:
        if cap >= len(symbols):
            return symbols
        top = [s for s in symbols if s[1] <= min_indent]
        if len(top) >= cap:
            return top[:cap]
        rest = [s for s in symbols if s[1] > min_indent][: cap - len(top)]
        return sorted(top + rest)

    def build(i: int) -> str:
        h, cap = levels[i]
        parts = [header]
        if h:
            # the head: the first lines, or, for a read about one line, the first line (a viewer's title) and the
            # lines from a few above the one it asked for
            end = _line_ends(text, focus, h)
            pieces = [(0, _line_ends(text, 0, 1)), (focus, end)] if focus else [(0, end)]
            parts.append(render_pieces(text, pieces))
        chosen = pick(cap)
        if chosen:
            labels = [f"{n}-{end}" if end > n else str(n) for n, _, _, end in chosen]
            width = max(map(len, labels))
            parts.append(OUTLINE_TITLE)
            parts.extend(f"{lab:>{width}}: {' ' * min(s[1], 16)}{s[2]}" for lab, s in zip(labels, chosen, strict=True))
        if cap < len(symbols):
            parts.append(f"[… {len(symbols) - cap:,} more definitions not shown …]")
        return "\n".join(parts)

    return fit_levels(build, len(levels), ctx)


# ---------------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------------


def _table(text: str, ctx: Context) -> str | None:
    scan = text[:SCAN_LIMIT]
    first = scan.split("\n", 1)[0]
    md = first.lstrip().startswith("|")
    delim = "|" if md else max(("\t", ",", ";", "|"), key=first.count)
    header_lines = 2 if md else 1
    total = text.count("\n") + (0 if text.endswith("\n") else 1)
    rows = max(0, total - header_lines)
    if md:
        cols = len(first.strip().strip("|").split("|"))
    else:
        try:
            cols = len(next(csv.reader([first], delimiter=delim)))
        except (csv.Error, StopIteration):
            cols = first.count(delim) + 1
    name = {"\t": "tsv", ",": "csv", ";": "csv (;)", "|": "markdown" if md else "pipe-separated"}[delim]
    head = f"[table ({name}): {rows:,} rows, {cols} columns]"
    ctx.notes.append(f"table of {rows} rows")
    body_start = _line_ends(text, 0, header_lines)
    levels = [(30, 10), (20, 5), (12, 3), (8, 2), (5, 1), (3, 0), (1, 0), (0, 0)]

    def build(i: int) -> str:
        first_n, last_n = levels[i]
        kept = [(0, body_start)]
        if first_n:
            kept.append((body_start, _line_ends(text, body_start, first_n)))
        if last_n and rows > first_n:
            kept.append((max(body_start, _line_starts_back(text, last_n)), len(text)))
        return head + "\n" + render_pieces(text, kept)

    return fit_levels(build, len(levels), ctx)


def _text(text: str, ctx: Context) -> str | None:
    return None  # compress() falls back to head_tail, which is the text compressor


COMPRESSORS: dict[str, Callable[[str, Context], str | None]] = {
    "command_output": _command_output,
    "file_read": _file_read,
    "table": _table,
    "text": _text,
}
