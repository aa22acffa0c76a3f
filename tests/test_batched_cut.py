"""The cost side of compaction: a batched cut with hysteresis and a cache breakpoint on the history's
stable head.

* Between two compactions a request only appends to the previous one (its messages are a prefix, by
  digest), so the provider's cached prefix holds; a rewrite happens only on a build that compacted.
* When a due summary does not pay for itself, the free cut (emergency truncation) waits for the
  high-water mark ``CompactionConfig.cut_at`` and then cuts in one batch.
* The pinned first request carries its own breakpoint, so a cut re-writes only what follows it: the
  previous request's prefix through the pinned request is read from cache after every cut.
* Never blind: the newest user or tool message is in every request.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from windowsmith.bench.metrics import is_blind
from windowsmith.bench.run import extends_previous
from windowsmith.cache import plan_cache
from windowsmith.compaction import CompactionConfig
from windowsmith.costs import call_cost, shared_prefix_tokens
from windowsmith.errors import ConfigError
from windowsmith.formats import get_renderer
from windowsmith.model import Message, Text, ToolSpec
from windowsmith.request import NeutralRequest, Segment

MODEL = "claude-sonnet-4-5"


def _req(n: int, head: int, *, tail: str | None = None, session: bool = False, last_user: bool = False
         ) -> NeutralRequest:
    msgs = [Message("user", (Text("the task"),))]
    for i in range(1, n):
        role = "assistant" if i % 2 else "user"
        msgs.append(Message(role, (Text(f"message {i}"),)))
    if last_user and msgs[-1].role != "user":
        msgs.append(Message("user", (Text("more"),)))
    return NeutralRequest(model=MODEL, system=(Segment("sys", "system"),),
                          session=(Segment("ctx", "instructions"),) if session else (),
                          tools=(ToolSpec("run", "run it", {"type": "object", "properties": {}}),),
                          messages=tuple(msgs), tail=tail, max_output_tokens=100, cache_key="k", head=head)


def test_plan_cache_puts_a_breakpoint_on_the_head_before_the_newest_message():
    plan = plan_cache(_req(5, 1))
    assert plan.head_index == 0 and plan.message_index == 4
    assert plan.count == 4  # tools, system, head, message
    # a full plan: the head outranks the tools breakpoint (the head's prefix covers the tools too)
    full = plan_cache(_req(5, 1, session=True))
    assert full.head_index == 0 and full.message_index == 4 and full.session and full.system and not full.tools
    # no head, or the head is the newest message itself: no extra breakpoint
    assert plan_cache(_req(5, 0)).head_index is None
    assert plan_cache(_req(1, 1)).head_index is None
    # the tail is prepended to the final user message: the head may not be that message
    prepended = plan_cache(_req(2, 2, tail="NOTE", last_user=True))
    assert prepended.head_index is None


def test_anthropic_marks_the_pinned_request_and_the_newest_message():
    req = _req(5, 1)
    req = NeutralRequest(**{**req.__dict__, "cache": plan_cache(req)})
    out = get_renderer("anthropic").render(req).request
    marked = [k for k, m in enumerate(out["messages"]) if any("cache_control" in b for b in m["content"])]
    assert marked == [0, len(out["messages"]) - 1]


def test_a_head_index_past_the_rendered_messages_is_refused():
    from windowsmith.request import CachePlan

    req = _req(3, 1)
    bad = NeutralRequest(**{**req.__dict__, "cache": CachePlan(message_index=2, head_index=7)})
    with pytest.raises(ConfigError, match="head_index=7"):
        get_renderer("anthropic").render(bad)


def test_cut_at_is_validated():
    with pytest.raises(ConfigError, match="cut_at"):
        CompactionConfig(cut_at=0)
    with pytest.raises(ConfigError, match="cut_at"):
        CompactionConfig(cut_at=1.5)


step = st.one_of(
    st.tuples(st.just("tool"), st.integers(20, 700)),
    st.tuples(st.just("user"), st.integers(5, 500)),  # an observation as user text (bash-in-text agents)
)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=15, max_size=40), pinned=st.integers(10, 1500),
       window=st.sampled_from([8000, 12000]), cut_at=st.sampled_from([0.85, 0.95]))
def test_between_cuts_requests_only_append_and_cuts_wait_for_the_high_water_mark(steps, pinned, window, cut_at):
    cfg = CompactionConfig(cut_at=cut_at)
    with tempfile.TemporaryDirectory() as tmp, ws.Engine(model=MODEL, store=Path(tmp) / "w.db", window=window,
                                                         compaction=cfg) as e:
        s = e.session("cut")
        s.system("You are a coding agent. " * 20)
        s.tools([ToolSpec("run", "run a command", {"type": "object", "properties": {"cmd": {"type": "string"}}})])
        s.user("the task: " + "fix the parser " * pinned)
        prev = None
        prev_head: int | None = None
        rewrites = cuts = forced = 0
        counter = s.counter("anthropic")
        # the most one step adds (its result or observation, and the call before it)
        step_max = max(counter.text(f"out{k} " * size) for k, (_, size) in enumerate(steps)) + 40
        for k, (kind, size) in enumerate(steps):
            s.assistant(f"step {k}", tool_calls=[{"id": f"c{k}", "name": "run", "arguments": {"cmd": f"ls {k}"}}]
                        if kind == "tool" else ())
            if kind == "tool":
                newest = s.tool_result(f"c{k}", f"out{k} " * size)
            else:
                newest = s.user(f"obs{k} " * size)
            before = s.state.messages[-2]
            pack = s.build()
            req = pack.neutral
            m = pack.manifest
            assert not is_blind(req, newest, True, before), f"build {k} lost the newest message"
            kinds = {a["kind"] for a in m.actions}
            for a in m.actions:
                if a["kind"] == "emergency" and not a["reason"].startswith(("the provider", "asked")):
                    # the free cut waits for the high-water mark (or the window itself)
                    assert a["tokens_before"] >= int(cut_at * m.available) - 1, a
            if prev is not None:
                if extends_previous(prev, req):
                    assert not kinds & {"emergency", "summary", "truncate", "mask"}, (k, kinds)
                else:
                    rewrites += 1
                    assert kinds, f"build {k} rewrote the previous request without compacting"
                    if prev_head is not None and "shrink" not in kinds:
                        # the pinned request is re-written only when it is itself shrunk (once, a `shrink`
                        # record: larger than its share of a full history); else the prefix through it is shared
                        assert shared_prefix_tokens(prev, req, s.counter("anthropic")) >= prev_head
                cuts += "emergency" in kinds
                # a tiny room: fixed part, pinned request and the newest unit leave the cut a band under its mark
                # smaller than two steps, so the next step or the one after must cut again (nothing else to drop)
                forced += any(a["kind"] == "emergency" and cut_at * m.available - a["tokens_after"] < 2 * step_max
                              for a in m.actions)
            prev = req
            plan = req.cache
            prev_head = None
            if plan.head_index is not None:
                # raw tokens through the head breakpoint, in cache order (as costs.call_cost counts them)
                prev_head = (counter.overheads.per_request + counter.raw_tools(req.tools)
                             + counter.raw_segment(req.system_text) + counter.raw_segment(req.session_text)
                             + sum(counter.raw_message(x) for x in req.messages[: plan.head_index + 1]))
        assert rewrites - forced <= max(1, len(steps) // 2) or cuts == 0


@pytest.mark.slow
def test_a_cut_reads_the_pinned_request_from_cache():
    """After a cut, the previous request's prefix through the pinned request is a cache read."""
    with tempfile.TemporaryDirectory() as tmp, ws.Engine(model=MODEL, store=Path(tmp) / "w.db", window=8000) as e:
        s = e.session("pin")
        s.system("You are a coding agent.")
        s.user("the task, with a long demonstration: " + "example step " * 700)
        prev = None
        counter = s.counter("anthropic")
        spec = e.spec
        cands = None
        saw_cut = False
        for k in range(40):
            s.user(f"observation {k}: " + "line of output " * 60)
            pack = s.build()
            s.assistant(f"next {k}")
            req = pack.neutral
            cost, cands = call_cost(spec, "anthropic", prev, req, counter, prompt_tokens=pack.tokens,
                                    prev_candidates=cands)
            if prev is not None and not extends_previous(prev, req):
                saw_cut = True
                pinned_raw = counter.raw_message(req.messages[0])
                assert cost.cache_read_tokens >= pinned_raw * counter.scale * 0.9, (k, cost)
            prev = req
        assert saw_cut


