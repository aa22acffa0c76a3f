"""Secret redaction: a corpus of realistic secrets and non-secrets, properties, and speed."""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from windowsmith.ingest import redact_values as V
from windowsmith.ingest.redact import SECRET_TYPES, Redaction, has_candidate, redact, redact_obj, redact_schema

CORPUS = json.loads((Path(__file__).parent / "data" / "secrets_corpus.json").read_text())
SAMPLES = [
    (case["type"], case["secret"], sample) for case in CORPUS["cases"] for sample in case["samples"]
]
MARKER_RX = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")


def test_corpus_covers_every_secret_type_it_claims() -> None:
    assert {t for t, _, _ in SAMPLES} <= set(SECRET_TYPES)
    assert len({t for t, _, _ in SAMPLES}) >= 17


@pytest.mark.parametrize(("kind", "secret", "sample"), SAMPLES, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(SAMPLES)])
def test_every_corpus_secret_is_redacted_with_its_type(kind: str, secret: str, sample: str) -> None:
    text = sample.replace("{S}", secret)
    r = redact(text)
    assert secret not in r.text
    assert f"[REDACTED:{kind}]" in r.text
    assert r.counts.get(kind, 0) >= 1
    # The context around the secret survives: only the secret's own span is replaced.
    before, _, after = sample.partition("{S}")
    assert r.text.startswith(before)
    assert r.text.endswith(after)


@pytest.mark.parametrize("text", CORPUS["non_secrets"])
def test_non_secrets_survive_unchanged(text: str) -> None:
    r = redact(text)
    assert r.text == text
    assert r.total == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=hunter2", "password=[REDACTED:password_assignment]"),
        ("DB_PASSWORD='hunter2' # prod", "DB_PASSWORD='[REDACTED:password_assignment]' # prod"),
        (
            "https://deploy:s3cr3tP4ss@db.internal:5432/app",
            "https://deploy:[REDACTED:url_password]@db.internal:5432/app",
        ),
        (
            '{"user": "bob", "password": "p@ssw0rd!"}',
            '{"user": "bob", "password": "[REDACTED:password_assignment]"}',
        ),
        (
            "Authorization: Bearer abcdefghij0123456789ABCDEFGHIJ",
            "Authorization: Bearer [REDACTED:bearer_token]",
        ),
        (
            "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
            "https://hooks.slack.com/services/[REDACTED:slack_webhook]",
        ),
        ("mysql --password Tr0ub4dor&3 -h db", "mysql --password [REDACTED:password_assignment] -h db"),
    ],
)
def test_context_is_kept_and_only_the_value_replaced(text: str, expected: str) -> None:
    assert redact(text).text == expected


def test_counts_and_total() -> None:
    text = "a=1 password=x1 GITHUB_TOKEN=ghp_" + "a1B2" * 9 + " other password=y2"
    r = redact(text)
    assert r.counts == {"github_token": 1, "password_assignment": 2}
    assert r.total == 3
    assert isinstance(r, Redaction)


def test_git_shas_in_git_log_output_survive() -> None:
    rng = random.Random(7)
    lines = []
    for _ in range(200):
        sha = "".join(rng.choice("0123456789abcdef") for _ in range(40))
        lines += [f"commit {sha}", "Author: Dev <dev@example.com>", "", f"    fix: retry {sha[:7]}", ""]
    text = "\n".join(lines)
    assert redact(text).text == text


def test_private_key_without_end_marker_is_still_redacted() -> None:
    body = "\n".join("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" for _ in range(5))
    text = f"$ head -n 6 key.pem\n-----BEGIN PRIVATE KEY-----\n{body}\n$ echo done"
    r = redact(text)
    assert "MIIEvQIBADAN" not in r.text
    assert r.text.startswith("$ head -n 6 key.pem\n[REDACTED:private_key_block]")
    assert r.text.endswith("$ echo done")


def test_known_format_inside_a_keyed_value_gets_the_specific_type() -> None:
    r = redact("token = 'ghp_" + "Z9y8X7w6" * 4 + "abcd'")
    assert r.counts == {"github_token": 1}


# ---------------------------------------------------------------------------------------------------
# redact_obj
# ---------------------------------------------------------------------------------------------------


def test_redact_obj_walks_structures_and_uses_keys_as_context() -> None:
    gh = "ghp_" + "Q1w2E3r4" * 4 + "t5y6"
    value = {
        "user": "bob",
        "password": "correct horse battery staple",
        "nested": [{"api_key": "9f8e7d6c5b4a39281706f5e4d3c2b1a0"}, ("log: token=" + gh, 3, None, True)],
        "commit": "3f2a1c9e8b7d6f5a4c3b2a1f0e9d8c7b6a5f4e3d",
        "config": {"token_type": "bearer", "max_tokens": 4096},
    }
    new, counts = redact_obj(value)
    assert new["user"] == "bob"
    assert new["password"] == "[REDACTED:password_assignment]"
    assert new["nested"][0]["api_key"] == "[REDACTED:generic_secret_assignment]"
    assert new["nested"][1] == ("log: token=[REDACTED:github_token]", 3, None, True)
    assert new["commit"] == value["commit"]
    assert new["config"] == value["config"]
    assert counts == {"generic_secret_assignment": 1, "github_token": 1, "password_assignment": 1}
    assert value["password"] == "correct horse battery staple"  # input untouched


