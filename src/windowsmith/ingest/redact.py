"""Secret redaction for tool results and any other text headed for the store or a provider.

``redact(text)`` replaces every secret it recognises with a typed marker ``[REDACTED:<type>]`` and keeps
the non-secret context around it (``password=[REDACTED:password_assignment]``,
``https://deploy:[REDACTED:url_password]@db.internal``). ``redact_obj(value)`` does the same over
JSON-like structures and uses dict keys as context (``{"password": "hunter2"}``).

How secrets are found (the rule ideas follow gitleaks' default rules and Yelp/detect-secrets'
keyword and entropy plugins; no code is taken from either):

* **Known token formats** with fixed prefixes (AWS key ids, GitHub, OpenAI, Anthropic, Slack, Stripe,
  Google API keys, JWTs, PEM private keys). These are redacted wherever they appear.
* **Keyed values**: a value in ``KEY=value``, ``"key": "value"``, ``key: value``, ``--key value``,
  ``key := "v"``, ``KEY ::= v``, ``$key .= "v"``, ``var key string = "v"``, ``<key>v</key>``,
  ``setProperty("KEY", "v")`` or ``key == "v"`` position whose key names a secret (secret, token,
  password, api_key, access_key, auth, credential, ...). Password-like keys redact any non-placeholder
  value; other keys need the value to look random: at least 12 characters and a Shannon entropy of at
  least 3.0 bits/char for hex values (detect-secrets' hex limit) or 3.5 for other values.
  detect-secrets uses 4.5 for *unkeyed* base64 strings; a key that names a secret is strong evidence on
  its own, so we use gitleaks' lower "generic-api-key" limit there.
* **Credentials in context**: ``scheme://user:password@host``, ``Authorization: Bearer|Basic ...``,
  ``Authorization: Token|Api-Token|<raw value>``, ``PRIVATE-TOKEN: ...``, ``curl -u user:password``.

The judgement calls behind the rules (no unkeyed entropy scan, which keys and values are kept, the
AWS example key) are documented with the rule data, in :mod:`windowsmith.ingest.redact_rules`.

Guarantees: idempotent (markers never match a rule), linear time (every pattern that scans the text has
bounded repetitions, none nested, so one match attempt reads at most the pattern's width; token
patterns start at a token boundary; the checks of one value are linear in its length), and a clean text
costs a few substring checks.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .redact_rules import (
    ASSIGN,
    AUTH_MIN_LENGTH,
    AUTH_SCHEMES,
    CAMEL_SEG,
    CODE_SEGMENT,
    COMPARISONS,
    CONTEXT_RULES,
    DOTTED_IDENT,
    FILL_IN_BEFORE,
    FILL_IN_BETWEEN,
    FILL_IN_CHARS,
    FILL_IN_NOUNS,
    FILL_IN_WORDS,
    FLAG,
    FORMAT_RULES,
    GCP_KEY_CONTEXT,
    GENERIC_MIN_LENGTH,
    HEX,
    HEX_MIN_ENTROPY,
    HEX_MIN_LENGTH,
    IDENT_NO_DIGIT,
    KEY_CHARS,
    KEY_MAX,
    KEY_RUN,
    KEYED_TRIGGERS,
    KEYWORD,
    KEYWORD_I,
    MARKER,
    MARKER_RX,
    META_SPLIT,
    META_SUFFIXES,
    MIN_ENTROPY,
    MYSQL_CLIENT,
    NON_SECRET_TOKEN_QUALIFIERS,
    NUMBER,
    P_KEY_BLOCK,
    P_KEYED,
    PASSWORD_KEY,
    PATH,
    PEM_BEGIN,
    PEM_BODY,
    PEM_END,
    PEM_MAX,
    PLACEHOLDER_RX,
    PLACEHOLDER_WORDS,
    REST_OF_LINE,
    SECRET_KEY,
    SECRET_TYPES,
    TYPE_WORDS,
    VALUE_KEYWORDS,
    VERSION,
    WORDS_LOWER,
    XML,
    RegexRule,
)

__all__ = ["SECRET_TYPES", "Redaction", "has_candidate", "redact", "redact_obj", "redact_schema", "shannon_entropy"]


@dataclass(frozen=True)
class Redaction:
    """Redacted text and how many secrets of each type were replaced."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def shannon_entropy(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


# ---------------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------------
# A span is (start, end, type, priority); a lower priority number wins an overlap.

Span = tuple[int, int, str, int]


@dataclass(frozen=True)
class _Rule:
    name: str
    find: Callable[[str], Iterator[Span]]
    triggers: tuple[str, ...] = ()  # case-sensitive substrings; the rule runs if any is present
    itriggers: tuple[str, ...] = ()  # substrings of the lower-cased text
    scans: tuple[re.Pattern[str], ...] = ()  # the patterns it runs over the text (checked for linear time)


