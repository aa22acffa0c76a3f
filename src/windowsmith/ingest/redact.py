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
  A bare value runs to the end of the line or a quote, through ``& ( ) ] } ; , . < > |``
  (:mod:`windowsmith.ingest.redact_keyed`); the ``pw9==`` that ends a base64 hash is not a key.
* **Credentials in context**: ``scheme://user:password@host``, ``Authorization: Bearer|Basic ...``,
  ``Authorization: Token|Api-Token|<raw value>``, ``PRIVATE-TOKEN: ...``, ``curl -u user:password``,
  Docker's ``"auth": base64(user:password)``, session cookies (``Cookie:``, ``Set-Cookie:``, ``curl -b``).
* **Inside JSON strings**: the rules also run over a view of the text with its JSON string escapes decoded
  (``{"stdout": "DB_PASSWORD=\\"Xk9\\"\\n"}``, two levels deep), and each span found there replaces the
  characters of the text that spell it, so a JSON document stays valid (:mod:`windowsmith.ingest.redact_escapes`).
* **Base64 bodies**: a run of base64 (wrapped lines joined) of up to ``BASE64_MAX`` characters that decodes
  to text is checked in turn (a ``.env`` through ``base64``, a Kubernetes Secret, GitHub's contents API);
  when it holds a secret the whole run is replaced, typed by that secret.
* **Personal data**, only with ``pii=True`` (:mod:`windowsmith.ingest.redact_pii`): e-mail addresses,
  phone numbers, payment card numbers (Luhn), US SSNs and UK National Insurance numbers.

The judgement calls behind the rules (no unkeyed entropy scan, which keys and values are kept, the
AWS example key) are documented with the rule data, in :mod:`windowsmith.ingest.redact_rules`; judging one
candidate value (entropy, placeholders, whether a key names a secret) is :mod:`windowsmith.ingest.redact_values`.

Guarantees: idempotent (markers never match a rule), linear time (every pattern that scans the text has
bounded repetitions, none nested, so one match attempt reads at most the pattern's width; token
patterns start at a token boundary; the checks of one value are linear in its length; base64 runs are found
by a substring search over a byte class map), and a clean text costs a few substring checks.
"""

from __future__ import annotations

import base64
import binascii
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .redact_escapes import align, only_escapes, unescape
from .redact_keyed import Span, find_keyed
from .redact_pii import PII_CHECKS, PII_RULES, PII_TYPES
from .redact_rules import (
    ASSIGN,
    BASE64_CLASSES,
    BASE64_LAST_LINE,
    BASE64_MAX,
    BASE64_MIN,
    BASE64_RUN,
    BASE64_WRAP_MIN,
    CONTEXT_RULES,
    COOKIE_ATTRIBUTES,
    COOKIE_HEADER,
    COOKIE_MIN_LENGTH,
    COOKIE_PAIR,
    COOKIE_SESSION_NAME,
    FLAG,
    FORMAT_RULES,
    GCP_KEY_CONTEXT,
    KEY_RUN,
    KEYED_TRIGGERS,
    KEYWORD,
    KEYWORD_I,
    MARKER,
    MARKER_RX,
    NOT_TEXT,
    P_ENCODED,
    P_HEADER,
    P_KEY_BLOCK,
    PEM_BEGIN,
    PEM_BODY,
    PEM_END,
    PEM_MAX,
    SECRET_TYPES,
    VALUE_KEYWORDS,
    XML,
    RegexRule,
)
from .redact_values import CHECKS, classify, is_placeholder, looks_random, shannon_entropy

__all__ = ["PII_TYPES", "SECRET_TYPES", "Redaction", "has_candidate", "redact", "redact_obj", "redact_schema", "shannon_entropy"]


@dataclass(frozen=True)
class Redaction:
    """Redacted text and how many secrets of each type were replaced."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


# ---------------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------------
# A span (redact_keyed.Span) is (start, end, type, priority); a lower priority number wins an overlap.


@dataclass(frozen=True)
class _Rule:
    name: str
    find: Callable[[str], Iterator[Span]]
    triggers: tuple[str, ...] = ()  # case-sensitive substrings; the rule runs if any is present
    itriggers: tuple[str, ...] = ()  # substrings of the lower-cased text
    scans: tuple[re.Pattern[str], ...] = ()  # the patterns it runs over the text (checked for linear time)
    probe: Callable[[str], object] | None = None  # without triggers: the rule runs if this finds something


def _regex_rule(spec: RegexRule) -> _Rule:
    """The rule that scans ``spec.pattern`` over the text and keeps the matches its check accepts."""
    rx = re.compile(spec.pattern)
    check = {**CHECKS, **PII_CHECKS}[spec.check] if spec.check is not None else None
    kind, priority, group = spec.kind, spec.priority, spec.group

    def find(text: str) -> Iterator[Span]:
        for m in rx.finditer(text):
            if check is not None and not check(m):
                continue
            yield m.start(group), m.end(group), kind, priority

    probe = re.compile(spec.probe).search if spec.probe is not None else None
    return _Rule(spec.name, find, spec.triggers, spec.itriggers, (rx,), probe)


# ---------------------------------------------------------------------------------------------------
# Session cookies and base64 bodies
# ---------------------------------------------------------------------------------------------------


def _find_cookies(text: str) -> Iterator[Span]:
    """The values of session cookies in a ``Cookie`` / ``Set-Cookie`` header, ``curl -b`` or a
    ``"cookie": "..."`` field: a cookie whose name says session (``sessionid``, ``connect.sid``,
    ``remember_token``) of at least COOKIE_MIN_LENGTH characters, or any cookie with a random value."""
    done = -1  # the end of the pairs read so far: a header inside them ("cookie=1;cookie=1;...") is not reread
    for h in COOKIE_HEADER.finditer(text):
        if h.start() < done:
            continue
        pos = h.end()
        while (m := COOKIE_PAIR.match(text, pos)) is not None:
            name, value = m.group("name"), m.group("v")
            if name.lower() not in COOKIE_ATTRIBUTES and value and not is_placeholder(value):
                session = COOKIE_SESSION_NAME.search(name) is not None and len(value) >= COOKIE_MIN_LENGTH
                if session or looks_random(value, quoted=True):
                    yield m.start("v"), m.end("v"), "session_cookie", P_HEADER
            pos = m.end()
            if not text.startswith(";", pos):
                break
            pos += 1
        done = pos


_RUN = b"a" * BASE64_MIN
_NOT_BASE64 = re.compile(rb"[^a]")


def _base64_classes(text: str) -> bytes:
    """``text`` as one byte per character (non-ASCII as ``?``) mapped to BASE64_CLASSES: a run of base64
    is then found by a substring search in C, ten times faster than a pattern over the text."""
    return text.encode("ascii", "replace").translate(BASE64_CLASSES)


def _has_base64_run(text: str) -> bool:
    return len(text) >= BASE64_MIN and _RUN in _base64_classes(text)


def _base64_run_spans(text: str) -> Iterator[tuple[int, int]]:
    """What ``BASE64_RUN.finditer(text)`` finds: runs of BASE64_MIN to BASE64_MAX base64 characters and their
    padding, with no base64, padding or URL-safe character on either side."""
    classes = _base64_classes(text)
    pos = classes.find(_RUN)
    while pos != -1:
        m = _NOT_BASE64.search(classes, pos)
        end = len(classes) if m is None else m.start()
        stop = end
        while stop < len(classes) and stop - end < 2 and classes[stop] == 0x3D:
            stop += 1
        before_ok = pos == 0 or classes[pos - 1] == 0x20
        if before_ok and end - pos <= BASE64_MAX and (stop == len(classes) or classes[stop] == 0x20):
            yield pos, stop
        pos = classes.find(_RUN, stop + 1)


def _base64_runs(text: str) -> Iterator[tuple[int, int]]:
    """Runs of base64; a run wrapped over lines (each a multiple of 4 long, the last one shorter) is one."""
    start = end = line = -1
    for a, b in _base64_run_spans(text):
        gap = text[end:a] if end >= 0 else ""
        if gap in ("\n", "\r\n") and (end - line) % 4 == 0 and text[end - 1] != "=" and b - start <= BASE64_MAX:
            end, line = b, a
            continue
        if start >= 0:
            yield start, _wrapped_tail(text, line, end)
        start, end, line = a, b, a
    if start >= 0:
        yield start, _wrapped_tail(text, line, end)


def _wrapped_tail(text: str, line: int, end: int) -> int:
    """The end of a wrapped run, its last line included when shorter than BASE64_MIN (``base64`` prints 76
    characters a line, GitHub 60)."""
    if end - line < BASE64_WRAP_MIN or (end - line) % 4 or text[end - 1] == "=":
        return end
    tail = BASE64_LAST_LINE.match(text, end)
    return end if tail is None else tail.end()


def _find_base64_bodies(text: str) -> Iterator[Span]:
    """A base64-encoded text (a ``.env``, a config file) up to BASE64_MAX characters that holds a secret:
    the whole run is replaced, typed by the first secret inside it."""
    for a, b in _base64_runs(text):
        blob = text[a:b].replace("\r", "").replace("\n", "")
        if b - a > BASE64_MAX or blob.isdigit() or blob.islower() or blob.isupper():
            continue
        try:
            decoded = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if NOT_TEXT.search(decoded) is not None:
            continue
        inner = _spans(decoded, _active_rules(decoded, nested=True))
        if inner:
            yield a, b, min(inner)[2], P_ENCODED


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
        find_keyed,
        itriggers=KEYED_TRIGGERS,
        scans=(KEYWORD, KEYWORD_I, KEY_RUN, ASSIGN, FLAG, XML),
    ),
    _Rule("session_cookie", _find_cookies, itriggers=("cookie", " -b "), scans=(COOKIE_HEADER, COOKIE_PAIR)),
)
#: Decoding base64 bodies (one level: a body inside a body is not decoded).
_BASE64_RULE = _Rule("base64_body", _find_base64_bodies, probe=_has_base64_run, scans=(BASE64_RUN,))
_PII_RULES: tuple[_Rule, ...] = tuple(map(_regex_rule, PII_RULES))
_RULE_SETS = {  # (pii, nested): the rules that may run
    (False, False): (*_RULES, _BASE64_RULE),
    (True, False): (*_RULES, _BASE64_RULE, *_PII_RULES),
    (False, True): _RULES,
    (True, True): (*_RULES, *_PII_RULES),
}


