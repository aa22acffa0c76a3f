"""A compaction does not pay for the cache rewrite the provider makes anyway (``economics.forced_rewrite_from``):
under Anthropic's thinking rule a user message strips the thinking of the replies before it, so the cache holds
nothing from the first of those the previous request sent."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from conftest import DATA, lookup, needs_data, replay_strategies, thought, with_screenshots
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import prepare
from windowsmith.compaction import economics, mask
from windowsmith.costs import shared_prefix_tokens
from windowsmith.registry import load_registry
from windowsmith.traces import load_traces


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "gpt-4o"])
def test_the_rewrite_a_user_message_forces_starts_at_the_first_reply_the_cache_held_with_its_thinking(tmp_path, model):
    """The unit it names is where the billed cache prefix of two consecutive requests ends (costs.shared_prefix_tokens,
    the yardstick's pricing); with results alone since the last reply, or a provider that keeps no such rule, none."""
    with ws.Engine(model=model, store=tmp_path / "w.db", window=64_000) as e:
        s = e.session("s")
        s.user("Cancel my reservation booked for May 17.")
        lookup(s, 1)
        lookup(s, 2)
        counter = s.counter(e.spec.default_format)
        assert economics.forced_rewrite_from(s.state, counter) is None  # only results since the last reply
        prev = s.build().neutral
        s.add(ws.Message("assistant", (thought("Both reservations are on May 17; ask which one. " * 4),
                                       ws.Text("Which of R00001 and R00002 should I cancel?"))))
        s.user("The one to SEA, R00002.")
        cur = s.build().neutral
        forced = economics.forced_rewrite_from(s.state, counter)
        if model == "gpt-4o":
            assert forced is None and shared_prefix_tokens(prev, cur, counter) > 0
            return
        assert forced == 1  # the first lookup: its thinking was sent last time and is stripped now
        # the billed shared prefix ends exactly before that unit's message: the pinned request and nothing more
        head = shared_prefix_tokens(prev, replace(cur, messages=cur.messages[:1]), counter)
        assert shared_prefix_tokens(prev, cur, counter) == head
        lookup(s, 3)  # a lookup after the user's answer: nothing new is stripped
        assert economics.forced_rewrite_from(s.state, counter) is None



@needs_data
def test_a_batch_runs_where_the_cache_breaks_anyway_and_the_run_costs_less_than_the_cut(tmp_path, monkeypatch):
    """A real airline run of Claude with thinking (tau2-bench, dev) with a screenshot in every result at 32K: once the
    customer answers, the cache is re-written from the agent's first lookup since the last answer, so a mask batch
    before it re-writes only the part between its first edit and that lookup. Priced as if it broke the cache itself,
    the batch waited and the run cost $0.299 against `sticky`'s $0.283 (a batch ran a call later, re-writing
    everything again); now it runs at the break and the run costs $0.241, less than `sticky`, every target kept."""
    path = next((DATA / "tau2-bench").glob("claude-sonnet-4-5_airline*"))
    run = next(t for t in load_traces(path) if t.id.endswith("eddfda46-ca79-482b-a91b-74f44e6115eb"))
    run = prepare(replace(run, messages=with_screenshots(run.messages)))
    cfg = BenchConfig.make(load_registry().get("claude-sonnet-4-5"), 32_000)
    forced: list[int] = []
    masked: list[bool] = []
    at_break: list[bool] = []  # per pass that folded: whether the call re-wrote the cache anyway

    def spy(state: Any, counter: Any) -> int | None:
        f = economics.forced_rewrite_from(state, counter)
        if f is not None:
            forced.append(f)
        return f

    real = mask.run_mask

    def watch(p: Any, planner: Any, size: int) -> int:
        before = len(forced)
        out = real(p, planner, size)
        masked.append(out < size)
        if out < size:
            at_break.append(len(forced) > before)
        return out

    monkeypatch.setattr(mask, "forced_rewrite_from", spy)
    from windowsmith.compaction import pipeline
    monkeypatch.setattr(pipeline, "run_mask", watch)
    got = replay_strategies(run, cfg, ("windowsmith", "sticky"), tmp_path)
    ws_run, sticky = got["windowsmith"], got["sticky"]
    assert ws_run.error is None and sticky.error is None
    assert forced and any(masked)
    assert any(at_break), at_break  # a batch ran on a call whose cache broke anyway
    assert ws_run.cost_usd < sticky.cost_usd
    assert ws_run.strict_hits == ws_run.targets >= sticky.strict_hits
    assert ws_run.over_window == 0 and ws_run.blind_calls == 0


#: one step of a conversation: a lookup (with thinking or not), or a reply (with thinking or not) and the user's answer
step = st.tuples(st.sampled_from(["lookup", "reply"]), st.booleans())


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=14))
def test_the_forced_rewrite_is_where_the_billed_prefix_ends_in_any_conversation(tmp_path_factory, steps):
    """Property: in any sequence of lookups and replies, with thinking or without, a build right after the previous
    one shares with it (``costs.shared_prefix_tokens``, the yardstick's pricing) exactly the messages before the
    unit ``forced_rewrite_from`` names (its first message, by ``SessionState.unit_start``), or, with none named, every
    message the previous request sent (nothing is compacted at this window: the view is the log)."""
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path_factory.mktemp("p") / "w.db", window=200_000) as e:
        s = e.session("p")
        s.user("Help me with my reservations.")
        counter = s.counter("anthropic")
        prev = s.build().neutral
        for k, (kind, think) in enumerate(steps):
            if kind == "lookup":
                lookup(s, k, think=think)
            else:
                s.add(ws.Message("assistant", (thought(f"Answer the customer, step {k}. " * 4), ws.Text(f"Done {k}."))
                                 if think else (ws.Text(f"Done {k}."),)))
                s.user(f"Thanks, next question {k}.")
            forced = economics.forced_rewrite_from(s.state, counter)
            cur = s.build().neutral
            assert len(cur.messages) == len(s.state.messages)  # nothing compacted
            stable = len(prev.messages) - (prev.tail_mode() == "prepend")
            upto = stable if forced is None else s.state.unit_start[forced]  # the unit's first message
            assert upto <= stable
            assert shared_prefix_tokens(prev, cur, counter) == shared_prefix_tokens(
                prev, replace(cur, messages=cur.messages[:upto]), counter)
            if forced is not None:  # and the unit's first message is not shared
                assert shared_prefix_tokens(prev, cur, counter) < shared_prefix_tokens(
                    prev, replace(prev, messages=prev.messages[:upto + 1]), counter)
            prev = cur
