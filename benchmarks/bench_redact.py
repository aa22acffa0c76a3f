"""Secret redaction: recall per secret type on a synthetic corpus, false positives on the real traces.

Run:  .venv/bin/python benchmarks/bench_redact.py              (writes benchmarks/results/redact.json and .md)
      .venv/bin/python benchmarks/bench_redact.py --regenerate (rebuilds benchmarks/data/redact_corpus.json)
      .venv/bin/python benchmarks/bench_redact.py --adversarial (also times the 5 MB adversarial inputs)
      ... --detect-secrets          (runs Yelp/detect-secrets on the same cases and traces: minutes; without
                                     it, its last figures are carried over)
      ... --baseline MODULE         (an importable copy of an earlier windowsmith.ingest.redact, measured side
                                     by side, speed included)

**Recall.** ``benchmarks/data/redact_corpus.json`` holds synthetic secrets, generated here from a fixed
seed, for every type ``windowsmith.ingest.redact`` claims. Each secret follows the shape of a public rule
definition: the gitleaks default rules (``cmd/generate/config/rules/*.go``: aws, github, openai,
anthropic, openrouter, slack, stripe, gcp, jwt, private keys, curl, generic-api-key with its keywords,
character class and entropy ≥ 3.5) and Yelp/detect-secrets' keyword plugin (its ``=``, ``:``, ``:=``,
``=>``, quoted, ``dict["key"]`` and comparison positives), plus the shapes issue 14 lists (XML
elements, Go ``var x string =``, PHP ``.=``, Make ``::=``, ``setProperty``, ``Authorization: Token``,
``curl -u ":pw"``, unsigned JWTs, webhooks without a scheme, human-made passwords). Each secret is
embedded in a few of the contexts an agent sees (shell, .env, JSON, YAML, code in several languages,
HTTP headers, log and error lines, URLs). All values are random: none is a real credential. A case
counts as caught when the secret is gone from the redacted text; "typed" also needs the marker of the
expected type.

**Contexts (issue 56).** The same secrets inside a JSON-escaped string (``{"stdout": "..."}``), 1,000
unquoted passwords with ``& ( ) ] } ; , . < > |`` inside, base64-encoded ``.env`` bodies (bare, wrapped,
a Kubernetes Secret, GitHub's contents API), Docker ``auths`` (plain and escaped), session cookies, and
20,000 package-lock integrity hashes that must not change. Recall per context and type, side by side with
detect-secrets (default plugins and filters, a case caught when replacing what it reports hides the
secret). The optional PII redactor: recall per type on generated values, look-alikes that must be kept,
and its matches on the real traces.

**False positives.** Every text of the real traces in ``../shared/data/traces`` (system prompt, each tool
description, each message text, each tool result, each tool call's arguments through ``redact_obj``)
is one text; the traces hold no real credentials, so any redaction is a false positive.
"""

from __future__ import annotations

import base64
import json
import random
import string
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from windowsmith.ingest.redact import SECRET_TYPES, redact, redact_obj, shannon_entropy
from windowsmith.model import Text, Thinking, ToolCall, ToolResult
from windowsmith.traces import iter_trace_files, load_traces

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "traces"
CORPUS = ROOT / "benchmarks" / "data" / "redact_corpus.json"
OUT = ROOT / "benchmarks" / "results"
SEED = 14
PER_TYPE = 240  # cases per type (secret x context)

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
B32 = string.ascii_uppercase + "234567"
HEX = "0123456789abcdef"
URLSAFE = ALNUM + "_-"
PW_SYMBOLS = "!@%^*_-+=.?~"
WORDS = ["Summer", "Winter", "Autumn", "Spring", "Welcome", "Dragon", "Monkey", "Sunshine", "Football", "Princess",
         "MyPassword", "Password", "Admin", "Letmein", "Secret", "Qwerty", "Shadow", "Master", "Company", "London"]


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# --- secret generators (shapes from the public rule definitions) -----------------------------------


def _password(rng: random.Random, *, url: bool = False) -> str:
    kind = rng.randrange(3)
    if kind == 0:  # random, as a password manager makes them
        symbols = "!%^*_-+=.?~" if url else PW_SYMBOLS
        while True:
            v = _r(rng, ALNUM + symbols, rng.randint(10, 24))
            if any(c.isdigit() for c in v) and v[0] not in "-_.":
                return v
    if kind == 1:  # human-made: Word + year + symbol ("MyPassword2024!", "Summer2023#")
        return rng.choice(WORDS) + str(rng.randint(1990, 2026)) + rng.choice("!?.*+" if url else "!#?.*+@")
    # leet word with digits inside ("MyS3cretKey", "Tr0ub4dor9")
    w = rng.choice(WORDS) + rng.choice(WORDS)
    return "".join({"e": "3", "a": "4", "o": "0", "i": "1"}.get(c, c) if rng.random() < 0.5 else c for c in w) \
        + str(rng.randint(0, 99))


def _generic(rng: random.Random) -> str:
    # gitleaks generic-api-key: [0-9a-z\-_.=]{10,150} with entropy >= 3.5; detect-secrets hex/base64 shapes
    while True:
        shape = rng.randrange(3)
        if shape == 0:
            v = _r(rng, string.ascii_lowercase + string.digits + "-_.", rng.randint(16, 64))
        elif shape == 1:
            v = _r(rng, HEX, rng.choice([32, 40, 64]))
        else:
            v = _r(rng, ALNUM, rng.randint(20, 48))
        if shannon_entropy(v) >= (3.0 if shape == 1 else 3.5) and v[0] not in "-_.":
            return v


def _jwt(rng: random.Random) -> str:
    alg = rng.choice(["HS256", "RS256", "ES256", "none"])
    header = _b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    payload = _b64url(json.dumps({"sub": str(rng.randint(1, 10**9)), "iat": rng.randint(1.6e9, 1.8e9),
                                  "name": _r(rng, string.ascii_lowercase, 8)}).encode())
    if alg == "none":
        return f"{header}.{payload}" + rng.choice([".", ""])  # unsigned: trailing dot or no third part
    return f"{header}.{payload}.{_b64url(rng.randbytes(32 if alg == 'HS256' else 64))}"


