"""The engine end to end: sessions on a real SQLite store, every renderer, bad input, resume."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

import windowsmith as ws
from conftest import model_for
from windowsmith.errors import (
    BudgetBlockedError,
    BudgetExceededError,
    InvalidMessageError,
    InvalidToolSchemaError,
    TaskRequiredError,
    UnknownModelError,
    UnmatchedToolResultError,
    UsageError,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order by id.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    },
    {
        "name": "refund",
        "description": "Refund a charge.",
        "input_schema": {"type": "object", "properties": {"charge_id": {"type": "string"}, "amount": {"type": "number"}}},
    },
]


def support_session(engine, sid="ticket-42"):
    s = engine.session(sid, goal="Refund the duplicate charge", acceptance=["refund issued", "customer told"])
    s.system("You are a support agent for ACME. Be brief.")
    s.tools(TOOLS)
    s.user("I was charged twice for order 1234")
    s.assistant("Let me look that up.", tool_calls=[{"id": "call_1", "name": "get_order", "arguments": {"order_id": "1234"}}])
    s.tool_result("call_1", json.dumps({"order_id": "1234", "charges": ["ch_1", "ch_2"], "amount": 42.5}))
    return s


def test_quick_start_flow_builds_an_anthropic_request(engine):
    s = support_session(engine)
    pack = s.build()
    req = pack.request
    assert req["model"] == "claude-sonnet-4-5"
    assert [t["name"] for t in req["tools"]] == ["get_order", "refund"]
    assert req["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert req["system"][0]["text"].startswith("You are a support agent")
    last = req["messages"][-1]
    assert last["role"] == "user"
    # tool result first, then the dynamic tail as a trailing text block
    assert last["content"][0]["type"] == "tool_result"
    tail = last["content"][-1]["text"]
    assert tail.index("## TASK") < tail.index("## ACCEPTANCE")
    assert "- [ ] refund issued" in tail
    # the newest stable message carries the breakpoint: the tool result, not the tail
    assert last["content"][0].get("cache_control") == {"type": "ephemeral"}
    assert "cache_control" not in last["content"][-1]
    m = pack.manifest
    assert m.tokens > 0 and m.tokens <= m.available
    assert m.layers["history"]["used"] > 0 and m.layers["task"]["required"]
    assert m.cache["breakpoints"] <= 4
    assert "tokens" in m.summary() and m.pack_id in m.summary()


def test_user_request_stays_verbatim_at_the_end(engine):
    s = engine.session("t", goal="Answer the question")
    s.user("What is 2+2? Reply with one digit.")
    req = s.build().request
    content = req["messages"][-1]["content"]
    assert content[-1]["text"] == "What is 2+2? Reply with one digit."
    assert content[0]["text"].startswith("## TASK")


@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses", "gemini"])
def test_every_format_builds_and_is_deterministic(engine, fmt):
    s = support_session(engine, f"s-{fmt}")
    a = s.build(fmt, model=model_for(fmt))
    b = s.build(fmt, model=model_for(fmt))
    assert a.manifest.checksum == b.manifest.checksum
    assert json.dumps(a.request, sort_keys=True) == json.dumps(b.request, sort_keys=True)
    assert a.id == b.id  # same log + config → same pack id
    assert engine.store.get_pack(a.id)["checksum"] == a.manifest.checksum


def test_record_parses_response_and_calibrates(engine):
    s = support_session(engine)
    pack = s.build()
    billed_prompt = int(pack.tokens * 1.2)
    response = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "I see two charges."},
                    {"type": "tool_use", "id": "call_2", "name": "refund", "input": {"charge_id": "ch_2", "amount": 42.5}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": billed_prompt - 1000, "output_tokens": 30, "cache_read_input_tokens": 600,
                  "cache_creation_input_tokens": 400},
    }
    msg = s.record(response)
    assert msg is not None and msg.tool_calls[0].name == "refund"
    assert s.state.usages[-1][1].prompt_tokens == billed_prompt
    # one billed call: the calibration is a pure offset (what the count could not see), fitted on the count
    # before calibration
    cal = engine.store.get_kv("calibration", "claude-sonnet-4-5|anthropic")
    assert pack.manifest.tokens_counted == pack.tokens  # nothing learnt yet
    assert cal["slope"] == 1.0 and cal["offset"] == billed_prompt - pack.tokens
    s.tool_result("call_2", "refunded")
    after = s.build()
    m = after.manifest
    assert m.calibration == {"slope": 1.0, "offset": billed_prompt - pack.tokens, "observations": 1}
    assert m.tokens - m.tokens_counted == pytest.approx(m.calibration["offset"], abs=2)
    assert f"counted {m.tokens_counted:,} before calibration" in m.summary()


@pytest.mark.slow
def test_resume_in_a_new_process_builds_identical_packs(tmp_path):
    db = tmp_path / "ws.db"
    with ws.Engine(model="gpt-4.1", store=db) as e:
        s = support_session(e)
        first = s.build("openai-chat", model="gpt-4.1")
    code = textwrap.dedent(f"""
        import json, windowsmith as ws
        with ws.Engine(model="gpt-4.1", store={str(db)!r}) as e:
            p = e.session("ticket-42").build("openai-chat", model="gpt-4.1")
            print(json.dumps({{"checksum": p.manifest.checksum, "request": p.request}}, sort_keys=True))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    assert got["checksum"] == first.manifest.checksum
    assert got["request"] == json.loads(json.dumps(first.request))