def test_redact_schema_judges_sample_values_by_their_property_name() -> None:
    import jsonschema

    aws = "AKIA" + "QYLPMN5HHHFPZAM2"
    schema = {
        "type": "object",
        "required": ["password", "api_key"],
        "properties": {
            "password": {"type": "string", "default": "hunter2-but-longer", "examples": ["s3cr3t-Value"]},
            "api_key": {"anyOf": [{"type": "string", "const": "9f8e7d6c5b4a39281706f5e4d3c2b1a0"}, {"type": "null"}]},
            "region": {"type": "string", "default": "eu-west-1", "enum": ["eu-west-1", "us-east-1"],
                       "description": f"where; the old key was {aws}"},
            "sha": {"type": "string", "default": "3f2a1c9e8b7d6f5a4c3b2a1f0e9d8c7b6a5f4e3d"},
            "password_policy": {"type": "string", "default": "strict"},
        },
    }
    new, counts = redact_schema(schema)
    props = new["properties"]
    assert props["password"]["default"] == props["password"]["examples"][0] == "[REDACTED:password_assignment]"
    assert props["api_key"]["anyOf"][0]["const"] == "[REDACTED:generic_secret_assignment]"
    assert props["region"]["description"] == "where; the old key was [REDACTED:aws_access_key_id]"
    assert props["region"]["enum"] == ["eu-west-1", "us-east-1"] and props["sha"] == schema["properties"]["sha"]
    assert props["password_policy"] == {"type": "string", "default": "strict"}  # metadata key, plain word
    assert new["required"] == ["password", "api_key"] and new["type"] == "object"
    assert counts == {"aws_access_key_id": 1, "generic_secret_assignment": 1, "password_assignment": 2}
    jsonschema.Draft202012Validator.check_schema(new)
    assert redact_schema(new) == (new, {})  # idempotent


# ---------------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------------

_NOISE = st.text(
    alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789 \n\t=:\"'{}[],.-_/@#")), max_size=200
)


def _pieces_in_order(original: str, redacted: str) -> bool:
    pos = 0
    for piece in MARKER_RX.split(redacted)[::2]:
        i = original.find(piece, pos)
        if i < 0:
            return False
        pos = i + len(piece)
    return True


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SAMPLES), _NOISE, _NOISE)
def test_embedded_secrets_never_leak_and_redaction_is_idempotent(case: tuple[str, str, str], pre: str, post: str) -> None:
    _, secret, sample = case
    text = pre + "\n" + sample.replace("{S}", secret) + "\n" + post
    r = redact(text)
    assert secret not in r.text
    again = redact(r.text)
    assert again.text == r.text
    assert again.total == 0
    assert _pieces_in_order(text, r.text)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400) | _NOISE)
def test_idempotent_and_only_markers_change_text(text: str) -> None:
    r = redact(text)
    again = redact(r.text)
    assert again.text == r.text and again.total == 0
    assert _pieces_in_order(text, r.text)
    assert sum(r.counts.values()) == len(MARKER_RX.findall(r.text)) - len(MARKER_RX.findall(text))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("bcdfghjlmnqvxz BCDFGHJLMNQVXZ 0123456789 \n.,;()=:/")), max_size=500))
def test_text_without_candidates_is_never_changed(text: str) -> None:
    # no secret can be spelled with this alphabet (no vowels for keywords, no token prefixes), so
    # redaction must leave the text alone even when the cheap pre-check fires (e.g. on "://", or on a run of
    # 24 base64 characters, which may be a base64 body to decode)
    assert redact(text) == Redaction(text, {})
    if "://" not in text and not re.search(r"[A-Za-z0-9+/]{24}", text):
        assert not has_candidate(text)


# ---------------------------------------------------------------------------------------------------
# Targets (issue 14): recall on the generated corpus, false positives on the real traces
# ---------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "benchmarks" / "data" / "redact_corpus.json"
TRACES = ROOT.parent / "shared" / "data" / "traces"


@pytest.mark.slow
def test_generated_corpus_recall_is_at_least_99_percent_for_every_claimed_type() -> None:
    corpus = json.loads(GENERATED.read_text())
    caught: dict[str, list[bool]] = {}
    for case in corpus["cases"]:
        caught.setdefault(case["type"], []).append(case["secret"] not in redact(case["text"]).text)
    assert set(caught) == set(SECRET_TYPES)
    for kind, hits in caught.items():
        assert len(hits) >= 200 and sum(hits) / len(hits) >= 0.99, kind