def _pem(rng: random.Random, label: str) -> tuple[str, str]:
    body = base64.b64encode(rng.randbytes(rng.choice([128, 256, 400]))).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----", lines[1]


def _secret(kind: str, rng: random.Random) -> tuple[str, str]:
    """(the secret as it appears, the substring that must not survive)."""
    if kind == "aws_access_key_id":
        v = rng.choice(["AKIA", "ASIA", "ABIA", "ACCA", "A3T" + rng.choice(UPPER_DIGITS)]) + _r(rng, B32, 16)
    elif kind == "aws_secret_access_key":
        v = _r(rng, ALNUM + "/+", 40)
    elif kind == "github_token":
        v = rng.choice([rng.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + _r(rng, ALNUM, 36),
                        "github_pat_" + _r(rng, ALNUM, 22) + "_" + _r(rng, ALNUM, 59)])
    elif kind == "openai_api_key":
        v = rng.choice(["sk-proj-" + _r(rng, URLSAFE, 74) + "T3BlbkFJ" + _r(rng, URLSAFE, 74),
                        "sk-svcacct-" + _r(rng, URLSAFE, 74) + "T3BlbkFJ" + _r(rng, URLSAFE, 74),
                        "sk-admin-" + _r(rng, URLSAFE, 58) + "T3BlbkFJ" + _r(rng, URLSAFE, 58),
                        "sk-" + _r(rng, ALNUM, 20) + "T3BlbkFJ" + _r(rng, ALNUM, 20)])
    elif kind == "anthropic_api_key":
        v = rng.choice(["sk-ant-api03-" + _r(rng, URLSAFE, 93) + "AA", "sk-ant-admin01-" + _r(rng, URLSAFE, 93) + "AA"])
    elif kind == "openrouter_api_key":
        v = "sk-or-v1-" + _r(rng, HEX, 64)
    elif kind == "slack_token":
        v = rng.choice([
            f"xoxb-{_r(rng, string.digits, 12)}-{_r(rng, string.digits, 13)}-{_r(rng, ALNUM, 24)}",
            f"xoxp-{_r(rng, string.digits, 11)}-{_r(rng, string.digits, 11)}-{_r(rng, string.digits, 13)}-{_r(rng, HEX, 32)}",
            f"xapp-1-A{_r(rng, UPPER_DIGITS, 10)}-{_r(rng, string.digits, 13)}-{_r(rng, HEX, 64)}",
            f"xoxe.xoxp-1-{_r(rng, ALNUM, 140)}", f"xoxa-2-{_r(rng, ALNUM, 40)}",
        ])
    elif kind == "slack_webhook":
        path = rng.choice(["services", "workflows", "triggers"])
        tail = f"T{_r(rng, UPPER_DIGITS, 10)}/B{_r(rng, UPPER_DIGITS, 10)}/{_r(rng, ALNUM, 24)}"
        v = rng.choice(["https://", "http://", ""]) + f"hooks.slack.com/{path}/{tail}"
        return v, tail
    elif kind == "stripe_key":
        v = rng.choice([f"{rng.choice(['sk', 'rk'])}_{rng.choice(['test', 'live', 'prod'])}_{_r(rng, ALNUM, rng.choice([24, 99]))}",
                        "whsec_" + _r(rng, ALNUM, 32)])
    elif kind == "google_api_key":
        v = "AIza" + _r(rng, URLSAFE, 35)
    elif kind == "jwt":
        v = _jwt(rng)
        return v, v.split(".")[1]
    elif kind == "private_key_block":
        label = rng.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY",
                            "ENCRYPTED PRIVATE KEY", "DSA PRIVATE KEY", "PGP PRIVATE KEY BLOCK"])
        return _pem(rng, label)
    elif kind == "gcp_service_account_private_key":
        pem, line = _pem(rng, "PRIVATE KEY")
        return pem.replace("\n", "\\n") + "\\n", line
    elif kind == "bearer_token":
        v = rng.choice([_r(rng, URLSAFE, rng.randint(20, 64)), "ya29." + _r(rng, URLSAFE, 120),
                        _r(rng, ALNUM, 32) + "." + _r(rng, ALNUM, 16)])
        while not any(c.isdigit() for c in v):
            v = v[:-1] + rng.choice(string.digits)
    elif kind == "basic_auth":
        raw = f"{rng.choice(['admin', 'deploy', 'ci', 'api', 'user'])}:{_password(rng)}"
        v = base64.b64encode(raw.encode()).decode()
    elif kind == "authorization_header":
        v = rng.choice([_r(rng, HEX, 40), _r(rng, ALNUM, 32), "glpat-" + _r(rng, URLSAFE, 20)])
    elif kind == "url_password":
        v = _password(rng, url=True)
    elif kind == "password_assignment":
        v = _password(rng)
    elif kind == "generic_secret_assignment":
        v = _generic(rng)
    elif kind == "session_cookie":  # Django, Rails/Laravel, PHP, Java, express-session (signed), random tokens
        v = rng.choice([_r(rng, string.ascii_lowercase + string.digits, 32), _r(rng, URLSAFE, rng.randint(24, 64)),
                        _r(rng, HEX, 32).upper(), "s%3A" + _r(rng, URLSAFE, 32) + "." + _r(rng, ALNUM + "%", 43)])
    else:
        raise ValueError(kind)
    return v, v


# --- contexts --------------------------------------------------------------------------------------

