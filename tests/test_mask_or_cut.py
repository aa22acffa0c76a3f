"""Near the summary threshold a mask batch competes with the free cut: the one that makes room for the smaller
cache rewrite per token runs (``compaction/economics.py``, ``cut_makes_room_cheaper``)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

import windowsmith as ws
from conftest import DATA, needs_data, replay_strategies, with_screenshots
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import prepare
from windowsmith.compaction import economics, mask
from windowsmith.registry import load_registry
from windowsmith.traces import load_traces

pytestmark = pytest.mark.slow  # every test here replays real traces or runs processes

SONNET = load_registry().get("claude-sonnet-4-5")



@needs_data
def test_a_batch_that_rewrites_much_for_little_near_the_threshold_waits_for_the_cut(tmp_path, monkeypatch):
    """A real airline run (dev) with a screenshot in every result at 16K: near the summary threshold a batch folding
    the two oldest exchanges (screenshots and all) re-wrote most of the history to save them, every other turn; the
    cut makes that room for half the rewrite and lasts several turns. Before the rule windowsmith paid $0.314 on this run,
    `sticky` $0.286; it now pays less than `sticky`, with every target of every call still in its requests."""
    run = next(t for t in load_traces(DATA / "tau-bench" / "gpt-4o-airline.json")
               if t.id == "gpt-4o-airline/task-33/trial-0")
    run = prepare(replace(run, messages=with_screenshots(run.messages)))
    cfg = BenchConfig.make(SONNET, 16_000)
    decisions: list[bool] = []

    def spy(*args: Any) -> bool:
        decisions.append(economics.cut_makes_room_cheaper(*args))
        return decisions[-1]

    monkeypatch.setattr(mask, "cut_makes_room_cheaper", spy)
    got = replay_strategies(run, cfg, ("windowsmith", "sticky"), tmp_path)
    ws_run, sticky = got["windowsmith"], got["sticky"]
    assert ws_run.error is None and sticky.error is None
    assert True in decisions  # batches near the threshold were declined: the cut made that room
    assert ws_run.events.get("emergency", 0) >= 2  # the cut made the room
    assert ws_run.cost_usd < sticky.cost_usd
    assert ws_run.strict_hits == ws_run.targets > sticky.strict_hits
    assert ws_run.over_window == 0 and ws_run.blind_calls == 0


@pytest.mark.parametrize(("model", "weighs"), [("claude-sonnet-4-5", True), ("gemini-2.5-flash", True),
                                              ("gpt-4o", False)])
def test_the_cut_is_cheaper_only_where_the_batch_rewrites_more_per_token_it_saves(tmp_path, monkeypatch, model, weighs):
    """On the passes the engine runs at the summary threshold (a session of searches, each with a screenshot): a batch
    that saves 2,000 tokens for a rewrite of 16,000 loses to the cut, one that saves them for a rewrite of 250 wins.
    Where a rewrite costs little more than a read (OpenAI's prices) the batch always runs: its rewrite is cheap, and
    the folds keep more identifiers than the cut."""
    from windowsmith.compaction import pipeline

    seen: list[tuple[bool, bool]] = []

    def probe(p: Any, planner: Any, size: int) -> int:
        if size >= p.summarize_at * p.available:
            seen.append((economics.cut_makes_room_cheaper(p, size, 2_000, 16_000),
                         economics.cut_makes_room_cheaper(p, size, 2_000, 250)))
            assert not economics.cut_makes_room_cheaper(p, size, 0, 1_000)  # nothing saved: no batch to weigh
        return mask.run_mask(p, planner, size)

    monkeypatch.setattr(pipeline, "run_mask", probe)
    with ws.Engine(model=model, store=tmp_path / "w.db", window=16_000) as e:
        s = e.session("shots")
        s.user("Book the cheapest flight from JFK to SEA on May 20 for user mia_li_3668.")
        for i in range(30):
            s.assistant(f"Step {i}: searching.", tool_calls=[
                {"id": f"c{i}", "name": "search_direct_flight",
                 "arguments": {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"}}])
            flights = [{"flight_number": f"HAT{i:03d}{k}", "price": 100 + i + k, "seats": 9 - k % 9} for k in range(12)]
            s.tool_result(f"c{i}", [{"type": "text", "text": json.dumps(flights)},
                                    {"type": "image", "url": f"https://shots.invalid/{i}.png"}])
            s.build()
    assert seen, "the request never reached the summary threshold"
    assert all(small == weighs and not big for small, big in seen)
