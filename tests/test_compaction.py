"""History compaction: masking, summaries, emergency truncation, reactive retry, resume, references."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from click.testing import CliRunner

import windowsmith as ws
from conftest import model_for
from windowsmith.compaction import (
    COMPACT_CONTEXT_TOOL,
    CompactionConfig,
    FakeSummarizer,
    OfflineSummarizer,
    Reference,
    Summary,
    check_summary,
    reconstruct,
    render_transcript,
)
from windowsmith.compaction.mask import PlannedFold, mask_pays, rewrite_from
from windowsmith.compaction.providers import AnthropicSummarizer, OpenAISummarizer
from windowsmith.errors import UsageError
from windowsmith.registry import load_registry

#: summarize whenever due (these tests are about summaries, not about when a summary pays for itself)
SUMMARIZE = ws.CompactionConfig(summary_pays=False)
RESULT = "collected 40 items\n" + "tests/test_x.py::test_{i} PASSED\n" * 30 + "FAILED tests/test_refund.py::test_refund_twice - AssertionError\n"


def long_session(engine: ws.Engine, sid: str = "long", turns: int = 40, size: int = 1) -> ws.Session:
    s = engine.session(sid, goal="Fix the refund bug in src/billing/refund.py")
    s.system("You are a coding agent.")
    s.tools([{"name": "run", "description": "Run a shell command.",
              "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}])
    s.user("ORIGINAL TASK: the refund endpoint refunds twice. I prefer small commits.")
    for i in range(turns):
        add_turn(s, i, size)
    return s


def add_turn(s: ws.Session, i: int, size: int = 1) -> None:
    s.assistant(f"I will run step {i}.", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"command": f"pytest -k t{i}"}}])
    s.tool_result(f"c{i}", (RESULT * size).replace("{i}", str(i)))


def check_pairs(msgs: tuple[ws.Message, ...]) -> None:
    for i, m in enumerate(msgs):
        if m.role == "tool":
            prev = msgs[i - 1]
            assert prev.role == "assistant" and {r.call_id for r in m.tool_results} <= {c.id for c in prev.tool_calls}
        if m.role == "assistant" and m.tool_calls:
            assert i + 1 < len(msgs) and msgs[i + 1].role == "tool"
            assert {c.id for c in m.tool_calls} == {r.call_id for r in msgs[i + 1].tool_results}


def records(s: ws.Session, typ: str | None = None) -> list[dict[str, Any]]:
    return [c for c in s.state.compactions if typ is None or c.get("type") == typ]


@pytest.fixture
def engine(make_engine):
    # the scenarios below are sized for these values (not the defaults, which the bench tunes)
    return make_engine(window=24_000, compaction=CompactionConfig(keep_turns=8, keep_ratio=0.35))


@pytest.fixture
def pressure_engine(make_engine):
    # what a fold writes, whatever decides it: without the cost model a batch is due at mask_at (with it, this
    # 26-turn session does not pay a rewrite yet: test_a_mask_batch_under_the_summary_threshold_has_to_pay_back)
    return make_engine(window=24_000, compaction=CompactionConfig(keep_turns=8, keep_ratio=0.35, cost_aware=False))


# --------------------------------------------------------------------------- masking


def test_mask_folds_old_exchanges_into_one_line_with_a_readable_artifact(pressure_engine):
    engine = pressure_engine
    s = long_session(engine, turns=26)
    pack = s.build()
    masks = records(s, "mask")
    assert len(masks) == 1
    folds = masks[0]["folds"]
    assert folds and len(folds) == 26 - 8  # the last keep_turns=8 exchanges stay verbatim
    line = folds[0]["text"]
    assert line.startswith("[turn 1] «I will run step 0.» run(command=pytest -k t0) → FAILED tests/test_refund.py")
    sha = folds[0]["artifacts"][0]
    assert f"artifact://{sha}" in line
    assert engine.store.get_blob(sha).decode() == RESULT.replace("{i}", "0")  # byte for byte
    assert pack.manifest.actions[0]["kind"] == "mask" and "window pressure" in pack.manifest.actions[0]["reason"]
    check_pairs(pack.neutral.messages)
    texts = [m.text for m in pack.neutral.messages]
    assert texts[0].startswith("ORIGINAL TASK")  # the user's request is never folded
    assert sum(t.startswith("[turn ") for t in texts) == 18
    # the full transcript is untouched
    assert len(s.messages) == 1 + 52 and s.messages[2].tool_results[0].text.startswith("collected")


def test_a_mask_batch_under_the_summary_threshold_has_to_pay_back(make_engine, tmp_path):
    """Over mask_at but under the summary threshold, a batch is made only when the cache reads it saves over
    expected_turns outweigh the rewrite it causes: the request still has room to grow, and the summary or the free
    cut decides at its threshold. Made whenever it was over mask_at, a batch that bought two or three turns
    rewrote the cache each time (screenshots, whose newest turns cannot fold)."""
    def build(expected: int) -> ws.Pack:
        cfg = CompactionConfig(keep_turns=8, keep_ratio=0.35, expected_turns=expected)
        with make_engine(window=24_000, compaction=cfg, store=tmp_path / f"{expected}.db") as e:
            s = long_session(e, turns=26)
            return s.build()

    short = build(10)  # the default: ten more turns to pay the rewrite back
    m = short.manifest
    assert m.tokens > CompactionConfig().mask_at * m.available and not any(a["kind"] == "mask" for a in m.actions)
    long = build(200)  # a long run ahead: the same batch pays
    assert long.manifest.actions[0]["kind"] == "mask" and "cost model: pays back" in long.manifest.actions[0]["reason"]
    assert long.manifest.tokens < 0.5 * long.manifest.available


def test_folds_never_nest(pressure_engine):
    engine = pressure_engine
    s = long_session(engine, turns=26)
    s.build()
    first = records(s, "mask")[0]
    before = list(s.state.view)
    # replaying the same mask record (a fold of a fold) changes nothing
    s._append("compaction", {**{k: v for k, v in first.items() if k != "seq"}, "folds": [
        {**f, "text": "[turn 99] nested " + f["text"]} for f in first["folds"]]})
    assert s.state.view == before
    # and the planner never proposes a folded unit again
    for i in range(26, 46):
        add_turn(s, i)
        s.build()
    planned = [r for r in records(s, "mask") if r["seq"] != records(s, "mask")[1]["seq"]]  # not the injected one
    folded_seqs = [f["first_seq"] for r in planned for f in r["folds"]]
    assert len(folded_seqs) == len(set(folded_seqs))
    for m in s.state.view:
        assert m.text.count("[turn ") <= 1


@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses", "gemini"])
def test_folded_history_renders_valid_structure_for_every_format(pressure_engine, fmt):
    engine = pressure_engine
    s = long_session(engine, sid=f"r-{fmt}", turns=26)
    pack = s.build(fmt, model=model_for(fmt))
    assert records(s, "mask")
    req = pack.request
    if fmt == "anthropic":
        ids = [b["id"] for m in req["messages"] for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        res = [b["tool_use_id"] for m in req["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
        assert ids == res
    elif fmt == "openai-chat":
        calls = [c["id"] for m in req["messages"] for c in m.get("tool_calls", [])]
        assert calls == [m["tool_call_id"] for m in req["messages"] if m["role"] == "tool"]
    elif fmt == "openai-responses":
        calls = [x["call_id"] for x in req["input"] if x.get("type") == "function_call"]
        assert calls == [x["call_id"] for x in req["input"] if x.get("type") == "function_call_output"]
    else:
        calls = [p["function_call"]["name"] for c in req["contents"] for p in c["parts"] if "function_call" in p]
        outs = [p["function_response"]["name"] for c in req["contents"] for p in c["parts"] if "function_response" in p]
        assert len(calls) == len(outs) == 8


def test_mask_hysteresis_waits_for_a_batch_worth_the_cache_break(tmp_path):
    cfg = CompactionConfig(mask_at=0.01, mask_min_tokens=3000, cost_aware=False)
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=200_000, compaction=cfg) as e:
        s = long_session(e, turns=8)
        built = []
        for i in range(8, 40):
            add_turn(s, i)
            built.append((len(records(s, "mask")), s.build()))
        n_masks = built[-1][0]
        assert 1 <= n_masks <= 4  # a few batches, not one rewrite per turn
        for r in records(s, "mask"):
            assert r["saved_tokens"] >= 3000


def test_cost_model_masks_below_pressure_only_when_it_pays(tmp_path):
    turns = CompactionConfig(expected_turns=10).expected_turns
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db") as e:
        fold = PlannedFold(1, 1, 2, "x", 10_000, ())
        pays, econ = mask_pays([fold], [100, 10_500, 200, 300], 1.0, e.spec, turns)
        assert pays and econ["net_usd"] > 0  # big fold near the end: saves 10k cached tokens per turn
        pays, econ = mask_pays([PlannedFold(0, 1, 2, "x", 100, ())], [200, 50_000, 50_000], 1.0, e.spec, turns)
        assert not pays and econ["rewrite_usd"] > econ["saving_usd_per_turn"] * 10
        # explicit breakpoints: a batch after the carry re-writes from the carry (unit 1 here), not from its edit
        assert rewrite_from([fold], e.spec, 0) == 0 and rewrite_from([fold], e.spec, 3) == 1
        late = PlannedFold(3, 7, 8, "x", 250, ())
        _, near = mask_pays([late], [100, 10_500, 200, 300], 1.0, e.spec, turns)
        _, carry = mask_pays([late], [100, 10_500, 200, 300], 1.0, e.spec, turns, cached_upto=1)
        prices = e.spec.prices
        assert near["rewrite_usd"] == round(50 * (prices.cache_write - prices.cache_read) / 1e6, 6)
        assert carry["rewrite_usd"] == round((11_000 - 250) * (prices.cache_write - prices.cache_read) / 1e6, 6)
    with ws.Engine(model="gpt-4o", store=tmp_path / "o.db") as e:
        assert rewrite_from([late], e.spec, 1) == 3  # implicit prefix caching reads up to the edit


# --------------------------------------------------------------------------- summaries


def test_summary_replaces_the_oldest_span_and_rolls(tmp_path):
    with ws.Engine(model="claude-sonnet-4-5", compaction=SUMMARIZE, store=tmp_path / "w.db", window=12_000) as e:
        s = long_session(e, turns=8, size=2)
        p1 = None
        for i in range(8, 60):
            add_turn(s, i, size=2)
            pack = s.build()
            if p1 is None and any(a["kind"] == "summary" for a in pack.manifest.actions):
                p1 = pack
                break
        assert p1 is not None
        msgs = p1.neutral.messages
        assert msgs[0].text.startswith("ORIGINAL TASK")
        assert msgs[1].role == "user" and msgs[1].text.startswith("[windowsmith: summary")
        assert "GOAL: Fix the refund bug" in msgs[1].text and "REFERENCES:" in msgs[1].text
        assert p1.tokens <= p1.manifest.available
        check_pairs(msgs)
        assert any(a["kind"] == "summary" for a in p1.manifest.actions)
        for j in range(i + 1, i + 60):
            add_turn(s, j, size=2)
            s.build()
        sums = records(s, "summary")
        assert len(sums) >= 2
        assert sums[-1]["absorbs"] == sums[-2]["seq"]  # rolling: the new summary absorbs the previous
        assert "messages so far" in sums[-1]["summary"]["sections"]["state"]
        assert sums[-1]["summary"]["sections"]["calls"] > sums[-2]["summary"]["sections"]["calls"]
        # lessons extracted with provenance
        lessons = s.lessons
        assert any("prefer small commits" in x["text"] for x in lessons) or any("failed" in x["text"] for x in lessons) \
            or lessons == []
        for x in lessons:
            assert x["provenance"]["first_seq"] <= x["provenance"]["last_seq"]


def test_every_compacted_span_is_recorded_and_reconstructible(tmp_path):
    with ws.Engine(model="claude-sonnet-4-5", compaction=SUMMARIZE, store=tmp_path / "w.db", window=16_000) as e:
        s = long_session(e, turns=60, size=2)
        for i in range(60, 90):
            add_turn(s, i, size=2)
            s.build()
        for r in records(s):
            if r["type"] in ("summary", "emergency"):
                span = s.state.span_messages(r["first_seq"], r["last_seq"])
                assert span and span[0][0] == r["first_seq"]
        for r in records(s, "mask"):
            for f in r["folds"]:
                for sha in f["artifacts"]:
                    assert e.store.get_blob(sha) is not None
        latest = records(s, "summary")[-1]["summary"]
        kinds = {x["kind"] for x in latest["refs"]}
        assert {"file", "command", "error"} <= kinds
        rebuilt = s.reconstruct(400, kinds=["file"], content_provider=lambda p: f"<contents of {p}>")
        assert "### file: tests/" in rebuilt and "<contents of tests/" in rebuilt


def test_reconstruct_fetches_files_and_artifacts_within_budget(tmp_path):
    store = ws.open_store(str(tmp_path / "s.db"))
    sha = store.put_blob(b"line 1\nline 2\n" * 50, session_id=None)
    refs = [Reference("artifact", f"artifact://{sha}", 0.9, 3, {"sha256": sha}),
            Reference("file", "a.py", 0.8), Reference("file", "missing.py", 0.7), Reference("url", "https://x.y", 0.1)]
    out = reconstruct(refs, 10_000, lambda p: "print('a')" if p == "a.py" else None, store)
    assert "line 2" in out.text and "print('a')" in out.text
    assert [r.value for r in out.missing] == ["missing.py"]
    small = reconstruct(refs, 80, lambda p: "x" * 5000, store)
    assert small.tokens <= 80 and small.skipped
    with pytest.raises(UsageError, match="budget_tokens must be >= 0"):
        reconstruct(refs, -1)
    store.close()


# --------------------------------------------------------------------------- bad summarizers


@pytest.mark.parametrize("bad", ["empty", "echo", "error", "timeout", RuntimeError("boom")])
def test_bad_summarizer_output_falls_back_without_losing_history(tmp_path, bad):
    fake = FakeSummarizer(script=[bad])
    with ws.Engine(model="claude-sonnet-4-5", compaction=SUMMARIZE, store=tmp_path / "w.db", window=12_000, summarizer=fake) as e:
        s = long_session(e, turns=8, size=2)
        for i in range(8, 60):
            add_turn(s, i, size=2)
            pack = s.build()
            if fake.calls:
                break
        assert fake.calls
        failed = records(s, "failed")
        assert failed and failed[0]["stage"] == "summary" and "history kept" in failed[0]["reason"]
        assert not records(s, "summary")
        assert records(s, "emergency")  # the next stage ran
        kinds = [a["kind"] for a in pack.manifest.actions]
        assert "summary_failed" in kinds and "emergency" in kinds
        assert pack.tokens <= pack.manifest.available
        check_pairs(pack.neutral.messages)
        for m in pack.neutral.messages:
            assert "Overloaded" not in m.text and "must not" not in m.text
        assert len(s.messages) == 1 + 2 * (i + 1)  # nothing lost from the log
        log = [m for m in pack.neutral.messages if m.text.startswith("[windowsmith: work log")]
        assert log and "[turn " in log[0].text and "artifact://" in log[0].text


def test_check_summary_cases():
    msgs = [ws.Message.user("please fix " + "the bug in module x " * 50)]
    t = render_transcript(msgs)
    assert check_summary(Summary(""), t) == "the summarizer returned empty text"
    assert "echoed" in check_summary(Summary(t), t)
    assert "error message" in check_summary(Summary("Error: rate limit exceeded"), t)
    assert "no shorter" in check_summary(Summary("x " * 2000), t)
    assert check_summary("text", t).startswith("the summarizer returned str")
    assert check_summary(OfflineSummarizer().summarize(msgs), t) is None


# --------------------------------------------------------------------------- resume


@pytest.mark.slow
def test_resume_in_a_new_process_builds_identical_packs_without_summarizing(tmp_path):
    db = tmp_path / "w.db"
    with ws.Engine(model="claude-sonnet-4-5", compaction=SUMMARIZE, store=db, window=12_000) as e:
        s = long_session(e, turns=20, size=2)
        for i in range(20, 80):
            add_turn(s, i, size=2)
            s.build()
        assert len(records(s, "summary")) >= 2 and records(s, "mask")
        pack = s.build()
        events = len(e.store.events("long"))
    code = textwrap.dedent(f"""
        import json, windowsmith as ws
        from windowsmith.compaction import FakeSummarizer
        fake = FakeSummarizer(script=[RuntimeError("the summarizer must not run on resume")])
        with ws.Engine(model="claude-sonnet-4-5", store={str(db)!r}, window=12_000, summarizer=fake,
                       compaction=ws.CompactionConfig(summary_pays=False)) as e:
            s = e.session("long")
            p = s.build()
            print(json.dumps({{"checksum": p.manifest.checksum, "events": len(e.store.events("long")),
                              "calls": len(fake.calls)}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got == {"checksum": pack.manifest.checksum, "events": events, "calls": 0}


# --------------------------------------------------------------------------- cache prefix


def _strip_cc(x):
    if isinstance(x, dict):
        return {k: _strip_cc(v) for k, v in x.items() if k != "cache_control"}
    if isinstance(x, list):
        return [_strip_cc(v) for v in x]
    return x


def _breakpoint(req: dict) -> tuple[int, int]:
    last = None
    for i, m in enumerate(req["messages"]):
        if isinstance(m["content"], list):
            for j, b in enumerate(m["content"]):
                if "cache_control" in b:
                    last = (i, j)
    assert last is not None
    return last


def _prefix(req: dict, pos: tuple[int, int]) -> str:
    i, j = pos
    if i >= len(req["messages"]):
        return "<shorter>"
    msgs = [*req["messages"][:i], {"role": req["messages"][i]["role"], "content": req["messages"][i]["content"][: j + 1]}]
    return json.dumps(_strip_cc([req.get("tools"), req.get("system"), msgs]), sort_keys=True)


def test_cache_prefix_is_byte_identical_between_compactions(tmp_path):
    with ws.Engine(model="claude-sonnet-4-5", compaction=SUMMARIZE, store=tmp_path / "w.db", window=16_000) as e:
        s = long_session(e, turns=4, size=2)
        prev = None
        prev_n = 0
        breaks = same = 0
        for i in range(4, 70):
            add_turn(s, i, size=2)
            pack = s.build("anthropic")
            n = len(records(s))
            if prev is not None:
                pos = _breakpoint(prev)
                if n == prev_n:  # no compaction record since: the previous cached prefix is reused exactly
                    assert _prefix(pack.request, pos) == _prefix(prev, pos)
                    same += 1
                else:
                    breaks += 1
            prev, prev_n = pack.request, n
        assert breaks >= 1 and same >= 2 * breaks  # compaction batches: the prefix breaks rarely


# --------------------------------------------------------------------------- reactive retry


class Replies:
    def __init__(self, *replies: tuple[int, dict[str, Any]]) -> None:
        self.replies = itertools.cycle(replies) if len(replies) == 1 else iter(replies)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        status, body = next(self.replies)
        return httpx2.Response(status, json=body)


ANTHROPIC_TOO_LONG = (400, {"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": "prompt is too long: 215000 tokens > 200000 maximum"}})
ANTHROPIC_OK = (200, {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                      "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn", "stop_sequence": None,
                      "usage": {"input_tokens": 900, "output_tokens": 3, "cache_read_input_tokens": 0,
                                "cache_creation_input_tokens": 0}})
OPENAI_TOO_LONG = (400, {"error": {"message": "This model's maximum context length is 128000 tokens. However, your "
                                   "messages resulted in 140000 tokens.", "type": "invalid_request_error",
                                   "param": "messages", "code": "context_length_exceeded"}})
OPENAI_OK = (200, {"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "Done.", "refusal": None}}],
                   "usage": {"prompt_tokens": 900, "completion_tokens": 3, "total_tokens": 903}})


def test_reactive_retry_on_anthropic_overflow_compacts_harder_once(tmp_path):
    replies = Replies(ANTHROPIC_TOO_LONG, ANTHROPIC_OK)
    client = anthropic.Anthropic(api_key="t", http_client=httpx2.Client(transport=httpx2.MockTransport(replies)),
                                 max_retries=0)
    with ws.Engine(model="claude-opus-4-5", store=tmp_path / "w.db", window=200_000) as e:
        s = long_session(e, turns=12)
        before = len(records(s))
        resp = s.call(lambda req: client.messages.create(**req))
        assert resp.content[0].text == "Done."
        assert len(replies.bodies) == 2
        assert len(json.dumps(replies.bodies[1])) < len(json.dumps(replies.bodies[0]))
        new = records(s)[before:]
        assert new and all("rejected" in r["reason"] for r in new if r["type"] != "failed")
        assert s.messages[-1].text == "Done."


def test_reactive_retry_gives_up_after_one_retry(tmp_path):
    replies = Replies(OPENAI_TOO_LONG)
    client = openai.OpenAI(api_key="t", http_client=httpx2.Client(transport=httpx2.MockTransport(replies)), max_retries=0)
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db") as e:
        s = long_session(e, turns=12)
        with pytest.raises(openai.BadRequestError):
            s.call(lambda req: client.chat.completions.create(**req))
        assert len(replies.bodies) == 2  # one retry, no loop
        stages = [r["type"] for r in records(s)]
        assert len(stages) == len(set(stages)) or stages.count("truncate") > 1  # no stage twice per call


def test_reactive_retry_openai_then_success(tmp_path):
    replies = Replies(OPENAI_TOO_LONG, OPENAI_OK)
    client = openai.OpenAI(api_key="t", http_client=httpx2.Client(transport=httpx2.MockTransport(replies)), max_retries=0)
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db") as e:
        s = long_session(e, turns=12)
        s.call(lambda req: client.chat.completions.create(**req))
        assert len(replies.bodies) == 2 and s.messages[-1].text == "Done."


def test_other_errors_are_not_retried(tmp_path):
    calls = []

    def send(req):
        calls.append(req)
        raise RuntimeError("network down")

    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db") as e:
        s = long_session(e, turns=2)
        with pytest.raises(RuntimeError):
            s.call(send)
        assert len(calls) == 1


# --------------------------------------------------------------------------- SDK summarizers


def test_anthropic_summarizer_over_the_real_sdk(tmp_path):
    payload = {"goal": "fix refund", "decisions": ["patch refund.py"], "state": "tests fail in test_refund_twice",
               "open_questions": [], "next_step": "rerun tests", "references": [{"kind": "file", "value": "refund.py"}],
               "lessons": ["the user prefers small commits"]}
    reply = (200, {**ANTHROPIC_OK[1], "content": [{"type": "text", "text": json.dumps(payload)}],
                   "usage": {"input_tokens": 5000, "output_tokens": 120}})
    replies = Replies(reply)
    client = anthropic.Anthropic(api_key="t", http_client=httpx2.Client(transport=httpx2.MockTransport(replies)),
                                 max_retries=0)
    summ = AnthropicSummarizer(client, model="claude-haiku-4-5")
    with ws.Engine(model="claude-sonnet-4-5", compaction=SUMMARIZE, store=tmp_path / "w.db", window=12_000, summarizer=summ) as e:
        s = long_session(e, turns=8, size=2)
        for i in range(8, 60):
            add_turn(s, i, size=2)
            s.build()
            if replies.bodies:
                break
        body = replies.bodies[0]
        assert body["model"] == "claude-haiku-4-5" and 256 <= body["max_tokens"] <= 2048  # reserved output
        assert "JSON" in body["system"]
        rec = records(s, "summary")[0]
        assert rec["summarizer"] == "anthropic:claude-haiku-4-5"
        assert "DECISIONS:\n- patch refund.py" in rec["summary"]["text"]
        assert s.lessons[0]["text"] == "the user prefers small commits"
        assert s.lessons[0]["provenance"]["summary_seq"] == rec["seq"]


def test_openai_summarizer_over_the_real_sdk_and_error_text_is_rejected(tmp_path):
    bad = (200, {**OPENAI_OK[1], "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": "I'm sorry, I can't help."}}]})
    replies = Replies(bad)
    client = openai.OpenAI(api_key="t", http_client=httpx2.Client(transport=httpx2.MockTransport(replies)), max_retries=0)
    with ws.Engine(model="gpt-4o", compaction=SUMMARIZE, store=tmp_path / "w.db", window=12_000,
                   summarizer=OpenAISummarizer(client)) as e:
        s = long_session(e, turns=8, size=2)
        for i in range(8, 60):
            add_turn(s, i, size=2)
            s.build()
            if replies.bodies:
                break
        assert replies.bodies[0]["response_format"] == {"type": "json_object"}
        assert 256 <= replies.bodies[0]["max_completion_tokens"] <= 2048
        assert records(s, "failed") and not records(s, "summary")


