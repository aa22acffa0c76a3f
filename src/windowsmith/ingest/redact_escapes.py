"""A decoded view of the JSON string escapes in a text, for :mod:`windowsmith.ingest.redact`.

A tool result is often JSON that carries other text inside a string: ``{"stdout": "DB_PASSWORD=\\"Xk9\\"\\n"}``.
Matched as it stands, the secret sits between ``\\"`` and ``\\"`` (a rule sees a backslash, not a quote) and
after ``\\n`` (a rule sees the letter ``n`` glued to the next token). :func:`unescape` decodes the escapes
(``\\"``, ``\\\\``, ``\\/``, ``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t``, ``\\uXXXX``) into a view the rules run
over, and :meth:`View.original` maps a position of the view back to the text: a span found in the view
becomes the span of the text that holds the same characters, from the start of the first one's escape to
the start of the character after the last. Replacing that span with a marker (which needs no escaping)
keeps a JSON document valid. :func:`align` does the same for spans found in the text itself: a span never
starts or ends inside an escape sequence.

One pass, linear in the text: the view and a sorted list of its escape positions (a bisect per mapped
position).
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from dataclasses import dataclass

__all__ = ["View", "align", "only_escapes", "unescape"]

ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|[\"\\/bfnrt])")
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@dataclass(frozen=True)
class View:
    """The decoded text and, for each escape decoded, its position in the view, in the text and its length
    there (``\\n``: 2, ``\\u00e9``: 6)."""

    text: str
    at_view: array[int]
    at_text: array[int]
    length: array[int]

    def original(self, pos: int) -> int:
        """The position in the text of the character at ``pos`` in the view (or of the end, at its end)."""
        k = bisect_right(self.at_view, pos) - 1
        if k < 0:
            return pos
        if self.at_view[k] == pos:
            return self.at_text[k]
        return self.at_text[k] + self.length[k] + (pos - self.at_view[k] - 1)


def unescape(text: str) -> View | None:
    """The view of ``text`` with its JSON string escapes decoded, or None when it has none."""
    if "\\" not in text:
        return None
    parts: list[str] = []
    at_view, at_text, length = array("q"), array("q"), array("q")  # 8 bytes an escape, not an int object
    pos = 0
    size = 0  # length of the view so far
    for m in ESCAPE.finditer(text):
        start, end = m.span()
        parts.append(text[pos:start])
        size += start - pos
        s = m.group()
        parts.append(chr(int(s[2:], 16)) if s[1] == "u" else _SIMPLE[s[1]])
        at_view.append(size)
        at_text.append(start)
        length.append(end - start)
        size += 1
        pos = end
    if not at_view:
        return None
    parts.append(text[pos:])
    return View("".join(parts), at_view, at_text, length)


def _escape_start(text: str, pos: int) -> int | None:
    """The start of the escape sequence that covers ``pos`` without starting there, if any."""
    for j in range(pos - 1, max(-1, pos - 6), -1):
        if text[j] != "\\":
            continue
        run = 0
        while j - run - 1 >= 0 and text[j - run - 1] == "\\":
            run += 1
        if run % 2:
            continue  # this backslash is itself escaped
        m = ESCAPE.match(text, j)
        if m is not None and m.start() < pos < m.end():
            return j
        return None
    return None


def align(text: str, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` moved so that neither splits an escape sequence: the start back to the escape's
    backslash, the end back to before the escape (``Xk9\\`` of ``Xk9\\"`` keeps its ``\\"``)."""
    s = _escape_start(text, start)
    e = _escape_start(text, end)
    return (start if s is None else s), (end if e is None else e)


def only_escapes(span: str) -> bool:
    """Whether ``span`` is nothing but escape sequences (``\\\\`` of ``\\\\\\"``): the quoting of a string
    inside a string, never a value of its own."""
    return "\\" in span and not ESCAPE.sub("", span)