def _regex_rule(spec: RegexRule) -> _Rule:
    """The rule that scans ``spec.pattern`` over the text and keeps the matches its check accepts."""
    rx = re.compile(spec.pattern)
    check = CHECKS[spec.check] if spec.check is not None else None
    kind, priority, group = spec.kind, spec.priority, spec.group

    def find(text: str) -> Iterator[Span]:
        for m in rx.finditer(text):
            if check is not None and not check(m):
                continue
            yield m.start(group), m.end(group), kind, priority

    return _Rule(spec.name, find, spec.triggers, spec.itriggers, (rx,))


# ---------------------------------------------------------------------------------------------------
# Placeholders and value shapes
# ---------------------------------------------------------------------------------------------------


def _is_placeholder(value: str) -> bool:
    v = value.strip()
    if not v or "REDACTED" in v:
        return True
    if v.lower() in PLACEHOLDER_WORDS:
        return True
    return len(v) <= 300 and (PLACEHOLDER_RX.match(v) is not None or _asks_to_fill_in(v))


def _asks_to_fill_in(v: str) -> bool:
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


def _looks_like_words(v: str) -> bool:
    """Ordinary words (``my-app-db-credentials``, ``SessionTokenName``), not a random string."""
    if WORDS_LOWER.fullmatch(v):
        return True
    if v.isalpha():
        segs = CAMEL_SEG.findall(v)
        return bool(segs) and sum(map(len, segs)) == len(v) and len(v) / len(segs) >= 3.5
    return False


# ---------------------------------------------------------------------------------------------------
# Keyed values: KEY=value, "key": "value", key: value, --key value
# ---------------------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _key_kind(key: str) -> str | None:
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


def _classify(key: str, value: str, *, quoted: bool, sep: str, line_start: bool) -> str | None:
    """The secret type of ``value`` assigned to ``key``, or None when it is not a secret."""
    kind = _key_kind(key)
    if kind is None:
        return None
    v = value.strip()
    if kind == "generic_secret_assignment" and len(v) < GENERIC_MIN_LENGTH:
        return None
    if _is_placeholder(v):
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
        if "(" in v or DOTTED_IDENT.fullmatch(v) or v.lower() in TYPE_WORDS:
            return None  # code: password=get_password(), self.password, password: str
        if IDENT_NO_DIGIT.fullmatch(v):
            # A bare identifier is a variable in code (password=password) unless the key is an
            # environment variable (DB_PASSWORD=letmein) or a YAML key at the start of a line.
            env_key = key.strip("\"'").upper() == key.strip("\"'") and sep == "="
            yaml_key = sep == ":" and line_start
            if not (env_key or yaml_key) or v.lower() in key.lower():
                return None
        return kind
    # generic: the value must look random.
    if len(v) < GENERIC_MIN_LENGTH or any(c.isspace() for c in v):
        return None
    if NUMBER.fullmatch(v) or VERSION.fullmatch(v) or PATH.fullmatch(v) or "://" in v:
        return None
    if not quoted and ("(" in v or _is_attribute_path(v)):
        return None
    if _looks_like_words(v) or (DOTTED_IDENT.fullmatch(v) and all(map(_looks_like_words, v.split(".")))):
        return None  # AUTH_USER_MODEL = "accounts.CustomUser"
    limit = HEX_MIN_ENTROPY if HEX.fullmatch(v) else MIN_ENTROPY
    if HEX.fullmatch(v) and len(v) < HEX_MIN_LENGTH:
        return None
    return kind if shannon_entropy(v) >= limit else None


def _is_attribute_path(v: str) -> bool:
    """``self.config.api_key``, ``settings.SECRET_KEY2``: code, not a value (random segments are a value)."""
    return DOTTED_IDENT.fullmatch(v) is not None and all(CODE_SEGMENT.fullmatch(p) for p in v.split("."))


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


def _find_keyed(text: str) -> Iterator[Span]:
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
            skip_until = max(skip_until, m.end())  # each value is judged once: linear time
            span = _keyed_span(text, m, is_flag)
            if span is not None:
                yield span
                skip_until = max(skip_until, span[1])
                break


