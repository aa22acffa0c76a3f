"""Deferred cuts: where tools and system leave little room, the free cut comes every few calls, and a cut that
rewrote the summary message (work log, identifier index, transcript reference) wrote all of it to the cache again.
At most ``carry_refresh - 1`` cuts in a row leave it byte for byte (an ``EmergencyRecord`` with ``deferred``); a
cache breakpoint ends it (``CachePlan.carry_index``), so such a cut re-writes only what follows it; a small pending
message after it names what the span lost and its transcript; the next cut that refreshes the summary message takes
the deferred spans into its work log and index."""

from __future__ import annotations

import itertools
import re

import pytest

import windowsmith as ws
from conftest import item_lookup_session
from windowsmith.cache import plan_cache
from windowsmith.compaction import CompactionConfig
from windowsmith.costs import call_cost
from windowsmith.errors import ConfigError
from windowsmith.formats import get_renderer
from windowsmith.model import Message, Text, ToolSpec
from windowsmith.records import EmergencyRecord, TruncateRecord
from windowsmith.registry import load_registry
from windowsmith.request import NeutralRequest, Segment
from windowsmith.stand_ins import PENDING_HEAD

MODEL = "claude-sonnet-4-5"
POLICY = "Policy rule: always verify the order id and the customer's identity before any refund. " * 200


def _session(e: ws.Engine, turns: int = 60) -> tuple[ws.Session, list[ws.Pack]]:
    """A long policy leaves little room at 8K: emergency cuts come every few calls."""
    return item_lookup_session(e, "deferred", POLICY, turns)


def _emergencies(s: ws.Session) -> list[EmergencyRecord]:
    return [r for r in s.state.records if isinstance(r, EmergencyRecord)]


def test_record_round_trips_and_older_logs_have_no_deferred_flag():
    rec = EmergencyRecord(1, 9, 10, (), "abc", (), "why", index=("HAT170",), deferred=True)
    d = rec.to_dict()
    assert d["deferred"] is True and EmergencyRecord.from_dict(d) == rec
    plain = EmergencyRecord(1, 9, 10, ("[turn 1] x",), None, (), "why")
    assert "deferred" not in plain.to_dict()  # the chain of older logs is unchanged
    assert EmergencyRecord.from_dict(plain.to_dict()).deferred is False


def test_config_bounds_carry_refresh():
    for bad in (0, 17):
        with pytest.raises(ConfigError, match="carry_refresh"):
            CompactionConfig(carry_refresh=bad)


def test_a_deferred_cut_keeps_the_summary_message_and_reads_it_from_cache(tmp_path):
    spec = load_registry(None).get(MODEL)
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=8000) as e:
        s, packs = _session(e)
        recs = _emergencies(s)
        flags = [r.deferred for r in recs]
        assert True in flags and False in flags
        assert flags[0] is False  # nothing to keep before the first cut
        runs = "".join("d" if f else "r" for f in flags).split("r")
        assert max(len(x) for x in runs) <= CompactionConfig().carry_refresh - 1  # then a cut refreshes it
        counter = s.counter("anthropic")
        checked = 0
        for prev, cur in itertools.pairwise(packs):
            acts = [a for a in cur.manifest.actions if a["kind"] == "emergency"]
            if not acts or "summary message as it was" not in acts[0]["reason"]:
                continue
            rec = next(r for r in recs if r.keep_from_seq == acts[0]["detail"]["keep_from_seq"])
            assert rec.deferred and rec.work_log == () and rec.transcript
            req, before = cur.neutral, prev.neutral
            k = req.carry
            assert k >= 2 and req.cache.carry_index == k - 1 and req.cache.head_index == req.head - 1
            # the pinned request and the summary message are the previous request's, byte for byte
            assert [m.digest for m in req.messages[:k]] == [m.digest for m in before.messages[:k]]
            pending = req.messages[k].text
            assert pending.startswith(PENDING_HEAD) and f"artifact://{rec.transcript}" in pending
            assert all(x in pending for x in rec.index)
            # the cut reads the prefix through the summary message from cache and writes only what follows
            through = counter.overheads.per_request + counter.raw_tools(req.tools) + counter.raw_segment(req.system_text) \
                + sum(counter.raw_message(m) for m in req.messages[:k])
            cost, _ = call_cost(spec, "anthropic", before, req, counter, prompt_tokens=cur.tokens)
            assert cost.cache_read_tokens >= int(through * counter.scale)
            checked += 1
        assert checked >= 2


