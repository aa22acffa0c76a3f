"""Secret redaction: a corpus of realistic secrets and non-secrets, properties, and speed."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400) | _NOISE)
def test_idempotent_and_only_markers_change_text(text: str) -> None:
    r = redact(text)
    again = redact(r.text)
    assert again.text == r.text and again.total == 0
    assert _pieces_in_order(text, r.text)
    assert sum(r.counts.values()) == len(MARKER_RX.findall(r.text)) - len(MARKER_RX.findall(text))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("bcdfghjlmnqvxz BCDFGHJLMNQVXZ 0123456789 \n.,;()=:/")), max_size=500))
def test_text_without_candidates_is_never_changed(text: str) -> None:
    # no secret can be spelled with this alphabet (no vowels for keywords, no token prefixes), so
    # redaction must leave the text alone even when the cheap pre-check fires (e.g. on "://")
    assert redact(text) == Redaction(text, {})
    if "://" not in text:
        assert not has_candidate(text)


# ---------------------------------------------------------------------------------------------------
# Speed: linear regexes, cheap pre-check
# ---------------------------------------------------------------------------------------------------

_ADVERSARIAL = {
    "jwt-prefix": "eyJ" * 1_700_000,
    "jwt-dots": "eyJaaaaaaaa." * 420_000,
    "assignments": "token=" * 850_000,
    "one-run": "a" * 5_000_000,
    "keyword-run": "token" * 1_000_000,
    "pem-begin": "-----BEGIN PRIVATE KEY-----!" * 180_000,
    "url-userinfo": "a://b:c@" * 620_000,
    "bearer": "Bearer " * 700_000,
    "quotes": "password = '" * 420_000,
    "flags": "--password " * 450_000,
    "sk": "sk-" * 1_700_000,
}


@pytest.mark.parametrize("name", sorted(_ADVERSARIAL))
def test_adversarial_5mb_input_finishes_quickly(name: str) -> None:
    text = _ADVERSARIAL[name]
    assert len(text) >= 4_900_000
    start = time.perf_counter()
    redact(text)
    assert time.perf_counter() - start < 8.0  # linear: ~0.2-2 s on a laptop; quadratic would take minutes


def test_clean_1mb_log_is_cheap() -> None:
    line = "2024-05-01T12:00:00Z INFO worker[3] processed batch {} in 0.42s (rows=512, path=/srv/app/jobs.py)\n"
    text = "".join(line.format(i) for i in range(12_000))
    assert len(text) > 1_000_000
    start = time.perf_counter()
    r = redact(text)
    assert time.perf_counter() - start < 0.25
    assert r.text is text
