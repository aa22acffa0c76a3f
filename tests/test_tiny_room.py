"""Tiny rooms: where tools and system leave the history less than ``TINY_ROOM`` of the available budget, what every
request after a cut carries besides the kept messages (the pinned request's view, the work log and the index) shrinks
in proportion to the room (``budget.room_factor``), so the free cut has a band to wait on and every call reads less."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import windowsmith as ws
from conftest import item_lookup_session
from test_shrink import issue_text
from windowsmith.budget import TINY_ROOM, room_factor
from windowsmith.compaction import CompactionConfig
from windowsmith.layers.builtin import HistoryLayer, default_layers
from windowsmith.model import Message, ToolCall
from windowsmith.records import EmergencyRecord, ShrinkRecord, render_index


@given(room=st.floats(0, 1e6), other=st.floats(0, 1e6), available=st.floats(1, 1e6))
def test_room_factor_is_one_from_the_tiny_share_up_and_proportional_below(room, other, available):
    f = room_factor(room, available)
    assert 0.0 <= f <= 1.0
    if room >= TINY_ROOM * available:
        assert f == 1.0
    else:
        assert abs(f - room / (TINY_ROOM * available)) < 1e-9
    if room <= other:  # more room never carries less
        assert f <= room_factor(other, available)


def test_room_factor_degenerate_budgets_keep_the_usual_share():
    assert room_factor(100, 0) == 1.0 and room_factor(100, 1000, tiny=0) == 1.0
    assert room_factor(-5, 1000) == 0.0


def test_the_pinned_share_scales_with_the_history_room_only_where_it_is_tiny():
    h = HistoryLayer()
    assert h.pinned_share_for(3000, 5840) == h.pinned_share  # over half the budget: the usual share
    assert h.pinned_share_for(1460, 5840) == h.pinned_share / 2  # a quarter of it: half the share
    assert h.pinned_share_for(1460, 0) == h.pinned_share  # no budget known: the usual share
    # a request of several messages (a demonstration, then the task): a second share, scaled alike
    assert h.pinned_share_for(1460, 5840, several=True) == h.pinned_share


class PlainShareHistory(HistoryLayer):
    """The history layer with the pinned request's share not scaled to the room (the behaviour before)."""

    def pinned_share_for(self, cap: int, available: int, *, several: bool = False) -> float:
        return self.pinned_share * (2 if several else 1)


def _plain_layers() -> list:
    return [PlainShareHistory() if isinstance(layer, HistoryLayer) else layer for layer in default_layers()]


def _pinned_view(tmp_path, name: str, system: str, layers=None) -> tuple[list[tuple[int, int]], int, str]:
    """The shrink entries of the pinned request (tokens before, after) and its view's raw tokens in the last request,
    over an agent session whose issue is larger than its share."""
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / f"{name}.db", window=8000, layers=layers) as e:
        s = e.session(name)
        s.system(system)
        s.user(issue_text(80))
        for i in range(30):
            s.add(Message("assistant", (ToolCall(f"c{i}", "bash", {"command": f"cat src/f{i}.py"}),)))
            s.tool_result(f"c{i}", f"def f{i}():\n    return {i}\n" * 20)
            pack = s.build()
            assert pack.manifest.tokens <= pack.manifest.available
        first_seq = s.state.units[0].first_seq
        entries = [(en.tokens_before, en.tokens_after) for r in s.state.records if isinstance(r, ShrinkRecord)
                   for en in r.entries if en.seq == first_seq]
        head = pack.neutral.messages[0]
        return entries, s.counter(pack.manifest.format).raw_message(head), head.text


@pytest.mark.slow
def test_a_tiny_room_shrinks_the_pinned_request_further(tmp_path):
    """Tools and system (about 3,650 tokens) leave the history about a third of the 5,840 available: the pinned
    request's view is cut to its share of the history scaled by that room (about 0.7 of it), not to the full 20%."""
    policy = "Policy: verify ids before edits. " * 520
    tiny, tiny_head, text = _pinned_view(tmp_path, "tiny", policy)
    plain, plain_head, _ = _pinned_view(tmp_path, "plain", policy, layers=_plain_layers)
    assert len(tiny) == 1 and len(plain) == 1 and tiny[0][0] == plain[0][0]  # one shrink each, of the same message
    assert tiny[0][1] < plain[0][1] and tiny_head < plain_head
    assert "artifact://" in text and "x-trace-id" in text  # still a view that names the original and keeps the issue


@pytest.mark.slow
def test_with_room_to_spare_the_pinned_request_is_unchanged(tmp_path):
    ours = _pinned_view(tmp_path, "roomy", "You are a careful engineer.")
    plain = _pinned_view(tmp_path, "roomy-plain", "You are a careful engineer.", layers=_plain_layers)
    assert ours == plain


@pytest.mark.slow
def test_a_tiny_room_scales_the_carried_work_log_and_index_down_with_it(tmp_path):
    """The work log and the index take at most ``carry_share`` of the room, times the room's factor where it is tiny:
    counted on every emergency record of a support session whose policy leaves about a quarter of the budget."""
    policy = "Policy rule: always verify the order id and the customer's identity before any refund. " * 260
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "carry.db", window=8000) as e:
        s, packs = item_lookup_session(e, "carry", policy, 40)
        pack = packs[-1]
        counter = s.counter(pack.manifest.format)
        room = pack.manifest.available / counter.scale - counter.raw_segment(policy) - counter.overheads.per_request
        factor = room_factor(room * counter.scale, pack.manifest.available)
        assert factor < 0.9  # the room is tiny
        recs = [r for r in s.state.records if isinstance(r, EmergencyRecord) and not r.deferred]
        assert len(recs) >= 2
        cfg = CompactionConfig()
        bound = cfg.carry_share * room * factor
        floor = min(cfg.index_floor, room / 4)  # the index never below its floor
        assert floor > bound / 2  # (a room this tiny: the floor binds)
        for r in recs:
            index = counter.raw_text(render_index(r.index))
            carried = sum(counter.raw_text(x) + 1 for x in r.work_log) + index
            line = max((counter.raw_text(x) + 1 for x in r.work_log), default=0)
            assert carried <= max(bound, floor) + bound + line  # the newest kept line may overshoot by at most itself
            assert index <= max(bound, floor) + (bound if not r.work_log else 0)


@pytest.mark.slow
def test_a_tiny_room_keeps_an_index_of_its_floor_not_two_names(tmp_path):
    """Where the room is tiny, ``carry_share`` times the room's factor left the index two names (about 18 tokens in
    a room of 1,100, the head alone 15); ``index_floor`` keeps 96 raw tokens for it: the items the cuts took are
    named (dev tau-bench at 8K with a 3,000-token longer system prompt: strict recall 81.2% -> 88.1%)."""
    policy = "Policy rule: always verify the order id and the customer's identity before any refund. " * 260
    named: dict[int, list[int]] = {}
    for floor in (0, CompactionConfig().index_floor):
        with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / f"floor{floor}.db", window=8000,
                       compaction=CompactionConfig(index_floor=floor)) as e:
            s, packs = item_lookup_session(e, f"floor{floor}", policy, 40)
            assert all(p.manifest.tokens <= p.manifest.available for p in packs)
            named[floor] = [len(r.index) for r in s.state.records if isinstance(r, EmergencyRecord)]
    plain, ours = named.values()
    assert ours and max(ours) >= 4 and max(ours) > max(plain, default=0)
    assert sum(ours) > sum(plain)