def test_many_sessions_per_store(engine):
    for i in range(5):
        s = engine.session(f"s{i}")
        s.user(f"hello {i}")
    assert sorted(engine.sessions()) == [f"s{i}" for i in range(5)]


# --------------------------------------------------------------------------- bad input


def test_unknown_role_and_malformed_messages(engine):
    s = engine.session("bad")
    with pytest.raises(InvalidMessageError, match="unknown role 'system'"):
        s.add({"role": "system", "content": "x"})
    with pytest.raises(InvalidMessageError, match="unknown type 'video'"):
        s.add({"role": "user", "content": [{"type": "video", "url": "x"}]})
    with pytest.raises(InvalidMessageError, match="missing the field 'text'"):
        s.add({"role": "user", "content": [{"type": "text"}]})
    assert engine.store.events("bad") == []  # nothing half-written


def test_tool_result_without_matching_call(engine):
    s = support_session(engine)
    before = len(engine.store.events("ticket-42"))
    with pytest.raises(UnmatchedToolResultError, match="no assistant tool call with id 'nope'"):
        s.tool_result("nope", "x")
    with pytest.raises(UnmatchedToolResultError, match="already has a result"):
        s.tool_result("call_1", "again")
    assert len(engine.store.events("ticket-42")) == before


def test_invalid_tool_schema_is_refused(engine):
    s = engine.session("schema")
    with pytest.raises(InvalidToolSchemaError, match="not a valid JSON Schema"):
        s.tools([{"name": "x", "parameters": {"type": "object", "properties": {"a": {"type": "strnig"}}}}])
    with pytest.raises(InvalidToolSchemaError, match="must have \"type\": \"object\""):
        s.tools([{"name": "x", "parameters": {"type": "string"}}])
    with pytest.raises(InvalidToolSchemaError, match="name"):
        s.tools([{"name": "bad name!", "parameters": {"type": "object"}}])
    assert engine.store.events("schema") == []


def test_invalid_utf8_is_repaired(engine):
    s = engine.session("utf8")
    msg = s.user(b"caf\xe9 \xff ok")
    assert "\ufffd" in msg.text and msg.text.endswith(" ok")
    s.assistant("", tool_calls=[{"id": "c1", "name": "cat", "arguments": {}}])
    res = s.tool_result("c1", "bad \udcff surrogate")
    res.tool_results[0].text.encode("utf-8")  # storable and sendable


@pytest.mark.slow
def test_huge_tool_output_is_offloaded_not_sent(engine):
    s = engine.session("big", goal="read the log")
    s.user("show me the log")
    s.assistant("", tool_calls=[{"id": "c1", "name": "cat", "arguments": {"path": "app.log"}}])
    big = ("2026-11-22 INFO request ok\n" * 4_000_000)[: 100 * 1024 * 1024]
    res = s.tool_result("c1", big)
    text = res.tool_results[0].text
    assert len(text) < 50_000 and "artifact://" in text
    sha = re.search(r"artifact://([0-9a-f]{64})", text).group(1)
    assert engine.store.get_blob(sha) == big.encode()
    pack = s.build()
    assert pack.tokens <= pack.manifest.available
    assert f"artifact://{sha}" in pack.manifest.artifacts


