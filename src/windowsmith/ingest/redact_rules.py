"""The data of secret redaction: what :mod:`windowsmith.ingest.redact` looks for.

The secret types, the token formats and credential contexts (one pattern each, as :class:`RegexRule`),
the keyed-value patterns and key vocabularies, the placeholder and value-shape patterns, the entropy
and length limits, and the PEM markers. The code that applies them (finding spans, judging a keyed
value, choosing among overlapping spans, replacing) is :mod:`windowsmith.ingest.redact`, whose docstring
says how secrets are found, and :mod:`windowsmith.ingest.redact_values` (judging one value).

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

Every pattern a rule scans over the text has bounded repetitions, none nested (a test parses each one),
so one match attempt reads at most the pattern's width. The patterns fullmatched against one value (at
most 512 characters, a header value 4,096) nest no repetition that can backtrack in another (possessive
runs; checked by the same test), so their cost is linear in the value's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKER = "[REDACTED:{}]"
MARKER_RX = re.compile(r"\[REDACTED:[a-z0-9_]{1,40}\]")


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
    "session_cookie",
)

# A span is (start, end, type, priority); a lower priority number wins an overlap.
P_KEY_BLOCK, P_FORMAT, P_CONTEXT, P_HEADER, P_KEYED, P_ENCODED = 0, 1, 2, 3, 4, 5

#: Keyed values whose key names a secret (not a password) must look random: this long, and this many bits
#: of Shannon entropy per character (detect-secrets' hex limit; gitleaks' "generic-api-key" limit).
GENERIC_MIN_LENGTH = 12
HEX_MIN_LENGTH = 16
HEX_MIN_ENTROPY = 3.0
MIN_ENTROPY = 3.5
#: An ``Authorization`` value with no digit must be this long (and reach MIN_ENTROPY).
AUTH_MIN_LENGTH = 16


@dataclass(frozen=True)
class RegexRule:
    """A rule that is one pattern scanned over the text: the secret type it finds (``kind``), how it wins
    an overlap (``priority``), when it runs (``triggers``: case-sensitive substrings of the text,
    ``itriggers``: substrings of the lower-cased text, ``probe``: a pattern searched for), the group that is
    the secret, and the name of the check a match must pass (a key of ``redact_values.CHECKS`` or
    ``redact_pii.PII_CHECKS``)."""

    name: str
    kind: str
    pattern: str
    priority: int
    triggers: tuple[str, ...] = ()
    itriggers: tuple[str, ...] = ()
    group: str | int = 0
    check: str | None = None
    probe: str | None = None  # with no triggers: a pattern whose presence makes the rule run


# Token formats. Each pattern starts with a negative look-behind on its own character class, so a
# match can only start at the beginning of a token: the engine never rescans inside a long run, which
# keeps every rule linear even on adversarial input. Every repetition is bounded.
_B = r"(?<![A-Za-z0-9_-])"  # token start
_E = r"(?![A-Za-z0-9_-])"  # token end

FORMAT_RULES: tuple[RegexRule, ...] = (
    RegexRule(
        "aws_access_key_id",
        "aws_access_key_id",
        r"(?<![A-Za-z0-9])(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}(?![A-Za-z0-9])",
        P_FORMAT,
        triggers=("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
    ),
    RegexRule(
        "github_token",
        "github_token",
        _B + r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,247})" + _E,
        P_FORMAT,
        triggers=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    RegexRule(
        "anthropic_api_key",
        "anthropic_api_key",
        _B + r"sk-ant-[a-z]{2,8}[0-9]{2}-[A-Za-z0-9_-]{20,300}" + _E,
        P_FORMAT,
        triggers=("sk-ant-",),
    ),
    RegexRule(
        "openrouter_api_key",
        "openrouter_api_key",
        _B + r"sk-or-v[0-9]-[A-Za-z0-9]{32,128}" + _E,
        P_FORMAT,
        triggers=("sk-or-",),
    ),
    RegexRule(
        "openai_api_key",
        "openai_api_key",
        _B
        + r"sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,300}"
        + r"|[A-Za-z0-9]{8,200}T3BlbkFJ[A-Za-z0-9]{8,200}"
        + r"|[A-Za-z0-9]{48})"
        + _E,
        P_FORMAT,
        triggers=("sk-",),
    ),
    RegexRule(
        "slack_token",
        "slack_token",
        r"(?<![A-Za-z0-9_-])(?:xox(?:e\.xox[bp]|[abposre])|xapp)-[0-9A-Za-z][A-Za-z0-9-]{9,300}" + _E,
        P_FORMAT,
        triggers=("xox", "xapp-"),
    ),
    RegexRule(
        "slack_webhook",
        "slack_webhook",
        r"(?<![A-Za-z0-9.-])(?i:(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/)(?P<v>[A-Za-z0-9+/_-]{20,300})",
        P_FORMAT,
        itriggers=("hooks.slack.com",),
        group="v",
    ),
    RegexRule(
        "stripe_key",
        "stripe_key",
        r"(?<![A-Za-z0-9_])(?:(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,250}|whsec_[A-Za-z0-9+/=]{24,120})"
        + r"(?![A-Za-z0-9])",
        P_FORMAT,
        triggers=("k_live_", "k_test_", "k_prod_", "whsec_"),  # sk_live_ and rk_live_ both contain k_live_
    ),
    RegexRule(
        "google_api_key",
        "google_api_key",
        _B + r"AIza[A-Za-z0-9_-]{35}" + _E,
        P_FORMAT,
        triggers=("AIza",),
    ),
    RegexRule(
        "jwt",
        "jwt",
        _B + r"eyJ[A-Za-z0-9_-]{8,4000}\.eyJ[A-Za-z0-9_-]{8,8000}(?:\.[A-Za-z0-9_-]{0,4000})?" + _E,
        P_FORMAT,
        triggers=("eyJ",),
    ),
)

# ---------------------------------------------------------------------------------------------------
# Credentials in context
# ---------------------------------------------------------------------------------------------------

AUTH_SCHEMES = frozenset(
    ["bearer", "basic", "digest", "negotiate", "ntlm", "token", "api-token", "apikey", "api-key", "key", "sso-key",
     "jwt", "dpop", "hmac", "aws4-hmac-sha256"]
)
MYSQL_CLIENT = re.compile(r"(?<![\w-])(?:mysql|mysqldump|mysqladmin|mysqlimport|mariadb|mariadb-dump)(?![\w-])")

CONTEXT_RULES: tuple[RegexRule, ...] = (
    RegexRule(
        "aws_secret_access_key",
        "aws_secret_access_key",
        r"""(?i:aws[A-Za-z0-9_.\-]{0,20}secret[A-Za-z0-9_.\-]{0,20}|secret_?access_?key)["']?[ \t]{0,5}"""
        r"""(?:=|:|=>|,)[ \t]{0,5}["']?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])""",
        P_CONTEXT,
        itriggers=("secret",),
        group="v",
    ),
    RegexRule(
        "url_password",
        "url_password",
        r"""(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s:/@'"<>]{0,256}:(?P<v>[^\s/@'"<>]{1,256})@"""
        r"""(?=[A-Za-z0-9\[])""",
        P_CONTEXT,
        triggers=("://",),
        group="v",
        check="url_password",
    ),
    RegexRule(
        "bearer_token",
        "bearer_token",
        r"(?<![A-Za-z0-9])(?i:bearer)[ \t]{1,8}(?P<v>[A-Za-z0-9._~+/=-]{16,4096})(?![A-Za-z0-9._~+/=-])",
        P_HEADER,
        itriggers=("bearer",),
        group="v",
        check="bearer",
    ),
    RegexRule(
        "basic_auth",
        "basic_auth",
        r"(?<![A-Za-z0-9])(?i:basic)[ \t]{1,8}(?P<v>[A-Za-z0-9+/]{8,1024}={0,2})(?![A-Za-z0-9+/=])",
        P_HEADER,
        itriggers=("basic",),
        group="v",
        check="basic",
    ),
    RegexRule(
        "authorization_header",
        "authorization_header",
        r"""(?<![A-Za-z0-9_-])(?i:(?:proxy-)?authorization|x-auth-token|x-access-token|x-api-token|api-token"""
        r"""|private-token)["']?\]?[ \t]{0,4}[:=,][ \t]{0,4}["']?"""
        r"""(?!(?i:bearer|basic)[ \t])(?:(?i:token|api-token|apikey|api-key|key|sso-key|jwt|dpop|hmac)[ \t=]{1,4})?"""
        r"""(?P<v>[A-Za-z0-9._~+/=:@-]{8,4096})(?![A-Za-z0-9._~+/=:@-])""",
        P_HEADER,
        itriggers=("authorization", "-token"),
        group="v",
        check="authorization",
    ),
    RegexRule(
        "docker_auth",  # ~/.docker/config.json: {"auths": {"<registry>": {"auth": base64("user:password")}}}
        "basic_auth",
        r"""(?<![A-Za-z0-9_])["']auth["'][ \t]{0,4}:[ \t]{0,4}["'](?P<v>[A-Za-z0-9+/]{4,1024}={0,2})["']""",
        P_CONTEXT,
        itriggers=('"auth"', "'auth'"),
        group="v",
        check="basic",
    ),
    RegexRule(
        "mysql_password",
        "password_assignment",
        r"""(?<![\w-])-p(?P<v>[^\s'"-][^\s'"]{0,127})""",
        P_HEADER,
        itriggers=("mysql", "mariadb"),
        group="v",
        check="mysql_password",
    ),
    RegexRule(
        "sshpass",
        "password_assignment",
        r"""(?<![\w-])sshpass[ \t]{1,8}-p[ \t]{0,8}["']?(?P<v>[^\s'"]{1,256})""",
        P_HEADER,
        triggers=("sshpass",),
        group="v",
        check="url_password",
    ),
    RegexRule(
        "curl_user_only",  # curl -u "sk_live_...:" / -u "APIKEY:": the key is the user name, no password
        "password_assignment",
        r"""(?<![\w-])(?:-u|--user)(?:[ \t]{1,8}|=)["']?(?P<v>[^\s:'"]{8,256}):(?=["']?(?:\s|$))""",
        P_HEADER,
        triggers=("-u",),  # "--user" contains it
        group="v",
        check="authorization",
    ),
    RegexRule(
        "curl_user",
        "password_assignment",
        r"""(?<![\w-])(?:-u|--user)(?:[ \t]{1,8}|=)["']?[^\s:'"]{0,128}["']?:["']?(?P<v>[^\s'"]{1,256})""",
        P_HEADER,
        triggers=("-u",),  # "--user" contains it
        group="v",
        check="url_password",
    ),
)

