"""The neutral trace and what every trace-file importer shares: reading the file, making the trace.

A :class:`Trace` is one agent run turned into windowsmith's neutral form: a system prompt, tool
definitions, and a message list in which every tool call is followed by a ``tool`` message holding
its result. Importers never repair silently: each fix is written to :attr:`Trace.repairs`.

The provider message shapes are read by ``windowsmith.formats`` (its ``reader`` toolkit, the
:class:`~windowsmith.formats.reader.Builder` that pairs calls and results); an importer walks its own
file layout and hands the conversations it finds to them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import InvalidMessageError, TraceFormatError
from ..formats.reader import TRACE_FORMATS, Builder, fail
from ..jsonvalues import MAX_JSON_DEPTH, check_json_value, clean_text
from ..model import Message, ToolCall, ToolSpec, Usage

#: the formats :func:`~windowsmith.traces.load_traces` reads
FORMATS: tuple[str, ...] = TRACE_FORMATS

#: File name endings :func:`iter_trace_files` picks up.
TRACE_EXTENSIONS: tuple[str, ...] = (".json", ".jsonl", ".ndjson", ".traj", ".eval")


@dataclass
class Trace:
    """One agent run in neutral form."""

    id: str
    format: str
    source: str
    system: str | None
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    billed: dict[int, Usage] = field(default_factory=dict)
    repairs: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(c for m in self.messages for c in m.tool_calls)

    def __repr__(self) -> str:  # the default would print every message
        return (
            f"Trace(id={self.id!r}, format={self.format!r}, messages={len(self.messages)}, "
            f"tool_calls={len(self.tool_calls)}, repairs={len(self.repairs)})"
        )


# ---------------------------------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------------------------------


@dataclass
class Document:
    """A parsed trace file: either one JSON value or the records of a JSONL file."""

    path: Path
    kind: str  # "json" | "jsonl"
    value: Any = None  # kind == "json"
    records: list[tuple[int, Any]] = field(default_factory=list)  # kind == "jsonl": (1-based line, value)
    notes: list[str] = field(default_factory=list)  # file-level repairs (bad bytes, truncated last line)


def _loads(text: str, p: Path, where: str) -> Any:
    """``json.loads`` whose non-syntax failures (nesting deeper than Python can parse, integers too long
    to convert) become a :class:`TraceFormatError` naming the file; syntax errors propagate."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise fail(p, where, f"nested too deeply to parse (more than {MAX_JSON_DEPTH} levels of lists/objects "
                             "inside each other); this is not a trace a recorder writes: check the file") from None
    except ValueError as e:  # Python's limit on integer digits
        raise fail(p, where, f"a number is too long to read ({e}); quote it as a string") from None
    try:
        check_json_value(value, "the document")
    except InvalidMessageError as e:
        raise fail(p, where, str(e).replace("the document ", "it ", 1)) from None
    return value


def read_document(path: str | Path) -> Document:
    """Read ``path`` as bytes, decode UTF-8 with replacement, and parse it as JSON or JSONL."""
    p = Path(path)
    if p.suffix == ".eval":  # an Inspect AI log: a zip of zstd-compressed JSON members
        from .eval_zip import read_eval_log

        return Document(p, "json", value=read_eval_log(p), notes=[])
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise fail(p, "", f"cannot read the file ({e.strerror or e})") from None
    notes: list[str] = []
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    text, repaired = clean_text(raw, str(p))
    if repaired:
        bad = text.count("\ufffd")
        notes.append(
            f"{p.name}: invalid UTF-8 bytes decoded with replacement (U+FFFD, {bad} replacement chars in file)"
        )
    if not text.strip():
        raise fail(p, "", "the file is empty")
    try:
        return Document(p, "json", value=_loads(text, p, ""), notes=notes)
    except json.JSONDecodeError as whole_err:
        lines = text.split("\n")
        numbered = [(i + 1, ln) for i, ln in enumerate(lines) if ln.strip()]
        first_ok = False
        if len(numbered) >= 2:
            try:
                _loads(numbered[0][1], p, f"line {numbered[0][0]}")
                first_ok = True
            except json.JSONDecodeError:
                first_ok = False
        if not first_ok:
            w = whole_err
            raise fail(
                p,
                f"line {w.lineno} column {w.colno} (char {w.pos})",
                f"invalid or truncated JSON: {w.msg}",
            ) from None
        records: list[tuple[int, Any]] = []
        for k, (lineno, ln) in enumerate(numbered):
            try:
                records.append((lineno, _loads(ln, p, f"line {lineno}")))
            except json.JSONDecodeError as e:
                if k == len(numbered) - 1:
                    notes.append(
                        f"{p.name} line {lineno}: truncated last JSONL line ({len(ln)} chars, {e.msg} "
                        f"at column {e.colno}) skipped"
                    )
                    continue
                raise fail(p, f"line {lineno} column {e.colno}", f"invalid JSONL record: {e.msg}") from None
        return Document(p, "jsonl", records=records, notes=notes)


def iter_trace_files(directory: str | Path) -> list[Path]:
    """Every file under ``directory`` (recursively) with a known trace extension, sorted."""
    d = Path(directory)
    if d.is_file():
        return [d]
    if not d.is_dir():
        raise TraceFormatError(f"{d}: no such directory; pass a directory of trace files or one file")
    return sorted(
        f
        for f in d.rglob("*")
        if f.is_file() and not f.name.startswith(".") and f.name.lower().endswith(TRACE_EXTENSIONS)
        and not _conversation_part(f)
    )


def _conversation_part(f: Path) -> bool:
    """A file an OpenHands V1 conversation keeps beside its ``base_state.json`` (one event per file under
    ``events/``, saved outputs under ``observations/``): part of that trace, not a trace of its own."""
    return (f.parent.name in ("events", "observations") and (f.parent.parent / "base_state.json").is_file())


def retag(traces: Sequence[Trace], format: str, meta: dict[str, Any]) -> list[Trace]:
    """``traces`` (imported by the importer of the log format a session file wraps) as ``format``, with ``meta``
    added to theirs."""
    return [replace(t, format=format, meta={**t.meta, **meta}) for t in traces]


def make_trace(
    *,
    id: str,
    format: str,
    source: str,
    system: str | None,
    tools: tuple[ToolSpec, ...],
    builder: Builder,
    meta: dict[str, Any],
    notes: Sequence[str] = (),
    extra_repairs: Sequence[str] = (),
) -> Trace:
    messages, billed, repairs = builder.finish()
    if builder.large_outputs:
        meta["large_outputs"] = builder.large_outputs
    return Trace(
        id=id,
        format=format,
        source=source,
        system=system if system else None,
        tools=tools,
        messages=messages,
        billed=billed,
        repairs=(*notes, *extra_repairs, *repairs),
        meta=meta,
    )