def test_build_with_pending_tool_calls_is_refused(engine):
    s = engine.session("pending")
    s.user("hi")
    s.assistant("", tool_calls=[{"id": "c9", "name": "x", "arguments": {}}])
    with pytest.raises(UsageError, match="have no result yet"):
        s.build()


def test_unanswered_call_is_repaired_when_the_conversation_moves_on(engine):
    s = engine.session("repair")
    s.user("hi")
    s.assistant("", tool_calls=[{"id": "c9", "name": "x", "arguments": {}}])
    s.user("never mind")
    pack = s.build("openai-chat", model="gpt-4.1")
    roles = [m["role"] for m in pack.request["messages"]]
    assert roles[-3:] == ["assistant", "tool", "user"]
    assert pack.manifest.repairs and "c9" in pack.manifest.repairs[0]["what"]


def test_required_task_missing_fails_clearly(engine):
    s = engine.session("task", task_required=True)
    s.user("hi")
    with pytest.raises(TaskRequiredError, match=r"session.task\(goal=..."):
        s.build()


def test_required_layer_that_cannot_fit_names_the_layer(tmp_path):
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=2000) as e:
        s = e.session("tight")
        s.system("rule. " * 3000)
        s.user("hi")
        with pytest.raises(BudgetExceededError, match="the largest is 'system'") as ei:
            s.build()
        assert ei.value.layer == "system" and ei.value.needed > ei.value.available


def _busy_session(e: ws.Engine, sid: str, turns: int) -> ws.Session:
    s = e.session(sid, goal="Find why the nightly export is slow")
    s.tools(TOOLS)
    s.user("ORIGINAL TASK: the nightly export takes 3 hours, find out why")
    for i in range(turns):
        s.assistant(f"Looking at order {i}.", tool_calls=[{"id": f"c{i}", "name": "get_order", "arguments": {"order_id": f"o{i}"}}])
        s.tool_result(f"c{i}", f"order o{i}: " + " ".join(f"line {j} shipped to warehouse {i * j % 17}" for j in range(40)))
    return s


def test_request_over_block_at_is_refused_before_anything_is_written(tmp_path):
    strict = ws.BudgetConfig(warn_at=0.4, compact_at=0.45, block_at=0.5)
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000, budget=strict) as e:
        s = _busy_session(e, "strict", turns=30)  # the history alone is over the compaction threshold
        s.system("Follow the export runbook step by step. " * 420)  # about 60% of the available budget
        seq, head = s.state.seq, s.state.head
        with pytest.raises(BudgetBlockedError) as ei:
            s.build()
        err = ei.value
        assert isinstance(err, BudgetExceededError) and isinstance(err, ws.RuntimeFailure)
        assert err.limit == int(err.available * 0.5) < err.needed <= err.available and err.layer == "system"
        msg = str(err)
        for part in (f"needs {err.needed:,} tokens", f"block_at=0.5) = {err.limit:,} tokens", "'system'",
                     "session.compact()", "BudgetConfig(block_at=...)", "reserved_output"):
            assert part in msg, part
        # nothing written: no compaction record (compaction cannot shrink the system prompt), no pack
        assert (s.state.seq, s.state.head) == (seq, head)
        assert len(e.store.events("strict")) == seq + 1 and s.packs() == [] and s.last_pack is None
    # the fix the message names works, on the same log
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=8000, budget=ws.BudgetConfig(block_at=0.9)) as e:
        pack = e.session("strict").build()
        assert pack.tokens <= int(pack.manifest.available * 0.9)


@pytest.mark.parametrize("compaction", [True, False])
def test_block_at_is_a_ceiling_that_compaction_and_fitting_keep(tmp_path, compaction):
    from windowsmith.compaction import CompactionConfig

    cfg = ws.BudgetConfig(warn_at=0.5, compact_at=0.8, block_at=0.9)
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=16_000, budget=cfg,
                   compaction=CompactionConfig(enabled=compaction)) as e:
        s = _busy_session(e, "busy", turns=60)  # far over the window before compaction and fitting
        for i in range(5):
            s.note("memory", f"export job {i} runs at 02:00 UTC and writes to bucket exports-{i}")
        pack = s.build()
        m = pack.manifest
        assert m.tokens <= int(m.available * 0.9) and m.status in ("ok", "warn", "compact")
        kinds = {a["kind"] for a in m.actions}
        assert kinds & ({"mask", "summary", "emergency"} if compaction else {"truncate"})
        assert [ev for ev in e.store.events("busy") if ev.kind == "compaction"]  # recorded, and the pack stored
        assert s.packs()[-1].pack_id == m.pack_id


