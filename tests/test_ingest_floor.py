"""The offload threshold falls as the window fills, but never below a share of the whole budget.

The newest result is the one the next action quotes; a full window is made room for by compacting
older history, not by offloading every new result (the bench showed reservation ids lost that way)."""

from __future__ import annotations

import json

import pytest

import windowsmith as ws
from windowsmith.errors import ConfigError
from windowsmith.ingest.pipeline import IngestConfig


def test_threshold_floor_is_a_share_of_the_available_budget():
    cfg = IngestConfig()
    assert cfg.threshold(1_000) == 400  # no budget given: the absolute minimum
    assert cfg.threshold(1_000, 5_840) == 584  # a full 8K window: 10% of its available budget
    assert cfg.threshold(5_840, 5_840) == 1_460  # an empty one: 25% of the room left
    assert cfg.threshold(3_000, 5_840) == 750  # in between: the fuller, the lower
    assert cfg.threshold(0, 10**6) == 6_000  # clamped to max_offload_tokens
    assert IngestConfig(floor_fraction=0).threshold(1_000, 5_840) == 400
    assert IngestConfig(offload_tokens=900).threshold(0, 10**6) == 900
    with pytest.raises(ConfigError, match="floor_fraction"):
        IngestConfig(floor_fraction=1.5)


def _fill(s: ws.Session, n: int) -> None:
    for i in range(n):
        s.assistant("", tool_calls=[{"id": f"f{i}", "name": "lookup", "arguments": {"q": i}}])
        s.tool_result(f"f{i}", " ".join(f"filler{i}word{j}" for j in range(160)))
        s.build()


def test_a_full_window_keeps_the_newest_mid_sized_result_inline(tmp_path):
    record = {"user_id": "sofia_kim_7287", "reservations": ["OI5L9G", "AQLBTL", "KA7I60", "I57WUD"],
              "payment_methods": {f"gift_card_{i}": {"amount": i * 7, "id": f"gift_card_{i}"} for i in range(18)}}
    text = json.dumps(record)
    with ws.Engine("claude-sonnet-4-5", store=tmp_path / "ws.db", window=8_000) as e:
        s = e.session("full")
        s.user("look up my reservations")
        _fill(s, 6)
        pack = s.build()
        assert pack.tokens > 0.6 * pack.manifest.available  # the window is well filled
        tokens = s.counter(pack.format).text(text)
        assert 400 < tokens < 0.10 * pack.manifest.available
        s.assistant("", tool_calls=[{"id": "u", "name": "get_user_details", "arguments": {"user_id": "sofia_kim_7287"}}])
        msg = s.tool_result("u", text)
        assert msg.content[0].content[0].text == text  # kept whole: the next call needs KA7I60
        with ws.Engine("claude-sonnet-4-5", store=tmp_path / "ws2.db", window=8_000,
                       ingest=IngestConfig(floor_fraction=0)) as e2:
            s2 = e2.session("full")
            s2.user("look up my reservations")
            _fill(s2, 6)
            s2.build()
            s2.assistant("", tool_calls=[{"id": "u", "name": "get_user_details", "arguments": {"user_id": "x"}}])
            assert "artifact://" in s2.tool_result("u", text).content[0].content[0].text  # without the floor
