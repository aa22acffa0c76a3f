"""Judging a candidate value: is it a secret? The half of :mod:`windowsmith.ingest.redact` that looks at one
value, not at the text: the entropy measure, placeholders (``changeme``, ``<token>``, ``your-api-key-here``) and
ordinary words, whether a key names a secret and whether the value assigned to it looks like one
(:func:`classify`), and the checks a :class:`~windowsmith.ingest.redact_rules.RegexRule` names
(:data:`CHECKS`). The limits and vocabularies are data in :mod:`windowsmith.ingest.redact_rules`, with the
judgement calls behind them.

Each function reads one value (at most 512 characters, a header value 4,096) with patterns that nest no
repetition that can backtrack in another, so its cost is linear in the value's length.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Callable
from functools import lru_cache

from .redact_rules import (
    AUTH_MIN_LENGTH,
    AUTH_SCHEMES,
    CALL,
    CAMEL_SEG,
    CODE_SEGMENT,
    DOTTED_IDENT,
    FILL_IN_BEFORE,
    FILL_IN_BETWEEN,
    FILL_IN_CHARS,
    FILL_IN_NOUNS,
    FILL_IN_WORDS,
    GENERIC_MIN_LENGTH,
    HEX,
    HEX_MIN_ENTROPY,
    HEX_MIN_LENGTH,
    IDENT_NO_DIGIT,
    META_SPLIT,
    META_SUFFIXES,
    MIN_ENTROPY,
    MYSQL_CLIENT,
    NON_SECRET_TOKEN_QUALIFIERS,
    NUMBER,
    PASSWORD_KEY,
    PATH,
    PLACEHOLDER_RX,
    PLACEHOLDER_WORDS,
    SECRET_KEY,
    TYPE_WORDS,
    VERSION,
    WORDS_LOWER,
)

__all__ = [
    "CHECKS", "asks_to_fill_in", "classify", "is_placeholder", "key_kind", "looks_like_words", "looks_random",
    "shannon_entropy",
]


def shannon_entropy(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


# ---------------------------------------------------------------------------------------------------
# Placeholders and value shapes
# ---------------------------------------------------------------------------------------------------


def is_placeholder(value: str) -> bool:
    v = value.strip()
    if not v or "REDACTED" in v:
        return True
    if v.lower() in PLACEHOLDER_WORDS:
        return True
    return len(v) <= 300 and (PLACEHOLDER_RX.match(v) is not None or asks_to_fill_in(v))


def asks_to_fill_in(v: str) -> bool:
    """``your-api-key-here``, ``insert token``, ``my secret key`` (see ``redact_rules.FILL_IN_WORDS``): one
    ``find`` per occurrence of a fill-in word among the first characters, linear in the value."""
    if not FILL_IN_CHARS.fullmatch(v):
        return False
    low = v.lower()
    nouns = [len(low) - len(n) - plural for n in FILL_IN_NOUNS for plural in (0, 1) if low.endswith(n + "s" * plural)]
    for word in FILL_IN_WORDS:
        limit = FILL_IN_BEFORE + len(word)
        at = low.find(word, 0, limit)
        while at != -1:
            end = at + len(word)
            for start in nouns:
                gap = start - end
                if 0 <= gap <= FILL_IN_BETWEEN or (gap == FILL_IN_BETWEEN + 1 and low[end] in "-_ "):
                    return True
            at = low.find(word, at + 1, limit)
    return False


def looks_like_words(v: str) -> bool:
    """Ordinary words (``my-app-db-credentials``, ``SessionTokenName``), not a random string."""
    if WORDS_LOWER.fullmatch(v):
        return True
    if v.isalpha():
        segs = CAMEL_SEG.findall(v)
        return bool(segs) and sum(map(len, segs)) == len(v) and len(v) / len(segs) >= 3.5
    return False


# ---------------------------------------------------------------------------------------------------
# Keyed values: does the key name a secret, and does the value assigned to it look like one?
# ---------------------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def key_kind(key: str) -> str | None:
    """``password_assignment`` / ``generic_secret_assignment`` if the key names a secret, else None."""
    k = key.strip("\"'").lower()
    if not k or len(k) > 64:
        return None
    parts = [p for p in META_SPLIT.split(key.strip("\"'")) if p]
    if parts and parts[-1].lower() in META_SUFFIXES and len(parts) > 1:
        return None
    low = [p.lower() for p in parts]
    if len(low) >= 2 and low[-1] == "token" and low[-2] in NON_SECRET_TOKEN_QUALIFIERS:
        return None  # nextPageToken, eos_token, page_token
    if PASSWORD_KEY.search(k):
        return "password_assignment"
    if SECRET_KEY.search(k):
        return "generic_secret_assignment"
    return None


def classify(key: str, value: str, *, quoted: bool, sep: str, line_start: bool) -> str | None:
    """The secret type of ``value`` assigned to ``key``, or None when it is not a secret."""
    kind = key_kind(key)
    if kind is None:
        return None
    v = value.strip()
    if kind == "generic_secret_assignment" and len(v) < GENERIC_MIN_LENGTH:
        return None
    if is_placeholder(v):
        return None
    if v.startswith(("data:", "artifact://", "file://")) or v.endswith("("):
        return None
    if kind == "password_assignment":
        if "pwd" in key.lower() and PATH.fullmatch(v):
            return None  # PWD=/home/user is the working directory
        bare_key = key.strip("\"'")
        if bare_key == "PASS" and sep == ":":
            return None  # test runners: "--- PASS: TestX (0.00s)", "PASS: test_name"
        if bare_key.lower() in ("pass", "pw") and not quoted and IDENT_NO_DIGIT.fullmatch(v):
            return None  # "pass: done", "pw: Piecewise": a short key needs a value that is not a word
        if quoted:
            return kind
        if _is_call(v) or _is_attribute_path(v) or v.lower() in TYPE_WORDS:
            return None  # code: password=get_password(), self.password, password: str
        if IDENT_NO_DIGIT.fullmatch(v):
            # A bare identifier is a variable in code (password=password) unless the key is an
            # environment variable (DB_PASSWORD=letmein) or a YAML key at the start of a line.
            env_key = key.strip("\"'").upper() == key.strip("\"'") and sep == "="
            yaml_key = sep == ":" and line_start
            if not (env_key or yaml_key) or v.lower() in key.lower():
                return None
        return kind
    return kind if looks_random(v, quoted=quoted) else None


def looks_random(v: str, *, quoted: bool) -> bool:
    """A value that looks like a generated secret: long enough, no blank, not a number, version, path, URL,
    code or words, and enough entropy (hex values: their own, lower limit)."""
    if len(v) < GENERIC_MIN_LENGTH or any(c.isspace() for c in v):
        return False
    if NUMBER.fullmatch(v) or VERSION.fullmatch(v) or PATH.fullmatch(v) or "://" in v:
        return False
    if not quoted and (_is_call(v) or v.endswith("(") or _is_attribute_path(v)):
        return False
    if looks_like_words(v) or (DOTTED_IDENT.fullmatch(v) and all(map(looks_like_words, v.split(".")))):
        return False  # AUTH_USER_MODEL = "accounts.CustomUser"
    if HEX.fullmatch(v):
        return len(v) >= HEX_MIN_LENGTH and shannon_entropy(v) >= HEX_MIN_ENTROPY
    return shannon_entropy(v) >= MIN_ENTROPY


def _is_attribute_path(v: str) -> bool:
    """``self.config.api_key``, ``settings.SECRET_KEY2``: code, not a value. Each segment reads as words
    (and at most three digits); random segments (``tUzH.aPyhMFL``) are a value."""
    if DOTTED_IDENT.fullmatch(v) is None:
        return False
    return all(CODE_SEGMENT.fullmatch(p) and _reads_as_words(p.rstrip("0123456789")) for p in v.split("."))


def _reads_as_words(name: str) -> bool:
    """An identifier made of words: ``api_key``, ``_get_new_session_key``, ``__init__``, ``Piecewise``."""
    bare = name.strip("_")
    return not bare or looks_like_words(bare)


def _is_call(v: str) -> bool:
    """``get_password()``, ``hash(pw)``, ``os.getenv(name).strip()``: a call whose name reads as words and whose
    parentheses close at the end of the value (``Jb(0gQ6Ze`` and ``tpp(1}1B3kC)on`` are values)."""
    m = CALL.match(v)
    return m is not None and v.endswith(")") and v.count("(") == v.count(")") and \
        all(_reads_as_words(p) for p in m.group().rstrip("(").split("."))


def _check_bearer(m: re.Match[str]) -> bool:
    v = m.group("v")
    if is_placeholder(v) or looks_like_words(v):
        return False
    return not v.isalpha() or shannon_entropy(v) >= MIN_ENTROPY


def _check_basic(m: re.Match[str]) -> bool:
    v = m.group("v")
    try:
        raw = base64.b64decode(v + "=" * (-len(v) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in raw and all(32 <= b < 127 for b in raw)


def _check_url_password(m: re.Match[str]) -> bool:
    v = m.group("v")
    if v[:1] in "<[" and v[-1:] in ">]":
        return False  # <password>, [PASSWORD]
    return not is_placeholder(v) and not is_placeholder(v.strip("<>[]"))


def _check_mysql_password(m: re.Match[str]) -> bool:
    """``-pSECRET`` glued to the flag is a password only on a MySQL client's command line."""
    text = m.string
    line_start = max(text.rfind("\n", max(0, m.start() - 300), m.start()) + 1, m.start() - 300)
    return MYSQL_CLIENT.search(text, line_start, m.start()) is not None and _check_url_password(m)


def _check_authorization(m: re.Match[str]) -> bool:
    v = m.group("v").rstrip(".,:;")
    if is_placeholder(v) or looks_like_words(v) or v.lower() in AUTH_SCHEMES:
        return False
    return any(c.isdigit() for c in v) or (len(v) >= AUTH_MIN_LENGTH and shannon_entropy(v) >= MIN_ENTROPY)


#: The checks a :class:`RegexRule` names: a match is a secret only if its check accepts it.
CHECKS: dict[str, Callable[[re.Match[str]], bool]] = {
    "authorization": _check_authorization,
    "basic": _check_basic,
    "bearer": _check_bearer,
    "mysql_password": _check_mysql_password,
    "url_password": _check_url_password,
}