# ---------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------


def _active_rules(text: str, *, pii: bool = False, nested: bool = False) -> list[_Rule]:
    lowered: str | None = None
    active = []
    for rule in _RULE_SETS[pii, nested]:
        for t in rule.triggers:  # a loop over "in" is cheaper than any(map(text.__contains__, ...)) here
            if t in text:
                active.append(rule)
                break
        else:
            if rule.itriggers:
                if lowered is None:
                    lowered = text.lower()
                for t in rule.itriggers:
                    if t in lowered:
                        active.append(rule)
                        break
            elif rule.probe is not None and rule.probe(text):
                active.append(rule)
    return active


def has_candidate(text: str, *, pii: bool = False) -> bool:
    """Cheap pre-check: False means ``redact(text)`` cannot change ``text``."""
    if _active_rules(text, pii=pii):
        return True
    view = unescape(text)  # https:\\/\\/user:pw@host (PHP's JSON) shows its "://" only when decoded
    return view is not None and has_candidate(view.text, pii=pii)


def _spans(text: str, rules: list[_Rule]) -> list[Span]:
    """Every span the rules find in ``text`` that does not hold an existing marker."""
    return [s for rule in rules for s in rule.find(text) if "REDACTED:" not in text[s[0] : s[1]]]


def _overlaps(chosen: list[Span], starts: list[int], a: int, b: int) -> bool:
    i = bisect_right(starts, a)
    return (i > 0 and chosen[i - 1][1] > a) or (i < len(chosen) and chosen[i][0] < b)


