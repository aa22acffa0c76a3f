"""A summary's references: merged from per-message scans (kept per message digest), they are exactly what the
plain per-block loop found (a property test against it), the records a summary writes on real traces are pinned
byte for byte, and one compaction scans each message once for both of its readers."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import windowsmith as ws
from conftest import DATA, needs_data
from test_references_scan import plain_items, texts
from windowsmith.compaction import CompactionConfig
from windowsmith.compaction import references as R
from windowsmith.compaction.base import Reference
from windowsmith.model import Message, Text, ToolCall, ToolResult
from windowsmith.traces import load_traces


def plain_refs(messages, *, seqs=None, goal=None, artifacts=None, limit=200) -> list[Reference]:
    """``extract_refs`` as it was written before the per-message scans: one ``add`` per sighting, in order,
    the plain patterns' matches, ``score_ref`` for each reference."""
    goal_words = R._words(goal or "")
    artifacts = artifacts or {}
    found: dict = {}
    n = len(messages)

    def add(kind, value, pos, detail=None):
        value = value.strip()
        if not value or len(value) < 2:
            return
        prev = found.get((kind, value))
        if prev is None:
            found[(kind, value)] = (pos, dict(detail) if detail else {})
        else:
            found[(kind, value)] = (pos, {**prev[1], **detail} if detail else prev[1])

    def scan(text, pos, errors):
        if not text:
            return
        if len(text) > 40_000:
            text = text[:20_000] + "\n" + text[-20_000:]
        for kind, value in plain_items(text, errors):
            add(kind, value, pos, {"sha256": value[len("artifact://"):]} if kind == "artifact" else None)

    call_args: dict = {}
    for pos, m in enumerate(messages):
        for b in m.content:
            if isinstance(b, ToolCall):
                cmd = next((str(b.arguments[k]) for k in R._COMMAND_KEYS if isinstance(b.arguments.get(k), str)), None)
                value = R._clip(cmd, 200) if cmd else f"{b.name}({R._clip(R.format_args(b.arguments), 160)})"
                call_args[b.id] = value
                detail = {"call_id": b.id, "tool": b.name}
                if b.id in artifacts:
                    detail["artifact"] = artifacts[b.id]
                add("command", value, pos, detail)
                scan(b.arguments_json, pos, False)
            elif isinstance(b, ToolResult):
                detail = {"call_id": b.call_id}
                if b.call_id in artifacts:
                    detail["artifact"] = artifacts[b.call_id]
                errs = [R._clip(e, 200) for e in R._ERROR_RE.findall(b.text)[:3]]
                if b.is_error and not errs and b.text.strip():
                    errs = [R._clip(b.text.strip().splitlines()[0], 200)]
                for e in errs:
                    add("error", e, pos, {**detail, "tool": b.name or "", "call": call_args.get(b.call_id, "")})
                scan(b.text, pos, False)
            elif isinstance(b, Text):
                scan(b.text, pos, m.role != "user")
                if m.role == "assistant":
                    for d in R.decisions(b.text[:20_000])[:4]:
                        add("decision", R._clip(d, 200), pos)
    refs = [Reference(k, v, R.score_ref(k, v, goal_words=goal_words, recency=(pos + 1) / n),
                      seqs[pos] if seqs is not None and pos < len(seqs) else None, detail)
            for (k, v), (pos, detail) in found.items()]
    refs.sort(key=lambda r: (-r.score, r.kind, r.value))
    return refs[:limit]


SHA = "a" * 64
block_texts = st.one_of(texts, st.sampled_from(["I will fix a.py next. Let's run tests.", f"see artifact://{SHA}",
                                                "error: x failed\nERROR y", "Traceback\nValueError: bad", "  "]))
call_ids = st.sampled_from(["c1", "c2", "c3"])
blocks = st.one_of(
    block_texts.map(Text),
    st.builds(ToolCall, call_ids, st.sampled_from(["run", "read"]),
              st.one_of(st.fixed_dictionaries({"cmd": block_texts}), st.fixed_dictionaries({"path": block_texts}),
                        st.fixed_dictionaries({"n": st.integers(0, 5)}))),
    st.builds(lambda call_id, parts, is_error, name: ToolResult(call_id, tuple(map(Text, parts)), is_error, name),
              call_ids, st.lists(block_texts, min_size=1, max_size=2), st.booleans(), st.sampled_from([None, "run"])),
)
KINDS = {"user": (Text,), "assistant": (Text, ToolCall), "tool": (ToolResult,)}


def _message(role: str, bs: list) -> Message:
    """A valid message of ``role`` from the generated blocks it may hold (tool call ids unique in it)."""
    keep, ids = [], set()
    for b in bs:
        if isinstance(b, KINDS[role]) and getattr(b, "id", None) not in ids:
            keep.append(b)
            ids.add(getattr(b, "id", None))
    return Message(role, tuple(keep) or ((ToolResult("c1", (Text("x"),)),) if role == "tool" else (Text("x"),)))


messages = st.lists(st.builds(_message, st.sampled_from(list(KINDS)), st.lists(blocks, min_size=1, max_size=3)),
                    min_size=1, max_size=8)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(messages, st.sampled_from([None, "", "fix the failing test in a.py"]),
       st.sampled_from([None, {"c1": SHA}, {"c2": "b" * 64, "c3": SHA}]), st.booleans(), st.integers(1, 200))
