"""The turn breakpoint (``NeutralRequest.turn``, marked by the history layer; ``cache.plan_cache``): where the provider strips the thinking of the replies before the newest
user message (Claude before Opus 4.5), a cache breakpoint ends that message while replies after it carry thinking,
so the user's next message re-writes only those replies, not the whole history before them."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

import windowsmith as ws
from conftest import DATA, lookup, needs_data, replay_strategies, thought
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import prepare
from windowsmith.cache import plan_cache
from windowsmith.costs import call_cost
from windowsmith.formats import get_renderer
from windowsmith.registry import load_registry
from windowsmith.tokens import TokenCounter
from windowsmith.traces import load_traces


def answer(s: ws.Session, text: str, *, think: bool = True) -> None:
    s.add(ws.Message("assistant", (thought("Tell the customer what I found. " * 10), ws.Text(text)) if think
                     else (ws.Text(text),)))


def conversation(s: ws.Session, *, think: bool = True) -> None:
    s.user("I want to cancel one of my reservations, R00001 or R00002.")
    lookup(s, 1, think=think, flights=20)
    lookup(s, 2, think=think, flights=20)
    answer(s, "Both are to SEA. Which one should I cancel?", think=think)
    s.user("R00002, the later one.")
    lookup(s, 3, think=think, flights=20)


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "gpt-4o"])
def test_the_breakpoint_ends_the_newest_user_message_where_the_provider_strips_thinking(tmp_path, model):
    with ws.Engine(model=model, store=tmp_path / "w.db", window=64_000) as e:
        s = e.session("s")
        conversation(s)
        req = s.build().neutral
        users = [i for i, m in enumerate(req.messages) if m.role == "user" and not m.tool_results]
        if model == "gpt-4o":  # no thinking rule, no breakpoints: the plan is for accounting
            assert req.cache.turn_index is None
            return
        assert req.cache.turn_index == users[-1] and req.messages[users[-1]].text == "R00002, the later one."
        assert "turn" in req.cache.names and len(req.cache.names) <= e.spec.max_breakpoints
        body = get_renderer("anthropic").render(req).request
        marked = [b.get("text") or b.get("type") for m in body["messages"] for b in m["content"] if "cache_control" in b]
        assert "R00002, the later one." in marked  # the renderer marks the message's last block
        assert len(re.findall("cache_control", json.dumps(body))) <= 4


def test_no_turn_breakpoint_without_thinking_after_the_user_message_or_in_a_peers_request(tmp_path):
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=64_000) as e:
        s = e.session("plain")
        conversation(s, think=False)
        assert s.build().neutral.cache.turn_index is None
        t = e.session("thinking")
        conversation(t)
        req = t.build().neutral
        counter = t.counter("anthropic")
        # the history layer's incremental counts name the message the provider's rule names on the whole request
        assert counter.stripped_before(req.messages) == req.cache.turn_index is not None
        peer = replace(req, turn=0)  # a request the bench builds for a peer: no turn marked
        assert plan_cache(peer, e.spec.max_breakpoints).turn_index is None
        t.user("Thanks, that is all.")  # the newest message is the user's: nothing after it to strip yet, but it
        # strips the replies before it, so the cache holds the history through the previous user message: the previous
        # request's turn breakpoint stays one more request (its message breakpoint may be too far after it to find it)
        assert t.build().neutral.cache.turn_index == req.cache.turn_index
        t.add(ws.Message("assistant", (ws.Text("You are welcome."),)))
        t.user("Bye.")  # no reply since the previous user message carried thinking: nothing stripped, no turn
        assert t.build().neutral.cache.turn_index is None


def test_the_users_next_message_reads_the_history_through_the_previous_one(tmp_path):
    """Priced as the yardstick prices it (``costs.call_cost``): the request after the customer's answer reads from cache
    everything through the customer's previous message; planned without the turn breakpoint (what a peer sends) it
    reads only what the previous request's earlier breakpoints cover, and writes the rest again."""
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=64_000) as e:
        s = e.session("s")
        conversation(s)
        answer(s, "R00002 is cancelled.")
        counter = s.counter("anthropic")
        spec = e.spec
        prev = s.build().neutral
        s.user("Can you also check R00004?")
        cur = s.build().neutral
        at = prev.cache.turn_index
        assert at is not None
        cost, _ = call_cost(spec, "anthropic", prev, cur, counter, prompt_tokens=counter.request(cur))
        head = counter.request(replace(cur, messages=cur.messages[:at + 1], tail=None))
        assert cost.cache_read_tokens >= head - 16  # (per-request overheads aside)
        bare = [replace(r, turn=0, cache=plan_cache(replace(r, turn=0), spec.max_breakpoints)) for r in (prev, cur)]
        without, _ = call_cost(spec, "anthropic", bare[0], bare[1], counter, prompt_tokens=counter.request(cur))
        assert without.cache_read_tokens < cost.cache_read_tokens
        assert without.cache_write_tokens > cost.cache_write_tokens
        assert without.usd > cost.usd


