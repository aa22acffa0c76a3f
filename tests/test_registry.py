"""The model registry: sourced data, name resolution, user overrides, validation, cost arithmetic."""

from __future__ import annotations

import json
import os
import re
from datetime import date
from importlib import resources
from pathlib import Path

import pytest

from windowsmith.errors import ConfigError, UnknownModelError, UsageError
from windowsmith.registry import (
    ENV_VAR,
    LongContextPrices,
    ModelSpec,
    Prices,
    Registry,
    load_registry,
)


def _raw_models() -> dict:
    text = resources.files("windowsmith").joinpath("data", "models.json").read_text(encoding="utf-8")
    return json.loads(text)


RAW = _raw_models()
NAMES = [m["name"] for m in RAW["models"]]


# ---------------------------------------------------------------------------------------------------------
# The packaged data
# ---------------------------------------------------------------------------------------------------------


def test_document_has_schema_version_and_updated_date():
    assert RAW["schema_version"] == 1
    date.fromisoformat(RAW["updated"])


@pytest.mark.parametrize("entry", RAW["models"], ids=NAMES)
@pytest.mark.parametrize("group", ["prices", "window", "cache", "token_factor"])
def test_every_model_sources_each_number_group(entry, group):
    src = entry["sources"][group]
    assert re.match(r"^https://\S+$", src["url"]), src
    read_on = date.fromisoformat(src["read_on"])
    assert date(2025, 1, 1) <= read_on <= date.fromisoformat(RAW["updated"])


@pytest.mark.parametrize("entry", RAW["models"], ids=NAMES)
def test_long_context_tiers_are_sourced(entry):
    if entry["prices"]["long_context"] is not None:
        assert entry["sources"]["long_context"]["url"].startswith("https://")