def test_extract_refs_equals_the_plain_loop(msgs, goal, artifacts, with_seqs, limit) -> None:
    seqs = [10 + 3 * i for i in range(len(msgs) - 1)] if with_seqs else None  # one short: the last has no seq
    for _ in range(2):  # cold, then from the per-message scans kept
        got = R.extract_refs(msgs, seqs=seqs, goal=goal, artifacts=artifacts, limit=limit)
        assert [r.to_dict() for r in got] == [r.to_dict() for r in plain_refs(msgs, seqs=seqs, goal=goal,
                                                                                  artifacts=artifacts, limit=limit)]


# The records a compaction (fold and summary, then a second summary absorbing the first) appends on real traces:
# sha256 of their JSON, as the code before the per-message scans (375006a) wrote them. A deliberate change of what
# a summary holds updates these; a speed-up must not. (The OpenHands pair: updated when the fold and summary keys
# left out JSON field names — 'view_range', 'insert_line' — for the identifiers after them, and when fold lines went
# from 12 keys to 16; the mini-swe-agent run: when a timestamp's '19T00' stopped being an identifier, and when its observations, user
# messages, began to fold like exchanges. The three: when a mask batch's economics priced it over the turns a run
# of its age is expected to live, not the whole horizon: 'expected_turns' and 'net_usd' only.)
PINNED = {
    ("mini-swe-agent/astropy__astropy-12907.traj.json", 0):
        "b60f1fece0cb0c5837232e5404d2c83a9ec066899a6389ac8b9c1a811898aadc",
    ("openhands/msb_example_output.jsonl", 1): "a22e979ed33b1a74ae5961d0453f1c4d1d6950965f080c498a3a66270f41079a",
    ("openhands/msb_example_output.jsonl", 2): "eb9c1ae32a9f542a28afece7ce98ea76bb514d2d74612b747d333388371dbdc1",
    # its spans are a dozen tokens: an on-demand summary would make the request larger, so none is written (issue 55)
    ("tau2-bench/gpt-4.1_retail_default_1trial.json", 1):
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
}
#: summaries each pinned trace writes (2 unless noted)
PINNED_SUMMARIES = {("tau2-bench/gpt-4.1_retail_default_1trial.json", 1): 0}


def _compaction_records(tmp_path, path: str, index: int) -> tuple[list[str], list[str]]:
    trace = load_traces(DATA / path)[index]
    db = tmp_path / "pin.db"
    half = len(trace.messages) // 2
    with ws.Engine(model="gpt-4.1", store=db, compaction=CompactionConfig(enabled=False)) as e:
        s = e.session("t", goal="fix the failing test")
        if trace.system:
            s.system(trace.system)
        if trace.tools:
            s.tools(trace.tools)
        for m in trace.messages[:half]:
            s.add(m)
    with ws.Engine(model="gpt-4.1", store=db) as e:  # a fresh process's memos: the scans start cold
        n0 = len(list(e.store.events("t")))
        s = e.session("t")
        stages = list(s.compact("openai-chat").stages)
        for m in trace.messages[half:]:
            s.add(m)
        stages += s.compact("openai-chat").stages
        events = [ev for ev in list(e.store.events("t"))[n0:] if ev.kind != "message"]
    return [json.dumps(ev.data, sort_keys=True) for ev in events], stages


@pytest.mark.slow
@needs_data
@pytest.mark.parametrize(("path", "index"), list(PINNED))
def test_summary_records_on_real_traces_are_pinned(tmp_path, path: str, index: int) -> None:
    R._MESSAGES.items.clear()
    records, stages = _compaction_records(tmp_path, path, index)
    assert stages.count("summary") == PINNED_SUMMARIES.get((path, index), 2)
    assert hashlib.sha256("\n".join(records).encode()).hexdigest() == PINNED[(path, index)]


def test_one_compaction_scans_each_message_once(tmp_path) -> None:
    """The summarizer and the summary record read the same span: each message's references are found once."""
    R._MESSAGES.items.clear()
    scanned: list[str] = []
    real = R._message_scan
    with ws.Engine(model="gpt-4.1", store=tmp_path / "w.db", compaction=CompactionConfig(enabled=False)) as e:
        s = e.session("t", goal="fix the failing test")
        for i in range(12):
            s.user(f"step {i}: run the tests")
            s.assistant(tool_calls=[ws.ToolCall(f"c{i}", "run", {"cmd": f"pytest tests/test_{i}.py"})])
            s.tool_result(f"c{i}", f"FAILED tests/test_{i}.py::t - AssertionError\nsrc/mod_{i}.py req-{i:05d}")
            s.assistant(f"I will fix src/mod_{i}.py next.")
        try:
            R._message_scan = lambda m: scanned.append(m.digest) or real(m)  # type: ignore[assignment]
            assert "summary" in s.compact("openai-chat", harder=True).stages  # on demand, too short to pay
        finally:
            R._message_scan = real
    assert scanned and len(scanned) == len(set(scanned))
