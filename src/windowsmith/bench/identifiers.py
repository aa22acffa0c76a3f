"""Identifiers: the concrete names an agent's next action reuses from what it has seen.

``extract_identifiers(text) -> set[str]`` finds, with regular expressions and no model, the tokens
below. Every identifier is returned exactly as written (case kept), after the normalisation said
for its kind; a token shorter than 3 characters is never an identifier.

1. **File paths and URLs** — a run of ``[A-Za-z0-9_.~-]`` parts joined by ``/`` (optionally with a
   ``scheme://`` prefix) that has at least one of: a leading ``/``, ``~/``, ``./`` or ``../``; a
   scheme; two or more ``/``; or a last part with a file extension (``.`` + 1-8 letters/digits
   after a non-empty stem). A leading ``./`` and trailing ``.``/``-`` are stripped, so ``./a/b.py``
   and ``a/b.py`` are the same identifier. ``and/or`` or ``input/output`` (one slash, no
   extension, no leading ``/``) are not paths. A ``:123`` line suffix is not part of the path.
   The last part of a path is also an identifier when it has an extension (``/repo/x/models.py``
   yields ``/repo/x/models.py``, ``x/models.py`` is not derived, ``models.py`` is).
2. **Bare file names** — ``name.ext`` without a slash, where ``ext`` is one of :data:`FILE_EXTENSIONS`
   (``setup.cfg``, ``models.py``, ``README.md``).
3. **Error names** — words ending in ``Error``, ``Exception`` or ``Warning`` with a capital
   first letter (``ValueError``, ``IntegrityError``, ``DeprecationWarning``), and linter/error codes:
   1-3 capitals followed by 3-4 digits (``E501``, ``W0611``, ``PLR0913``).
4. **IDs** — (a) codes of 5-12 capitals and digits holding at least one of each (``ZFA04Y``,
   ``HAT170``); (b) ``#`` followed by letters/digits/``_``/``-`` holding a digit (``#W2378156``); (c)
   e-mail addresses; (d) UUIDs; (e) hexadecimal strings of 7-64 characters holding a digit and a
   letter ``a``-``f`` (commit hashes, blob digests); (f) ISO dates ``YYYY-MM-DD``.
5. **Symbols** — identifier-like words ``[A-Za-z_][A-Za-z0-9_]*``, optionally dotted
   (``os.path.join``), at least 4 characters long, that carry a *marker*: an underscore, a digit,
   a dot between two parts, or a capital letter after the first character next to a lower-case
   letter or followed by another capital (``snake_case``, ``sha256``, ``QuerySet``, ``getName``,
   ``HTTPServer``, ``self.assertEqual``). A capitalised English word (``Hello``) or a plain
   lower-case word (``order``) has no marker and is not a symbol; all-caps words without a
   digit or underscore (``NOTE``, ``HTTP``) are not either.
6. **Numbers** — runs of digits, optionally with one decimal part, not glued to a letter or
   ``_``, holding at least 3 digits (``404``, ``1458``, ``1234.56``).

Excluded always: tokens shorter than 3 characters and the words in :data:`STOPWORDS` (common
English and programming words that pass a rule by accident, e.g. ``e.g``, ``i.e``, ``etc.``).

What counts as the *agent's next action* (see ``action_text``): the assistant message's text and
the **values** of its tool-call arguments (recursively; keys are schema names, not data). An
observation is a ``tool`` message or a ``user`` message (the simulated customer of tau-bench, the
observations of mini-swe-agent, the task itself).
"""

from __future__ import annotations

import re

from ..model import Message, Text, Thinking, ToolCall, ToolResult
from ..text import named_text

#: Extensions that make a bare ``name.ext`` a file name.
FILE_EXTENSIONS: frozenset[str] = frozenset(
    ["py", "pyi", "pyx", "pxd", "ipynb", "js", "mjs", "cjs", "ts", "tsx", "jsx", "json", "jsonl", "yaml", "yml", "toml", "cfg", "ini", "conf", "txt", "md", "rst", "html", "htm", "css", "scss", "c", "h", "cc", "cpp", "hpp", "cxx", "go", "rs", "java", "kt", "scala", "rb", "php", "pl", "sh", "bash", "zsh", "bat", "ps1", "sql", "csv", "tsv", "xml", "lock", "log", "patch", "diff", "in", "out", "tex", "svg", "png", "jpg", "jpeg", "gif", "pdf", "zip", "gz", "tar", "whl", "egg", "so", "dll", "exe", "env", "gitignore", "dockerfile", "mk", "cmake", "gradle", "proto", "graphql", "vue", "swift", "m", "mm", "r", "jl", "lua", "dart", "ex", "exs", "erl", "hs", "ml", "clj"]
)

#: Tokens that pass a rule but are ordinary words or notation, never identifiers.
STOPWORDS: frozenset[str] = frozenset(
    {
        "e.g", "i.e", "etc", "vs.", "a.m", "p.m", "n/a", "and/or", "w/o", "Ph.D",
        "OK", "ok", "TODO", "FIXME", "NOTE", "README",
    }
)