def _keyed_span(text: str, m: re.Match[str], is_flag: bool) -> Span | None:
    key = m.group("key")
    if _key_kind(key) is None:
        return None
    vg = _value_group(m)
    if vg is None:
        return None
    g, quoted = vg
    value = m.group(g)
    sep = " " if is_flag else m.group("sep")
    if sep == "" and not (quoted and text.startswith(";", m.end())):
        return None  # private_key "v"; (a directive and its quoted value) needs the closing semicolon
    if sep in COMPARISONS and (not quoted or (sep == "," and not m.group("kq"))):
        return None  # password == other, f(token, x): a comparison or an argument list needs a literal
    if sep == "," and (len(value) < 6 or IDENT_NO_DIGIT.fullmatch(value) or _looks_like_words(value)):
        return None  # ("pass", "raise"), ["password", "email"]: a list of words, not a key and its value
    if sep == ":" and not m.group("kq") and text.startswith("//", m.end("sep")):
        return None  # a URL scheme, not a key
    kind = _classify(key, value, quoted=quoted, sep=sep, line_start=_line_start(text, m.start()))
    if kind is None:
        return None
    if not quoted and sep == ":" and IDENT_NO_DIGIT.fullmatch(value):
        rest = REST_OF_LINE.match(text, m.end(g))
        if rest is not None and rest.group().strip() and not rest.group().lstrip().startswith("#"):
            return None  # "passwd: files systemd" (nsswitch.conf): a word among words, not a YAML value
    start, end = m.start(g), m.end(g)
    if not quoted:  # trailing punctuation is not part of a bare value
        while end > start and text[end - 1] in ".:":
            end -= 1
    return start, end, kind, P_KEYED


def _check_bearer(m: re.Match[str]) -> bool:
    v = m.group("v")
    if _is_placeholder(v) or _looks_like_words(v):
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
    return not _is_placeholder(v) and not _is_placeholder(v.strip("<>[]"))


def _check_mysql_password(m: re.Match[str]) -> bool:
    """``-pSECRET`` glued to the flag is a password only on a MySQL client's command line."""
    text = m.string
    line_start = max(text.rfind("\n", max(0, m.start() - 300), m.start()) + 1, m.start() - 300)
    return MYSQL_CLIENT.search(text, line_start, m.start()) is not None and _check_url_password(m)


def _check_authorization(m: re.Match[str]) -> bool:
    v = m.group("v").rstrip(".,:;")
    if _is_placeholder(v) or _looks_like_words(v) or v.lower() in AUTH_SCHEMES:
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


# ---------------------------------------------------------------------------------------------------
# PEM private keys (found by markers, not one regex: the BEGIN and END lines may be far apart)
# ---------------------------------------------------------------------------------------------------


def _find_private_keys(text: str) -> Iterator[Span]:
    ends = [m.end() for m in PEM_END.finditer(text)]
    pos = 0
    while True:
        m = PEM_BEGIN.search(text, pos)
        if m is None:
            return
        i = bisect_left(ends, m.end())
        if i < len(ends) and ends[i] - m.end() <= PEM_MAX:
            end = ends[i]
        else:  # truncated key: redact the base64 body that follows
            body = PEM_BODY.match(text, m.end())
            end = body.end() if body else m.end()
            while end > m.end() and text[end - 1] in " \t\r\n-":
                end -= 1
        before = text[max(0, m.start() - 40) : m.start()]
        kind = "gcp_service_account_private_key" if GCP_KEY_CONTEXT.search(before) else "private_key_block"
        yield m.start(), end, kind, P_KEY_BLOCK
        pos = max(end, m.end())


_RULES: tuple[_Rule, ...] = (
    _Rule("private_key", _find_private_keys, triggers=("PRIVATE KEY",), scans=(PEM_BEGIN, PEM_END, PEM_BODY)),
    *map(_regex_rule, FORMAT_RULES),
    *map(_regex_rule, CONTEXT_RULES),
    _Rule(
        "keyed",
        _find_keyed,
        itriggers=KEYED_TRIGGERS,
        scans=(KEYWORD, KEYWORD_I, KEY_RUN, ASSIGN, FLAG, XML),
    ),
)


# ---------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------


def _active_rules(text: str) -> list[_Rule]:
    lowered: str | None = None
    active = []
    contains = text.__contains__
    for rule in _RULES:
        if any(map(contains, rule.triggers)):
            active.append(rule)
            continue
        if rule.itriggers:
            if lowered is None:
                lowered = text.lower()
            if any(map(lowered.__contains__, rule.itriggers)):
                active.append(rule)
    return active


def has_candidate(text: str) -> bool:
    """Cheap pre-check: False means ``redact(text)`` cannot change ``text``."""
    return bool(_active_rules(text))


