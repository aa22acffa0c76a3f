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

Decisions (documented because they are judgement calls):

* No *unkeyed* entropy scan. Tool output is full of git SHAs, sha256/sha512 digests, UUIDs, base64
  images and lockfile integrity hashes; an agent that cannot see a commit id or a digest is broken.
  So bare high-entropy strings are kept; only known formats and keyed values are redacted.
* Base64 ``data:`` URIs (images) are not secrets and are kept.
* Keys that name metadata about a secret are not secrets: ``AUTH_USER_MODEL``, ``PASSWORD_HASHERS``,
  ``token_url``, and tokens qualified as pagination or tokenizer tokens (``nextPageToken``,
  ``eos_token``). ``PASS:`` in capitals followed by ``:`` is a test runner's line, not a password.
* Placeholders are kept: ``changeme``, ``password``, ``xxx``, ``***``, ``<token>``, ``${VAR}``,
  ``$VAR``, ``{{ var }}``, ``your-api-key-here``, ``None``/``null``, ... They carry no secret and are
  useful context when an agent debugs configuration. The "your/my ... key" shape holds only letters
  and separators, so ``MyPassword2024!`` or ``MyS3cretKey`` is a password, not a placeholder.
* AWS's documented example key ``AKIAIOSFODNN7EXAMPLE`` *is* redacted: over-redacting a doc example is
  harmless, and real keys can end in EXAMPLE.

Guarantees: idempotent (markers never match a rule), linear time (every pattern that scans the text has
bounded repetitions, none nested, so one match attempt reads at most the pattern's width; token
patterns start at a token boundary), and a clean text costs a few substring checks.
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

__all__ = ["SECRET_TYPES", "Redaction", "has_candidate", "redact", "redact_obj", "redact_schema", "shannon_entropy"]

MARKER = "[REDACTED:{}]"

SECRET_TYPES: tuple[str, ...] = (
    "private_key_block",
    "gcp_service_account_private_key",
    "aws_access_key_id",
    "aws_secret_access_key",
    "github_token",
    "openai_api_key",
    "anthropic_api_key",
    "openrouter_api_key",
    "slack_token",
    "slack_webhook",
    "stripe_key",
    "google_api_key",
    "jwt",
    "bearer_token",
    "basic_auth",
    "authorization_header",
    "url_password",
    "password_assignment",
    "generic_secret_assignment",
)


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

_P_KEY_BLOCK, _P_FORMAT, _P_CONTEXT, _P_HEADER, _P_KEYED = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class _Rule:
    name: str
    find: Callable[[str], Iterator[Span]]
    triggers: tuple[str, ...] = ()  # case-sensitive substrings; the rule runs if any is present
    itriggers: tuple[str, ...] = ()  # substrings of the lower-cased text
    scans: tuple[re.Pattern[str], ...] = ()  # the patterns it runs over the text (checked for linear time)


def _regex_rule(
    name: str,
    kind: str,
    pattern: str,
    priority: int,
    *,
    triggers: tuple[str, ...] = (),
    itriggers: tuple[str, ...] = (),
    group: str | int = 0,
    check: Callable[[re.Match[str]], bool] | None = None,
    flags: int = 0,
) -> _Rule:
    rx = re.compile(pattern, flags)

    def find(text: str) -> Iterator[Span]:
        for m in rx.finditer(text):
            if check is not None and not check(m):
                continue
            yield m.start(group), m.end(group), kind, priority

    return _Rule(name, find, triggers, itriggers, (rx,))


# Token formats. Each pattern starts with a negative look-behind on its own character class, so a
# match can only start at the beginning of a token: the engine never rescans inside a long run, which
# keeps every rule linear even on adversarial input. Every repetition is bounded.
_B = r"(?<![A-Za-z0-9_-])"  # token start
_E = r"(?![A-Za-z0-9_-])"  # token end

