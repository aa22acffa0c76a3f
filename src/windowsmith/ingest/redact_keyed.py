"""Keyed values for :mod:`windowsmith.ingest.redact`: a value in ``KEY=value``, ``"key": "value"``, ``key: value``,
``--key value``, ``<key>value</key>`` and the other positions ``redact_rules.ASSIGN`` knows, whose key names a
secret; :func:`find_keyed` yields the spans, :func:`redact_values.classify` judges each value.

A bare (unquoted) value runs to the end of the line or a quote, through ``& ( ) ] } ; , . < > |`` (a password may
hold any of them), and stops only where the next key, an operator or a sentence starts (:func:`bare_end`). A key
candidate that ends a base64 string (``...+pw9==`` of a package-lock integrity hash) is not a key.

Linear time: keys are found from keyword hits; each value is judged once (a skip mark moves past it) and every
look around a hit is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .redact_rules import (
    ASSIGN,
    B64_TAIL,
    BARE_MAYBE_STOP,
    BARE_STOP,
    BARE_VALUE_MAX,
    CALL,
    CLOSERS,
    COMPARISONS,
    FLAG,
    IDENT_NO_DIGIT,
    INTEGRITY_PREFIX,
    JSON_NUMBER,
    KEY_CHARS,
    KEY_MAX,
    KEY_RUN,
    KEYWORD,
    KEYWORD_I,
    NEXT_KEY,
    P_KEYED,
    REST_OF_LINE,
    XML,
)
from .redact_values import classify, key_kind, looks_like_words

__all__ = ["Span", "bare_end", "find_keyed"]

_B64_NEXT = ("=", "+", "/")  # what follows a key candidate that may end a base64 string

#: (start, end, type, priority); a lower priority number wins an overlap.
Span = tuple[int, int, str, int]

def _line_start(text: str, pos: int) -> bool:
    i = pos - 1
    while i >= 0 and text[i] in " \t-":
        i -= 1
    return i < 0 or text[i] in "\n\x00"


def _value_group(m: re.Match[str]) -> tuple[str, bool] | None:
    for g, quoted in (("dq", True), ("sq", True), ("bq", True), ("bare", False)):
        if g in m.re.groupindex and m.group(g) is not None:
            return g, quoted
    return None


def _base64_tail(text: str, key_start: int, key_end: int) -> bool:
    """The key candidate ``text[key_start:key_end]`` ends a base64 string (``...+pw9==`` of a package-lock
    integrity hash), so the ``=`` after it is padding, not an assignment."""
    tail = B64_TAIL.match(text, key_end)
    if tail is None:
        return False
    if (key_start > 0 and text[key_start - 1] in "+/") or "+" in tail.group() or "/" in tail.group():
        return True
    if INTEGRITY_PREFIX.match(text, key_start):
        return True
    return tail.group().endswith("==") and (tail.end() - key_start) % 4 == 0 and tail.end() - key_start >= 24


def find_keyed(text: str) -> Iterator[Span]:
    """Keyed values, found from keyword hits so that text without assignments costs one scan."""
    lowered = text.lower()
    hits = KEYWORD.finditer(lowered) if len(lowered) == len(text) else KEYWORD_I.finditer(text)
    skip_until = -1
    for hit in hits:
        p = hit.start()
        if p < skip_until:
            continue
        word_end = KEY_RUN.match(text, p).end()  # type: ignore[union-attr]
        skip_until = word_end
        i = p
        lo = max(0, p - KEY_MAX)
        while i > lo and text[i - 1] in KEY_CHARS:
            i -= 1
        if (i == lo and lo > 0 and text[i - 1] in KEY_CHARS) or word_end - i > KEY_MAX + 2:
            continue  # a long run of word characters, not a key
        if (text.startswith(_B64_NEXT, word_end) and _base64_tail(text, i, word_end)) or \
                (i >= 10 and text.startswith("[REDACTED:", i - 10)):
            continue  # padding of a base64 hash, or the type in a marker ([REDACTED:password_assignment]: ...)
        j = i
        while j < p and text[j] == "-":
            j += 1
        candidates: list[tuple[re.Match[str] | None, bool]] = []
        if 0 < j - i <= 2:
            candidates.append((FLAG.match(text, i), True))
        if i > 0 and text[i - 1] == "<":
            candidates.append((XML.match(text, i), False))
        candidates.append((ASSIGN.match(text, j), False))
        for m, is_flag in candidates:
            if m is None or m.end("key") < hit.end():
                continue
            span = _keyed_span(text, m, is_flag)
            if span is not None:
                yield span
                skip_until = max(skip_until, m.end(), span[1])  # each value is judged once: linear time
                break
            # a quoted value judged not a secret may be a key itself ("KEY-----", "password": "0"): its keywords
            # are looked at, the rest of the match is not
            quoted_at = m.start("dq") if "dq" in m.re.groupindex and m.group("dq") is not None else -1
            skip_until = max(skip_until, quoted_at if quoted_at >= 0 else m.end())


def _value_ends_at(text: str, i: int) -> bool:
    """Whether ``text[i]`` (one of ``& ; , | < >``) ends a bare value rather than belongs to it: before a
    blank, a quote or the end, before the next ``key=`` (``&page=2``, ``;Database=app``), or a closing tag
    (``</``). Glued to more characters it is part of the value (``Xk9&&BOW``, ``Xk9>>cT``)."""
    c = text[i]
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if not nxt or nxt in BARE_STOP:
        return True
    if c in "&;," and NEXT_KEY.match(text, i + 1):
        return True
    return c == "<" and nxt == "/"


def bare_end(text: str, start: int, end: int) -> int:
    """The end of the bare value that ``ASSIGN`` matched as ``text[start:end]``: the value runs on to the end
    of the line or a quote (a password may hold ``& ( ) ] } ; , . < > |``), less trailing punctuation and
    closing brackets it did not open (``f(password=x1)``)."""
    limit = min(len(text), start + BARE_VALUE_MAX)
    i = end
    while i < limit:
        c = text[i]
        if c in BARE_STOP or (c in BARE_MAYBE_STOP and _value_ends_at(text, i)):
            break
        if c == "\\" and i + 1 < len(text) and text[i + 1] in "\"'":
            break  # an escaped quote closes the string the value sits in
        i += 1
    while i > start:
        c = text[i - 1]
        if c in ".:,;" or (c in CLOSERS and text.count(CLOSERS[c], start, i) < text.count(c, start, i)):
            i -= 1
        else:
            break
    return i


def _keyed_span(text: str, m: re.Match[str], is_flag: bool) -> Span | None:
    key = m.group("key")
    if key_kind(key) is None:
        return None
    vg = _value_group(m)
    if vg is None:
        return None
    g, quoted = vg
    start, end = m.start(g), m.end(g)
    if not quoted:
        end = bare_end(text, start, end)
        if end <= start:
            return None
    value = text[start:end]
    sep = " " if is_flag else m.group("sep")
    if not quoted and not is_flag and m.group("kq") == '"' and sep == ":" and (
            JSON_NUMBER.fullmatch(value) or value[0] in "[{"):
        return None  # "password": 0 or [0] in JSON: a marker in place of a number or a list breaks the document
    if sep == "" and not (quoted and text.startswith(";", m.end())):
        return None  # private_key "v"; (a directive and its quoted value) needs the closing semicolon
    if sep in COMPARISONS and (not quoted or (sep == "," and not m.group("kq"))):
        return None  # password == other, f(token, x): a comparison or an argument list needs a literal
    if sep == "," and (len(value) < 6 or IDENT_NO_DIGIT.fullmatch(value) or looks_like_words(value)):
        return None  # ("pass", "raise"), ["password", "email"]: a list of words, not a key and its value
    if sep == ":" and not m.group("kq") and text.startswith("//", m.end("sep")):
        return None  # a URL scheme, not a key
    kind = classify(key, value, quoted=quoted, sep=sep, line_start=_line_start(text, m.start()))
    if kind is None:
        return None
    if not quoted and CALL.match(value) and value.count("(") > value.count(")"):
        rest = REST_OF_LINE.match(text, end)
        if rest is not None and ")" in rest.group():
            return None  # pw = Piecewise((x, y > x), ...): a call whose arguments go on past the value
    if not quoted and sep == ":" and IDENT_NO_DIGIT.fullmatch(value):
        rest = REST_OF_LINE.match(text, end)
        if rest is not None and rest.group().strip() and not rest.group().lstrip().startswith("#"):
            return None  # "passwd: files systemd" (nsswitch.conf): a word among words, not a YAML value
    return start, end, kind, P_KEYED