def test_summarizer_timeout_through_the_sdk_is_a_fallback(tmp_path):
    def handler(request):
        raise httpx2.ReadTimeout("timed out", request=request)

    client = anthropic.Anthropic(api_key="t", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
                                 max_retries=0)
    with ws.Engine(model="claude-sonnet-4-5", compaction=SUMMARIZE, store=tmp_path / "w.db", window=12_000,
                   summarizer=AnthropicSummarizer(client)) as e:
        s = long_session(e, turns=8, size=2)
        for i in range(8, 60):
            add_turn(s, i, size=2)
            pack = s.build()
            if records(s, "failed"):
                break
        assert "APITimeoutError" in records(s, "failed")[0]["reason"]
        assert pack.tokens <= pack.manifest.available


# --------------------------------------------------------------------------- on demand


def test_compact_on_demand_tool_and_cli(tmp_path):
    db = tmp_path / "w.db"
    with ws.Engine(model="claude-sonnet-4-5", store=db) as e:
        s = long_session(e, turns=14)
        s.tools([*[t.to_dict() for t in s.state.tools], COMPACT_CONTEXT_TOOL])
        s.assistant("", tool_calls=[{"id": "cc", "name": "compact_context", "arguments": {"reason": "new subtask"}}])
        report = s.compact_context(reason="new subtask")  # while the call is open
        assert report.startswith("compacted the context")
        s.tool_result("cc", report)
        kinds = [r["type"] for r in records(s)]
        assert "mask" in kinds and "summary" in kinds
        pack = s.build()
        check_pairs(pack.neutral.messages)
        assert pack.neutral.messages[-1].tool_results[0].text == report
    out = CliRunner().invoke(ws.cli.main if hasattr(ws, "cli") else __import__("windowsmith.cli").cli.main,
                             ["compact", "long", "--store", str(db)])
    assert out.exit_code == 0, out.output
    assert "compact" in out.output
    out = CliRunner().invoke(__import__("windowsmith.cli").cli.main, ["compact", "nope", "--store", str(db)])
    assert out.exit_code != 0 and "no session" in out.output