# ---------------------------------------------------------------------------------------------------
# Placeholders and value shapes (applied to one value, never scanned over the text)
# ---------------------------------------------------------------------------------------------------

PLACEHOLDER_WORDS = frozenset(
    ["changeme", "change_me", "change-me", "changethis", "password", "passwd", "pass", "secret", "secrets", "token", "apikey", "api_key", "api-key", "key", "example", "sample", "dummy", "fake", "test", "testing", "tests", "none", "null", "nil", "undefined", "true", "false", "yes", "no", "redacted", "placeholder", "todo", "tbd", "fixme", "required", "optional", "empty", "default", "hidden", "masked", "notset", "not_set", "unset", "string", "str", "bytes", "int", "bool", "any", "value", "foo", "bar", "baz", "mysecret", "mypassword", "secretkey", "xxx"]
)
PLACEHOLDER_RX = re.compile(
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
      | [a-z_\-]{0,60}[-_]here
      | \{[A-Za-z_][A-Za-z0-9_.!:\[\]'"]{0,80}\}?     # {var}, f"{pw}" cut at its closing brace
      | [\[{(][^A-Za-z0-9]{0,4}                     # a list, dict or call opens: not a scalar
    )$""",
)
# "your-api-key-here", "insert token", "my secret key": up to FILL_IN_BEFORE characters, a fill-in word, an
# optional separator, up to FILL_IN_BETWEEN characters, a noun (or its plural); letters, "_", "-" and spaces
# only. Found by a scan over the words' positions (redact_values.asks_to_fill_in), not a regex: two adjacent
# bounded runs of one class made a regex try every split of the value.
FILL_IN_WORDS = ("your", "my", "insert", "enter", "replace")
FILL_IN_NOUNS = ("here", "key", "token", "secret", "password")
FILL_IN_BEFORE, FILL_IN_BETWEEN = 40, 60
FILL_IN_MAX = FILL_IN_BEFORE + max(map(len, FILL_IN_WORDS)) + 1 + FILL_IN_BETWEEN + max(map(len, FILL_IN_NOUNS)) + 1
FILL_IN_CHARS = re.compile(rf"[a-z_\- ]{{1,{FILL_IN_MAX}}}", re.IGNORECASE)
TYPE_WORDS = frozenset(
    ["str", "string", "int", "integer", "bool", "boolean", "bytes", "float", "number", "any", "object", "optional", "none", "secretstr", "securestring", "text", "char", "varchar", "list", "dict"]
)
# The value shapes are only ever fullmatched against one value; their runs are possessive (``*+``, ``++``):
# each run is followed by a character it cannot contain, so giving characters back could never help, and
# without it a value that fails at its last character made the engine retry every split (quadratic).
DOTTED_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*+(?:\.[A-Za-z_][A-Za-z0-9_]*+)++")
CODE_SEGMENT = re.compile(r"[A-Za-z_]+[0-9]{0,3}")
IDENT_NO_DIGIT = re.compile(r"[A-Za-z_]+")
WORDS_LOWER = re.compile(r"[a-z]++(?:[-_. /][a-z]++)*+|[A-Z]++(?:[-_. /][A-Z]++)*+")
CAMEL_SEG = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
PATH = re.compile(r"(?:~|\.{1,2})?/[\w.@+-]*+(?:/[\w.@+-]*+)++|[A-Za-z]:\\.*")
# 1.2, 1.2.3-rc.1, v2.0.0+build: ``(?:\.[0-9]+)+`` before a tail that may start with "." was ambiguous (every
# split of 1.1.1...1 tried); "1.2" then any tail starting with [-+.] is the same set of strings.
VERSION = re.compile(r"v?[0-9]++\.[0-9]++(?:[-+.][0-9A-Za-z.-]*+)?")
HEX = re.compile(r"[0-9a-fA-F]+")
NUMBER = re.compile(r"[-+]?[0-9][0-9_,.]*")
JSON_NUMBER = re.compile(r"-?[0-9]++(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?")

# ---------------------------------------------------------------------------------------------------
# Keyed values: KEY=value, "key": "value", key: value, --key value
# ---------------------------------------------------------------------------------------------------

PASSWORD_KEY = re.compile(r"password|passwd|passphrase|pwd|(?<![a-z])pass(?![a-z])|(?<![a-z])pw(?![a-z])")
SECRET_KEY = re.compile(
    r"secret|token|api[_.-]?key|apikey|access[_.-]?key|private[_.-]?key|signing[_.-]?key|encryption[_.-]?key"
    r"|master[_.-]?key|client[_.-]?key|account[_.-]?key|auth(?!or)|credential|creds|session[_.-]?key|(?<![a-z])salt(?![a-z])"
    r"|connection[_.-]?string|dsn(?![a-z])"
)
# Keys that name metadata about a secret, not the secret itself.
META_SUFFIXES = (
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
NON_SECRET_TOKEN_QUALIFIERS = frozenset(
    ["page", "next", "prev", "previous", "continuation", "cursor", "pagination", "resume", "resumption", "sync",
     "delta", "start", "end", "last", "first", "stop", "eos", "bos", "pad", "unk", "sep", "mask", "cls", "special",
     "input", "output", "prompt", "completion", "cache", "cached", "reasoning", "max", "num", "total"]
)
META_SPLIT = re.compile(r"[_.\-]|(?<=[a-z0-9])(?=[A-Z])")

# Matched at a key start found from a keyword hit (see _find_keyed), never scanned with finditer.
_TYPE_ANNOTATION = (
    r"""(?:[ \t]{0,4}:?[ \t]{1,4}(?:string|String|str|&str|&'static[ \t]str|\[\]byte|char[ \t]?\*|QString"""
    r"""|NSString[ \t]?\*|SecureString|SecretStr)[ \t]{0,4}(?=[:.+!=]))?"""
)
ASSIGN = re.compile(
    r"""(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,63})(?P<kq>["']?(?:\]|\[\])?)""" + _TYPE_ANNOTATION + r"""[ \t]{0,8}"""
    r"""(?P<sep>:::=|::=|:=|===|!==|==|!=|=>|\?=|\.=|\+=|=|:|,|(?<=[ \t])(?=["']))[ \t]{0,8}@?"""
    r"""(?:"(?P<dq>[^"\n]{0,512})"|'(?P<sq>[^'\n]{0,512})'|`(?P<bq>[^`\n]{0,512})`|(?P<bare>[^\s\x00"'`,;&|<>)\]}]{1,512}))"""
)
# <password>value</password>, <add name="x"><ApiKey>value</ApiKey>: the element name is the key.
XML = re.compile(
    r"""(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,63})(?P<kq>)(?:[ \t][^<>\n]{0,200})?(?P<sep>>)(?P<dq>[^<>\n]{1,512})</"""
)
COMPARISONS = frozenset({"==", "===", "!=", "!==", ","})
FLAG = re.compile(
    r"""--?(?P<key>[A-Za-z][A-Za-z0-9_-]{1,40})[ \t]{1,8}"""
    r"""(?:"(?P<dq>[^"\n]{1,512})"|'(?P<sq>[^'\n]{1,512})'|(?P<bare>[^\s\x00"'`;&|<>-][^\s\x00"'`;&|<>]{0,511}))"""
)
KEYWORD = re.compile(r"pass|pwd|pw|secret|token|key|auth|cred|salt|dsn|connection")
KEYWORD_I = re.compile(KEYWORD.pattern, re.IGNORECASE)
KEY_RUN = re.compile(r"[A-Za-z0-9_.\-]{0,100}")
KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
KEY_MAX = 64
#: Substrings of the lower-cased text without which the keyed rule cannot match.
KEYED_TRIGGERS = ("pass", "pw", "secret", "token", "key", "auth", "cred", "salt", "dsn", "connection")  # "pw" in "pwd"
REST_OF_LINE = re.compile(r"[^\n\x00]{0,80}")
#: A bare (unquoted) value runs to the end of the line or a quote; these characters end it only where they
#: end a value (see redact._bare_end): before a blank, a doubled operator or the next ``key=``.
BARE_VALUE_MAX = 512
BARE_STOP = frozenset(" \t\r\n\x0b\x0c\x00\"'`")
BARE_MAYBE_STOP = frozenset("&;,|<>")
NEXT_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_. \-]{0,63}=")
CLOSERS = {")": "(", "]": "[", "}": "{"}
#: A value that starts with a call (``get_password()``, ``hash(pw)``, ``Piecewise((x, y > x)``): code, not a
#: password. The name is words with at most three digits at the end (``sha256(``), so ``Xk9mQ2(w`` is a value.
CALL = re.compile(r"(?:[A-Za-z_$][A-Za-z_$]*+[0-9]{0,3}\.)*+[A-Za-z_$][A-Za-z_$]*+[0-9]{0,3}\(")
#: The end of a base64 string after a key candidate: ``pw9==`` of an integrity hash is not ``pw9 = "..."``.
B64_TAIL = re.compile(r"[A-Za-z0-9+/]{0,100}={1,2}(?![A-Za-z0-9+/=])")
INTEGRITY_PREFIX = re.compile(r"sha(?:1|224|256|384|512)-")

# ---------------------------------------------------------------------------------------------------
# Session cookies: Cookie / Set-Cookie headers, curl -b / --cookie, "cookie": "..." (pairs read one by one)
# ---------------------------------------------------------------------------------------------------

COOKIE_HEADER = re.compile(
    r"""(?:(?<![A-Za-z0-9_-])(?i:(?:set-)?cookies?)["']?[ \t]{0,4}[:=][ \t]{0,4}|(?<![\w-])(?:--cookie|-b)[ \t=]{1,4})["']?"""
)
COOKIE_PAIR = re.compile(r"""[ \t]{0,4}(?P<name>[A-Za-z0-9!#$%&*+.^_|~-]{1,128})=(?P<v>[^;,\s"'\\]{0,4096})""")
COOKIE_SESSION_NAME = re.compile(r"(?i)sess|sid|auth|token|jwt|remember|login|identity|credential|secret|key")
COOKIE_ATTRIBUTES = frozenset(
    ["path", "domain", "expires", "max-age", "samesite", "secure", "httponly", "priority", "version", "comment",
     "partitioned"]
)
COOKIE_MIN_LENGTH = 8  # a session-named cookie's value; any other cookie needs a random value (GENERIC_MIN_LENGTH)

# ---------------------------------------------------------------------------------------------------
# Base64 bodies: a base64-encoded .env or config (``base64 .env``, a Kubernetes Secret, GitHub's contents API)
# ---------------------------------------------------------------------------------------------------

#: A run of standard base64; runs on consecutive lines (``base64`` wraps at 76, GitHub at 60) are joined.
#: Runs of more than BASE64_MAX characters in all are not decoded (images and archives, not configuration).
BASE64_MAX = 19_998
BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{24,19998}={0,2}(?![A-Za-z0-9+/=_-])")
BASE64_MIN = 24
BASE64_WRAP_MIN = 60  # a line this long (and a multiple of 4) may be wrapped: the short line after it joins
BASE64_LAST_LINE = re.compile(r"\r?\n[A-Za-z0-9+/]{2,76}={0,2}(?![A-Za-z0-9+/=_-])")
#: Maps each ASCII byte to its class for finding runs in C: base64 "a", padding "=", URL-safe "-", other " ".
BASE64_CLASSES = bytes(
    0x61 if chr(i).isascii() and (chr(i).isalnum() or chr(i) in "+/") else 0x3D if chr(i) == "=" else
    0x2D if chr(i) in "-_" else 0x20
    for i in range(256)
)
#: Characters that are not in printable text: a decoded body with any of them is binary, not configuration.
NOT_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")

# ---------------------------------------------------------------------------------------------------
# PEM private keys (found by markers, not one regex: the BEGIN and END lines may be far apart)
# ---------------------------------------------------------------------------------------------------

PEM_BEGIN = re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
PEM_END = re.compile(r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
PEM_BODY = re.compile(r"[A-Za-z0-9+/=\s\\:,.-]{0,20000}")
PEM_MAX = 20000
GCP_KEY_CONTEXT = re.compile(r"""["']?private_key["']?\s{0,4}[:=]\s{0,4}["']?$""")

#: JSON Schema keywords whose values are sample *values* of the property (not schema).
VALUE_KEYWORDS = frozenset({"default", "const", "enum", "examples", "example"})
