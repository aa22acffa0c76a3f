"""Planning the mask stage is incremental: each exchange's fold line is computed once, not at every build.

(The speed itself is measured in benchmarks/bench_build.py; this checks the work done, which does not
depend on the machine.)"""

from __future__ import annotations

import windowsmith as ws
from windowsmith.compaction import CompactionConfig, mask


def test_each_exchange_is_folded_in_planning_at_most_once(tmp_path, monkeypatch):
    calls: list[int] = []
    real = mask.fold_line

    def counting(turn, unit, **kw):
        calls.append(unit.first_seq)
        return real(turn, unit, **kw)

    monkeypatch.setattr(mask, "fold_line", counting)
    # a 1M window, and a batch floor no batch reaches: nothing is ever due (the floor stops growing at a 32K room)
    with ws.Engine("gpt-4.1", store=tmp_path / "ws.db", compaction=CompactionConfig(mask_min_tokens=500_000)) as e:
        s = e.session("inc")
        s.user("go")
        for i in range(60):
            s.assistant("", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"i": i}}])
            s.tool_result(f"c{i}", f"result {i}\n" * 40)
            s.build()
        assert not s.state.compactions
    keep = CompactionConfig().keep_turns
    assert len(calls) == len(set(calls)) == 60 - keep  # every aged exchange planned exactly once


def test_planned_folds_are_replanned_after_a_compaction(tmp_path):
    with ws.Engine("claude-sonnet-4-5", store=tmp_path / "ws.db", window=16_000,
                   compaction=CompactionConfig(keep_turns=4, mask_batch=2)) as e:
        s = e.session("re")
        s.user("go")
        for i in range(40):
            s.assistant("", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"i": i}}])
            s.tool_result(f"c{i}", f"FAILED test_{i}\n" + "noise line\n" * 120)
            pack = s.build()
            assert pack.tokens <= pack.manifest.available
        masks = [c for c in s.state.compactions if c["type"] == "mask"]
        assert len(masks) >= 2
        folded = [f["first_seq"] for m in masks for f in m["folds"]]
        assert len(folded) == len(set(folded))  # a fold is never planned (or applied) twice