_FORMAT_CONTEXTS = [
    "{S}", "export {ENV}={S}", '{ENV}="{S}"', '{{"{key}": "{S}", "region": "eu-west-1"}}', "{key}: {S}",
    "  {key}: '{S}'\n  timeout: 30", "Error: the credential {S} was rejected (401 Unauthorized)",
    "curl -s https://api.example.com/v1/items?key={S}&page=2", "client = Client(api_key='{S}')",
    "<{key}>{S}</{key}>", "| {key} | {S} |", "found `{S}` in .env.local", "[{S}]", "docker run -e {ENV}={S} app",
    "const {camel} = \"{S}\";", "{S}\nnext line", "os.environ[\"{ENV}\"] = \"{S}\"",
]
_NAMES = {
    "aws_access_key_id": ("aws_access_key_id", "AWS_ACCESS_KEY_ID", "accessKeyId"),
    "github_token": ("github_token", "GITHUB_TOKEN", "ghToken"),
    "openai_api_key": ("openai_api_key", "OPENAI_API_KEY", "openaiKey"),
    "anthropic_api_key": ("anthropic_api_key", "ANTHROPIC_API_KEY", "anthropicKey"),
    "openrouter_api_key": ("openrouter_key", "OPENROUTER_API_KEY", "routerKey"),
    "slack_token": ("slack_token", "SLACK_BOT_TOKEN", "slackToken"),
    "slack_webhook": ("webhook", "SLACK_WEBHOOK_URL", "webhookUrl"),
    "stripe_key": ("stripe_key", "STRIPE_SECRET_KEY", "stripeKey"),
    "google_api_key": ("google_api_key", "GOOGLE_API_KEY", "mapsKey"),
    "jwt": ("id_token", "SESSION_JWT", "accessToken"),
}
_AWS_SECRET_CONTEXTS = [
    "export AWS_SECRET_ACCESS_KEY={S}", "aws_secret_access_key = {S}", '{{"SecretAccessKey": "{S}"}}',
    "AWS_SECRET_ACCESS_KEY: '{S}'", "[default]\naws_access_key_id = AKIA{ID}\naws_secret_access_key={S}\n",
    'aws_secret_key="{S}"', "secretAccessKey: {S}", "SECRET_ACCESS_KEY={S}",
]
_PEM_CONTEXTS = ["{S}", "$ cat ~/.ssh/id_rsa\n{S}\n$ ", 'key = """{S}"""', "  tls.key: |\n{S}", "```\n{S}\n```"]
_GCP_CONTEXTS = ['{{"type": "service_account", "project_id": "demo", "private_key_id": "{ID}", "private_key": "{S}", '
                 '"client_email": "sa@demo.iam.gserviceaccount.com"}}', '  "private_key": "{S}",']
_BEARER_CONTEXTS = [
    "Authorization: Bearer {S}", 'curl -H "Authorization: Bearer {S}" https://api.example.com',
    "headers = {{'Authorization': 'Bearer {S}'}}", "> Authorization: bearer {S}\n> Accept: */*",
    "Authorization=Bearer {S}", "fetch(url, {{ headers: {{ Authorization: `Bearer {S}` }} }})",
]
_BASIC_CONTEXTS = ["Authorization: Basic {S}", 'curl -H "Authorization: Basic {S}" https://ci.example.com',
                   "> Authorization: Basic {S}", "headers['Authorization'] = 'Basic {S}'"]
_AUTHORIZATION_CONTEXTS = [
    "Authorization: Token {S}", "Authorization: Api-Token {S}", "Authorization: {S}",
    'curl -H "Authorization: token {S}" https://api.example.com', 'headers["Authorization"] = "Token {S}"',
    "PRIVATE-TOKEN: {S}", "X-Auth-Token: {S}", "requests.get(url, headers={{'Authorization': 'Token {S}'}})",
    "curl --header  'Authorization:  {S}'",
]
_URL_CONTEXTS = [
    "postgres://app:{S}@db.internal:5432/app", "DATABASE_URL=postgresql://admin:{S}@10.0.0.5/prod",
    "mongodb+srv://svc:{S}@cluster0.example.net/test", "redis://default:{S}@cache:6379/0",
    "git clone https://deploy:{S}@git.example.com/acme/api.git", "amqp://guest:{S}@rabbit:5672//",
    "could not connect to mysql://root:{S}@localhost:3306/db: timeout", "ftp://backup:{S}@files.example.com/",
]
_PASSWORD_KEYS = ["password", "passwd", "db_password", "adminPassword", "smtp_pass", "passphrase", "userPassword",
                  "mysql_root_password", "PGPASSWORD", "DB_PASSWORD", "REDIS_PASSWORD", "ADMIN_PASS"]
_PASSWORD_CONTEXTS = [
    '{k} = "{S}"', "{k}='{S}'", '{k}: "{S}"', '"{k}": "{S}"', "{k}: {S}", "{K}={S}", "export {K}='{S}'",
    '{k} := "{S}"', '{k} => "{S}",', 'some_dict["{k}"] = "{S}"', "<{k}>{S}</{k}>", 'var {k} string = "{S}"',
    '${k} .= "{S}";', "{K} ::= {S}", 'props.setProperty("{K}", "{S}");', 'if ({k} == "{S}") {{', "{k} = '{S}'  # prod",
    "mysql -u root --password {S} -h db", "psql --password={S}", 'curl -u ":{S}" https://api.example.com',
    "curl --user admin:'{S}' https://ci.example.com", "curl -u deploy:{S} https://example.com/upload",
    "  {k}: {S}\n  host: db", "{K}={S} ./run.sh", 'const {k}: string = "{S}";', "{k}={S}\n",
    "Server=db;Database=app;User Id=sa;Password={S};", "mysql -u root -p{S} app < dump.sql",
    "sshpass -p '{S}' ssh deploy@10.0.0.7", 'curl -X POST --user "{{id-42}}":"{S}" --data x',
    "curl -s --user 'api:{S}' \\\n    https://api.mailgun.example/v3/messages",
    'curl -u "{S}:" https://api.example.com/v1/charges',
]
_COOKIE_NAMES = ["sessionid", "session", "connect.sid", "PHPSESSID", "JSESSIONID", "_app_session", "laravel_session",
                 "remember_token", "auth_token", "sid", "__Secure-next-auth.session-token", "_gh_sess"]
_COOKIE_CONTEXTS = [
    "Cookie: {k}={S}", "Cookie: _ga=GA1.2.1234.5678; {k}={S}; theme=dark", "Set-Cookie: {k}={S}; Path=/; HttpOnly; Secure",
    'curl -b "{k}={S}" https://app.example.com/api/me', "curl --cookie '{k}={S}; lang=en' https://app.example.com",
    '{{"headers": {{"Cookie": "{k}={S}"}}}}', "> Cookie: {k}={S}\n> Accept: */*", 'document.cookie = "{k}={S}; path=/"',
    "< set-cookie: {k}={S}; Max-Age=1209600; SameSite=Lax",
]
_GENERIC_KEYS = ["api_key", "apiKey", "client_secret", "access_token", "auth_token", "secret_key", "SIGNING_KEY",
                 "SECRET_KEY", "private_key", "app_secret", "API_TOKEN", "encryption_key", "webhookSecret",
                 "x-api-key", "refresh_token", "credentials", "session_key", "master_key", "AccountKey"]