def test_usage_note_in_the_tail_when_over_80_percent(tmp_path):
    cfg = CompactionConfig(enabled=False)
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=9_000, compaction=cfg,
                   budget=ws.BudgetConfig(reserved_output=500)) as e:
        s = e.session("n", goal="g")
        s.tools([COMPACT_CONTEXT_TOOL])
        s.user("start")
        s.assistant("word " * 7300)
        pack = s.build("openai-chat", model="gpt-4.1")
        assert pack.neutral.tail and "## NOTE" in pack.neutral.tail and "compact_context" in pack.neutral.tail
        s2 = e.session("m", goal="g")
        s2.user("short")
        assert "## NOTE" not in (s2.build("openai-chat", model="gpt-4.1").neutral.tail or "")
        # as full, but the agent has no tool to act on it (compact_context, read_result): the note, uncached and
        # different on every call, is left out
        s3 = e.session("k", goal="g")
        s3.user("start")
        s3.assistant("word " * 7300)
        assert "## NOTE" not in (s3.build("openai-chat", model="gpt-4.1").neutral.tail or "")


def test_decision_scanner_finds_what_the_backtracking_pattern_found() -> None:
    # the old single pattern (quadratic in the sentence length) is the reference for the two linear passes
    import re

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from windowsmith.compaction.references import _S, decisions

    old = re.compile(_S + r"*\b(?:I will|I'll|I decided|decided to|let's|we should|we will|going to|the plan is|"
                     r"instead of)\b" + _S + r"*[.!?]?", re.I)
    pieces = st.sampled_from(["I will", "let's", "Instead of", "fix", "a.b", "we", "should", ".", "!", "?", "\n", " ",
                              "refund.py", "I'll", "x"])

    @settings(max_examples=300, deadline=None)
    @given(st.lists(pieces, max_size=40))
    def check(ps: list[str]) -> None:
        text = "".join(ps)
        assert decisions(text) == old.findall(text)

    check()