@pytest.mark.slow
@pytest.mark.skipif(not TRACES.exists(), reason="needs the shared traces (../shared/data/traces)")
def test_real_traces_have_at_most_one_false_positive_per_10000_texts() -> None:
    from windowsmith.model import Text, ToolCall, ToolResult
    from windowsmith.traces import iter_trace_files, load_traces

    texts, redacted = 0, []
    for f in iter_trace_files(TRACES):
        for tr in load_traces(f):
            for m in tr.messages:
                for b in m.content:
                    if isinstance(b, Text | ToolResult) and b.text:
                        texts += 1
                        r = redact(b.text)
                        if r.total:
                            redacted.append(r.text)
                    elif isinstance(b, ToolCall) and b.arguments:
                        texts += 1
                        new, counts = redact_obj(dict(b.arguments))
                        if counts:
                            redacted.append(json.dumps(new))
    assert texts > 10_000
    assert len(redacted) <= texts / 10_000, redacted[:3]  # the traces hold no credentials: each is a false positive


# ---------------------------------------------------------------------------------------------------
# Linear time: bounded patterns (structure) and counted steps (no timing; bench_redact.py times 5 MB)
# ---------------------------------------------------------------------------------------------------

R = sys.modules["windowsmith.ingest.redact"]
KEYED = sys.modules["windowsmith.ingest.redact_keyed"]


def _repeats_are_bounded_and_flat(items: Any, inside: bool = False) -> None:
    from re import _constants as C  # type: ignore[attr-defined]

    repeats = {C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", C.MAX_REPEAT)}
    for op, av in items:
        if op in repeats:
            _, hi, sub = av
            assert hi != C.MAXREPEAT, "unbounded repetition"
            assert not (inside and hi > 1), "a repetition inside a repetition"
            _repeats_are_bounded_and_flat(sub, inside or hi > 1)
        elif op is C.SUBPATTERN:
            _repeats_are_bounded_and_flat(av[3], inside)
        elif op is C.BRANCH:
            for branch in av[1]:
                _repeats_are_bounded_and_flat(branch, inside)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            _repeats_are_bounded_and_flat(av[1], inside)


def test_every_pattern_that_scans_text_is_bounded_and_has_no_nested_repetition() -> None:
    # With every repetition bounded and none nested, one match attempt reads at most the pattern's
    # maximum width, so no input can make the engine backtrack more than a constant per start.
    from re import _parser  # type: ignore[attr-defined]

    every_rule = R._RULE_SETS[True, False]  # with the base64 bodies and the PII rules
    scans = [(rule.name, rx) for rule in every_rule for rx in rule.scans]
    assert {name for name, _ in scans} == {rule.name for rule in every_rule}  # every rule declares its patterns
    for name, rx in scans:
        parsed = _parser.parse(rx.pattern, rx.flags)
        _repeats_are_bounded_and_flat(list(parsed))
        assert parsed.getwidth()[1] <= 20_000, name


class _Counted:
    """A compiled pattern that counts every match attempt it is asked for and every match it yields."""

    def __init__(self, rx: re.Pattern[str], steps: list[int]) -> None:
        self.rx, self.steps, self.pattern, self.groupindex = rx, steps, rx.pattern, rx.groupindex

    def match(self, *a: Any) -> Any:
        self.steps[0] += 1
        return self.rx.match(*a)

    def search(self, *a: Any) -> Any:
        self.steps[0] += 1
        return self.rx.search(*a)

    def finditer(self, *a: Any) -> Any:
        for m in self.rx.finditer(*a):
            self.steps[0] += 1
            yield m


_ADVERSARIAL_UNITS = {
    "jwt-prefix": "eyJ", "jwt-dots": "eyJaaaaaaaa.", "assignments": "token=", "one-run": "a", "keyword-run": "token",
    "pem-begin": "-----BEGIN PRIVATE KEY-----!", "url-userinfo": "a://b:c@", "bearer": "Bearer ",
    "quotes": "password = '", "flags": "--password ", "sk": "sk-", "authorization": "Authorization: ",
    "xml": "<password>", "curl-user": "-u :", "mysql-p": "mysql -pa ", "sshpass": "sshpass -p ", "commas": '"token", ', "hex": "0123456789abcdef",
    "mixed-levels": "ghp_" + "a1B2" * 9 + " password=x1y2z3 ",  # spans of two priorities, interleaved
    "cookies": "cookie=1;", "escaped": '\\"password=x1\\" ', "base64": "QUJD" * 8 + " ",
}


def _counted_steps(monkeypatch: pytest.MonkeyPatch, text: str) -> int:
    steps = [0]
    with monkeypatch.context() as mp:
        for name in ("KEYWORD", "KEYWORD_I", "KEY_RUN", "ASSIGN", "FLAG", "XML"):
            mp.setattr(KEYED, name, _Counted(getattr(KEYED, name), steps))
        for name in ("PEM_BEGIN", "PEM_END", "PEM_BODY", "COOKIE_HEADER", "COOKIE_PAIR"):
            mp.setattr(R, name, _Counted(getattr(R, name), steps))

        def counting(find: Any) -> Any:
            def wrapped(t: str) -> Any:
                for span in find(t):
                    steps[0] += 1
                    yield span
            return wrapped

        mp.setattr(R, "_RULE_SETS", {key: tuple(dataclasses.replace(rule, find=counting(rule.find)) for rule in rules)
                                     for key, rules in R._RULE_SETS.items()})
        redact(text)
    return steps[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_ADVERSARIAL_UNITS))
