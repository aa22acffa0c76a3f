"""Inspect AI evaluation logs (JSON log format): one trace per sample and epoch.

The log in tests/data/inspect-ai was written by Inspect AI 0.3.285 itself (see the README there); only the model
was its scripted mockllm provider. A customer-support task with two tools: a domain none of the shared traces'
coding agents cover.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import prepare
from windowsmith.bench.run import run_strategy
from windowsmith.bench.strategies import WindowsmithStrategy
from windowsmith.errors import TraceFormatError
from windowsmith.registry import load_registry
from windowsmith.traces import FORMATS, detect_format, iter_trace_files, load_traces

LOG = next((Path(__file__).parent / "data" / "inspect-ai").glob("*.json"))
EVAL = next((Path(__file__).parent / "data" / "inspect-ai").glob("*.eval"))


def test_a_real_inspect_log_imports_each_sample_as_the_model_saw_it():
    assert "inspect-ai" in FORMATS and detect_format(LOG) == "inspect-ai"
    (t,) = load_traces(LOG)
    assert t.format == "inspect-ai" and t.id == "order_support/1/epoch1"
    assert t.meta["task"] == "order_support" and t.meta["model"] == "mockllm/model" and t.meta["status"] == "success"
    assert t.system == "You are an order-support agent. Use the tools to look up orders and refund items."
    assert [x.name for x in t.tools] == ["lookup_order", "refund_item"]
    assert t.tools[1].parameters["required"] == ["order_id", "item"]
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    calls = t.tool_calls
    assert [(c.name, dict(c.arguments)) for c in calls] == [
        ("lookup_order", {"order_id": "W2378156"}),
        ("refund_item", {"order_id": "W2378156", "item": "mechanical keyboard KB-981"})]
    assert t.messages[2].tool_results[0].text.startswith("order W2378156: {'status': 'delivered'")
    assert t.messages[4].tool_results[0].text.endswith("of order W2378156: $129.00")
    # each model call's usage from its model event, in order
    assert [(u.prompt_tokens, u.output_tokens) for _, u in sorted(t.billed.items())] == [(900, 40), (1050, 40), (1200, 40)]


def test_attachment_references_are_resolved(tmp_path: Path):
    """Inspect stores a repeated text once, under the sample's ``attachments``, and writes ``attachment://<hash>``
    where it was (this log does so in its model events; a condensed log does it in messages too)."""
    d = json.loads(LOG.read_text(encoding="utf-8"))
    sample = d["samples"][0]
    (ref,) = [k for k, v in sample["attachments"].items() if v.startswith("order W2378156")]
    sample["messages"][3]["content"] = f"attachment://{ref}"
    sample["messages"][1]["content"] = "tc://" + ref  # the older flavour of the reference
    p = tmp_path / "condensed.json"
    p.write_text(json.dumps(d), encoding="utf-8")
    (t,) = load_traces(p)
    assert t.messages[2].tool_results[0].text == t.messages[0].text == sample["attachments"][ref]


def test_model_calls_outside_the_conversation_are_not_billed_to_it(tmp_path: Path):
    """A model-graded scorer or a sub-agent calls a model too; its model event produced no message of the
    conversation, so usage is matched to messages by id, not by position."""
    d = json.loads(LOG.read_text(encoding="utf-8"))
    events = d["samples"][0]["events"]
    grader = {"event": "model", "model": "mockllm/grader", "input": [], "tools": [],
              "output": {"choices": [{"message": {"id": "grader-1", "role": "assistant", "content": "GRADE: C"}}],
                         "usage": {"input_tokens": 77777, "output_tokens": 5, "total_tokens": 77782}}}
    d["samples"][0]["events"] = [grader, *events]
    p = tmp_path / "graded.json"
    p.write_text(json.dumps(d), encoding="utf-8")
    (t,) = load_traces(p)
    assert [u.prompt_tokens for _, u in sorted(t.billed.items())] == [900, 1050, 1200]
    assert [x.name for x in t.tools] == ["lookup_order", "refund_item"]  # the agent's call's tools, not the grader's


def test_cache_reads_and_writes_are_billed_as_such(tmp_path: Path):
    """Inspect's ModelUsage keeps input_tokens at the full rate, cache reads and writes apart
    (input_tokens_cache_read / _write): the prompt the provider billed is their sum."""
    d = json.loads(LOG.read_text(encoding="utf-8"))
    for e in d["samples"][0]["events"]:
        if e.get("event") == "model":
            e["output"]["usage"].update({"input_tokens": 100, "input_tokens_cache_read": 800, "input_tokens_cache_write": 40})
    p = tmp_path / "cached.json"
    p.write_text(json.dumps(d), encoding="utf-8")
    (t,) = load_traces(p)
    u = t.billed[1]
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.prompt_tokens) == (100, 800, 40, 940)


def test_a_failed_tool_call_is_an_error_result(tmp_path: Path):
    d = json.loads(LOG.read_text(encoding="utf-8"))
    tool = d["samples"][0]["messages"][5]
    tool["content"] = ""
    tool["error"] = {"type": "parsing", "message": "item 'keyboard' is not on order W2378156"}
    p = tmp_path / "err.json"
    p.write_text(json.dumps(d), encoding="utf-8")
    (t,) = load_traces(p)
    res = t.messages[4].tool_results[0]
    assert res.is_error and res.text.endswith("parsing: item 'keyboard' is not on order W2378156")


def test_an_eval_log_reads_as_its_json_log_does():
    """Inspect's default log format: a zip of zstd-compressed JSON members (method 93, which zipfile cannot
    inflate), read member by member. The same task and scripted model as the JSON log, run again."""
    assert EVAL.suffix == ".eval" and detect_format(EVAL) == "inspect-ai"
    (e,) = load_traces(EVAL)
    (j,) = load_traces(LOG)
    assert e.id == j.id and e.system == j.system and [x.name for x in e.tools] == [x.name for x in j.tools]
    assert [m.role for m in e.messages] == [m.role for m in j.messages]
    assert [dict(c.arguments) for c in e.tool_calls] == [dict(c.arguments) for c in j.tool_calls]
    # the lookup's output is the same (the refund id differs: the tool hashes with Python's per-process seed)
    assert e.messages[2].tool_results[0].text == j.messages[2].tool_results[0].text
    assert {k: u.prompt_tokens for k, u in e.billed.items()} == {k: u.prompt_tokens for k, u in j.billed.items()}
    assert iter_trace_files(EVAL.parent) == sorted([EVAL, LOG])


def test_a_damaged_eval_log_is_an_error(tmp_path: Path):
    p = tmp_path / "run.eval"
    p.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(TraceFormatError, match=r"not a readable \.eval log"):
        load_traces(p)
    import zipfile

    q = tmp_path / "running.eval"
    with zipfile.ZipFile(q, "w") as z:
        z.writestr("_journal/start.json", "{}")
    with pytest.raises(TraceFormatError, match=r"without header\.json"):
        load_traces(q)
    # a member whose zstd frame is damaged (the real log, bytes of header.json's frame overwritten)
    raw = bytearray(EVAL.read_bytes())
    info = zipfile.ZipFile(EVAL).getinfo("header.json")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + 4
    raw[start:start + 16] = b"\xff" * 16
    r = tmp_path / "damaged.eval"
    r.write_bytes(bytes(raw))
    with pytest.raises(TraceFormatError, match=r"'header\.json' cannot be decompressed"):
        load_traces(r)


def test_an_inspect_sample_replays_through_the_engine():
    run = prepare(load_traces(LOG)[0])
    rm = run_strategy(run, WindowsmithStrategy(BenchConfig.make(load_registry().get("claude-sonnet-4-5"), 8000)))
    assert rm.error is None and rm.calls == len(run.calls) == 3 and rm.blind_calls == 0
    assert rm.targets > 0 and rm.strict_hits == rm.targets  # W2378156 and the keyboard's name, reused from outputs


def test_without_the_extra_an_eval_log_names_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if `pip install 'windowsmith[inspect]'` had not run
    with pytest.raises(TraceFormatError, match=r"pip install 'windowsmith\[inspect\]'.*inspect log convert"):
        load_traces(EVAL)