def test_default_registry_loads_every_entry():
    reg = Registry.default()
    assert reg.names() == sorted(NAMES)
    assert len(reg) == len(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_packaged_specs_follow_provider_rules(name):
    spec = Registry.default().get(name)
    assert spec.context_window >= spec.max_output > 0
    assert spec.tokenizer == "o200k_base"
    p = spec.prices
    if spec.provider == "anthropic":
        assert spec.default_format == "anthropic"
        assert spec.max_breakpoints == 4
        assert spec.token_factor > 1.0
        assert p.cache_write == pytest.approx(1.25 * p.input)  # 5-minute write
        assert p.cache_read < p.input
    else:
        assert spec.max_breakpoints == 0
        assert p.cache_write == p.input  # implicit caching: no write surcharge
    if spec.provider == "openai":
        assert spec.token_factor == 1.0
        assert spec.min_cacheable_prefix == 1024
        reasoning = name.startswith(("gpt-5", "o3", "o4"))
        assert spec.default_format == ("openai-responses" if reasoning else "openai-chat")
    if spec.provider == "gemini":
        assert spec.default_format == "gemini"
    if p.long_context is not None:
        assert p.long_context.threshold <= spec.context_window
        assert p.long_context.input >= p.input


def test_known_minimum_cacheable_prefixes():
    reg = Registry.default()
    assert reg.get("claude-sonnet-4-5").min_cacheable_prefix == 1024
    assert reg.get("claude-opus-4-5").min_cacheable_prefix == 4096
    assert reg.get("claude-haiku-4-5").min_cacheable_prefix == 4096
    assert reg.get("gemini-2.5-pro").min_cacheable_prefix == 2048


def test_gpt4o_may_snapshot_is_not_silently_priced_as_gpt4o():
    # gpt-4o-2024-05-13 has its own (higher) price; it must not be an alias of gpt-4o.
    assert "gpt-4o-2024-05-13" not in Registry.default().get("gpt-4o").aliases


# ---------------------------------------------------------------------------------------------------------
# Name resolution
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),  # alias
        ("Claude-Sonnet-4-5", "claude-sonnet-4-5"),  # case
        ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"),  # provider prefix
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),  # Vertex snapshot
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),  # Bedrock
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("claude-haiku-4-5-latest", "claude-haiku-4-5"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("google/gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
        ("gemini-2.5-flash-001", "gemini-2.5-flash"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),  # longest prefix wins over gpt-4o
        ("openai/gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),
        ("gpt-5-2025-08-07", "gpt-5"),
        ("gpt-5-nano", "gpt-5-nano"),
        ("o4-mini-2025-04-16", "o4-mini"),
    ],
)
def test_get_resolves_names_aliases_and_snapshots(query, expected):
    assert Registry.default().get(query).name == expected


@pytest.mark.parametrize("query", ["o3-mini", "claude-sonnet-4-6", "gpt-4.1-mini-foo", "gpt-5.4", "gemini-2.5"])
def test_prefix_of_a_different_model_is_not_a_snapshot(query):
    with pytest.raises(UnknownModelError):
        Registry.default().get(query)


def test_unknown_model_error_suggests_close_matches_and_says_how_to_add():
    with pytest.raises(UnknownModelError) as info:
        Registry.default().get("claude-sonet-4-5")
    msg = str(info.value)
    assert "claude-sonet-4-5" in msg
    assert "Close matches: claude-sonnet-4-5" in msg
    assert ENV_VAR in msg
    assert "Engine(registry=...)" in msg
    # One tree of errors: callers can catch it as a usage error or as a KeyError.
    assert isinstance(info.value, UsageError)
    assert isinstance(info.value, KeyError)


def test_unknown_model_without_close_match_lists_known_models():
    with pytest.raises(UnknownModelError, match="Known models: claude-fable-5-1"):
        Registry.default().get("zzzzzz")


def test_contains_uses_resolution():
    reg = Registry.default()
    assert "anthropic/claude-opus-4-5" in reg
    assert "o3-mini" not in reg
    assert 42 not in reg


# ---------------------------------------------------------------------------------------------------------
# User overrides and additions
# ---------------------------------------------------------------------------------------------------------


NEW_MODEL_TOML = """
[models."acme-large"]
provider = "openai"
default_format = "openai-chat"
context_window = 64000
max_output = 8000
tokenizer = "cl100k_base"
aliases = ["acme-large-2026-01-01"]
prices = { input = 1.0, output = 2.0, cache_write = 1.0, cache_read = 0.5 }
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_partial_toml_overrides_one_price_and_keeps_the_rest(tmp_path):
    path = _write(tmp_path, "prices.toml", '[models."claude-sonnet-4-5".prices]\ninput = 2.5\n')
    base = Registry.default()
    merged = base.merged(path)
    new, old = merged.get("claude-sonnet-4-5"), base.get("claude-sonnet-4-5")
    assert new.prices.input == 2.5
    assert new.prices.output == old.prices.output
    assert new.prices.long_context == old.prices.long_context
    assert new.context_window == old.context_window
    assert new.aliases == old.aliases
    assert new.sources["prices"] == old.sources["prices"]
    assert base.get("claude-sonnet-4-5").prices.input == 3.0  # merged() returns a new registry


def test_partial_override_by_alias_updates_the_canonical_model(tmp_path):
    path = _write(tmp_path, "o.json", json.dumps({"models": [{"name": "gpt-4o-2024-08-06", "max_output": 4096}]}))
    merged = Registry.default().merged(path)
    assert merged.get("gpt-4o").max_output == 4096
    assert "gpt-4o-2024-08-06" not in merged.names()


def test_new_model_from_toml(tmp_path):
    merged = Registry.default().merged(_write(tmp_path, "new.toml", NEW_MODEL_TOML))
    spec = merged.get("acme-large-2026-01-01")
    assert spec.name == "acme-large"
    assert spec.tokenizer == "cl100k_base"
    assert spec.token_factor == 1.0  # default
    assert spec.cost(1_000_000, 0) == pytest.approx(1.0)


def test_from_file_holds_only_that_files_models(tmp_path):
    reg = Registry.from_file(_write(tmp_path, "new.toml", NEW_MODEL_TOML))
    assert reg.names() == ["acme-large"]
    with pytest.raises(UnknownModelError):
        reg.get("gpt-4o")


def test_merged_with_a_registry_replaces_whole_specs():
    base = Registry.default()
    spec = base.get("gpt-4o")
    cheap = ModelSpec(
        name="gpt-4o",
        provider="openai",
        default_format="openai-chat",
        context_window=128_000,
        max_output=16_384,
        tokenizer="o200k_base",
        token_factor=1.0,
        prices=Prices(input=1.0, output=1.0, cache_write=1.0, cache_read=0.5),
        min_cacheable_prefix=1024,
        max_breakpoints=0,
    )
    merged = base.merged(Registry([cheap]))
    assert merged.get("gpt-4o").prices.input == 1.0
    assert merged.get("gpt-4o").aliases == ()
    assert base.get("gpt-4o") == spec


def test_load_registry_applies_env_then_extra(tmp_path, monkeypatch):
    env_file = _write(tmp_path, "env.toml", '[models."gpt-4o".prices]\ninput = 9.0\noutput = 9.0\n')
    extra = _write(tmp_path, "extra.json", json.dumps({"models": {"gpt-4o": {"prices": {"input": 7.0}}}}))
    monkeypatch.setenv(ENV_VAR, str(env_file))
    reg = load_registry(extra)
    assert reg.get("gpt-4o").prices.input == 7.0  # extra wins
    assert reg.get("gpt-4o").prices.output == 9.0  # env applied first
    monkeypatch.delenv(ENV_VAR)
    assert load_registry().get("gpt-4o").prices.input == 2.5


def test_load_registry_env_may_name_several_files(tmp_path, monkeypatch):
    a = _write(tmp_path, "a.toml", NEW_MODEL_TOML)
    b = _write(tmp_path, "b.toml", '[models."acme-large"]\nmax_output = 4000\n')

    monkeypatch.setenv(ENV_VAR, f"{a}{os.pathsep}{b}")
    assert load_registry().get("acme-large").max_output == 4000


def test_register_adds_and_replaces_without_touching_the_default():
    reg = Registry.default()
    spec = reg.get("o3")
    reg.register(ModelSpec(**{**_fields(spec), "name": "o3-custom", "aliases": ()}))
    assert reg.get("o3-custom").prices == spec.prices
    assert "o3-custom" not in Registry.default()


def test_register_rejects_an_alias_owned_by_another_model():
    reg = Registry.default()
    spec = reg.get("o3")
    with pytest.raises(ConfigError, match="aliases"):
        reg.register(ModelSpec(**{**_fields(spec), "name": "o3-custom", "aliases": ("gpt-4o-2024-08-06",)}))


def test_register_rejects_non_specs():
    with pytest.raises(UsageError):
        Registry().register({"name": "x"})  # type: ignore[arg-type]


def _fields(spec: ModelSpec) -> dict:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}


# ---------------------------------------------------------------------------------------------------------
# Validation: bad files name the model and the field
# ---------------------------------------------------------------------------------------------------------


def _bad(tmp_path: Path, **changes) -> Path:
    entry = {
        "name": "broken-model",
        "provider": "openai",
        "default_format": "openai-chat",
        "context_window": 1000,
        "max_output": 100,
        "tokenizer": "o200k_base",
        "prices": {"input": 1.0, "output": 2.0, "cache_write": 1.0, "cache_read": 0.5},
    }
    for key, value in changes.items():
        if key.startswith("prices_"):
            entry["prices"][key.removeprefix("prices_")] = value
        else:
            entry[key] = value
    return _write(tmp_path, "bad.json", json.dumps({"models": [entry]}))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"prices_input": -1.0}, "prices.input"),
        ({"prices_cache_read": -0.1}, "prices.cache_read"),
        ({"context_window": 50}, "context_window"),
        ({"tokenizer": "claude_bpe"}, "tokenizer"),
        ({"provider": "mistral"}, "provider"),
        ({"default_format": "openai-completions"}, "default_format"),
        ({"max_output": 0}, "max_output"),
        ({"token_factor": 0}, "token_factor"),
        ({"contxt_window": 10}, "contxt_window"),  # typo'd field is an error, not silently ignored
        (
            {"prices_long_context": {"threshold": 5000, "input": 1, "output": 1, "cache_write": 1, "cache_read": 1}},
            "prices.long_context.threshold",
        ),
        ({"sources": {"prices": {"url": "https://x", "read_on": "yesterday"}}}, "sources.prices.read_on"),
    ],
)
def test_bad_values_raise_config_error_naming_model_and_field(tmp_path, changes, field):
    path = _bad(tmp_path, **changes)
    with pytest.raises(ConfigError) as info:
        Registry.from_file(path)
    msg = str(info.value)
    assert "broken-model" in msg
    assert f"'{field}'" in msg
    assert str(path) in msg
    with pytest.raises(ConfigError, match="broken-model"):
        Registry.default().merged(path)


def test_partial_entry_for_an_unknown_model_names_the_missing_field(tmp_path):
    path = _write(tmp_path, "p.toml", '[models."not-a-model".prices]\ninput = 1.0\n')
    with pytest.raises(ConfigError, match=r"not-a-model.*'provider'"):
        Registry.default().merged(path)


def test_override_that_breaks_a_known_model_is_rejected(tmp_path):
    path = _write(tmp_path, "p.toml", '[models."gpt-4o"]\nmax_output = 999999\n')
    with pytest.raises(ConfigError, match=r"gpt-4o.*'context_window'"):
        Registry.default().merged(path)


@pytest.mark.parametrize(
    ("filename", "text", "match"),
    [
        ("m.yaml", "models: []", "must end in .json or .toml"),
        ("m.json", "{not json", "not valid JSON"),
        ("m.toml", "models = [", "not valid TOML"),
        ("m.json", "[]", "must hold an object"),
        ("m.json", '{"schema_version": 2, "models": []}', "schema_version"),
        ("m.json", '{"nothing": 1}', "no 'models' key"),
        ("m.json", '{"models": [{"provider": "openai"}]}', r"models\[0\]"),
        ("m.json", '{"models": 3}', "must be a list"),
    ],
)
def test_malformed_files_raise_config_error(tmp_path, filename, text, match):
    with pytest.raises(ConfigError, match=match):
        Registry.from_file(_write(tmp_path, filename, text))


def test_missing_file_raises_config_error(tmp_path):
    with pytest.raises(ConfigError, match="Cannot read"):
        Registry.from_file(tmp_path / "absent.json")


# ---------------------------------------------------------------------------------------------------------
# cost(): checked by hand
# ---------------------------------------------------------------------------------------------------------


def test_cost_anthropic_with_cache_write_and_read():
    spec = Registry.default().get("claude-sonnet-4-5")  # $3 in, $15 out, $3.75 5m write, $0.30 read
    # 10,000 x 3 + 2,000 x 15 + 50,000 x 0.30 + 20,000 x 3.75 = 30,000 + 30,000 + 15,000 + 75,000 = 150,000 / 1e6
    assert spec.cost(10_000, 2_000, cache_read_tokens=50_000, cache_write_tokens=20_000) == pytest.approx(0.15)


def test_cost_openai_with_cached_input():
    spec = Registry.default().get("gpt-4o")  # $2.50 in, $10 out, $1.25 cached
    # prompt_tokens 128,000 of which 28,000 cached -> 100,000 uncached
    # 100,000 x 2.50 + 28,000 x 1.25 + 500 x 10 = 250,000 + 35,000 + 5,000 = 290,000 / 1e6
    assert spec.cost(100_000, 500, cache_read_tokens=28_000) == pytest.approx(0.29)


def test_cost_gemini_long_context_prices_the_whole_request():
    spec = Registry.default().get("gemini-2.5-pro")  # > 200K prompt: $2.50 in, $15 out, $0.25 cached
    # prompt = 250,000 + 50,000 = 300,000 > 200,000 -> long tier for every token, output included
    # 250,000 x 2.50 + 50,000 x 0.25 + 10,000 x 15 = 625,000 + 12,500 + 150,000 = 787,500 / 1e6
    assert spec.cost(250_000, 10_000, cache_read_tokens=50_000) == pytest.approx(0.7875)


def test_cost_long_context_threshold_is_exclusive():
    spec = Registry.default().get("gemini-2.5-pro")
    assert spec.cost(200_000, 0) == pytest.approx(200_000 * 1.25 / 1e6)  # exactly at threshold: base tier
    assert spec.cost(200_001, 0) == pytest.approx(200_001 * 2.50 / 1e6)


def test_cost_uses_a_custom_long_context_tier():
    spec = ModelSpec(
        name="tiered",
        provider="anthropic",
        default_format="anthropic",
        context_window=1_000,
        max_output=100,
        tokenizer="o200k_base",
        token_factor=1.2,
        prices=Prices(
            1.0,
            5.0,
            1.25,
            0.1,
            LongContextPrices(threshold=100, input=2.0, output=10.0, cache_write=2.5, cache_read=0.2),
        ),
        min_cacheable_prefix=0,
        max_breakpoints=4,
    )
    # 50 + 40 cache read + 20 cache write = 110 > 100 -> long tier: 50x2 + 10x10 + 40x0.2 + 20x2.5 = 258
    assert spec.cost(50, 10, 40, 20) == pytest.approx(258 / 1e6)


@pytest.mark.parametrize("bad", [(-1, 0, 0, 0), (0, -5, 0, 0), (0, 0, -1, 0), (0, 0, 0, -1), (1.5, 0, 0, 0)])
def test_cost_rejects_negative_or_fractional_counts(bad):
    with pytest.raises(UsageError):
        Registry.default().get("gpt-4o").cost(*bad)


def test_specs_are_frozen_and_hashable():
    spec = Registry.default().get("gpt-4o")
    with pytest.raises(AttributeError):
        spec.max_output = 1  # type: ignore[misc]
    assert hash(spec) == hash(Registry.default().get("gpt-4o"))