def test_adversarial_inputs_take_a_linear_number_of_steps(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    unit = _ADVERSARIAL_UNITS[name]
    small, large = (unit * (n // len(unit)) for n in (40_000, 160_000))
    s, big = _counted_steps(monkeypatch, small), _counted_steps(monkeypatch, large)
    assert big <= 4.4 * s + 16  # four times the input, at most about four times the steps
    assert big <= len(large)  # at most one match attempt per character


def test_clean_1mb_log_takes_no_match_attempt_and_is_returned_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    line = "2024-05-01T12:00:00Z INFO worker[3] processed batch {} in 0.42s (rows=512, path=/srv/app/jobs.py)\n"
    text = "".join(line.format(i) for i in range(12_000))
    assert len(text) > 1_000_000
    assert not has_candidate(text)
    assert _counted_steps(monkeypatch, text) == 0
    assert redact(text).text is text


# ---------------------------------------------------------------------------------------------------
# Value shapes: patterns fullmatched against one value (at most 512 characters, a header value 4,096)
# ---------------------------------------------------------------------------------------------------

RULES = sys.modules["windowsmith.ingest.redact_rules"]


def _no_backtracking_repeat_nests(items: Any, inside: bool = False) -> list[str]:
    """Where a repetition that can backtrack (greedy or lazy, more than once) sits inside another one.
    A possessive repetition or an atomic group gives nothing back, so what is inside starts afresh."""
    from re import _constants as C  # type: ignore[attr-defined]

    found: list[str] = []
    for op, av in items:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            _, hi, sub = av
            if inside and hi > 1:
                found.append(f"{op} {av!r}"[:80])
            found += _no_backtracking_repeat_nests(sub, inside or hi > 1)
        elif op is getattr(C, "POSSESSIVE_REPEAT", None):
            found += _no_backtracking_repeat_nests(av[2], False)
        elif op is getattr(C, "ATOMIC_GROUP", None):
            found += _no_backtracking_repeat_nests(av, False)
        elif op is C.SUBPATTERN:
            found += _no_backtracking_repeat_nests(av[3], inside)
        elif op is C.BRANCH:
            for branch in av[1]:
                found += _no_backtracking_repeat_nests(branch, inside)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            found += _no_backtracking_repeat_nests(av[1], inside)
    return found


def test_no_value_shape_pattern_nests_a_backtracking_repetition() -> None:
    # ``(?:\.[0-9]+)+`` made VERSION quadratic on 1.1.1…1! (every split retried); the same shape in
    # WORDS_LOWER, PATH and DOTTED_IDENT. A backtracking repetition inside another must not come back.
    from re import _parser  # type: ignore[attr-defined]

    scanned = {id(rx) for rule in R._RULE_SETS[True, False] for rx in rule.scans}
    patterns = {n: v for n, v in vars(RULES).items() if isinstance(v, re.Pattern) and id(v) not in scanned}
    assert {"VERSION", "WORDS_LOWER", "PATH", "DOTTED_IDENT", "PLACEHOLDER_RX", "FILL_IN_CHARS"} <= set(patterns)
    nested = {n: f for n, rx in patterns.items() if (f := _no_backtracking_repeat_nests(list(_parser.parse(rx.pattern, rx.flags))))}
    assert not nested
    # the check finds the shapes it is about
    assert _no_backtracking_repeat_nests(list(_parser.parse(r"v?[0-9]+(?:\.[0-9]+)+(?:[-+.][0-9A-Za-z.-]*)?")))
    assert not _no_backtracking_repeat_nests(list(_parser.parse(r"[a-z]++(?:[-_. /][a-z]++)*+")))


# The patterns as they were before their runs were made possessive: they must accept the same values.
_BEFORE = {
    "VERSION": re.compile(r"v?[0-9]+(?:\.[0-9]+)+(?:[-+.][0-9A-Za-z.-]*)?"),
    "WORDS_LOWER": re.compile(r"[a-z]+(?:[-_. /][a-z]+)*|[A-Z]+(?:[-_. /][A-Z]+)*"),
    "PATH": re.compile(r"(?:~|\.{1,2})?/[\w.@+-]*(?:/[\w.@+-]*)+|[A-Za-z]:\\.*"),
    "DOTTED_IDENT": re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+"),
}
_SHAPE_PIECES = ["1", "12", ".", "a", "ab", "B", "_", "-", "+", "/", "~", "v", "..", "@", " ", "!", "C:\\", "x9"]


@pytest.mark.slow
@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_SHAPE_PIECES), max_size=16).map("".join))
def test_possessive_value_shapes_accept_exactly_what_they_did(value: str) -> None:
    for name, before in _BEFORE.items():
        assert (getattr(RULES, name).fullmatch(value) is None) == (before.fullmatch(value) is None), (name, value)


