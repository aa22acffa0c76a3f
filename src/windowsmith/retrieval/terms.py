"""Query terms from text: the identifiers an agent reuses (paths, symbols, ids, error names, numbers)
and, for prose, its content words. Regular expressions only, no model."""

from __future__ import annotations

import functools
import re

# A path, with or without a scheme: ``(?:[A-Za-z][A-Za-z0-9+.-]*://)?[\w.~-]*(?:/[\w.~-]+)+``, written so
# that neither branch starts inside a run it could have started earlier in (a scheme not right after a
# letter, a bare path not right after a path character): the same matches, in linear time (the plain
# pattern re-scanned a long word run from each of its characters: 77 ms on 6 KB holding hex digests).
_PATH = re.compile(r"(?<![A-Za-z])[A-Za-z][A-Za-z0-9+.-]*://[\w.~-]*(?:/[\w.~-]+)+|(?<![\w.~-])[\w.~-]*(?:/[\w.~-]+)+")
_FILE = re.compile(r"\b[\w-]+(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}\b")
_SYMBOL = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\b")
_ID = re.compile(r"#?\b(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9][A-Za-z0-9_-]{2,}\b")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_WORD = re.compile(r"\b[^\W\d_]{4,}\b")
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")

STOPWORDS: frozenset[str] = frozenset(
    ["that", "this", "with", "from", "have", "will", "would", "should", "could", "there", "their", "they", "them", "then", "than", "what", "when", "where", "which", "while", "your", "about", "into", "over", "also", "only", "just", "more", "most", "some", "such", "very", "been", "were", "being", "does", "done", "here", "like", "make", "made", "need", "want", "know", "please", "thanks", "thank", "sure", "okay", "call", "calls", "using", "used", "user", "tool", "result", "results", "assistant", "none", "true", "false", "null", "self", "return", "import", "class", "def", "print", "error", "file", "line", "lines"]
)


def _marked(s: str) -> bool:
    """An identifier-looking symbol: an underscore, a digit, a dot between parts, or camel case."""
    return "_" in s or "." in s.strip(".") or any(c.isdigit() for c in s) or bool(_CAMEL.search(s))


def identifiers(text: str, limit: int = 64) -> list[str]:
    """Identifiers in ``text``, first occurrence first, at most ``limit``."""
    found: dict[str, None] = {}
    for rx in (_PATH, _EMAIL, _FILE, _ID):
        if rx is _EMAIL and "@" not in text:  # it re-scans a word run from each character looking for one
            continue
        for m in rx.finditer(text):
            t = m.group(0).rstrip(".-/")
            if len(t) >= 3:
                found.setdefault(t)
    for m in _SYMBOL.finditer(text):
        t = m.group(0)
        if len(t) >= 4 and _marked(t):
            found.setdefault(t)
    return list(found)[:limit]


def words(text: str, limit: int = 32) -> list[str]:
    """Content words (4+ letters, not stopwords), lower case, most frequent first (ties: first seen)."""
    counts: dict[str, int] = {}
    for m in _WORD.finditer(text):
        w = m.group(0).lower()
        if w not in STOPWORDS:
            counts[w] = counts.get(w, 0) + 1
    return sorted(counts, key=lambda w: -counts[w])[:limit]


def query_terms(text: str, *, limit: int = 32, with_words: bool = True) -> list[str]:
    """Identifiers first, then content words, up to ``limit`` terms. (Every build asks for the terms of the task
    and of the newest turn, which change only when they do: the last texts' terms are kept.)"""
    return list(_query_terms(text, limit, with_words))


@functools.lru_cache(maxsize=64)
def _query_terms(text: str, limit: int, with_words: bool) -> tuple[str, ...]:
    out = identifiers(text, limit)
    if with_words and len(out) < limit:
        seen = {t.lower() for t in out}
        out += [w for w in words(text, limit) if w not in seen][: limit - len(out)]
    return tuple(out)


__all__ = ["STOPWORDS", "identifiers", "query_terms", "words"]