def _find(text: str, pii: bool, depth: int = 0) -> list[Span]:
    """The spans to replace in ``text``: those found in it, and those found in the view of its JSON string
    escapes (two levels: JSON text inside a JSON string), mapped back. Where the two overlap the view's
    span wins (it read ``\\"`` as a quote); no span splits an escape sequence or is nothing but escapes
    (``\\\\`` before ``\\"``: the quoting of a string inside a string)."""
    spans = _spans(text, _active_rules(text, pii=pii))
    view = unescape(text) if depth < 2 and "\\" in text else None
    if view is None:
        return spans
    decoded = [(view.original(a), view.original(b), k, p) for a, b, k, p in _find(view.text, pii, depth + 1)]
    decoded.sort()
    starts = [s[0] for s in decoded]
    own = []
    for a, b, k, p in spans:
        a, b = align(text, a, b)
        if b > a and not only_escapes(text[a:b]) and not _overlaps(decoded, starts, a, b):
            own.append((a, b, k, p))
    return decoded + own


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


def redact(text: str, *, pii: bool = False) -> Redaction:
    """Replace every recognised secret in ``text`` with ``[REDACTED:<type>]``; with ``pii``, also e-mail
    addresses, phone numbers, payment card numbers and national ids (:data:`PII_TYPES`)."""
    spans = _find(text, pii)
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


def redact_obj(value: Any, *, pii: bool = False) -> tuple[Any, dict[str, int]]:
    """Redact every string in a JSON-like structure (dicts, lists, tuples, strings).

    A string value under a key that names a secret (``{"password": "hunter2"}``) is judged with the key as
    context, like ``"password": "hunter2"`` in text. Keys themselves are kept. Returns the new value and
    the counts per secret type.
    """
    counts: dict[str, int] = {}

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            r = redact(v, pii=pii)
            _merge(counts, r.counts)
            return r.text
        if isinstance(v, dict):
            out = {}
            for k, item in v.items():
                if isinstance(k, str) and isinstance(item, str) and "\n" not in item:
                    kind = classify(k, item, quoted=True, sep=":", line_start=True)
                    if kind is not None:
                        inner = redact(item, pii=pii)  # a known format inside wins (github_token, ...)
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