_FILL_IN_BEFORE = re.compile(
    r"(?i)[a-z_\- ]{0,40}(?:your|my|insert|enter|replace)[-_ ]?[a-z_\- ]{0,60}(?:here|key|token|secret|password)s?")
_FILL_IN_PIECES = ["my", "your", "insert", "enter", "replace", "here", "key", "token", "secret", "password", "s", "-",
                   "_", " ", "a", "API", "x" * 20, "1", "."]


@pytest.mark.slow
@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_FILL_IN_PIECES), max_size=24).map("".join))
def test_fill_in_scan_accepts_exactly_what_the_regex_it_replaced_did(value: str) -> None:
    # The regex tried every split of its two adjacent runs: 0.5 ms on a 300-character "my my my …".
    assert V.asks_to_fill_in(value) == (_FILL_IN_BEFORE.fullmatch(value) is not None), value


@pytest.mark.parametrize("value", ["your-api-key-here", "insert token", "MY SECRET KEY", "enter_your_passwords",
                                   "replace-" + "x" * 55 + "-here"])
def test_fill_in_placeholders_are_kept(value: str) -> None:
    assert redact(f'password = "{value}"').text == f'password = "{value}"'
    assert redact('password = "my secret key 2"').total == 1


# ---------------------------------------------------------------------------------------------------
# Issue 56: JSON-escaped strings, punctuated bare values, base64 bodies, cookies, Docker auths, and
# base64 hashes that are not passwords
# ---------------------------------------------------------------------------------------------------


def _escaped(text: str) -> str:
    """``text`` as a tool result that carries it in a JSON string, as an agent framework logs a command."""
    return json.dumps({"stdout": text, "exit_code": 0})


def _stdout(redacted: str) -> str:
    return str(json.loads(redacted)["stdout"])


@pytest.mark.parametrize(
    ("inner", "secret", "kind"),
    [
        ('DB_PASSWORD="Xk9mQ2wT7pLz"', "Xk9mQ2wT7pLz", "password_assignment"),
        ("export DB_PASSWORD='Xk9mQ2wT7pLz'\n", "Xk9mQ2wT7pLz", "password_assignment"),
        ('{"password": "Xk9mQ2wT7pLz", "user": "bob"}', "Xk9mQ2wT7pLz", "password_assignment"),
        ("ok\nAKIAQ3EGHL5DZXN7WYTA\n", "AKIAQ3EGHL5DZXN7WYTA", "aws_access_key_id"),
        ('aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKE"', "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKE",
         "aws_secret_access_key"),
        ('{"api_key": "8f3kq9zx0vB7mN2pL5tR"}', "8f3kq9zx0vB7mN2pL5tR", "generic_secret_assignment"),
    ],
)
def test_keyed_secrets_inside_a_json_escaped_string_are_redacted_and_the_json_stays_valid(
        inner: str, secret: str, kind: str) -> None:
    text = _escaped(inner)
    assert secret not in redact(text).text  # before: the value sat between \" and \" and was kept
    out = _stdout(redact(text).text)
    assert secret not in out and f"[REDACTED:{kind}]" in out
    assert out.replace(f"[REDACTED:{kind}]", secret) == inner  # nothing else changed, escapes included
    twice = json.dumps({"log": text})  # JSON text inside a JSON string inside a JSON string
    assert secret not in json.loads(json.loads(redact(twice).text)["log"])["stdout"]


def test_escaped_slashes_and_unicode_escapes_are_decoded_before_matching() -> None:
    text = '{"url": "postgres:\\/\\/app:s3cr3tP4ss@db.internal\\/prod", "note": "caf\\u00e9 token=\\"ghp_' + "a1B2" * 9 + '\\""}'
    r = redact(text)
    assert "s3cr3tP4ss" not in r.text and "a1B2a1B2" not in r.text
    assert json.loads(r.text)["url"] == "postgres://app:[REDACTED:url_password]@db.internal/prod"
    assert json.loads(r.text)["note"] == 'café token="[REDACTED:github_token]"'