_FORMAT_RULES = [
    _regex_rule(
        "aws_access_key_id",
        "aws_access_key_id",
        r"(?<![A-Za-z0-9])(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}(?![A-Za-z0-9])",
        _P_FORMAT,
        triggers=("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
    ),
    _regex_rule(
        "github_token",
        "github_token",
        _B + r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,247})" + _E,
        _P_FORMAT,
        triggers=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _regex_rule(
        "anthropic_api_key",
        "anthropic_api_key",
        _B + r"sk-ant-[a-z]{2,8}[0-9]{2}-[A-Za-z0-9_-]{20,300}" + _E,
        _P_FORMAT,
        triggers=("sk-ant-",),
    ),
    _regex_rule(
        "openrouter_api_key",
        "openrouter_api_key",
        _B + r"sk-or-v[0-9]-[A-Za-z0-9]{32,128}" + _E,
        _P_FORMAT,
        triggers=("sk-or-",),
    ),
    _regex_rule(
        "openai_api_key",
        "openai_api_key",
        _B
        + r"sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,300}"
        + r"|[A-Za-z0-9]{8,200}T3BlbkFJ[A-Za-z0-9]{8,200}"
        + r"|[A-Za-z0-9]{48})"
        + _E,
        _P_FORMAT,
        triggers=("sk-",),
    ),
    _regex_rule(
        "slack_token",
        "slack_token",
        r"(?<![A-Za-z0-9_-])(?:xox(?:e\.xox[bp]|[abposre])|xapp)-[0-9A-Za-z][A-Za-z0-9-]{9,300}" + _E,
        _P_FORMAT,
        triggers=("xox", "xapp-"),
    ),
    _regex_rule(
        "slack_webhook",
        "slack_webhook",
        r"(?<![A-Za-z0-9.-])(?i:(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/)(?P<v>[A-Za-z0-9+/_-]{20,300})",
        _P_FORMAT,
        itriggers=("hooks.slack.com",),
        group="v",
    ),
    _regex_rule(
        "stripe_key",
        "stripe_key",
        r"(?<![A-Za-z0-9_])(?:(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,250}|whsec_[A-Za-z0-9+/=]{24,120})"
        + r"(?![A-Za-z0-9])",
        _P_FORMAT,
        triggers=("sk_live_", "sk_test_", "sk_prod_", "rk_live_", "rk_test_", "rk_prod_", "whsec_"),
    ),
    _regex_rule(
        "google_api_key",
        "google_api_key",
        _B + r"AIza[A-Za-z0-9_-]{35}" + _E,
        _P_FORMAT,
        triggers=("AIza",),
    ),
    _regex_rule(
        "jwt",
        "jwt",
        _B + r"eyJ[A-Za-z0-9_-]{8,4000}\.eyJ[A-Za-z0-9_-]{8,8000}(?:\.[A-Za-z0-9_-]{0,4000})?" + _E,
        _P_FORMAT,
        triggers=("eyJ",),
    ),
]

# ---------------------------------------------------------------------------------------------------
# Placeholders and value shapes
# ---------------------------------------------------------------------------------------------------