_GENERIC_CONTEXTS = [
    '{k} = "{S}"', "{k}='{S}'", '{k}: "{S}"', '"{k}": "{S}"', "{k}: {S}", "{K}={S}", "export {K}={S}",
    '{k} := "{S}"', '{k} => "{S}",', 'settings["{k}"] = "{S}"', "<{k}>{S}</{k}>", 'var {k} string = "{S}"',
    '${k} .= "{S}";', "{K} ::= {S}", 'System.setProperty("{K}", "{S}");', 'if ({k} === "{S}") {{',
    "--{k} {S}", "--{k}={S}", '{k}: string = "{S}";', "  {k}: {S}\n  region: us-east-1", "{k}={S}&format=json",
    '${k}[]= "{S}";', '{k} "{S}";', '{k} = @"{S}";',
]


def _fill(template: str, secret: str, rng: random.Random, key: str = "", names: tuple[str, str, str] = ("", "", "")) -> str:
    return template.format(
        S=secret, k=key, K=key.upper().replace("-", "_"), key=names[0], ENV=names[1], camel=names[2],
        ID=_r(rng, B32, 16),
    )


def _contexts(kind: str) -> list[str]:
    return {
        "aws_secret_access_key": _AWS_SECRET_CONTEXTS, "private_key_block": _PEM_CONTEXTS,
        "gcp_service_account_private_key": _GCP_CONTEXTS, "bearer_token": _BEARER_CONTEXTS,
        "basic_auth": _BASIC_CONTEXTS, "authorization_header": _AUTHORIZATION_CONTEXTS, "url_password": _URL_CONTEXTS,
        "password_assignment": _PASSWORD_CONTEXTS, "generic_secret_assignment": _GENERIC_CONTEXTS,
        "session_cookie": _COOKIE_CONTEXTS,
    }.get(kind, _FORMAT_CONTEXTS)


def build_corpus(seed: int = SEED, per_type: int = PER_TYPE) -> dict[str, Any]:
    rng = random.Random(seed)
    cases = []
    for kind in SECRET_TYPES:
        contexts = _contexts(kind)
        for i in range(per_type):
            secret, must_go = _secret(kind, rng)
            template = contexts[i % len(contexts)]
            keys = {"password_assignment": _PASSWORD_KEYS, "session_cookie": _COOKIE_NAMES}.get(kind, _GENERIC_KEYS)
            key = rng.choice(keys)
            text = _fill(template, secret, rng, key, _NAMES.get(kind, ("key", "SECRET", "secretValue")))
            cases.append({"type": kind, "text": text, "secret": must_go})
    return {
        "description": "Synthetic secrets (random values, no real credentials) in the shapes of the gitleaks "
                       "default rules and detect-secrets' keyword plugin, each embedded in agent-like contexts. "
                       "Generated by benchmarks/bench_redact.py --regenerate; see its docstring.",
        "seed": seed,
        "cases": cases,
    }


# --- measurement -----------------------------------------------------------------------------------


def recall(corpus: dict[str, Any]) -> dict[str, dict[str, Any]]:
    by: dict[str, dict[str, Any]] = defaultdict(lambda: {"cases": 0, "caught": 0, "typed": 0, "missed": []})
    for case in corpus["cases"]:
        r = redact(case["text"])
        row = by[case["type"]]
        row["cases"] += 1
        if case["secret"] not in r.text:
            row["caught"] += 1
            row["typed"] += f"[REDACTED:{case['type']}]" in r.text
        elif len(row["missed"]) < 5:
            row["missed"].append(case["text"][:200])
    return dict(by)


def trace_texts() -> list[str | dict[str, Any]]:
    texts: list[str | dict[str, Any]] = []
    for f in iter_trace_files(TRACES):
        for tr in load_traces(f):
            if tr.system:
                texts.append(tr.system)
            texts += [t.description for t in tr.tools if t.description]
            for m in tr.messages:
                for b in m.content:
                    if isinstance(b, Text | ToolResult | Thinking) and b.text:
                        texts.append(b.text)
                    elif isinstance(b, ToolCall) and b.arguments:
                        texts.append(dict(b.arguments))
    return texts


def false_positives(texts: list[str | dict[str, Any]]) -> tuple[int, list[str]]:
    hits, examples = 0, []
    for t in texts:
        if isinstance(t, dict):
            new, counts = redact_obj(t)
            changed, shown = bool(counts), json.dumps(new)
        else:
            r = redact(t)
            changed, shown = bool(r.total), r.text
        if changed:
            hits += 1
            i = shown.find("[REDACTED:")
            examples.append(shown[max(0, i - 80) : i + 60])
    return hits, examples


# --- issue 56: the contexts a secret hides in, side by side with detect-secrets ----------------------
# Each context is generated from its own seed on every run (nothing stored). A case is caught when the secret
# cannot be read back: for JSON-escaped text, from the decoded string (and the redacted JSON must parse); for
# punctuated passwords, no piece of 3+ letters or digits survives; for base64 bodies, no line of the blob.

PUNCT = "&()]};,.<>|"
_PUNCT_TEMPLATES = ["DB_PASSWORD={S}", "export DB_PASSWORD={S}\n", "  password: {S}\n", "PGPASSWORD={S} psql -h db",
                    "mysql -u root --password {S} -h db", "./deploy --db-password={S}", "REDIS_PASS={S}\nREDIS_HOST=cache"]
_ENV_LINES = ["APP_ENV=production", "LOG_LEVEL=info", "DB_HOST=db.internal", "DB_PORT=5432", "WORKERS=4", "TZ=UTC"]
_ENV_CONTEXTS = ["{B}", "$ base64 .env\n{W76}\n$ ", "apiVersion: v1\nkind: Secret\ndata:\n  .env: {B}\n",
                 "echo {B} | base64 -d > .env", "{GH}"]


def _punctuated(rng: random.Random) -> str:
    v = list(_r(rng, ALNUM, rng.randint(10, 20)))
    for _ in range(rng.randint(1, 3)):
        v.insert(rng.randint(2, len(v) - 2), rng.choice(PUNCT))
    return "".join(v)