@given(n=st.integers(0, 8), head=st.integers(0, 9), tail=st.sampled_from([None, "NOTE"]),
       last_user=st.booleans(), session=st.booleans(), max_bp=st.integers(0, 4))
def test_plan_cache_head_breakpoint_invariants(n, head, tail, last_user, session, max_bp):
    req = _req(max(n, 1), head, tail=tail, session=session, last_user=last_user)
    plan = plan_cache(req, max_bp)
    if max_bp:
        assert plan.count <= max_bp
    if plan.head_index is not None:
        assert plan.head_index == req.head - 1
        assert plan.message_index is None or plan.head_index < plan.message_index
        if req.tail_mode() == "prepend":
            assert plan.head_index < len(req.messages) - 1  # never the message the tail is prepended to
    # the renderer accepts every plan the planner makes
    get_renderer("anthropic").render(NeutralRequest(**{**req.__dict__, "cache": plan}))


def test_a_policy_over_the_budget_does_not_cut_on_every_call():
    """Required layers that alone exceed the budget beside the reserved output (a long policy at 8K) lower the
    reservation; that lowered reservation is no part of the history, so it must not count as history over the
    line: the session appends between cuts (before: an emergency cut and a cache rewrite on every call)."""
    with tempfile.TemporaryDirectory() as tmp, ws.Engine(model=MODEL, store=Path(tmp) / "w.db", window=8000) as e:
        s = e.session("policy")
        s.system(" ".join(f"policy rule {i}: be accurate about plan {i}." for i in range(432)))
        s.user("hi, my phone has no service")
        counter = s.counter("anthropic")
        spec = e.spec
        prev = cands = None
        builds = rewrites = writes = 0
        for k in range(30):
            pack = s.build()
            req = pack.neutral
            assert any(a["layer"] == "output" for a in pack.manifest.actions)  # the reservation was lowered
            cost, cands = call_cost(spec, "anthropic", prev, req, counter, prompt_tokens=pack.tokens,
                                    prev_candidates=cands)
            if prev is not None:
                builds += 1
                rewrites += not extends_previous(prev, req)
                writes += cost.cache_write_tokens
                if not extends_previous(prev, req):
                    assert any(a["kind"] in ("emergency", "truncate") for a in pack.manifest.actions)
            prev = req
            s.assistant(f"let me check step {k} of the troubleshooting guide for you")
            s.user(f"ok, I did step {k}: " + "the screen shows the same status bar icon " * 8)
        assert rewrites <= builds // 3, (rewrites, builds)