def _select(spans: list[Span]) -> list[Span]:
    """Non-overlapping spans, higher-priority (lower number) and earlier first.

    One pass per priority level (at most five): the level's spans are taken greedily by start when they
    overlap neither an earlier pick of the level nor a span of a higher level (a bisect into that sorted
    list), then merged into it. O(k log k) for k spans, with no insertion into the middle of a list.
    """
    by_level: dict[int, list[Span]] = {}
    for sp in spans:
        if sp[1] > sp[0]:
            by_level.setdefault(sp[3], []).append(sp)
    chosen: list[Span] = []
    for level in sorted(by_level):
        starts = [c[0] for c in chosen]
        picked: list[Span] = []
        last_end = -1
        for sp in sorted(by_level[level], key=lambda x: (x[0], -x[1])):
            a, b = sp[0], sp[1]
            if a < last_end:
                continue
            i = bisect_right(starts, a)
            if (i > 0 and chosen[i - 1][1] > a) or (i < len(chosen) and chosen[i][0] < b):
                continue
            picked.append(sp)
            last_end = b
        chosen = sorted(chosen + picked)  # two sorted runs: timsort merges them in linear time
    return chosen


def _touches(marks: list[tuple[int, int]], starts: list[int], a: int, b: int) -> bool:
    i = bisect_right(starts, b)  # markers starting at or before b; the last of them may reach a
    return i > 0 and marks[i - 1][1] >= a


def redact(text: str) -> Redaction:
    """Replace every recognised secret in ``text`` with ``[REDACTED:<type>]``."""
    rules = _active_rules(text)
    if not rules:
        return Redaction(text, {})
    spans: list[Span] = []
    for rule in rules:
        for s in rule.find(text):
            if "REDACTED:" not in text[s[0] : s[1]]:
                spans.append(s)
    if spans and "[REDACTED:" in text:  # a span that touches an existing marker: idempotence
        marks = [(m.start(), m.end()) for m in MARKER_RX.finditer(text)]
        starts = [a for a, _ in marks]
        spans = [s for s in spans if not _touches(marks, starts, s[0], s[1])]
    if not spans:
        return Redaction(text, {})
    out: list[str] = []
    counts: dict[str, int] = {}
    pos = 0
    for start, end, kind, _ in _select(spans):
        out.append(text[pos:start])
        out.append(MARKER.format(kind))
        counts[kind] = counts.get(kind, 0) + 1
        pos = end
    out.append(text[pos:])
    return Redaction("".join(out), dict(sorted(counts.items())))


def _merge(into: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def redact_obj(value: Any) -> tuple[Any, dict[str, int]]:
    """Redact every string in a JSON-like structure (dicts, lists, tuples, strings).

    A string value under a key that names a secret (``{"password": "hunter2"}``) is judged with the key as
    context, like ``"password": "hunter2"`` in text. Keys themselves are kept. Returns the new value and
    the counts per secret type.
    """
    counts: dict[str, int] = {}

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            r = redact(v)
            _merge(counts, r.counts)
            return r.text
        if isinstance(v, dict):
            out = {}
            for k, item in v.items():
                if isinstance(k, str) and isinstance(item, str) and "\n" not in item:
                    kind = _classify(k, item, quoted=True, sep=":", line_start=True)
                    if kind is not None:
                        inner = redact(item)  # a known format inside wins (github_token, ...)
                        if inner.total:
                            _merge(counts, inner.counts)
                            out[k] = inner.text
                        else:
                            counts[kind] = counts.get(kind, 0) + 1
                            out[k] = MARKER.format(kind)
                        continue
                out[k] = walk(item)
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, tuple):
            return tuple(walk(x) for x in v)
        return v

    result = walk(value)
    return result, dict(sorted(counts.items()))


def redact_schema(schema: Any) -> tuple[Any, dict[str, int]]:
    """Redact a JSON Schema (a tool's parameters) like :func:`redact_obj`, plus one schema rule: the
    sample values of a property (``default``, ``const``, ``enum``, ``examples``) are judged with the
    property's name as their key, so ``{"password": {"type": "string", "default": "hunter2"}}`` loses
    its default. Keys, types and structure are kept, so the result is still a valid schema.
    """
    counts: dict[str, int] = {}

    def values(name: str, v: Any) -> Any:
        if isinstance(v, str):
            new, c = redact_obj({name: v})
            _merge(counts, c)
            return new[name]
        if isinstance(v, list):
            return [values(name, x) for x in v]
        new, c = redact_obj(v)
        _merge(counts, c)
        return new

    def walk(node: Any, name: str | None) -> Any:
        if isinstance(node, list):
            return [walk(x, name) for x in node]
        if not isinstance(node, dict):
            new, c = redact_obj(node)
            _merge(counts, c)
            return new
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k == "properties" and isinstance(v, dict):
                out[k] = {p: walk(sub, p) for p, sub in v.items()}
            elif k in VALUE_KEYWORDS and name is not None:
                out[k] = values(name, v)
            elif isinstance(v, dict | list):
                out[k] = walk(v, name if k in ("items", "anyOf", "oneOf", "allOf") else None)
            else:
                new, c = redact_obj({k: v})
                _merge(counts, c)
                out[k] = new[k]
        return out

    result = walk(schema, None)
    return result, dict(sorted(counts.items()))