def test_a_redacted_span_never_splits_an_escape_sequence() -> None:
    # Matched as it stands, the bare value of DB_PASSWORD=\"...\" was the backslash alone: replacing it
    # left an unescaped quote and the JSON stopped parsing.
    text = '{"stdout": "DB_PASSWORD=\\"Xk9mQ2wT7pLz\\"\\n"}'
    assert json.loads(redact(text).text) == {"stdout": 'DB_PASSWORD="[REDACTED:password_assignment]"\n'}


@pytest.mark.parametrize("password", ["Xk9mQ2.wT7pLz", "Xk9;mQ2wT7pLz", "Xk9&mQ2(w)T7pLz", "Xk9]mQ2}wT7",
                                      "Xk9,mQ2<w>T7|pLz", "Xk9mQ2wT7pLz.", "Xk9)mQ2", "a.b.Xk9mQ2", "Jb(0gQ6Ze5hZ",
                                      "tUzH.aPyhMFL", "x3&&BOW;gyGKv", "Xx>&jT4", "WiD;cx,,89m96O", "tpp(1}1B3kC)on"])
@pytest.mark.parametrize("template", ["DB_PASSWORD={S}", "export DB_PASSWORD={S}\n", "  password: {S}\n",
                                      "mysql --password {S} -h db", "psql --password={S}", '{{"stdout": "PGPASSWORD={S}"}}'])
def test_an_unquoted_value_runs_to_the_end_of_line_or_quote_through_punctuation(template: str, password: str) -> None:
    out = redact(template.format(S=password)).text
    pieces = [p for p in re.split(r"[^A-Za-z0-9]", password) if len(p) >= 3]
    assert not [p for p in pieces if p in out], out  # before: cut at the first & ( ) ] } ; , . < > |


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DB_PASSWORD=Xk9;mQ2 ./run.sh", "DB_PASSWORD=[REDACTED:password_assignment] ./run.sh"),
        ("GET /login?password=Xk9mQ2wT7&page=2", "GET /login?password=[REDACTED:password_assignment]&page=2"),
        ("Server=db;Password=Xk9mQ2.wT7;Database=app;", "Server=db;Password=[REDACTED:password_assignment];Database=app;"),
        ("connect(password=x1y2z3)", "connect(password=[REDACTED:password_assignment])"),
        ("PASSWORD=Xk9mQ2 && make", "PASSWORD=[REDACTED:password_assignment] && make"),
        ("password=Xk9mQ2. Then retry.", "password=[REDACTED:password_assignment]. Then retry."),
        ("<env>PASSWORD=Xk9mQ2</env>", "<env>PASSWORD=[REDACTED:password_assignment]</env>"),
    ],
)
def test_a_bare_value_stops_where_the_next_key_operator_or_sentence_starts(text: str, expected: str) -> None:
    assert redact(text).text == expected


@pytest.mark.parametrize("code", ["pw = Piecewise((x, y > x), (y, True))", "password=get_password(user).strip()",
                                  "password=self.settings.db.password", "token=os.getenv(name)",
                                  "self._session_key = self._get_new_session_key()", "pw_sub = pw.subs({y: 1.0})"])
def test_a_bare_value_that_is_code_is_kept(code: str) -> None:
    assert redact(code).text == code


_ENV = "APP_ENV=production\nDB_HOST=db.internal\nDB_PASSWORD=Xk9mQ2wT7pLz\nLOG_LEVEL=info\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "template",
    ["{B}", "$ base64 .env\n{W}\n$ ", "apiVersion: v1\nkind: Secret\ndata:\n  .env: {B}\n", "echo {B} | base64 -d > .env"],
)
def test_a_base64_env_body_is_decoded_and_checked(template: str) -> None:
    encoded = _b64(_ENV * 3)
    wrapped = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))  # as base64(1) prints it
    text = template.format(B=encoded, W=wrapped)
    r = redact(text)
    assert r.counts == {"password_assignment": 1}  # before: 0% of base64 .env bodies
    assert encoded[:40] not in r.text and wrapped.splitlines()[-1] not in r.text


def test_a_base64_body_in_a_json_api_answer_with_escaped_newlines_is_decoded() -> None:
    encoded = _b64(_ENV)
    content = "\n".join(encoded[i : i + 60] for i in range(0, len(encoded), 60)) + "\n"  # GitHub's contents API
    r = redact(json.dumps({"name": ".env", "encoding": "base64", "content": content}))
    assert json.loads(r.text)["content"] == "[REDACTED:password_assignment]\n"


