"""Invariants over multi-turn sessions built from the real traces in ../shared/data/traces.

* Cache prefix: between compaction boundaries, each request's cacheable prefix (up to its last cache
  breakpoint) is byte-identical at the start of the next request (Anthropic: the exact JSON up to
  the block carrying the last ``cache_control``; implicit-cache formats: every message before the
  dynamic tail).
* Stable before dynamic: the dynamic tail is only ever in the final user turn.
* Determinism: the same log rebuilt in a fresh engine yields the same checksums.
* Fit: every request fits window - reserved output.
"""

from __future__ import annotations

import itertools
import json

import pytest

import windowsmith as ws
from conftest import DATA, needs_data
from windowsmith.traces import load_traces

pytestmark = [pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available"), pytest.mark.slow]

CASES = [
    ("tau-bench/gpt-4o-airline.json", [0, 7]),
    ("tau2-bench/gpt-4.1_retail_default_1trial.json", [0]),
    ("tau2-bench/claude-sonnet-4-5_airline.json", [3]),
    ("mini-swe-agent/django__django-11119.traj.json", [0]),
    ("swe-agent/trajectories__demonstrations__function_calling_simple.traj", [0]),
    ("openhands/msb_example_output.jsonl", [0]),
]


def _canon(x) -> str:
    return json.dumps(x, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _anthropic_prefix(req: dict) -> tuple[str, tuple[int, int] | None]:
    """JSON of everything up to and including the last block with cache_control, and its position."""
    last = None
    for i, m in enumerate(req["messages"]):
        if isinstance(m["content"], list):
            for j, b in enumerate(m["content"]):
                if "cache_control" in b:
                    last = (i, j)
    if last is None:
        return _canon([req.get("tools"), req.get("system")]), None
    i, j = last
    msgs = [*req["messages"][:i], {"role": req["messages"][i]["role"], "content": req["messages"][i]["content"][: j + 1]}]
    return _canon([req.get("tools"), req.get("system"), msgs]), last


def _cut_at(req: dict, pos: tuple[int, int] | None) -> str:
    if pos is None:
        return _canon([req.get("tools"), req.get("system")])
    i, j = pos
    if i >= len(req["messages"]):
        return "<shorter>"
    m = req["messages"][i]
    msgs = [*req["messages"][:i], {"role": m["role"], "content": m["content"][: j + 1]}]
    # the breakpoint itself may move on: compare without cache_control markers
    return _canon([req.get("tools"), req.get("system"), msgs])


def _strip_cc(x):
    if isinstance(x, dict):
        return {k: _strip_cc(v) for k, v in x.items() if k != "cache_control"}
    if isinstance(x, list):
        return [_strip_cc(v) for v in x]
    return x


def _message_array(fmt: str, req: dict) -> list:
    return {"openai-chat": req.get("messages"), "openai-responses": req.get("input"), "gemini": req.get("contents")}[fmt]


def _stable_messages(fmt: str, req: dict, tail: str | None) -> list:
    arr = list(_message_array(fmt, req))
    if tail:
        marker = tail.splitlines()[0]
        while arr and marker in json.dumps(arr[-1], ensure_ascii=False):
            arr.pop()
    return arr


def _replay_packs(engine: ws.Engine, trace, fmt: str, sid: str):
    s = engine.session(sid, goal=(trace.meta.get("goal") if isinstance(trace.meta, dict) else None) or "finish the task")
    if trace.system:
        s.system(trace.system)
    if trace.tools:
        s.tools(trace.tools)
    packs = []
    for m in trace.messages:
        if m.role == "assistant" and s.state.units:
            packs.append(s.build(fmt))
            s.record(message=m, pack=packs[-1])
        else:
            s.add(m)
    return packs


def assert_prefix_kept_between_compactions(packs, fmt: str, *, tools: bool = False) -> None:
    """Between two packs with no compaction action, the later request starts with the earlier one's cacheable
    prefix (Anthropic: up to its last breakpoint; other formats: the stable messages, and the tool list when
    ``tools``)."""
    for prev, cur in itertools.pairwise(packs):
        if cur.manifest.actions:
            continue
        if fmt == "anthropic":
            prefix, pos = _anthropic_prefix(prev.request)
            assert _canon(_strip_cc(json.loads(prefix))) == _canon(_strip_cc(json.loads(_cut_at(cur.request, pos))))
        else:
            before = _stable_messages(fmt, prev.request, prev.neutral.tail)
            assert _canon(_message_array(fmt, cur.request)[: len(before)]) == _canon(before)
            if tools:
                assert _canon(prev.request.get("tools")) == _canon(cur.request.get("tools"))


@needs_data
@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses", "gemini"])
@pytest.mark.parametrize(("path", "indices"), CASES)
def test_cache_prefix_is_byte_identical_between_turns(tmp_path, fmt, path, indices):
    model = {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-pro"}.get(fmt, "gpt-4.1")
    traces = load_traces(DATA / path)
    with ws.Engine(model=model, store=tmp_path / "w.db") as engine:
        for idx in indices:
            packs = _replay_packs(engine, traces[idx], fmt, f"{fmt}-{idx}")
            assert len(packs) >= 2, "a multi-turn trace"
            for prev, cur in itertools.pairwise(packs):
                assert cur.tokens <= cur.manifest.available
                if cur.manifest.actions:  # a compaction boundary: the prefix may break here, once
                    continue
                if fmt == "anthropic":
                    prefix, pos = _anthropic_prefix(prev.request)
                    assert _canon(_strip_cc(json.loads(prefix))) == _canon(_strip_cc(json.loads(_cut_at(cur.request, pos))))
                    assert sum(1 for m in cur.request["messages"] for b in m["content"] if "cache_control" in b) \
                        + sum(1 for b in cur.request.get("system", []) if "cache_control" in b) \
                        + sum(1 for t in cur.request.get("tools", []) if "cache_control" in t) <= 4
                else:
                    before = _stable_messages(fmt, prev.request, prev.neutral.tail)
                    after = _message_array(fmt, cur.request)
                    assert _canon(after[: len(before)]) == _canon(before)
                    assert _canon(prev.request.get("tools")) == _canon(cur.request.get("tools"))
                    if fmt == "openai-chat" or fmt == "openai-responses":
                        assert prev.request["prompt_cache_key"] == cur.request["prompt_cache_key"]


@needs_data
@pytest.mark.parametrize(("path", "indices"), CASES[:4])
def test_prefix_holds_between_compactions_on_small_windows(tmp_path, path, indices):
    traces = load_traces(DATA / path)
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=8000) as engine:
        packs = _replay_packs(engine, traces[indices[0]], "anthropic", "small")
        boundaries = 0
        for prev, cur in itertools.pairwise(packs):
            assert cur.tokens <= cur.manifest.available
            if cur.manifest.actions:
                boundaries += 1
                continue
            prefix, pos = _anthropic_prefix(prev.request)
            assert _canon(_strip_cc(json.loads(prefix))) == _canon(_strip_cc(json.loads(_cut_at(cur.request, pos))))
        assert boundaries <= max(1, len(packs) // 3), "compaction is batched: the prefix breaks rarely"


@needs_data
def test_replaying_the_same_log_is_deterministic(tmp_path):
    trace = load_traces(DATA / "tau-bench/gpt-4o-airline.json")[3]
    sums = []
    for run in range(2):
        with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / f"w{run}.db", window=16000) as engine:
            sums.append([p.manifest.checksum for p in _replay_packs(engine, trace, "anthropic", "det")])
    assert sums[0] == sums[1] and len(sums[0]) > 3
