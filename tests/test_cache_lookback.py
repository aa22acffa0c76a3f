"""Anthropic's lookback: a request reads a cached prefix only at one of its breakpoints or at most 20 content blocks
before one (``cache.LOOKBACK_BLOCKS``; ``costs.call_cost`` prices it so). The message breakpoint moves on every call;
after a turn of many parallel tool calls and results (more blocks than that), it no longer finds the previous
request's, so one more breakpoint, the anchor (``CachePlan.anchor_index``), ends what the previous request sent."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

import windowsmith as ws
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.strategies import make_strategy
from windowsmith.cache import LOOKBACK_BLOCKS, message_blocks, plan_cache
from windowsmith.costs import call_cost
from windowsmith.formats import get_renderer

MODEL = "claude-sonnet-4-5"


def parallel(s: ws.Session, turn: int, width: int) -> None:
    """One assistant message of ``width`` parallel lookups, then their results."""
    calls = [ws.ToolCall(f"t{turn}c{k}", "get_item", {"item_id": f"HAT{turn * 100 + k}"}) for k in range(width)]
    s.add(ws.Message("assistant", (ws.Text(f"Looking up {width} items."), *calls)))
    for c in calls:
        s.tool_result(c.id, json.dumps({"item_id": c.arguments["item_id"], "note": "in stock " * 20}))


def session(e: ws.Engine, widths: list[int]) -> tuple[ws.Session, list[ws.NeutralRequest]]:
    s = e.session("s")
    s.system("You are a warehouse agent. Check every item the customer names before answering. " * 60)
    s.user("Please check the items of order #W2378156.")
    reqs = []
    for turn, w in enumerate(widths):
        parallel(s, turn, w)
        reqs.append(s.build().neutral)
    return s, reqs


@pytest.mark.parametrize("width", [3, 12])
def test_a_wide_turn_gets_an_anchor_at_the_end_of_the_previous_request(tmp_path, width):
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=200_000) as e:
        s, reqs = session(e, [2, 2, width])
        prev, cur = reqs[-2], reqs[-1]
        blocks = sum(message_blocks(m) for m in cur.messages[len(prev.messages):])
        assert blocks == 2 * width + 1
        counter = s.counter("anthropic")
        cost, _ = call_cost(e.spec, "anthropic", prev, cur, counter, prompt_tokens=counter.request(cur))
        whole = counter.request(replace(prev, tail=None))
        assert cost.cache_read_tokens >= whole - 16  # everything the previous request sent, read from cache
        if blocks <= LOOKBACK_BLOCKS:
            assert cur.cache.anchor_index is None  # the message breakpoint finds the previous one
            return
        assert cur.cache.anchor_index == len(prev.messages) - 1
        assert cur.cache.names[-2:] == ("anchor", "message") and cur.cache.count <= e.spec.max_breakpoints
        body = get_renderer("anthropic").render(cur).request
        assert len(re.findall("cache_control", json.dumps(body))) == cur.cache.count
        anchor = body["messages"][cur.cache.anchor_index]
        assert "cache_control" in anchor["content"][-1]
        # planned without the anchor (a peer's plan) the request finds only the system prompt's breakpoint
        bare = replace(cur, cache=replace(cur.cache, anchor_index=None))
        without, _ = call_cost(e.spec, "anthropic", prev, bare, counter, prompt_tokens=counter.request(cur))
        history = whole - counter.request(replace(prev, messages=prev.messages[:1], tail=None))
        assert history > 400 and without.cache_read_tokens <= cost.cache_read_tokens - history + 16
        assert without.usd > cost.usd


def test_the_lookback_is_priced_from_each_breakpoint_of_the_request():
    """``call_cost`` on hand-made plans: the previous request's breakpoint is read when this one has a breakpoint at
    most ``LOOKBACK_BLOCKS`` blocks after it, and not when the nearest is further."""
    from windowsmith.registry import load_registry
    from windowsmith.request import CachePlan, NeutralRequest
    from windowsmith.tokens import TokenCounter

    mspec = load_registry().get(MODEL)
    counter = TokenCounter(mspec.tokenizer, "anthropic", mspec.token_factor, thinking=mspec.thinking_kept)
    text = "word " * 400  # each message well over the cacheable minimum together
    msgs = [ws.Message("user" if i % 2 == 0 else "assistant", (ws.Text(f"{i} {text}"),)) for i in range(40)]

    def req(n: int, at: int | None = None) -> NeutralRequest:
        r = NeutralRequest(model=MODEL, system=(), session=(), tools=(), messages=tuple(msgs[:n]), tail=None,
                           max_output_tokens=1000, cache_key="k")
        return replace(r, cache=CachePlan(message_index=n - 1, anchor_index=at))

    prev = req(10)
    for n, read in ((10 + LOOKBACK_BLOCKS, True), (11 + LOOKBACK_BLOCKS, False)):
        cur = req(n)
        cost, _ = call_cost(mspec, "anthropic", prev, cur, counter, prompt_tokens=counter.request(cur))
        assert (cost.cache_read_tokens > 0) is read, n
    cur = req(11 + LOOKBACK_BLOCKS, at=9)  # an anchor at the previous request's last message
    cost, _ = call_cost(mspec, "anthropic", prev, cur, counter, prompt_tokens=counter.request(cur))
    assert cost.cache_read_tokens >= counter.request(prev) - 16


def test_plan_cache_ranks_the_anchor_after_the_message_breakpoint_when_breakpoints_are_few(tmp_path):
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=200_000) as e:
        _, reqs = session(e, [2, 12])
        cur = reqs[-1]
        assert plan_cache(cur, 2).names == ("anchor", "message")
        assert plan_cache(cur, 1).names == ("message",)
        assert plan_cache(cur, 0).anchor_index is not None  # implicit caching: the plan is for accounting only
        # the bench's peers plan as LangChain's caching middleware ships: system, tools, the newest message
        peer = make_strategy("sticky", BenchConfig.make(e.spec, 200_000))
        try:
            peer.start("r", cur.system_text, ())
            assert peer.request(cur.messages).cache.names == ("system", "message")
        finally:
            peer.close()


def test_in_a_longer_session_the_anchor_saves_most_of_the_wide_turns_price(tmp_path):
    """The README's figure: ten turns of four lookups, then one of twelve (a 6,240-token request): with the anchor the
    call reads the whole history and writes the new turn ($0.0060); without it, it reads only the system prompt and
    writes everything else again ($0.0197)."""
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=200_000) as e:
        s, reqs = session(e, [4] * 10 + [12])
        prev, cur = reqs[-2], reqs[-1]
        counter = s.counter("anthropic")
        tokens = counter.request(cur)
        cost, _ = call_cost(e.spec, "anthropic", prev, cur, counter, prompt_tokens=tokens)
        bare = replace(cur, cache=replace(cur.cache, anchor_index=None))
        without, _ = call_cost(e.spec, "anthropic", prev, bare, counter, prompt_tokens=tokens)
        assert tokens == 6240 and cur.cache.anchor_index is not None
        assert (cost.cache_read_tokens, cost.cache_write_tokens) == (5041, 1198)
        assert (without.cache_read_tokens, without.cache_write_tokens) == (1062, 5177)
        assert round(cost.usd, 4) == 0.0060 and round(without.usd, 4) == 0.0197