_PLACEHOLDER_WORDS = frozenset(
    ["changeme", "change_me", "change-me", "changethis", "password", "passwd", "pass", "secret", "secrets", "token", "apikey", "api_key", "api-key", "key", "example", "sample", "dummy", "fake", "test", "testing", "tests", "none", "null", "nil", "undefined", "true", "false", "yes", "no", "redacted", "placeholder", "todo", "tbd", "fixme", "required", "optional", "empty", "default", "hidden", "masked", "notset", "not_set", "unset", "string", "str", "bytes", "int", "bool", "any", "value", "foo", "bar", "baz", "mysecret", "mypassword", "secretkey", "xxx"]
)
_PLACEHOLDER_RX = re.compile(
    r"""(?ix)^(?:
        [x*.#_\-•]{1,64}                       # xxx, ***, ...
      | (?P<rep>[A-Za-z0-9])(?P=rep){1,15}      # yyy, 0000: one character repeated
      | \$\{\{.{0,120}\}\}                       # ${{ secrets.FOO }} (CI templates)
      | <[^<>]{0,80}>                          # <token>
      | \$\{[^{}]{0,120}\}?                    # ${VAR} (a bare value may lose its closing brace)
      | \$[A-Za-z_][A-Za-z0-9_]{0,80}          # $VAR
      | \$\(.{0,120}\)                         # $(cmd)
      | %\(?[A-Za-z_]{0,40}\)?s | %s | \$[0-9] | %~?[0-9*]  # %s, %(name)s, $1, %1 (batch files)
      | \{\{.{0,120}\}\} | \{%.{0,120}%\}      # {{ var }}, {% x %}
      | \{[A-Za-z_][A-Za-z0-9_.]{0,80}\}       # {var}
      | %[A-Za-z_][A-Za-z0-9_]{0,80}%          # %VAR%
      | @[A-Za-z_][A-Za-z0-9_]{0,80}@          # @VAR@
      | (?:os\.environ|os\.getenv|process\.env|env|getenv|ENV|System\.getenv|secrets|vars)\b.{0,160}
      | [a-z_\- ]{0,40}(?:your|my|insert|enter|replace)[-_ ]?[a-z_\- ]{0,60}(?:here|key|token|secret|password)s?
      | [a-z_\-]{0,60}[-_]here
      | \{[A-Za-z_][A-Za-z0-9_.!:\[\]'"]{0,80}\}?     # {var}, f"{pw}" cut at its closing brace
      | [\[{(][^A-Za-z0-9]{0,4}                     # a list, dict or call opens: not a scalar
    )$""",
)
_TYPE_WORDS = frozenset(
    ["str", "string", "int", "integer", "bool", "boolean", "bytes", "float", "number", "any", "object", "optional", "none", "secretstr", "securestring", "text", "char", "varchar", "list", "dict"]
)
_DOTTED_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_CODE_SEGMENT = re.compile(r"[A-Za-z_]+[0-9]{0,3}")
_IDENT_NO_DIGIT = re.compile(r"[A-Za-z_]+")
_WORDS_LOWER = re.compile(r"[a-z]+(?:[-_. /][a-z]+)*|[A-Z]+(?:[-_. /][A-Z]+)*")
_CAMEL_SEG = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_PATH = re.compile(r"(?:~|\.{1,2})?/[\w.@+-]*(?:/[\w.@+-]*)+|[A-Za-z]:\\.*")
_VERSION = re.compile(r"v?[0-9]+(?:\.[0-9]+)+(?:[-+.][0-9A-Za-z.-]*)?")
_HEX = re.compile(r"[0-9a-fA-F]+")
_NUMBER = re.compile(r"[-+]?[0-9][0-9_,.]*")


def _is_placeholder(value: str) -> bool:
    v = value.strip()
    if not v or "REDACTED" in v:
        return True
    if v.lower() in _PLACEHOLDER_WORDS:
        return True
    return len(v) <= 300 and _PLACEHOLDER_RX.match(v) is not None


def _looks_like_words(v: str) -> bool:
    """Ordinary words (``my-app-db-credentials``, ``SessionTokenName``), not a random string."""
    if _WORDS_LOWER.fullmatch(v):
        return True
    if v.isalpha():
        segs = _CAMEL_SEG.findall(v)
        return bool(segs) and sum(map(len, segs)) == len(v) and len(v) / len(segs) >= 3.5
    return False


# ---------------------------------------------------------------------------------------------------
# Keyed values: KEY=value, "key": "value", key: value, --key value
# ---------------------------------------------------------------------------------------------------

_PASSWORD_KEY = re.compile(r"password|passwd|passphrase|pwd|(?<![a-z])pass(?![a-z])|(?<![a-z])pw(?![a-z])")
_SECRET_KEY = re.compile(
    r"secret|token|api[_.-]?key|apikey|access[_.-]?key|private[_.-]?key|signing[_.-]?key|encryption[_.-]?key"
    r"|master[_.-]?key|client[_.-]?key|account[_.-]?key|auth(?!or)|credential|creds|session[_.-]?key|(?<![a-z])salt(?![a-z])"
    r"|connection[_.-]?string|dsn(?![a-z])"
)
# Keys that name metadata about a secret, not the secret itself.
_META_SUFFIXES = (
    "id", "ids", "url", "uri", "urls", "endpoint", "type", "types", "name", "names", "path", "file", "files",
    "dir", "length", "len", "count", "size", "expires", "expiry", "expiration", "ttl", "at", "time",
    "timeout", "header", "field", "env", "var", "prefix", "format", "method", "mode", "enabled", "required",
    "version", "limit", "usage", "tokens", "provider", "scheme", "hint", "policy", "kind", "label",
    "location", "ref", "arn", "region", "scope", "scopes", "status", "state", "rotation", "hash", "algorithm",
    "algo", "strategy", "store", "manager", "backend", "source", "class", "dialog", "page", "form", "error",
    "errors", "valid", "check", "regex", "pattern", "min", "max", "user", "username", "login", "email",
    "model", "models", "backends", "classes", "hasher", "hashers", "validator", "validators", "reset", "changed",
    "field", "fields", "input", "widget", "label", "placeholder", "prompt", "confirm", "confirmation",
    "required", "complexity", "strength", "handler", "middleware", "view", "views", "template", "test", "tests",
)
# A token qualified by one of these words is not a credential: pagination cursors, tokenizer tokens.
_NON_SECRET_TOKEN_QUALIFIERS = frozenset(
    ["page", "next", "prev", "previous", "continuation", "cursor", "pagination", "resume", "resumption", "sync",
     "delta", "start", "end", "last", "first", "stop", "eos", "bos", "pad", "unk", "sep", "mask", "cls", "special",
     "input", "output", "prompt", "completion", "cache", "cached", "reasoning", "max", "num", "total"]
)
_META_SPLIT = re.compile(r"[_.\-]|(?<=[a-z0-9])(?=[A-Z])")