def test_base64_bodies_without_secrets_binary_or_over_the_limit_are_kept() -> None:
    from windowsmith.ingest.redact_rules import BASE64_MAX

    clean = _b64("APP_ENV=production\nLOG_LEVEL=info\nWORKERS=4\n")
    binary = base64.b64encode(random.Random(5).randbytes(600)).decode()
    huge = _b64(_ENV + "X=" + "y" * BASE64_MAX + "\n")  # too big to be a configuration file: not decoded
    for text in (clean, binary, huge, f"data:image/png;base64,{binary}"):
        assert redact(text).text == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Cookie: _ga=GA1.2.3.4; sessionid=k2j4h5g6f7d8s9a0q1w2e3r4t5y6u7i8; theme=dark", "k2j4h5g6f7d8s9a0q1w2e3r4t5y6u7i8"),
        ("< Set-Cookie: _app_session=Zk9xQ2wT7pLzM4nB8vC1; Path=/; HttpOnly; Secure", "Zk9xQ2wT7pLzM4nB8vC1"),
        ('curl -b "connect.sid=s%3AaB3dE5fG7hJ9kL1m.NoPqRsTuVwXyZ0123" https://app.example.com', "s%3AaB3dE5fG7hJ9kL1m"),
        (_escaped('curl -v https://app\n> Cookie: PHPSESSID=9f8e7d6c5b4a39281706f5e4d3c2b1a0\n'), "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
        (json.dumps({"headers": {"Cookie": "remember_token=1|Xk9mQ2wT7pLzAb3D"}}), "Xk9mQ2wT7pLzAb3D"),
    ],
)
def test_session_cookies_are_redacted_in_headers_and_escaped_json(text: str, secret: str) -> None:
    r = redact(text)
    assert secret not in r.text and "[REDACTED:session_cookie]" in r.text
    assert "Path=/" in r.text or "Path" not in text  # cookie attributes are not secrets


def test_cookies_that_are_not_secrets_are_kept() -> None:
    for text in ("Cookie: theme=dark; lang=en-GB; _ga=GA1.2.1234567.1700000000", "Set-Cookie: sessionid=; Max-Age=0",
                 "git checkout -b feature/cookie-banner", "Cookie: sessionid=<your-session-id>"):
        assert redact(text).text == text


def test_docker_auths_are_redacted_plain_and_in_escaped_json() -> None:
    auth = _b64("deploy:Xk9mQ2wT7pLz")
    config = json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": auth}, "ghcr.io": {"auth": _b64("a:b")}}})
    for text in (config, _escaped(config), _escaped("$ cat ~/.docker/config.json\n" + json.dumps(json.loads(config), indent=2))):
        r = redact(text)
        assert auth not in r.text and _b64("a:b") not in r.text  # before: 0% in escaped JSON
        assert "https://index.docker.io/v1/" in r.text


_INTEGRITY = (
    "sha512-MZsNbSxaVmDTk5Ozy0BpFLRUxyVT2b4x93J6P/aw0R3ZB4k1+pw9==",  # the shape that was read as "pw9 = ..."
    "sha512-3bV8Fq2Zm1L9kX+pw1Ae6Tc0Rj5Yw7Uh2Ni4Ko6Ps8Qd1Gf3Hj5Kl7Zx9Cv2Bn4Mq6Wr8Et0Yu2Io4Pa6Sd8Fg0Hj2Kl4Zx6Cv8Bn0Mq2Wr4Et6Yu8Io0Pa==",
    "sha1-Qm9vK2pw3=",
    "sha512-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAApw8/==",
)


def test_package_lock_integrity_hashes_with_pw_are_not_passwords() -> None:
    lock = {"packages": {f"node_modules/p{i}": {"version": "1.0.0", "integrity": h} for i, h in enumerate(_INTEGRITY)}}
    for text in (json.dumps(lock, indent=2), json.dumps(lock, separators=(",", ":"))):
        assert redact(text).text == text  # before: "...pw9=[REDACTED]" and the JSON stopped parsing
    assert redact_obj(lock) == (lock, {})