def test_the_history_layers_own_cut_indexes_the_identifiers_it_dropped(tmp_path):
    """With compaction off the history layer still cuts to fit (a ``truncate`` record). Like the emergency stage's
    cut it now writes an index of the identifiers the dropped units named and the kept request lost, carried by the
    summary message; before, the ids of a dropped lookup were gone from every later request."""
    db = tmp_path / "w.db"
    with ws.Engine(model="gpt-4o", store=db, window=6_000, compaction=CompactionConfig(enabled=False)) as e:
        s = e.session("lookup")
        s.user("My order is stuck; please look it up and fix the shipping address.")
        acts: list = []
        for i in range(30):
            s.assistant(tool_calls=[ws.ToolCall(f"c{i}", "get_order", {"n": i})])
            s.tool_result(f"c{i}", f'{{"order_id": "ORD-{7100 + i}", "customer_id": "CUS-{4200 + i}", '
                                   f'"status": "pending"}}\n' + "note: nothing else changed on the order\n" * 30)
            pack = s.build()
            assert pack.tokens <= pack.manifest.available
            acts = [a for a in pack.manifest.actions if a["kind"] == "truncate"] or acts
        cuts = [c for c in s.state.compactions if c["type"] == "truncate"]
        assert len(cuts) >= 2 and all(c.get("index") for c in cuts), cuts
        first, carry, *kept = pack.neutral.messages  # the pinned request, the summary message, the kept units
        assert first.text.startswith("My order is stuck") and "identifiers the dropped history named" in carry.text
        kept_text = " ".join(str(c) for m in kept for c in m.content)
        for k in ("7100", "4200"):  # the oldest lookup's ids: dropped with it, named by the index alone
            assert k in cuts[-1]["index"] and k in carry.text and k not in kept_text
        # the manifest of the build that cut says so
        assert acts[0]["detail"]["index"] == cuts[-1]["index"] and "index of" in acts[0]["reason"]
    # the log rebuilds the same request: the index is in the record, not only in the pack
    with ws.Engine(model="gpt-4o", store=db, window=6_000, compaction=CompactionConfig(enabled=False)) as e:
        again = e.session("lookup").build()
    assert again.neutral.messages[1].text == carry.text
