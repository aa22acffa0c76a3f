"""Cache-break linting: volatile content in the stable layers of a request.

The cached prefix (tools → system → session context) is read from the provider's cache only while it stays byte
for byte the same. A timestamp, a date, a UUID, a request id or a counter in it changes on every call, so every call
re-writes the whole prefix at the cache-write price and reads nothing. :func:`lint_request` finds such spans in a
request's stable layers (each system and session segment, with the layer it came from, and each tool's description)
and :func:`move_to_tail` takes them out: each span becomes a placeholder that does not change (``[timestamp 1: see
the end of the request]``) and its value goes to the dynamic tail, after the last breakpoint.

The build records every span in the manifest (a warning naming the layer and the span, and ``cache["volatile"]``);
it moves them only with ``CacheConfig(volatile_to_tail=True)`` (off by default: the request stays as the layers made
it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .request import NeutralRequest, Segment

if TYPE_CHECKING:
    from .manifest import Manifest

#: the kinds of volatile span, in the order they are looked for (an earlier kind wins an overlap)
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("uuid", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")),
    ("timestamp", re.compile(
        r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}|\s?UTC)?"
        r"|\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? \d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* "
        r"\d{4} \d{2}:\d{2}(?::\d{2})?(?: ?(?:GMT|UTC|[+-]\d{4}))?"
        r"|\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"
        r"|\b1[6-9]\d{8}(?:\d{3})?\b")),  # a clock time with seconds, a Unix time (seconds or milliseconds)
    ("date", re.compile(
        r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{4}\b"
        r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2}, \d{4}\b"
        r"|\b\d{1,2} (?:January|February|March|April|May|June|July|August|September|October|November|December) \d{4}\b")),
    ("request_id", re.compile(
        r"\b(?:req|request|msg|run|trace|span|call|chatcmpl|resp)[_-][A-Za-z0-9]{8,}\b")),  # (not bare hex: a commit
    # hash or an artifact's sha256 in an instruction file is stable)
    ("counter", re.compile(
        r"\b(?:turn|call|request|iteration|attempt|run|message|session|invocation)s?"
        r"(?: number| count| no\.?| #|#|:| =)\s*#?\d+\b", re.IGNORECASE)),
)

#: a span's stand-in in the stable layer (``kind`` and its number in the request): the same on every call
PLACEHOLDER = "[{kind} {n}: see the end of the request]"
#: the tail section that carries the moved values
TAIL_HEADER = "VALUES MOVED OUT OF THE CACHED PREFIX"


@dataclass(frozen=True)
class VolatileSpan:
    """A span of a stable layer that changes from call to call: ``layer`` (a segment's layer, ``tools`` for a tool
    description), ``where`` (``system[i]``, ``session[i]``, ``tool <name>``), the ``kind`` (:data:`PATTERNS`), the
    ``text`` and its ``start``/``end`` offsets in that piece."""

    layer: str
    where: str
    kind: str
    text: str
    start: int
    end: int

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "where": self.where, "kind": self.kind, "text": self.text,
                "start": self.start, "end": self.end}

    def warning(self) -> str:
        return (f"cache break: a {self.kind.replace('_', ' ')} {self.text!r} in the stable layer {self.layer!r} "
                f"({self.where}, chars {self.start}-{self.end}) changes the cached prefix on every call; move it to "
                "the tail (CacheConfig(volatile_to_tail=True)) or out of the layer")


@lru_cache(maxsize=512)
def scan(text: str) -> tuple[tuple[str, int, int], ...]:
    """The volatile spans of ``text`` as ``(kind, start, end)``, in text order, without overlaps."""
    taken: list[tuple[str, int, int]] = []
    for kind, pattern in PATTERNS:
        for m in pattern.finditer(text):
            s, e = m.span()
            if not any(s < te and ts < e for _, ts, te in taken):
                taken.append((kind, s, e))
    return tuple(sorted(taken, key=lambda t: t[1]))


def _pieces(req: NeutralRequest) -> list[tuple[str, str, str]]:
    """The stable pieces of ``req`` as ``(layer, where, text)``."""
    out = [(s.layer, f"system[{i}]", s.text) for i, s in enumerate(req.system)]
    out += [(s.layer, f"session[{i}]", s.text) for i, s in enumerate(req.session)]
    out += [("tools", f"tool {t.name}", t.description) for t in req.tools]
    return out


def lint_request(req: NeutralRequest) -> list[VolatileSpan]:
    """Every volatile span in ``req``'s stable layers (system, session context, tool descriptions)."""
    return [VolatileSpan(layer, where, kind, text[s:e], s, e)
            for layer, where, text in _pieces(req) for kind, s, e in scan(text)]


def move_to_tail(req: NeutralRequest, spans: list[VolatileSpan]) -> NeutralRequest:
    """``req`` with each of ``spans`` replaced by a :data:`PLACEHOLDER` in its stable layer and its value listed at
    the start of the tail (the tail is made if there is none): the stable layers render the same on every call."""
    if not spans:
        return req
    counts: dict[str, int] = {}
    lines: list[str] = []
    labels: dict[tuple[str, int], str] = {}
    for sp in spans:
        n = counts[sp.kind] = counts.get(sp.kind, 0) + 1
        label = PLACEHOLDER.format(kind=sp.kind.replace("_", " "), n=n)
        labels[(sp.where, sp.start)] = label
        lines.append(f"- {label[1:label.index(':')]} ({sp.layer}): {sp.text}")

    def clean(where: str, text: str) -> str:
        out, at = [], 0
        for _, s, e in scan(text):
            out += [text[at:s], labels[(where, s)]]
            at = e
        return "".join(out) + text[at:]

    system = tuple(Segment(clean(f"system[{i}]", s.text), s.layer) for i, s in enumerate(req.system))
    session = tuple(Segment(clean(f"session[{i}]", s.text), s.layer) for i, s in enumerate(req.session))
    tools = tuple(replace(t, description=clean(f"tool {t.name}", t.description)) if scan(t.description) else t
                  for t in req.tools)
    section = f"{TAIL_HEADER}\n" + "\n".join(lines)
    tail = f"{section}\n\n{req.tail}" if req.tail else section
    return replace(req, system=system, session=session, tools=tools, tail=tail)


def note_volatile(manifest: Manifest, spans: list[VolatileSpan], *, moved: bool) -> None:
    """Record ``spans`` in ``manifest``: a warning each (when they stayed in place) and ``cache["volatile"]``."""
    manifest.cache["volatile"] = {"moved": moved, "spans": [sp.to_dict() for sp in spans]}
    if not moved:
        manifest.warnings.extend(sp.warning() for sp in spans)


__all__ = ["PATTERNS", "PLACEHOLDER", "TAIL_HEADER", "VolatileSpan", "lint_request", "move_to_tail", "note_volatile", "scan"]
