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


RECORD = json.dumps({"user_id": "sofia_kim_7287", "reservations": ["OI5L9G", "AQLBTL", "KA7I60", "I57WUD"],
                     "payment_methods": {f"gift_card_{i}": {"amount": i * 7, "id": f"gift_card_{i}"} for i in range(18)}})


def _newest_result_after_filling(path, ingest: IngestConfig | None = None) -> tuple[str, ws.Pack]:
    """Fill an 8K window with six exchanges, then record a mid-sized user record; its stored text and the
    pack built just before it."""
    with ws.Engine("claude-sonnet-4-5", store=path, window=8_000, ingest=ingest) as e:
        s = e.session("full")
        s.user("look up my reservations")
        for i in range(6):
            s.assistant("", tool_calls=[{"id": f"f{i}", "name": "lookup", "arguments": {"q": i}}])
            s.tool_result(f"f{i}", " ".join(f"filler{i}word{j}" for j in range(160)))
            pack = s.build()
        tokens = s.counter(pack.format).text(RECORD)
        assert 400 < tokens < 0.10 * pack.manifest.available  # over the old minimum, under the floor
        s.assistant("", tool_calls=[{"id": "u", "name": "get_user_details", "arguments": {"user_id": "sofia_kim_7287"}}])
        return s.tool_result("u", RECORD).content[0].content[0].text, pack


def test_a_full_window_keeps_the_newest_mid_sized_result_inline(tmp_path):
    text, pack = _newest_result_after_filling(tmp_path / "ws.db")
    assert pack.tokens > 0.6 * pack.manifest.available  # the window is well filled
    assert text == RECORD  # kept whole: the next call needs KA7I60
    without_floor, _ = _newest_result_after_filling(tmp_path / "ws2.db", IngestConfig(floor_fraction=0))
    assert "artifact://" in without_floor  # the room-left rule alone offloads it