def _wrap(b: str, width: int) -> str:
    return "\n".join(b[i : i + width] for i in range(0, len(b), width))


def context_cases(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    """Cases by context: each is {"type", "text", "secret", "check"} (check: how "caught" is judged)."""
    rng = random.Random(seed * 56)
    corpus = build_corpus(seed)["cases"]
    out: dict[str, list[dict[str, Any]]] = {
        "plain": [{**c, "check": "plain"} for c in corpus],
        "json_escaped": [{**c, "text": json.dumps({"stdout": c["text"], "exit_code": 0}), "check": "json"} for c in corpus],
        "unquoted_punctuated": [],
        "base64_env": [],
        "docker_auths": [],
    }
    for i in range(1000):
        pw = _punctuated(rng)
        out["unquoted_punctuated"].append({"type": "password_assignment", "secret": pw, "check": "pieces",
                                           "text": _PUNCT_TEMPLATES[i % len(_PUNCT_TEMPLATES)].format(S=pw)})
    for i in range(500):
        kind = ("password_assignment", "generic_secret_assignment", "aws_access_key_id", "github_token")[i % 4]
        value, _ = _secret(kind, rng)
        key = {"password_assignment": "DB_PASSWORD", "generic_secret_assignment": "API_KEY",
               "aws_access_key_id": "AWS_ACCESS_KEY_ID", "github_token": "GITHUB_TOKEN"}[kind]
        lines = rng.sample(_ENV_LINES, rng.randint(2, 5))
        lines.insert(rng.randint(0, len(lines)), f"{key}={value}")
        b = base64.b64encode(("\n".join(lines) + "\n").encode()).decode()
        gh = json.dumps({"name": ".env", "encoding": "base64", "content": _wrap(b, 60) + "\n"})
        text = _ENV_CONTEXTS[i % len(_ENV_CONTEXTS)].format(B=b, W76=_wrap(b, 76), GH=gh)
        out["base64_env"].append({"type": kind, "secret": b, "check": "blob", "text": text})
    for i in range(300):
        auth = base64.b64encode(f"{rng.choice(['deploy', 'ci', 'bob'])}:{_password(rng)}".encode()).decode()
        config = {"auths": {rng.choice(["https://index.docker.io/v1/", "ghcr.io", "registry.example.com:5000"]):
                            {"auth": auth}}}
        text = [json.dumps(config), json.dumps(config, indent=2), json.dumps({"stdout": json.dumps(config, indent=1)})][i % 3]
        out["docker_auths"].append({"type": "basic_auth", "secret": auth, "check": "json" if i % 3 == 2 else "plain",
                                    "text": text})
    return out


def _readable(case: dict[str, Any], text: str) -> bool:
    """Whether the case's secret can still be read in ``text`` (see context_cases)."""
    secret, check = case["secret"], case["check"]
    if check == "json":
        try:
            doc = json.loads(text)
        except ValueError:
            return True  # a broken document is a failure too
        text = doc["stdout"] if isinstance(doc, dict) and "stdout" in doc else text
    if check == "pieces":
        return any(p in text for p in "".join(c if c.isalnum() else " " for c in secret).split() if len(p) >= 3)
    if check == "blob":
        flat = text.replace("\\n", "\n")
        return any(line[:24] in flat for line in _wrap(secret, 60).split("\n") + _wrap(secret, 76).split("\n")
                   if len(line) >= 24)
    return secret in text


def context_recall(cases: dict[str, list[dict[str, Any]]], redactor: Any) -> dict[str, dict[str, dict[str, float]]]:
    """Recall by context and secret type of ``redactor`` (text -> redacted text). For a scanner that only
    reports (``redactor.flagged``), also how often it reports anything at all in the case ("flagged")."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for context, rows in cases.items():
        by: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
        for case in rows:
            hidden = not _readable(case, redactor(case["text"]))
            by[case["type"]].append((hidden, getattr(redactor, "flagged", hidden)))
        by["all"] = [x for v in list(by.values()) for x in v]
        out[context] = {k: {"cases": len(v), "recall": round(sum(h for h, _ in v) / len(v), 4),
                            "flagged": round(sum(f for _, f in v) / len(v), 4)} for k, v in by.items()}
    return out


def integrity_entries(n: int = 20_000, seed: int = SEED) -> dict[str, Any]:
    """A package-lock.json with ``n`` packages, their integrity hashes random sha512 (and some sha1) digests."""
    rng = random.Random(seed)
    packages = {}
    for i in range(n):
        algo, size = ("sha512", 64) if rng.random() < 0.9 else ("sha1", 20)
        packages[f"node_modules/pkg-{i}"] = {"version": f"1.{i % 40}.{i % 7}", "resolved": f"https://registry.npmjs.org/pkg-{i}/-/pkg-{i}-1.0.0.tgz",
                                             "integrity": f"{algo}-{base64.b64encode(rng.randbytes(size)).decode()}"}
    return {"name": "app", "lockfileVersion": 3, "requires": True, "packages": packages}


def integrity_damage(lock: dict[str, Any], redactor: Any, *, compact: bool = True) -> dict[str, Any]:
    """How many integrity entries ``redactor`` changes in the package-lock text (as npm writes it, indented,
    and compact: one 4.4 MB line), and whether it still parses."""
    out: dict[str, Any] = {"entries": len(lock["packages"])}
    layouts = [("indented", json.dumps(lock, indent=2))]
    if compact:
        layouts.append(("compact", json.dumps(lock, separators=(",", ":"))))
    for layout, text in layouts:
        after_text = redactor(text)
        try:
            after = json.loads(after_text)["packages"]
            changed = sum(after[k]["integrity"] != v["integrity"] for k, v in lock["packages"].items())
            parses = True
        except (ValueError, KeyError, TypeError):  # what changed is then counted as the markers put in
            changed, parses = after_text.count("[REDACTED:") - text.count("[REDACTED:"), False
        out[layout] = {"changed": changed, "json_parses": parses}
    return out


class DetectSecrets:
    """Yelp/detect-secrets with its default plugins and filters, one text as one file (its ``scan_file``).
    A case counts as caught when replacing every value it reports makes the secret unreadable."""

    def __init__(self) -> None:
        import tempfile

        from detect_secrets.core.scan import scan_file
        from detect_secrets.settings import default_settings

        self._scan, self._settings = scan_file, default_settings
        self._path = Path(tempfile.mkdtemp()) / "text.txt"
        self.flagged = False

    def values(self, text: str) -> list[str]:
        self._path.write_text(text)
        with self._settings():
            return sorted({s.secret_value or "" for s in self._scan(str(self._path))} - {""}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        values = self.values(text)
        self.flagged = bool(values)  # it found something in the case (a private key: only its BEGIN line)
        for v in values:
            text = text.replace(v, "[X]")
        return text


# --- the optional PII redactor ----------------------------------------------------------------------

_PII_CONTEXTS = ["{S}", "Customer: Mia Li <{S}>", '{{"customer_id": "C1001", "{k}": "{S}"}}', "| {k} | {S} |",
                 "please call me at {S} tomorrow", "{k}={S}\n"]
_PII_LOOKALIKES = [
    "released 2024-05-01 12:00:00", "version 10.0.19045.3803", "ip 192.168.100.200", "npm i @scope/pkg@1.2.3",
    "git@github.com:acme/api.git", "pip install pkg==1.2.3", "uuid 550e8400-e29b-41d4-a716-446655440000",
    "order #W2378156 total 1234.56", "ts 1712345678901", "M 0 0 L 469 0 L 469 531 Q 828 903 1448",
    "isbn 978-3-16-148410-0", "port 8080:80 pid 12345", "Build 2024.05.01-1234", "sha 9f86d081884c7d659a2feaa0c55ad015",
    "coords 52.5200, 13.4050", "range 100-200-3000", "lat -33.8688 lon 151.2093", "1,234,567,890 rows",
]


def _luhn_digit(body: str) -> str:
    total = 0
    for i, c in enumerate(reversed(body)):
        d = int(c) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return str((10 - total % 10) % 10)


def _pii_value(kind: str, rng: random.Random) -> str:
    d = string.digits
    if kind == "email_address":
        return f"{rng.choice(WORDS).lower()}.{_r(rng, string.ascii_lowercase, 5)}{rng.randint(1, 9999)}@" \
               f"{rng.choice(['gmail.com', 'example.org', 'mail.co.uk', 'corp.example.com'])}"
    if kind == "phone_number":
        a, b, c = rng.randint(201, 989), rng.randint(200, 999), _r(rng, d, 4)
        return rng.choice([f"({a}) {b}-{c}", f"{a}-{b}-{c}", f"{a}.{b}.{c}", f"+1 {a} {b} {c}", f"+1-{a}-{b}-{c}",
                           f"+44 20 {_r(rng, d, 4)} {_r(rng, d, 4)}", f"07{_r(rng, d, 3)} {_r(rng, d, 6)}", f"+4915{_r(rng, d, 9)}"])
    if kind == "payment_card":
        prefix, n = rng.choice([("4", 16), ("51", 16), ("55", 16), ("2221", 16), ("34", 15), ("37", 15), ("6011", 16), (rng.choice(["3528", "3566", "3589"]), 16)])
        body = prefix + _r(rng, d, n - len(prefix) - 1)
        v = body + _luhn_digit(body)
        if rng.random() < 0.5 and n == 16:
            v = rng.choice([" ", "-"]).join(v[i : i + 4] for i in range(0, 16, 4))
        return v
    if kind == "us_ssn":
        return f"{rng.randint(1, 665):03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"
    if kind == "uk_nino":
        first, second = rng.choice("ABCEGHJKLMNOPRSTWXYZ"), rng.choice("ABCEGHJKLMNPRSTWXYZ")
        if first + second in ("BG", "GB", "NK", "KN", "TN", "NT", "ZZ"):
            first = "A"
        sep = rng.choice(["", " "])
        return sep.join([first + second, _r(rng, d, 2), _r(rng, d, 2), _r(rng, d, 2), rng.choice("ABCD")])
    raise ValueError(kind)


def pii_figures(texts: list[str | dict[str, Any]], seed: int = SEED, per_type: int = 300, *,
                show: bool = False) -> dict[str, Any]:
    """Recall per PII type on generated values, false positives on look-alikes, matches on the real traces
    (with ``show``, each distinct match is printed with the text before it, to be read by hand)."""
    from windowsmith.ingest.redact import PII_TYPES

    rng = random.Random(seed * 7)
    rec: dict[str, dict[str, float]] = {}
    for kind in PII_TYPES:
        caught = 0
        for i in range(per_type):
            v = _pii_value(kind, rng)
            text = _PII_CONTEXTS[i % len(_PII_CONTEXTS)].format(S=v, k=kind.split("_")[0])
            caught += v not in redact(text, pii=True).text
        rec[kind] = {"cases": per_type, "recall": round(caught / per_type, 4)}
    lookalike_fp = [t for t in _PII_LOOKALIKES if redact(t, pii=True).total]
    on_traces: dict[str, int] = defaultdict(int)
    changed = 0
    seen: set[str] = set()
    for t in texts:
        counts = redact_obj(t, pii=True)[1] if isinstance(t, dict) else redact(t, pii=True).counts
        pii = {k: v for k, v in counts.items() if k in PII_TYPES}
        changed += bool(pii)
        if pii and show:
            shown = json.dumps(redact_obj(t, pii=True)[0]) if isinstance(t, dict) else redact(t, pii=True).text
            original = json.dumps(t) if isinstance(t, dict) else t
            seen.update(f"{k}: ...{original[max(0, i - 40):i + 40]!r}" for k in pii for i in [shown.find(f"[REDACTED:{k}]")])
        for k, v in pii.items():
            on_traces[k] += v
    for line in sorted(seen):
        print("  pii match near", line)
    return {"recall": rec, "lookalikes": len(_PII_LOOKALIKES), "lookalike_false_positives": lookalike_fp,
            "trace_texts_changed": changed, "trace_matches": dict(sorted(on_traces.items())),
            "trace_note": "the traces hold synthetic customer records (tau-bench) and author e-mails in source headers; "
                          "every match (listed with --show) was read by hand: all are e-mail addresses and phone numbers"}


def timed_over(texts: list[str | dict[str, Any]], modules: dict[str, Any], rounds: int = 5) -> dict[str, float]:
    """The fastest of ``rounds`` passes of each module's redaction over every trace text, in CPU seconds (a
    machine shared with other work changes wall time far more), the modules taking turns."""
    best = dict.fromkeys(modules, float("inf"))
    for _ in range(rounds):
        for name, module in modules.items():
            start = time.process_time()
            for t in texts:
                module.redact_obj(t) if isinstance(t, dict) else module.redact(t)
            best[name] = min(best[name], time.process_time() - start)
    return {name: round(v, 3) for name, v in best.items()}


# Each unit is repeated to 5 MB (and to a quarter of that: a linear rule takes about 4 times as long on the
# full size). They stress the patterns scanned over the text: long runs of one character class, many
# candidate starts.
ADVERSARIAL_UNITS = {
    "jwt-prefix": "eyJ", "jwt-dots": "eyJaaaaaaaa.", "assignments": "token=", "one-run": "a", "keyword-run": "token",
    "pem-begin": "-----BEGIN PRIVATE KEY-----!", "url-userinfo": "a://b:c@", "bearer": "Bearer ",
    "quotes": "password = '", "flags": "--password ", "sk": "sk-", "authorization": "Authorization: ",
    "xml": "<password>", "curl-user": "-u :", "commas": '"token", ', "hex": "0123456789abcdef",
    "mysql-p": "mysql -pa ", "sshpass": "sshpass -p ", "cookies": "cookie=1;", "escaped": '\\"password=x1\\" ',
    "base64": "QUJD" * 8 + " ",
}
# The value-shape checks a keyed or header value goes through (a dotted number, a word list, a path, a
# "your ... here" placeholder), each fed 5 MB of values of 32 and of 256 characters: a check linear in
# the value's length costs the same on both (ratio about 1), a quadratic one about 8 times more.
VALUE_SHAPES = {
    "version": lambda n: 'api_key="' + ("1." * n)[:n] + '1!"\n',
    "fill-in": lambda n: 'password = "' + ("my " * n)[:n] + '"\n',
    "words": lambda n: "Bearer " + ("ab-" * n)[:n] + "1\n",
    "path": lambda n: 'PWD="' + ("/a" * n)[:n] + '!"\n',
    "dotted": lambda n: 'api_key="' + ("a.b" * n)[:n] + '!"\n',
}
ADVERSARIAL_BYTES = 5_000_000


def _timed(text: str) -> float:
    start = time.perf_counter()
    redact(text)
    return round(time.perf_counter() - start, 3)


def adversarial() -> dict[str, dict[str, float]]:
    """Per input, seconds on a quarter and on all of ADVERSARIAL_BYTES (scans) or on short and long values
    (value shapes), and their ratio."""
    out = {}
    for name, unit in ADVERSARIAL_UNITS.items():
        row = {"quarter": _timed(unit * (ADVERSARIAL_BYTES // 4 // len(unit))),
               "full": _timed(unit * (ADVERSARIAL_BYTES // len(unit)))}
        row["ratio"] = round(row["full"] / max(row["quarter"], 1e-3), 2)
        out[name] = row
    for name, make in VALUE_SHAPES.items():
        short, long = make(32), make(256)
        row = {"values_32": _timed(short * (ADVERSARIAL_BYTES // len(short))),
               "values_256": _timed(long * (ADVERSARIAL_BYTES // len(long)))}
        row["ratio"] = round(row["values_256"] / max(row["values_32"], 1e-3), 2)
        out[f"value-{name}"] = row
    return out


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def issue56(argv: list[str], texts: list[str | dict[str, Any]]) -> dict[str, Any]:
    """Recall by context and type, package-lock damage, speed on the traces, the PII redactor; with
    ``--baseline MODULE`` (an earlier copy of windowsmith.ingest.redact) and ``--detect-secrets`` side by side."""
    import importlib

    cases, lock = context_cases(), integrity_entries()
    current = importlib.import_module("windowsmith.ingest.redact")
    tools: dict[str, Any] = {"windowsmith": lambda t: redact(t).text}
    baseline = _option(argv, "--baseline")
    if baseline:
        before = importlib.import_module(baseline)
        tools = {"before": lambda t: before.redact(t).text, **tools}
    if "--detect-secrets" in argv:
        tools["detect-secrets"] = DetectSecrets()
    out: dict[str, Any] = {"contexts": {}, "package_lock": {}, "baseline": baseline}
    for name, tool in tools.items():
        print(f"measuring {name} ...", flush=True)
        out["contexts"][name] = context_recall(cases, tool)
        # detect-secrets ran over 20 minutes on the compact layout's single 4.4 MB line without finishing
        out["package_lock"][name] = integrity_damage(lock, tool, compact=name != "detect-secrets")
    if "detect-secrets" in tools and texts:
        ds = tools["detect-secrets"]
        hits = sum(bool(ds.values(t if isinstance(t, str) else json.dumps(t))) for t in texts)
        out["detect_secrets_false_positives"] = {"texts": len(texts), "flagged": hits,
                                                 "per_10000": round(hits / len(texts) * 10_000, 2)}
    elif (OUT / "redact.json").exists():  # detect-secrets takes minutes: its last figures are carried over
        last = json.loads((OUT / "redact.json").read_text())
        for section in ("contexts", "package_lock"):
            if "detect-secrets" in last.get(section, {}):
                out[section]["detect-secrets"] = last[section]["detect-secrets"]
        if "detect_secrets_false_positives" in last:
            out["detect_secrets_false_positives"] = last["detect_secrets_false_positives"]
        out["detect_secrets_carried_over"] = "detect-secrets" in out["contexts"]
    if texts:
        speed: dict[str, float] = timed_over(texts, {"windowsmith": current, **({"before": before} if baseline else {})})
        if baseline:
            speed["ratio"] = round(speed["windowsmith"] / speed["before"], 3)
        out["seconds_over_traces"] = speed
        out["pii"] = pii_figures(texts, show="--show" in argv)
    return out


def markdown(report: dict[str, Any]) -> str:
    """The figures of redact.json as tables."""
    lines = ["# Secret redaction (benchmarks/bench_redact.py)", ""]
    ctx = report.get("contexts", {})
    tools = list(ctx)
    if tools:
        if report.get("baseline"):
            lines += [f"\"before\" is `{report['baseline']}` (--baseline: a copy of windowsmith.ingest.redact as it was "
                      "before issue 56's fixes).", ""]
        if report.get("detect_secrets_carried_over"):
            lines += ["(detect-secrets figures from the last run with --detect-secrets, on the same seeded cases)", ""]
        lines += ["## Recall by context and secret type", "",
                  "Recall: the secret cannot be read back. detect-secrets only reports; a case counts when replacing "
                  "what it reports hides the secret (for a private key it reports the BEGIN line only), and "
                  "\"flagged\" says how often it reported anything in the case.", "",
                  "| context | type | cases | " + " | ".join(tools) + (" | detect-secrets flagged |" if "detect-secrets" in ctx
                                                                          else " |"),
                  "|---|---|---:|" + "---:|" * (len(tools) + ("detect-secrets" in ctx))]
        for context, types in ctx["windowsmith"].items():
            for kind, row in types.items():
                cells = [f"{ctx[t][context][kind]['recall']:.1%}" for t in tools]
                if "detect-secrets" in ctx:
                    cells.append(f"{ctx['detect-secrets'][context][kind].get('flagged', 0):.1%}")
                lines.append(f"| {context} | {kind} | {row['cases']} | " + " | ".join(cells) + " |")
        lines += ["", "## package-lock.json integrity hashes changed", "",
                  "| tool | entries | changed (indented) | parses | changed (compact) | parses |", "|---|---:|---:|---|---:|---|"]
        for t, row in report["package_lock"].items():
            ind, com = row["indented"], row.get("compact", {"changed": "not run (one 4.4 MB line)", "json_parses": "-"})
            lines.append(f"| {t} | {row['entries']} | {ind['changed']} | {ind['json_parses']} | {com['changed']} | "
                         f"{com['json_parses']} |")
    fp = report.get("false_positives")
    if fp:
        lines += ["", "## False positives on the real traces", "",
                  f"windowsmith: {fp['redacted']} of {fp['texts']:,} texts ({fp['per_10000']} per 10,000)."]
        ds = report.get("detect_secrets_false_positives")
        if ds:
            lines.append(f"detect-secrets: {ds['flagged']} of {ds['texts']:,} texts ({ds['per_10000']} per 10,000).")
    speed = report.get("seconds_over_traces")
    if speed:
        lines += ["", "## Speed over every trace text (CPU seconds, fastest of 5 passes, taking turns)", "",
                  ", ".join(f"{k}: {v}" + ("" if k == "ratio" else " s") for k, v in speed.items())]
    pii = report.get("pii")
    if pii:
        lines += ["", "## PII redactor (off by default; redact(pii=True), IngestConfig(redact_pii=True))", "",
                  "| type | cases | recall |", "|---|---:|---:|"]
        lines += [f"| {k} | {v['cases']} | {v['recall']:.1%} |" for k, v in pii["recall"].items()]
        lines += ["", f"Look-alikes (dates, versions, IPs, ids, SVG paths, ...): {len(pii['lookalike_false_positives'])} "
                      f"of {pii['lookalikes']} redacted.",
                  f"On the real traces: {pii['trace_texts_changed']} texts changed, matches {pii['trace_matches']}; "
                  f"{pii['trace_note']}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if "--regenerate" in argv or not CORPUS.exists():
        CORPUS.parent.mkdir(parents=True, exist_ok=True)
        CORPUS.write_text(json.dumps(build_corpus(), indent=0, ensure_ascii=False) + "\n")
        print(f"wrote {CORPUS.relative_to(ROOT)}")
    corpus = json.loads(CORPUS.read_text())
    rec = recall(corpus)
    print(f"{'type':34} {'cases':>6} {'recall':>8} {'typed':>8}")
    worst = 1.0
    for kind in SECRET_TYPES:
        row = rec.get(kind, {"cases": 0, "caught": 0, "typed": 0, "missed": []})
        rate = row["caught"] / row["cases"] if row["cases"] else 0.0
        worst = min(worst, rate)
        print(f"{kind:34} {row['cases']:>6} {rate:>8.2%} {row['typed'] / max(1, row['cases']):>8.2%}")
        for miss in row["missed"][:2] if "--show" in argv else []:
            print(f"    missed: {miss!r}")
    report: dict[str, Any] = {
        "corpus": {"cases": len(corpus["cases"]), "seed": corpus["seed"]},
        "recall": {k: {"cases": v["cases"], "recall": round(v["caught"] / v["cases"], 4),
                       "typed": round(v["typed"] / v["cases"], 4)} for k, v in rec.items()},
        "min_recall": round(worst, 4),
    }
    texts = trace_texts() if TRACES.exists() else []
    if texts:
        start = time.perf_counter()
        hits, examples = false_positives(texts)
        elapsed = time.perf_counter() - start
        rate = hits / len(texts) * 10_000
        print(f"\nfalse positives: {hits} of {len(texts):,} trace texts ({rate:.2f} per 10,000); "
              f"redaction over all of them took {elapsed:.2f} s")
        for ex in examples[:20] if "--show" in argv else []:
            print(f"    {ex!r}")
        report["false_positives"] = {"texts": len(texts), "redacted": hits, "per_10000": round(rate, 2),
                                     "seconds": round(elapsed, 2)}
    else:
        print(f"\n{TRACES} not found: false-positive rate not measured")
    report.update(issue56(argv, texts))
    print("\n" + markdown({k: v for k, v in report.items() if k != "false_positives"}))
    if "--adversarial" in argv:
        report["adversarial_seconds"] = adv = adversarial()
        print(f"\nadversarial inputs, seconds: scans at {ADVERSARIAL_BYTES // 4:,} and {ADVERSARIAL_BYTES:,} bytes "
              f"(linear: ratio about 4); value shapes, {ADVERSARIAL_BYTES:,} bytes of 32- and of 256-character values "
              "(linear in the value: ratio about 1)")
        for name, row in adv.items():
            a, b, ratio = row.values()
            print(f"  {name:16} {a:>8.3f} {b:>8.3f} {ratio:>6.2f}")
    OUT.mkdir(exist_ok=True)
    (OUT / "redact.json").write_text(json.dumps(report, indent=1) + "\n")
    (OUT / "redact.md").write_text(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