def test_status_warns_in_the_manifest_below_the_compaction_threshold(tmp_path):
    from windowsmith.compaction import CompactionConfig

    cfg = ws.BudgetConfig(warn_at=0.1, compact_at=0.9, block_at=0.95)
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=16_000, budget=cfg,
                   compaction=CompactionConfig(enabled=False)) as e:
        s = _busy_session(e, "warm", turns=6)
        m = s.build().manifest
        assert 0.1 <= m.fill < 0.9 and m.status == "warn"
        assert m.warnings == [f"the request fills {m.fill:.0%} of the available budget (warn threshold)"]
        assert e.session("quiet", goal="x").build().manifest.status == "ok"


def test_unknown_model_suggests_close_names():
    with pytest.raises(UnknownModelError, match="claude-sonnet-4-5"):
        ws.Engine(model="claude-sonet-4-5", store=":memory:")


# --------------------------------------------------------------------------- overflow and priorities


def test_history_drops_oldest_units_keeps_pairs_and_first_message(tmp_path):
    from windowsmith.compaction import CompactionConfig

    # the assembler's own fit (compaction off; tests/test_compaction.py covers the staged pipeline)
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=6000,
                   compaction=CompactionConfig(enabled=False)) as e:
        s = e.session("long", goal="Find the bug")
        s.user("ORIGINAL TASK: find the bug in module x")
        for i in range(60):
            s.assistant(f"step {i}", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"i": i}}])
            s.tool_result(f"c{i}", f"output {i} " + "lorem ipsum " * 30)
        pack = s.build("openai-chat", model="gpt-4.1")
        msgs = pack.request["messages"]
        assert pack.tokens <= pack.manifest.available
        assert msgs[0]["content"][0]["text"] == "ORIGINAL TASK: find the bug in module x"  # pinned
        # older steps dropped; in their place one reference to their verbatim transcript
        note = msgs[1]["content"][0]["text"] if isinstance(msgs[1]["content"], list) else msgs[1]["content"]
        ref = re.search(r"artifact://([0-9a-f]{64})", note)
        assert msgs[1]["role"] == "user" and ref and "read_result" in note
        assert msgs[2]["role"] == "assistant" and msgs[2]["content"] != "step 0"
        transcript = s.result_tools("read_result", {"ref": ref.group(0), "offset": 0, "limit": 400})
        assert "step 0" in transcript and "output 0 lorem" in transcript  # the dropped span, readable by the agent
        first_kept = msgs[2]["content"]
        assert f"ASSISTANT: {first_kept}" not in transcript  # only what left the view
        # every tool message answers a call in the assistant message right before it
        for i, m in enumerate(msgs):
            if m["role"] == "tool":
                prev = msgs[i - 1]
                assert prev["role"] == "assistant"
                assert m["tool_call_id"] in [c["id"] for c in prev["tool_calls"]]
        trunc = [a for a in pack.manifest.actions if a["kind"] == "truncate"]
        assert trunc and trunc[0]["detail"]["dropped_units"] > 0
        # the truncation is a log record: the next build keeps the same boundary (cache stays warm)
        again = s.build("openai-chat", model="gpt-4.1")
        assert again.manifest.checksum == pack.manifest.checksum
        assert not again.manifest.actions


def test_memory_is_dropped_before_history(tmp_path):
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=4000,
                   budget=ws.BudgetConfig(reserved_output=500)) as e:
        s = e.session("mem")
        for i in range(100):
            s.note("memory", f"fact {i}: " + "detail " * 40)
        s.user("question " * 200)
        pack = s.build("openai-chat", model="gpt-4.1")
        m = pack.manifest
        assert m.layers["memory"]["dropped"] > 0
        assert m.layers["history"]["dropped"] == 0
        assert m.tokens <= m.available
        assert any(a["kind"] == "drop" and a["layer"] == "memory" for a in m.actions)
