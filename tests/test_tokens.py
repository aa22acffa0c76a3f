import hashlib
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windowsmith.errors import TokenizerError
from windowsmith.model import Message, Text, ToolCall, ToolResult, ToolSpec
from windowsmith.tokens import COUNT_CACHE, Calibration, TokenCounter, count_text, get_encoding


def test_shipped_bpe_files_match_tiktoken_expected_hashes():
    expected = {
        "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    }
    for name, sha in expected.items():
        data = (resources.files("windowsmith") / "data" / "tokenizers" / f"{name}.tiktoken").read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha


@pytest.mark.slow
def test_known_token_counts_offline():
    # reference values from OpenAI's tokenizer for these encodings
    assert get_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert get_encoding("o200k_base").encode("hello world") == [24912, 2375]
    assert count_text("tiktoken is great!", "cl100k_base") == 6


def test_unknown_encoding_is_a_clear_error():
    with pytest.raises(TokenizerError, match="ships o200k_base, cl100k_base"):
        get_encoding("p50k_base")


def test_each_text_is_tokenized_once_per_process():
    text = "a unique piece of content for the cache test " * 20
    before = COUNT_CACHE.misses
    n1 = count_text(text)
    n2 = count_text(text)
    assert n1 == n2 > 0
    assert COUNT_CACHE.misses == before + 1


def test_message_count_includes_overheads_and_tool_blocks():
    c = TokenCounter("o200k_base", "openai-chat")
    m = Message("assistant", (Text("ok"), ToolCall("c1", "get_order", {"id": 1234})))
    raw = 3 + count_text("ok") + 7 + count_text("get_order") + count_text('{"id":1234}')
    assert c.message(m) == raw
    r = Message("tool", (ToolResult("c1", (Text("done"),)),))
    assert c.message(r) == 3 + 4 + count_text("done")


def test_factor_and_calibration_scale_counts():
    c = TokenCounter("o200k_base", "anthropic", factor=1.15)
    text = "The quick brown fox jumps over the lazy dog. " * 10
    raw = count_text(text)
    assert c.text(text) == -(-raw * 115 // 100) or c.text(text) == int(raw * 1.15) + 1
    # three requests billed 1.3x their raw count: the slope learnt (1.3 / 1.15; three pairs outvote the
    # prior of a fresh store, 1.0) scales every later count
    for n in (1000, 3000, 5000):
        c.calibration.observe(counted=c.counted(n), billed=int(n * 1.3))
    assert c.text(text) == pytest.approx(raw * 1.3, rel=0.01)
    assert c.offset == pytest.approx(0, abs=2)


def test_calibration_clamps_the_slope_and_ignores_nonsense():
    cal = Calibration()
    cal.observe(1000, 1100)
    assert cal.slope == 1.0 and cal.offset == 100  # one observation: a pure offset
    cal.observe(1300, 1100 * 10)  # one absurd observation cannot push the slope past the clamp
    assert cal.slope <= cal.high == 1.5
    assert cal.observations == 2
    back = Calibration.from_dict(cal.to_dict())  # a new session: the first call's offset; the absurd fit (outside
    assert (back.slope, back.offset) == (1.0, cal.head_offset) and back.offset == 100  # the band) is not persisted
    assert cal.observe(0, 100) == cal.slope and cal.observations == 2  # ignored
    assert Calibration.from_dict({"ratio": 1.2, "observations": 3}).slope == 1.2  # the earlier stored form


def test_tools_count_is_stable_for_equal_schemas():
    a = ToolSpec.from_dict({"name": "t", "description": "d", "parameters": {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}})
    b = ToolSpec.from_dict({"name": "t", "description": "d", "parameters": {"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "type": "object"}})
    assert a.canonical == b.canonical
    c = TokenCounter()
    assert c.tools([a]) == c.tools([b]) > 12


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=5))
def test_counts_are_additive_over_messages(texts):
    c = TokenCounter()
    msgs = [Message.user(t or "x") for t in texts]
    assert sum(c.message(m) for m in msgs) == sum(3 + count_text(t or "x") for t in texts)


def test_parsed_ranks_are_cached_across_processes_and_checked_before_use(tmp_path, monkeypatch):
    from tiktoken.load import load_tiktoken_bpe

    from windowsmith import bpe_cache
    from windowsmith.tokens import _SPECS

    name = "cl100k_base"
    path = str(resources.files("windowsmith") / "data" / "tokenizers" / f"{name}.tiktoken")
    expected = _SPECS[name]["expected_hash"]
    parsed = load_tiktoken_bpe(path, expected_hash=expected)
    assert bpe_cache.load_ranks(path, name, expected, tmp_path) == parsed  # parsed, then written
    (entry,) = tmp_path.iterdir()
    assert entry.name == f"{name}-{expected}.bpe"
    assert bpe_cache._read(entry) == parsed  # what a later process reads
    raw = bytearray(entry.read_bytes())
    raw[-5] ^= 1  # a changed byte: the entry's own digest no longer matches, so it is parsed again and rewritten
    entry.write_bytes(bytes(raw))
    assert bpe_cache._read(entry) is None
    assert bpe_cache.load_ranks(path, name, expected, tmp_path) == parsed
    assert bpe_cache._read(entry) == parsed
    with pytest.raises(ValueError, match="hash mismatch"):  # the shipped file is checked even with an entry
        bpe_cache.load_ranks(path, name, "0" * 64, tmp_path)
    unwritable = tmp_path / "file"
    unwritable.write_text("")
    assert bpe_cache.load_ranks(path, name, expected, unwritable / "sub") == parsed  # no cache: parsed each time
    def homeless() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(bpe_cache, "cache_dir", homeless)  # no home folder: parsed, nothing written
    assert bpe_cache.load_ranks(path, name, expected) == parsed