# Matched at a key start found from a keyword hit (see _find_keyed), never scanned with finditer.
_TYPE_ANNOTATION = (
    r"""(?:[ \t]{0,4}:?[ \t]{1,4}(?:string|String|str|&str|&'static[ \t]str|\[\]byte|char[ \t]?\*|QString"""
    r"""|NSString[ \t]?\*|SecureString|SecretStr)[ \t]{0,4}(?=[:.+!=]))?"""
)
_ASSIGN = re.compile(
    r"""(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,63})(?P<kq>["']?(?:\]|\[\])?)""" + _TYPE_ANNOTATION + r"""[ \t]{0,8}"""
    r"""(?P<sep>:::=|::=|:=|===|!==|==|!=|=>|\?=|\.=|\+=|=|:|,|(?<=[ \t])(?=["']))[ \t]{0,8}@?"""
    r"""(?:"(?P<dq>[^"\n]{0,512})"|'(?P<sq>[^'\n]{0,512})'|`(?P<bq>[^`\n]{0,512})`|(?P<bare>[^\s\x00"'`,;&|<>)\]}]{1,512}))"""
)
# <password>value</password>, <add name="x"><ApiKey>value</ApiKey>: the element name is the key.
_XML = re.compile(
    r"""(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,63})(?P<kq>)(?:[ \t][^<>\n]{0,200})?(?P<sep>>)(?P<dq>[^<>\n]{1,512})</"""
)
_COMPARISONS = frozenset({"==", "===", "!=", "!==", ","})
_FLAG = re.compile(
    r"""--?(?P<key>[A-Za-z][A-Za-z0-9_-]{1,40})[ \t]{1,8}"""
    r"""(?:"(?P<dq>[^"\n]{1,512})"|'(?P<sq>[^'\n]{1,512})'|(?P<bare>[^\s\x00"'`;&|<>-][^\s\x00"'`;&|<>]{0,511}))"""
)
_KEYWORD = re.compile(r"pass|pwd|pw|secret|token|key|auth|cred|salt|dsn|connection")
_KEYWORD_I = re.compile(_KEYWORD.pattern, re.IGNORECASE)
_KEY_RUN = re.compile(r"[A-Za-z0-9_.\-]{0,100}")
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_KEY_MAX = 64


@lru_cache(maxsize=4096)
def _key_kind(key: str) -> str | None:
    """``password_assignment`` / ``generic_secret_assignment`` if the key names a secret, else None."""
    k = key.strip("\"'").lower()
    if not k or len(k) > 64:
        return None
    parts = [p for p in _META_SPLIT.split(key.strip("\"'")) if p]
    if parts and parts[-1].lower() in _META_SUFFIXES and len(parts) > 1:
        return None
    low = [p.lower() for p in parts]
    if len(low) >= 2 and low[-1] == "token" and low[-2] in _NON_SECRET_TOKEN_QUALIFIERS:
        return None  # nextPageToken, eos_token, page_token
    if _PASSWORD_KEY.search(k):
        return "password_assignment"
    if _SECRET_KEY.search(k):
        return "generic_secret_assignment"
    return None


