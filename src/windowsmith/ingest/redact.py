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
AWS example key) are documented with the rule data, in :mod:`windowsmith.ingest.redact_rules`; judging one
candidate value (entropy, placeholders, whether a key names a secret) is :mod:`windowsmith.ingest.redact_values`.

Guarantees: idempotent (markers never match a rule), linear time (every pattern that scans the text has
bounded repetitions, none nested, so one match attempt reads at most the pattern's width; token
patterns start at a token boundary; the checks of one value are linear in its length), and a clean text
costs a few substring checks.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .redact_rules import (
    ASSIGN,
    COMPARISONS,
    CONTEXT_RULES,
    FLAG,
    FORMAT_RULES,
    GCP_KEY_CONTEXT,
    IDENT_NO_DIGIT,
    KEY_CHARS,
    KEY_MAX,
    KEY_RUN,
    KEYED_TRIGGERS,
    KEYWORD,
    KEYWORD_I,
    MARKER,
    MARKER_RX,
    P_KEY_BLOCK,
    P_KEYED,
    PEM_BEGIN,
    PEM_BODY,
    PEM_END,
    PEM_MAX,
    REST_OF_LINE,
    SECRET_TYPES,
    VALUE_KEYWORDS,
    XML,
    RegexRule,
)
from .redact_values import CHECKS, classify, key_kind, looks_like_words, shannon_entropy

__all__ = ["SECRET_TYPES", "Redaction", "has_candidate", "redact", "redact_obj", "redact_schema", "shannon_entropy"]


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
# Keyed values: KEY=value, "key": "value", key: value, --key value (judged by redact_values.classify)
# ---------------------------------------------------------------------------------------------------


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
    if key_kind(key) is None:
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
    if sep == "," and (len(value) < 6 or IDENT_NO_DIGIT.fullmatch(value) or looks_like_words(value)):
        return None  # ("pass", "raise"), ["password", "email"]: a list of words, not a key and its value
    if sep == ":" and not m.group("kq") and text.startswith("//", m.end("sep")):
        return None  # a URL scheme, not a key
    kind = classify(key, value, quoted=quoted, sep=sep, line_start=_line_start(text, m.start()))
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
                    kind = classify(k, item, quoted=True, sep=":", line_start=True)
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
