"""Secret redaction: a corpus of realistic secrets and non-secrets, properties, and speed."""

from __future__ import annotations

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
        ("mysql --password Tr0ub4dor&3 -h db", "mysql --password [REDACTED:password_assignment]&3 -h db"),
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
    # redaction must leave the text alone even when the cheap pre-check fires (e.g. on "://")
    assert redact(text) == Redaction(text, {})
    if "://" not in text:
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

    scans = [(rule.name, rx) for rule in R._RULES for rx in rule.scans]
    assert {name for name, _ in scans} == {rule.name for rule in R._RULES}  # every rule declares its patterns
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
}


def _counted_steps(monkeypatch: pytest.MonkeyPatch, text: str) -> int:
    steps = [0]
    with monkeypatch.context() as mp:
        for name in ("KEYWORD", "KEYWORD_I", "KEY_RUN", "ASSIGN", "FLAG", "XML", "PEM_BEGIN", "PEM_END", "PEM_BODY"):
            mp.setattr(R, name, _Counted(getattr(R, name), steps))

        def counting(find: Any) -> Any:
            def wrapped(t: str) -> Any:
                for span in find(t):
                    steps[0] += 1
                    yield span
            return wrapped

        mp.setattr(R, "_RULES", tuple(dataclasses.replace(rule, find=counting(rule.find)) for rule in R._RULES))
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

    scanned = {id(rx) for rule in R._RULES for rx in rule.scans}
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