def _classify(key: str, value: str, *, quoted: bool, sep: str, line_start: bool) -> str | None:
    """The secret type of ``value`` assigned to ``key``, or None when it is not a secret."""
    kind = _key_kind(key)
    if kind is None:
        return None
    v = value.strip()
    if kind == "generic_secret_assignment" and len(v) < 12:
        return None
    if _is_placeholder(v):
        return None
    if v.startswith(("data:", "artifact://", "file://")) or v.endswith("("):
        return None
    if kind == "password_assignment":
        if "pwd" in key.lower() and _PATH.fullmatch(v):
            return None  # PWD=/home/user is the working directory
        bare_key = key.strip("\"'")
        if bare_key == "PASS" and sep == ":":
            return None  # test runners: "--- PASS: TestX (0.00s)", "PASS: test_name"
        if bare_key.lower() in ("pass", "pw") and not quoted and _IDENT_NO_DIGIT.fullmatch(v):
            return None  # "pass: done", "pw: Piecewise": a short key needs a value that is not a word
        if quoted:
            return kind
        if "(" in v or _DOTTED_IDENT.fullmatch(v) or v.lower() in _TYPE_WORDS:
            return None  # code: password=get_password(), self.password, password: str
        if _IDENT_NO_DIGIT.fullmatch(v):
            # A bare identifier is a variable in code (password=password) unless the key is an
            # environment variable (DB_PASSWORD=letmein) or a YAML key at the start of a line.
            env_key = key.strip("\"'").upper() == key.strip("\"'") and sep == "="
            yaml_key = sep == ":" and line_start
            if not (env_key or yaml_key) or v.lower() in key.lower():
                return None
        return kind
    # generic: the value must look random.
    if len(v) < 12 or any(c.isspace() for c in v):
        return None
    if _NUMBER.fullmatch(v) or _VERSION.fullmatch(v) or _PATH.fullmatch(v) or "://" in v:
        return None
    if not quoted and ("(" in v or _is_attribute_path(v)):
        return None
    if _looks_like_words(v) or (_DOTTED_IDENT.fullmatch(v) and all(map(_looks_like_words, v.split(".")))):
        return None  # AUTH_USER_MODEL = "accounts.CustomUser"
    limit = 3.0 if _HEX.fullmatch(v) else 3.5
    if _HEX.fullmatch(v) and len(v) < 16:
        return None
    return kind if shannon_entropy(v) >= limit else None


def _is_attribute_path(v: str) -> bool:
    """``self.config.api_key``, ``settings.SECRET_KEY2``: code, not a value (random segments are a value)."""
    return _DOTTED_IDENT.fullmatch(v) is not None and all(_CODE_SEGMENT.fullmatch(p) for p in v.split("."))


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
    hits = _KEYWORD.finditer(lowered) if len(lowered) == len(text) else _KEYWORD_I.finditer(text)
    skip_until = -1
    for hit in hits:
        p = hit.start()
        if p < skip_until:
            continue
        word_end = _KEY_RUN.match(text, p).end()  # type: ignore[union-attr]
        skip_until = word_end
        i = p
        lo = max(0, p - _KEY_MAX)
        while i > lo and text[i - 1] in _KEY_CHARS:
            i -= 1
        if (i == lo and lo > 0 and text[i - 1] in _KEY_CHARS) or word_end - i > _KEY_MAX + 2:
            continue  # a long run of word characters, not a key
        j = i
        while j < p and text[j] == "-":
            j += 1
        candidates: list[tuple[re.Match[str] | None, bool]] = []
        if 0 < j - i <= 2:
            candidates.append((_FLAG.match(text, i), True))
        if i > 0 and text[i - 1] == "<":
            candidates.append((_XML.match(text, i), False))
        candidates.append((_ASSIGN.match(text, j), False))
        for m, is_flag in candidates:
            if m is None or m.end("key") < hit.end():
                continue
            skip_until = max(skip_until, m.end())  # each value is judged once: linear time
            span = _keyed_span(text, m, is_flag)
            if span is not None:
                yield span
                skip_until = max(skip_until, span[1])
                break