def test_a_build_marks_the_turn_without_walking_the_session(tmp_path, monkeypatch):
    """The history layer marks the turn from the counts it keeps as the log grows (``HistoryLayer._turn_meta``): a
    build of a thinking agent's session does not walk its messages for the user's newest one (the provider's rule,
    ``TokenCounter.stripped_before``, is O(messages): a coding agent's one task message is at the start)."""
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=64_000) as e:
        s = e.session("s")
        conversation(s)
        s.build()
        walks: list[int] = []
        real = TokenCounter.stripped_before

        def counted(self: TokenCounter, messages: object) -> int:
            walks.append(1)
            return real(self, messages)  # type: ignore[arg-type]

        monkeypatch.setattr(TokenCounter, "stripped_before", counted)
        lookup(s, 4, flights=20)
        req = s.build().neutral
        assert req.cache.turn_index is not None and not walks


@pytest.mark.slow
@needs_data
def test_a_real_conversation_with_thinking_costs_less_than_the_full_history_it_keeps(tmp_path):
    """A real airline run of Claude with thinking (tau2-bench, dev) at 32K, where nothing needs compacting: every
    answer of the customer re-wrote the whole history after the system prompt, so windowsmith cost what `full` costs
    ($0.1148); with the turn breakpoint each answer re-writes only the replies since the previous one ($0.1056), and
    every target is kept."""
    path = next((DATA / "tau2-bench").glob("claude-sonnet-4-5_airline*"))
    run = prepare(next(t for t in load_traces(path) if t.id.endswith("eddfda46-ca79-482b-a91b-74f44e6115eb")))
    cfg = BenchConfig.make(load_registry().get("claude-sonnet-4-5"), 32_000)
    got = replay_strategies(run, cfg, ("windowsmith", "full"), tmp_path)
    ws_run, full = got["windowsmith"], got["full"]
    assert ws_run.strict == full.strict == ws_run.recall_calls  # every target of every call
    assert ws_run.cost_usd < full.cost_usd * 0.95
    assert ws_run.cache_write_tokens < full.cache_write_tokens


def test_after_many_thinking_tool_calls_the_users_answer_reads_the_history_through_their_previous_message(tmp_path):
    """Anthropic finds a cached prefix only at a breakpoint or up to 20 blocks before one (``cache.LOOKBACK_BLOCKS``,
    priced so by ``costs.call_cost``). Twelve thinking tool calls since the customer's previous message are 36 blocks: the
    request after the customer's answer, whose message breakpoint is past them, keeps the previous turn breakpoint and
    reads the history through the previous message; without it, it would read only the system prompt's prefix."""
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=200_000) as e:
        s = e.session("s")
        s.system("You are an airline agent. " * 300)
        s.user("Hi, I need help with my reservations.")
        answer(s, "Sure, what can I do for you?")
        s.user("I want to cancel one of my reservations, R00001 or R00002.")
        for i in range(12):
            lookup(s, i, flights=5)
        answer(s, "Which one should I cancel?")
        counter = s.counter("anthropic")
        prev = s.build().neutral
        s.user("R00002, the later one.")
        cur = s.build().neutral
        assert cur.cache.turn_index == prev.cache.turn_index == 2  # the customer's previous message
        cost, _ = call_cost(e.spec, "anthropic", prev, cur, counter, prompt_tokens=counter.request(cur))
        head = counter.request(replace(cur, messages=cur.messages[:3], tail=None))
        assert cost.cache_read_tokens >= head - 16
        bare = replace(cur, turn=0, cache=plan_cache(replace(cur, turn=0), e.spec.max_breakpoints))
        without, _ = call_cost(e.spec, "anthropic", prev, bare, counter, prompt_tokens=counter.request(cur))
        assert without.cache_read_tokens < head - 16 and without.usd > cost.usd
