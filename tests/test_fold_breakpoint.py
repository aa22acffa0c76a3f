"""The fold breakpoint: a cache breakpoint ends the history's folded region.

A mask batch folds the oldest unfolded exchanges into one line each; a fold is never folded again and the next
batch folds later exchanges, so the request's prefix through the newest folded exchange is the same before and
after the next batch. Anthropic caches only the prefixes a request marked: without a breakpoint there, every batch
re-wrote the whole history after the pinned request (the folds included); with it, a batch re-writes only what
follows the folds (``NeutralRequest.fold``, ``CachePlan.fold_index``, and the mask cost model's ``rewrite_from``).
"""

from __future__ import annotations

import re

import windowsmith as ws
from conftest import DATA, needs_data
from windowsmith.cache import plan_cache
from windowsmith.costs import call_cost
from windowsmith.formats import get_renderer
from windowsmith.model import Message, Text, ToolSpec
from windowsmith.records import MaskRecord
from windowsmith.registry import load_registry
from windowsmith.request import NeutralRequest, Segment

MODEL = "claude-sonnet-4-5"


def _req(n: int, *, head: int = 1, carry: int = 0, fold: int = 0, tail: str | None = None,
         last_user: bool = False) -> NeutralRequest:
    msgs = [Message("user", (Text("the task"),))]
    for i in range(1, n):
        msgs.append(Message("assistant" if i % 2 else "user", (Text(f"message {i}"),)))
    if last_user and msgs[-1].role != "user":
        msgs.append(Message("user", (Text("more"),)))
    return NeutralRequest(model=MODEL, system=(Segment("sys", "system"),), session=(),
                          tools=(ToolSpec("run", "run it", {"type": "object", "properties": {}}),),
                          messages=tuple(msgs), tail=tail, max_output_tokens=100, cache_key="k", head=head,
                          carry=carry, fold=fold)


def test_plan_cache_ends_the_folds_with_a_breakpoint_after_the_head_and_the_carry():
    plan = plan_cache(_req(8, fold=5))
    # message, head, fold and system: the system's prefix covers the tools
    assert (plan.message_index, plan.head_index, plan.fold_index) == (7, 0, 4)
    assert plan.system and not plan.tools and plan.count == 4
    assert plan.names == ("system", "head", "fold", "message")  # in cache order, as the manifest lists them
    both = plan_cache(_req(8, carry=2, fold=5))
    # with a carry too, the four are message, head, carry and fold (the head's prefix covers system and tools)
    assert (both.message_index, both.head_index, both.carry_index, both.fold_index) == (7, 0, 1, 4)
    assert not both.system and not both.tools and both.count == 4
    assert plan_cache(_req(8)).fold_index is None  # no fold: as before
    assert plan_cache(_req(8, carry=3, fold=3)).fold_index is None  # the folds must end after the carry
    assert plan_cache(_req(8, fold=8)).fold_index is None  # nor on the newest message (its own breakpoint)
    assert plan_cache(_req(8, head=0, fold=5)).fold_index == 4  # no pinned request: the folds lead the history
    # the tail is prepended to the final user message: no breakpoint on that message
    assert plan_cache(_req(3, fold=3, tail="NOTE", last_user=True)).fold_index is None


def test_anthropic_marks_the_last_fold():
    req = _req(8, fold=5)
    req = NeutralRequest(**{**req.__dict__, "cache": plan_cache(req)})
    out = get_renderer("anthropic").render(req).request
    marked = [b["text"] for m in out["messages"] for b in m["content"] if "cache_control" in b]
    assert marked == ["the task", "message 4", "message 7"]
    assert len(re.findall("cache_control", str(out))) == 4


def test_openai_and_gemini_packs_carry_no_marker_for_it():
    req = _req(8, fold=5)
    req = NeutralRequest(**{**req.__dict__, "cache": plan_cache(req)})
    for fmt in ("openai-chat", "openai-responses", "gemini"):
        assert "cache_control" not in str(get_renderer(fmt).render(req).request)


@needs_data
def test_each_fold_batch_reads_the_previous_folds_from_cache(tmp_path):
    # build logs of 5,000 characters a turn (real agent output) at 32K: a mask batch every five or six turns
    text = sorted((DATA / "openhands").iterdir())[0].read_text(encoding="utf-8", errors="replace")[:300_000]
    with ws.Engine(model=MODEL, store=tmp_path / "f.db", window=32000) as e:
        s = e.session("logs")
        s.system("You triage build logs.")
        s.user("Find why the nightly build fails; the logs are under /var/log/ci.")
        packs = []
        for i in range(40):
            s.assistant(f"Reading log {i}.", tool_calls=[{"id": f"c{i}", "name": "read_log",
                                                          "arguments": {"path": f"/var/log/ci/build-{i}.log"}}])
            s.tool_result(f"c{i}", text[i * 7919 % 250_000:][:5000])
            packs.append(s.build())
        masks = [r for r in s.state.records if isinstance(r, MaskRecord)]
        assert len(masks) >= 3
        spec = load_registry().get(MODEL)
        counter = s.counter("anthropic")
        batches = [k for k, p in enumerate(packs) if any(a["kind"] == "mask" for a in p.manifest.actions)]
        assert len(batches) == len(masks)
        for k in batches[1:]:
            prev, cur = packs[k - 1].neutral, packs[k].neutral
            # the request before the batch ended the earlier folds with a breakpoint...
            assert prev.fold > prev.head and prev.cache.fold_index == prev.fold - 1
            folded = prev.messages[:prev.fold]
            # the pinned request, then one fold line per exchange
            assert folded[0].role == "user" and all(m.role == "assistant" and len(m.content) == 1 for m in folded[1:])
            # ...so the batch's request reads them from cache and re-writes only what follows them
            assert cur.messages[:prev.fold] == folded
            cost, _ = call_cost(spec, "anthropic", prev, cur, counter, prompt_tokens=packs[k].manifest.tokens)
            through_fold = sum(counter.raw_message(m) for m in folded)
            assert cost.cache_read_tokens >= int(through_fold * counter.scale)
            # and the cost model priced the batch's rewrite from the folds on, not from the pinned request on
            act = next(a for a in packs[k].manifest.actions if a["kind"] == "mask")
            per_token = (spec.prices.cache_write - spec.prices.cache_read) / 1e6
            after_folds = sum(counter.raw_message(m) for m in cur.messages[prev.fold:]) * counter.scale
            assert act["detail"]["rewrite_usd"] <= after_folds * per_token * 1.05
            assert act["detail"]["rewrite_usd"] < (after_folds + through_fold * counter.scale) * per_token * 0.95
        # the manifest names the breakpoints: the folds' from the first batch on, never before
        marks = [p.manifest.cache["marks"] for p in packs]
        assert all("fold" not in m for m in marks[:batches[0]])
        assert all(m[-2:] == ["fold", "message"] for m in marks[batches[0]:])
        # the folds grow: each batch's breakpoint is after the previous one's
        ends = [packs[k].neutral.fold for k in batches]
        assert ends == sorted(ends) and len(set(ends)) == len(ends)