_REST_OF_LINE = re.compile(r"[^\n\x00]{0,80}")


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
    if sep in _COMPARISONS and (not quoted or (sep == "," and not m.group("kq"))):
        return None  # password == other, f(token, x): a comparison or an argument list needs a literal
    if sep == "," and (len(value) < 6 or _IDENT_NO_DIGIT.fullmatch(value) or _looks_like_words(value)):
        return None  # ("pass", "raise"), ["password", "email"]: a list of words, not a key and its value
    if sep == ":" and not m.group("kq") and text.startswith("//", m.end("sep")):
        return None  # a URL scheme, not a key
    kind = _classify(key, value, quoted=quoted, sep=sep, line_start=_line_start(text, m.start()))
    if kind is None:
        return None
    if not quoted and sep == ":" and _IDENT_NO_DIGIT.fullmatch(value):
        rest = _REST_OF_LINE.match(text, m.end(g))
        if rest is not None and rest.group().strip() and not rest.group().lstrip().startswith("#"):
            return None  # "passwd: files systemd" (nsswitch.conf): a word among words, not a YAML value
    start, end = m.start(g), m.end(g)
    if not quoted:  # trailing punctuation is not part of a bare value
        while end > start and text[end - 1] in ".:":
            end -= 1
    return start, end, kind, _P_KEYED


def _check_bearer(m: re.Match[str]) -> bool:
    v = m.group("v")
    if _is_placeholder(v) or _looks_like_words(v):
        return False
    return not v.isalpha() or shannon_entropy(v) >= 3.5


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


_MYSQL_CLIENT = re.compile(r"(?<![\w-])(?:mysql|mysqldump|mysqladmin|mysqlimport|mariadb|mariadb-dump)(?![\w-])")


def _check_mysql_password(m: re.Match[str]) -> bool:
    """``-pSECRET`` glued to the flag is a password only on a MySQL client's command line."""
    text = m.string
    line_start = max(text.rfind("\n", max(0, m.start() - 300), m.start()) + 1, m.start() - 300)
    return _MYSQL_CLIENT.search(text, line_start, m.start()) is not None and _check_url_password(m)


def _check_authorization(m: re.Match[str]) -> bool:
    v = m.group("v").rstrip(".,:;")
    if _is_placeholder(v) or _looks_like_words(v) or v.lower() in _AUTH_SCHEMES:
        return False
    return any(c.isdigit() for c in v) or (len(v) >= 16 and shannon_entropy(v) >= 3.5)


_AUTH_SCHEMES = frozenset(
    ["bearer", "basic", "digest", "negotiate", "ntlm", "token", "api-token", "apikey", "api-key", "key", "sso-key",
     "jwt", "dpop", "hmac", "aws4-hmac-sha256"]
)


_CONTEXT_RULES = [
    _regex_rule(
        "aws_secret_access_key",
        "aws_secret_access_key",
        r"""(?i:aws[A-Za-z0-9_.\-]{0,20}secret[A-Za-z0-9_.\-]{0,20}|secret_?access_?key)["']?[ \t]{0,5}"""
        r"""(?:=|:|=>|,)[ \t]{0,5}["']?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])""",
        _P_CONTEXT,
        itriggers=("secret",),
        group="v",
    ),
    _regex_rule(
        "url_password",
        "url_password",
        r"""(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s:/@'"<>]{0,256}:(?P<v>[^\s/@'"<>]{1,256})@"""
        r"""(?=[A-Za-z0-9\[])""",
        _P_CONTEXT,
        triggers=("://",),
        group="v",
        check=_check_url_password,
    ),
    _regex_rule(
        "bearer_token",
        "bearer_token",
        r"(?<![A-Za-z0-9])(?i:bearer)[ \t]{1,8}(?P<v>[A-Za-z0-9._~+/=-]{16,4096})(?![A-Za-z0-9._~+/=-])",
        _P_HEADER,
        itriggers=("bearer",),
        group="v",
        check=_check_bearer,
    ),
    _regex_rule(
        "basic_auth",
        "basic_auth",
        r"(?<![A-Za-z0-9])(?i:basic)[ \t]{1,8}(?P<v>[A-Za-z0-9+/]{8,1024}={0,2})(?![A-Za-z0-9+/=])",
        _P_HEADER,
        itriggers=("basic",),
        group="v",
        check=_check_basic,
    ),
    _regex_rule(
        "authorization_header",
        "authorization_header",
        r"""(?<![A-Za-z0-9_-])(?i:(?:proxy-)?authorization|x-auth-token|x-access-token|x-api-token|api-token"""
        r"""|private-token)["']?\]?[ \t]{0,4}[:=,][ \t]{0,4}["']?"""
        r"""(?!(?i:bearer|basic)[ \t])(?:(?i:token|api-token|apikey|api-key|key|sso-key|jwt|dpop|hmac)[ \t=]{1,4})?"""
        r"""(?P<v>[A-Za-z0-9._~+/=:@-]{8,4096})(?![A-Za-z0-9._~+/=:@-])""",
        _P_HEADER,
        itriggers=("authorization", "-token"),
        group="v",
        check=_check_authorization,
    ),
    _regex_rule(
        "mysql_password",
        "password_assignment",
        r"""(?<![\w-])-p(?P<v>[^\s'"-][^\s'"]{0,127})""",
        _P_HEADER,
        itriggers=("mysql", "mariadb"),
        group="v",
        check=_check_mysql_password,
    ),
    _regex_rule(
        "sshpass",
        "password_assignment",
        r"""(?<![\w-])sshpass[ \t]{1,8}-p[ \t]{0,8}["']?(?P<v>[^\s'"]{1,256})""",
        _P_HEADER,
        triggers=("sshpass",),
        group="v",
        check=_check_url_password,
    ),
    _regex_rule(
        "curl_user_only",  # curl -u "sk_live_...:" / -u "APIKEY:": the key is the user name, no password
        "password_assignment",
        r"""(?<![\w-])(?:-u|--user)(?:[ \t]{1,8}|=)["']?(?P<v>[^\s:'"]{8,256}):(?=["']?(?:\s|$))""",
        _P_HEADER,
        triggers=("-u", "--user"),
        group="v",
        check=_check_authorization,
    ),
    _regex_rule(
        "curl_user",
        "password_assignment",
        r"""(?<![\w-])(?:-u|--user)(?:[ \t]{1,8}|=)["']?[^\s:'"]{0,128}["']?:["']?(?P<v>[^\s'"]{1,256})""",
        _P_HEADER,
        triggers=("-u", "--user"),
        group="v",
        check=_check_url_password,
    ),
]