def test_the_refreshing_cut_takes_the_deferred_span_into_the_work_log(tmp_path):
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=8000) as e:
        s, packs = _session(e)
        recs = _emergencies(s)
        pairs = [(a, b) for a, b in itertools.pairwise(recs) if a.deferred and not b.deferred]
        assert pairs
        # the free cut, not the history layer's fit, takes the history: no span leaves without a work-log line
        assert not any(isinstance(r, TruncateRecord) for r in s.state.records)
        for deferred, refresh in pairs:
            # the work log names every exchange of the deferred span (the items it looked up); where not one line
            # fits the log's cap (this policy leaves the history a tiny room), the index names them instead
            # (newest first, within the index's budget)
            span = s.state.span_messages(deferred.first_seq, deferred.last_seq)
            order = [c.arguments["item_id"] for _, m in span for c in m.tool_calls]
            items = set(order)
            if refresh.work_log:
                assert items and all(any(x in line for line in refresh.work_log) for x in items)
            else:
                assert order and order[-1] in refresh.index and len(items & set(refresh.index)) >= len(items) // 2
            # the refresh's transcript chains to the deferred span's, so the whole history stays reachable
            text = e.artifacts.get(refresh.transcript).decode()
            assert f"[earlier history: artifact://{deferred.transcript}]" in text
        # after a refresh no pending message is left
        last = packs[-1].neutral
        if not recs[-1].deferred:
            assert not any(m.text.startswith(PENDING_HEAD) for m in last.messages)


def test_carry_refresh_one_rewrites_at_every_cut(tmp_path):
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=8000,
                   compaction=CompactionConfig(carry_refresh=1)) as e:
        s, packs = _session(e)
        recs = _emergencies(s)
        assert len(recs) >= 3 and not any(r.deferred for r in recs)
        assert not any(PENDING_HEAD in m.text for p in packs for m in p.neutral.messages)


def test_a_resumed_session_builds_the_same_request_after_a_deferred_cut(tmp_path):
    db = tmp_path / "w.db"
    with ws.Engine(model=MODEL, store=db, window=8000) as e:
        s, packs = _session(e, turns=24)
        assert any(r.deferred for r in _emergencies(s))
        sid = s.id
        live = packs[-1]
    with ws.Engine(model=MODEL, store=db, window=8000) as e2:
        again = e2.session(sid).build()
        assert again.manifest.checksum == live.manifest.checksum
        assert not any(a["kind"] == "emergency" for a in again.manifest.actions)


def _req(carry: int, head: int = 1) -> NeutralRequest:
    msgs = [Message("user", (Text("the task"),)), Message("user", (Text("[work log] …"),))]
    for i in range(2, 6):
        msgs.append(Message("assistant" if i % 2 == 0 else "user", (Text(f"message {i}"),)))
    return NeutralRequest(model=MODEL, system=(Segment("sys", "system"),), session=(),
                          tools=(ToolSpec("run", "run it", {"type": "object", "properties": {}}),),
                          messages=tuple(msgs), tail=None, max_output_tokens=100, cache_key="k", head=head, carry=carry)


def test_plan_cache_ends_the_carry_with_a_breakpoint_and_anthropic_marks_it():
    plan = plan_cache(_req(2))
    # message, head, carry and system: the tools' breakpoint goes (the system's prefix covers the tools)
    assert (plan.message_index, plan.head_index, plan.carry_index) == (5, 0, 1)
    assert plan.system and not plan.tools and plan.count == 4
    assert plan_cache(_req(0)).carry_index is None and plan_cache(_req(0)).tools  # no carry: as before
    assert plan_cache(_req(1)).carry_index is None  # the carry must follow the head
    assert plan_cache(_req(2, head=0)).carry_index == 1  # no pinned request: the carry leads the history
    req = _req(2)
    req = NeutralRequest(**{**req.__dict__, "cache": plan_cache(req)})
    out = get_renderer("anthropic").render(req).request
    blocks = [b for m in out["messages"] for b in m["content"]]
    marked = [b["text"] for b in blocks if "cache_control" in b]
    assert marked == ["the task", "[work log] …", "message 5"]
    assert sum(1 for t in out["tools"] if "cache_control" in t) == 0
    assert len(re.findall("cache_control", str(out))) == 4


def test_where_no_work_log_line_fits_its_cap_the_index_takes_it(tmp_path):
    # the policy leaves the history a tiny room: the work log's cap is scaled down (91 tokens) under one fold line
    # of an exchange; the summary message used to carry that line anyway (the log kept at least one) and an index of what
    # the few tokens left allowed; now it carries no line and the index gets the log's cap too
    from windowsmith.compaction.port import carry_caps_of

    # (without the index's own floor, ``index_floor``, which alone gives it more than the two caps here)
    cfg = CompactionConfig(index_floor=0)
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=8000, compaction=cfg) as e:
        s, packs = _session(e, turns=24)
        first = _emergencies(s)[0]
        counter = s.counter("anthropic")
        log_cap, index_cap = carry_caps_of(cfg, counter, s.state, packs[-1].manifest.available)
        assert 0 < log_cap < 120
        assert first.work_log == ()
        used = sum(counter.raw_text(x) + 1 for x in first.index)
        assert index_cap < used <= index_cap + log_cap + 2
        # the items the cut took, newest first, are named by the index the summary message carries
        span = s.state.span_messages(first.first_seq, first.last_seq)
        order = [c.arguments["item_id"] for _, m in span for c in m.tool_calls]
        assert order[-1] == first.index[0] and order[-2] in first.index
        pack = next(p for p in packs if any(a["kind"] == "emergency" for a in p.manifest.actions))
        assert any(order[-1] in m.text and "identifiers" in m.text for m in pack.neutral.messages)