_PATH_RE = re.compile(
    r"(?<![\w/.~-])"
    r"(?P<p>(?:[A-Za-z][A-Za-z0-9+.-]*://)?[\w.~-]*(?:/[\w.~-]+)+)"
)
_EXT_RE = re.compile(r"[^/.]\.([A-Za-z0-9]{1,8})$")
_FILE_RE = re.compile(r"(?<![\w/.-])([\w-]+(?:\.[\w-]+)*\.([A-Za-z0-9]{1,10}))(?![\w/-])")
_ERROR_RE = re.compile(r"(?<![\w.])([A-Z][A-Za-z0-9]*(?:Error|Exception|Warning))\b")
_CODE_RE = re.compile(r"(?<![\w#])([A-Z]{1,3}\d{3,4})\b")
_ID_RE = re.compile(r"(?<![\w#])((?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,12})(?![\w])")
_HASH_ID_RE = re.compile(r"(#(?=[\w-]*\d)[\w-]+)")
_EMAIL_RE = re.compile(r"(?<![\w.+-])([\w.+-]+@[\w-]+(?:\.[\w-]+)+)")
_UUID_RE = re.compile(r"\b([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\b")
_HEX_RE = re.compile(r"(?<![\w])((?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64})(?![\w])")
_DATE_RE = re.compile(r"(?<![\w-])(\d{4}-\d{2}-\d{2})(?![\w])")
_SYMBOL_RE = re.compile(r"(?<![\w.#@/-])([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?![\w@/-])")
_CAMEL_RE = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]|.[A-Z][a-z]")
_NUMBER_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w])")


def _strip_path(p: str) -> str:
    while p.startswith("./"):
        p = p[2:]
    return p.rstrip(".-")


def _is_path(p: str) -> bool:
    if "://" in p or p.startswith(("/", "~/", "../")):
        return any(c.isalnum() for c in p)
    if p.count("/") >= 2:
        return True
    return bool(_EXT_RE.search(p.rsplit("/", 1)[-1])) and any(c.isalpha() for c in p)


def _symbol_marker(s: str) -> bool:
    if "_" in s or "." in s or any(c.isdigit() for c in s):
        return True
    return bool(_CAMEL_RE.search(s[1:] if not s[:1].isupper() else s)) and not s.isupper()


def extract_identifiers(text: str) -> set[str]:
    """Every identifier in ``text`` by the rules of this module's docstring."""
    if not text:
        return set()
    out: set[str] = set()
    add = out.add
    for m in _PATH_RE.finditer(text):
        raw = m.group("p")
        p = _strip_path(raw)
        if raw.startswith(("./", "../")) or _is_path(p):
            if len(p) >= 3 and "/" in p:
                add(p)
            last = p.rsplit("/", 1)[-1]
            ext = _EXT_RE.search(last)
            if ext and len(last) >= 3 and any(c.isalpha() for c in last):
                add(last)
    for fm in _FILE_RE.finditer(text):
        name, suffix = fm.group(1), fm.group(2)
        if suffix.lower() in FILE_EXTENSIONS and len(name) >= 3 and name[0] != ".":
            add(name)
    for rx in (_ERROR_RE, _CODE_RE, _ID_RE, _HASH_ID_RE, _EMAIL_RE, _UUID_RE, _HEX_RE, _DATE_RE):
        for m in rx.finditer(text):
            add(m.group(1))
    for m in _SYMBOL_RE.finditer(text):
        s = m.group(1)
        if len(s) >= 4 and _symbol_marker(s):
            add(s)
    for m in _NUMBER_RE.finditer(text):
        s = m.group(1)
        if sum(c.isdigit() for c in s) >= 3:
            add(s)
    out.difference_update(STOPWORDS)
    return {s for s in out if len(s) >= 3}


def action_text(m: Message) -> str:
    """The text of an assistant message that its identifiers are taken from: text blocks and the
    values (not keys) of tool-call arguments."""
    return named_text(m)


def message_text(m: Message) -> str:
    """All the text of a message as the model reads it: text, tool-call arguments, tool results."""
    parts: list[str] = []
    for b in m.content:
        if isinstance(b, Text):
            parts.append(b.text)
        elif isinstance(b, ToolCall):
            parts.append(b.name)
            parts.append(b.arguments_json)
        elif isinstance(b, ToolResult | Thinking):
            parts.append(b.text)
    return "\n".join(parts)


_cache: dict[str, frozenset[str]] = {}
_action_cache: dict[str, frozenset[str]] = {}


def message_identifiers(m: Message) -> frozenset[str]:
    """Identifiers in everything the model reads of ``m`` (cached by message digest)."""
    key = m.digest
    got = _cache.get(key)
    if got is None:
        got = frozenset(extract_identifiers(message_text(m)))
        if len(_cache) > 100_000:
            _cache.clear()
        _cache[key] = got
    return got


def action_identifiers(m: Message) -> frozenset[str]:
    """Identifiers the agent's action ``m`` uses (text and argument values; cached by digest)."""
    key = m.digest
    got = _action_cache.get(key)
    if got is None:
        got = frozenset(extract_identifiers(action_text(m)))
        if len(_action_cache) > 100_000:
            _action_cache.clear()
        _action_cache[key] = got
    return got


__all__ = [
    "FILE_EXTENSIONS",
    "STOPWORDS",
    "action_identifiers",
    "action_text",
    "extract_identifiers",
    "message_identifiers",
    "message_text",
]