_B64 = st.text(alphabet=st.sampled_from(list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")))


@settings(max_examples=400, deadline=None)
@given(st.binary(min_size=20, max_size=64), st.sampled_from(["pw", "PW", "pass", "Pw", "pwd", "key", "token", "auth"]),
       st.integers(0, 9), st.sampled_from(["sha512-", "sha1-", "sha256-", "sha384-"]), _B64)
def test_integrity_hashes_are_never_changed(digest: bytes, word: str, digit: int, algo: str, noise: str) -> None:
    body = base64.b64encode(digest).decode().rstrip("=")
    cut = len(body) - len(word) - 1
    forced = (body[: max(0, cut - len(noise))] + noise[:cut] + "+" + word + str(digit))[-len(body) :]
    for b64 in (body, forced):
        value = algo + b64 + "=" * (-len(b64) % 4 or 2)
        lock = {"name": "app", "lockfileVersion": 3, "packages": {"node_modules/x": {"integrity": value}}}
        for text in (json.dumps(lock), json.dumps(lock, indent=2), f"integrity {value}\n"):
            assert redact(text).text == text
        assert redact_obj(lock) == (lock, {})


_JSON_LEAF = (
    st.sampled_from(SAMPLES).map(lambda c: c[2].replace("{S}", c[1]))
    | _NOISE
    | st.text(alphabet=st.sampled_from(list('ab\\"\'/=:;&.,{}[]\n\t \x01é✓')), max_size=60)
    | st.integers()
    | st.none()
)
_JSON_DOC = st.recursive(
    _JSON_LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["stdout", "password", "data", "auth", "k"]),
                                                                inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_JSON_DOC, st.booleans(), st.booleans())
def test_redacting_a_json_document_keeps_it_parseable(doc: Any, indent: bool, nest: bool) -> None:
    text = json.dumps(doc, indent=2 if indent else None, ensure_ascii=bool(indent))
    if nest:
        text = json.dumps({"stdout": text})  # the document as text inside another document's string
    r = redact(text)
    json.loads(r.text)  # never raises
    assert redact(r.text).text == r.text  # idempotent


# ---------------------------------------------------------------------------------------------------
# The optional PII redactor: off by default, on with redact(pii=True) / IngestConfig(redact_pii=True)
# ---------------------------------------------------------------------------------------------------

_PII_TEXT = ("Customer mia.li3818@example.com, phone (415) 555-2671 / +44 20 7946 0958 / 07700 900123, card "
             "4111 1111 1111 1111 (Amex 378282246310005), SSN 123-45-6789, NI number AB 12 34 56 C.")
_PII_VALUES = ["mia.li3818@example.com", "555-2671", "7946 0958", "07700 900123", "4111 1111", "378282246310005",
               "123-45-6789", "AB 12 34 56 C"]


def test_pii_is_kept_by_default_and_redacted_when_asked() -> None:
    assert redact(_PII_TEXT) == Redaction(_PII_TEXT, {})
    assert not has_candidate("mail mia.li3818@example.com")
    r = redact(_PII_TEXT, pii=True)
    assert [v for v in _PII_VALUES if v in r.text] == []
    assert r.counts == {"email_address": 1, "payment_card": 2, "phone_number": 3, "uk_nino": 1, "us_ssn": 1}
    assert redact(r.text, pii=True).total == 0  # idempotent
    assert redact_obj({"email": "mia.li3818@example.com"}) == ({"email": "mia.li3818@example.com"}, {})
    assert redact_obj({"email": "mia.li3818@example.com"}, pii=True)[1] == {"email_address": 1}


@pytest.mark.parametrize(
    "text",
    ["card 4111 1111 1111 1112", "id 4111111111111112", "SSN 000-12-3456", "SSN 666-12-3456", "SSN 123-00-4567",
     "NI GB 12 34 56 C", "NI QQ 12 34 56 E", "git clone git@github.com:acme/api.git", "pip install pkg==1.2.3",
     "released 2024-05-01 12:00:00", "version 10.0.19045.3803", "ip 192.168.100.200", "npm i @scope/pkg@1.2.3",
     "M 0 0 L 469 0 L 469 531 Q 828 903 1448 Q 2531 2678 2651 2914", "ts 1712345678901", "uuid 550e8400-e29b-41d4-a716-446655440000",
     "order #W2378156, total 1234.56 USD", "range 100-200-3000"],
)
def test_pii_lookalikes_are_kept(text: str) -> None:
    assert redact(text, pii=True).text == text


def test_luhn() -> None:
    from windowsmith.ingest.redact_pii import luhn_valid

    assert luhn_valid("4111111111111111") and luhn_valid("378282246310005") and luhn_valid("79927398713")
    assert not luhn_valid("4111111111111112") and not luhn_valid("79927398710")


def test_ingest_config_switches_the_pii_redactor_on_for_tool_results(tmp_path: Path) -> None:
    import windowsmith as ws
    from windowsmith.ingest.pipeline import IngestConfig

    assert IngestConfig().redact_pii is False
    requests = {}
    for on in (False, True):
        with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / f"ws-{on}.db", ingest=IngestConfig(redact_pii=on)) as e:
            s = e.session("s", goal="look the customer up")
            s.tools([{"name": "crm", "description": "find a customer",
                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}])
            s.user("who is customer 42?")
            s.assistant("", tool_calls=[{"id": "c1", "name": "crm", "arguments": {"q": "42"}}])
            s.tool_result("c1", _PII_TEXT + " DB_PASSWORD=Xk9mQ2.wT7pLz")
            requests[on] = json.dumps(s.build("anthropic").request)
    assert "mia.li3818@example.com" in requests[False] and "Xk9mQ2" not in requests[False]
    assert [v for v in _PII_VALUES if v in requests[True]] == [] and "[REDACTED:email_address]" in requests[True]