# ---------------------------------------------------------------------------------------------------
# PEM private keys (found by markers, not one regex: the BEGIN and END lines may be far apart)
# ---------------------------------------------------------------------------------------------------

_PEM_BEGIN = re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_BODY = re.compile(r"[A-Za-z0-9+/=\s\\:,.-]{0,20000}")
_PEM_MAX = 20000
_GCP_KEY_CONTEXT = re.compile(r"""["']?private_key["']?\s{0,4}[:=]\s{0,4}["']?$""")


def _find_private_keys(text: str) -> Iterator[Span]:
    ends = [m.end() for m in _PEM_END.finditer(text)]
    pos = 0
    while True:
        m = _PEM_BEGIN.search(text, pos)
        if m is None:
            return
        i = bisect_left(ends, m.end())
        if i < len(ends) and ends[i] - m.end() <= _PEM_MAX:
            end = ends[i]
        else:  # truncated key: redact the base64 body that follows
            body = _PEM_BODY.match(text, m.end())
            end = body.end() if body else m.end()
            while end > m.end() and text[end - 1] in " \t\r\n-":
                end -= 1
        before = text[max(0, m.start() - 40) : m.start()]
        kind = "gcp_service_account_private_key" if _GCP_KEY_CONTEXT.search(before) else "private_key_block"
        yield m.start(), end, kind, _P_KEY_BLOCK
        pos = max(end, m.end())


_RULES: tuple[_Rule, ...] = (
    _Rule("private_key", _find_private_keys, triggers=("PRIVATE KEY",), scans=(_PEM_BEGIN, _PEM_END, _PEM_BODY)),
    *_FORMAT_RULES,
    *_CONTEXT_RULES,
    _Rule(
        "keyed",
        _find_keyed,
        itriggers=("pass", "pwd", "pw", "secret", "token", "key", "auth", "cred", "salt", "dsn", "connection"),
        scans=(_KEYWORD, _KEYWORD_I, _KEY_RUN, _ASSIGN, _FLAG, _XML),
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


_MARKER_RX = re.compile(r"\[REDACTED:[a-z0-9_]{1,40}\]")


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
        marks = [(m.start(), m.end()) for m in _MARKER_RX.finditer(text)]
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


#: JSON Schema keywords whose values are sample *values* of the property (not schema).
_VALUE_KEYWORDS = frozenset({"default", "const", "enum", "examples", "example"})


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
            elif k in _VALUE_KEYWORDS and name is not None:
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