@pytest.mark.slow
def test_the_free_cut_comes_earlier_where_a_rewrite_costs_no_more_than_a_few_reads(tmp_path):
    """``cut_mark``: with gpt-4o's prices (no write premium, a read at half the input price) the band between two
    cuts that costs least is a few turns, so the free cut comes at the summary threshold (0.85 of the budget); with
    a rewrite premium of 11.5 reads (Anthropic's write and read multipliers on the same model) it waits for
    ``cut_at`` (0.95). Same model, tokenizer, window and session: only the cache prices differ."""
    from dataclasses import replace as dc_replace

    from windowsmith.compaction.economics import REWRITE_READS

    reg = load_registry()
    spec = reg.get("gpt-4o")
    p = spec.prices
    assert p.cache_write - p.cache_read <= REWRITE_READS * p.cache_read
    premium = dc_replace(spec, name="gpt-4o-premium", aliases=(),
                         prices=dc_replace(p, cache_write=p.input * 1.25, cache_read=p.input * 0.1))
    reg.register(premium)
    fills: dict[str, float] = {}
    for model in ("gpt-4o", "gpt-4o-premium"):
        with ws.Engine(model=model, registry=reg, store=tmp_path / f"{model}.db", window=8000) as e:
            s = e.session("cut")
            s.system("You are a careful coding agent.")
            s.user("Fix the failing refund test in tests/test_refund.py.")
            last = 0
            for i in range(80):
                add_turn(s, i)
                pack = s.build()
                if records(s, "emergency"):
                    fills[model] = last / pack.manifest.available
                    break
                last = pack.tokens
    # the request before the first cut: the cut comes with the turn that crosses the summary threshold for gpt-4o;
    # with the premium it waits for the turn that crosses cut_at
    assert set(fills) == {"gpt-4o", "gpt-4o-premium"}
    assert fills["gpt-4o"] < 0.85 < fills["gpt-4o-premium"]  # (0.83 and 0.90 here: a turn is ~0.06)
