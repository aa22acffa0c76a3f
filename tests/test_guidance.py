"""Guidance layers: failure evidence, goal recitation with drift, JSON repair of tool-call arguments.

The layers write only to the dynamic tail, so the prefix tests replay real traces with them on (every
format) and a property checks that everything but the tail is byte-identical to a build without them.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from test_invariants import (
    _replay_packs,
    assert_prefix_kept_between_compactions,
)
from windowsmith.guidance import (
    FailuresLayer,
    FailureTracker,
    RecitationLayer,
    classify,
    guided_layers,
    repair_arguments,
)
from windowsmith.guidance.failures import failed, signature
from windowsmith.traces import load_traces

BASH = {"name": "bash", "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
                       "required": ["command"]}}


# ---------------------------------------------------------------------------------------------- classification

@pytest.mark.parametrize(("text", "category"), [
    ('  File "a.py", line 3\n    def f(:\n         ^\nSyntaxError: invalid syntax', "syntax"),
    ("Traceback (most recent call last):\nModuleNotFoundError: No module named 'yaml'", "import"),
    ("FAILED tests/test_a.py::test_x - assert 1 == 2\n===== 1 failed, 3 passed in 0.2s =====", "test"),
    ("bash: /etc/shadow: Permission denied", "permission"),
    ("cat: missing.txt: No such file or directory", "not_found"),
    ("Error: user not found", "not_found"),
    ("requests.exceptions.ReadTimeout: HTTPSConnectionPool: Read timed out.", "timeout"),
    ("curl: (7) Failed to connect: Connection refused", "network"),
    ("TypeError: unsupported operand type(s) for +: 'int' and 'str'", "type"),
    ("Traceback (most recent call last):\nAssertionError", "assertion"),
    ("fatal: write error: No space left on device", "resource"),
    ("Error: payment amount does not add up, total price is 200, but paid 100", "other"),
])
def test_classify_each_category(text, category):
    assert classify(text) == category
    assert failed(text) or category in ("permission", "network", "timeout", "resource", "not_found")


@pytest.mark.parametrize(("text", "is_error", "expected"), [
    ("<returncode>1</returncode>\n<output>boom</output>", False, True),
    ("<returncode>0</returncode>\n<output>ValueError: mentioned in a file</output>", False, False),
    ("Exit code: 2\nusage: tool [-h]", False, True),
    ("all good", True, True),
    ("def handle_error(e):\n    raise ValueError('x')", False, False),  # a file that mentions errors
    ("Traceback (most recent call last):\n  File \"x\", line 1\nKeyError: 'a'", False, True),
])
def test_failed_outcomes(text, is_error, expected):
    assert failed(text, is_error) is expected


def test_signature_normalizes_numbers_ids_and_quoted_values():
    a = signature("Traceback (most recent call last):\n  File \"x.py\", line 10\nKeyError: 'user_123'")
    b = signature("Traceback (most recent call last):\n  File \"y.py\", line 99\nKeyError: 'user_999'")
    assert a == b == "KeyError: '…'"
    assert signature("<returncode>2</returncode>\n<output>\n</output>") == "exit code 2, no output"


# ---------------------------------------------------------------------------------------------- the tracker

def test_repeated_failing_action_on_a_real_trace_is_flagged(traces_dir):
    trace = load_traces(traces_dir / "tau-bench/gpt-4o-airline.json")[13]  # task-13 trial-0
    tr = FailureTracker().feed(trace.messages)
    reps = tr.repeats()
    # the agent sent the same flight change three times, and a second variant twice: both fail the same way
    assert sorted(len(v) for v in reps.values()) == [2, 3]
    assert {f.action.tool for v in reps.values() for f in v} == {"update_reservation_flights"}
    lines = tr.section()
    assert lines[0].startswith("REPEATED 3 times: update_reservation_flights(") and "(turns 12, 14, 20)" in lines[0]
    assert lines[1].startswith("REPEATED 2 times: update_reservation_flights(")
    assert all("not available on date" in ln for ln in lines[:2])


def test_text_actions_with_return_codes_are_tracked(traces_dir):
    trace = load_traces(traces_dir / "mini-swe-agent/django__django-16560.traj.json")[0]
    tr = FailureTracker().feed(trace.messages)
    assert tr.actions > 100
    rep = tr.report()
    assert rep["failures"] >= 5 and rep["repeated_actions"] >= 1
    assert "syntax" in rep["categories"]


def test_cascade_and_pattern_lines():
    msgs = [ws.Message.user("go")]
    for i, (cmd, out) in enumerate([("ls a", "ok"), ("cat x.txt", "cat: x.txt: No such file or directory\nexit code 1"),
                                    ("cat b/y.txt", "cat: b/y.txt: No such file or directory\nexit code 1"),
                                    ("python z.py", "Traceback (most recent call last):\nImportError: cannot import name 'q'")]):
        msgs.append(ws.Message.assistant(tool_calls=[ws.ToolCall(f"c{i}", "bash", {"command": cmd})]))
        msgs.append(ws.Message("tool", (ws.ToolResult(f"c{i}", (ws.Text(out),)),)))
    tr = FailureTracker().feed(msgs)
    lines = tr.section()
    assert any(ln.startswith("CASCADE: the last 3 actions all failed since turn 2") for ln in lines)
    assert any(ln.startswith("PATTERN: not_found:") and "2 different actions" in ln for ln in lines)
    assert tr.report()["longest_cascade"] == 3
    msgs += [ws.Message.assistant(tool_calls=[ws.ToolCall("c9", "bash", {"command": "ls"})]),
             ws.Message("tool", (ws.ToolResult("c9", (ws.Text("fine"),)),))]
    tr.feed(msgs[-2:])
    assert tr.report()["cascade"] == 0 and not any(ln.startswith("CASCADE") for ln in tr.section())


# ---------------------------------------------------------------------------------------------- layers in a session

def _failing_session(engine: ws.Engine, sid: str = "g") -> ws.Session:
    s = engine.session(sid, goal="Fix the failing test in parser.py", acceptance=["tests pass", "no new warnings"])
    s.tools([BASH])
    s.user("please fix parser.py")
    for i in range(3):
        s.assistant(tool_calls=[{"id": f"c{i}", "name": "bash", "arguments": {"command": "pytest tests/test_parser.py"}}])
        s.tool_result(f"c{i}", "FAILED tests/test_parser.py::test_x - AssertionError: assert 1 == 2\n1 failed")
    return s


def test_failures_section_in_the_tail_and_counts_in_the_manifest(make_engine):
    s = _failing_session(make_engine(layers=guided_layers))
    pack = s.build()
    tail = pack.neutral.tail
    assert "## FAILURES\n- REPEATED 3 times: bash(" in tail
    assert tail.index("## ACCEPTANCE") < tail.index("## FAILURES")
    g = pack.manifest.guidance["failures"]
    assert g["failures"] == 3 and g["repeated_actions"] == 1 and g["categories"] == {"test": 3} and g["lines"] == 1
    assert pack.manifest.layers["failures"]["used"] > 0


def test_failures_layer_keeps_to_its_own_budget(make_engine):
    s = _failing_session(make_engine(layers=lambda: [*guided_layers(failures=False), FailuresLayer(budget_tokens=10)]))
    pack = s.build()
    assert "FAILURES" not in (pack.neutral.tail or "")
    assert pack.manifest.guidance["failures"]["lines"] == 0 and pack.manifest.guidance["failures"]["failures"] == 3


def test_recitation_period_shrinks_as_the_session_grows():
    layer = RecitationLayer(base_period=8, grow_every=16)
    assert [layer.period(t) for t in (0, 15, 16, 31, 32, 63, 64, 500)] == [8, 8, 4, 4, 2, 2, 1, 1]


def test_recitation_on_schedule_and_on_drift(make_engine):
    engine = make_engine(layers=lambda: [*guided_layers(recitation=False), RecitationLayer(base_period=4, window=3)])
    s = engine.session("r", goal="Refund the damaged blender on order W123", acceptance=["refund issued"])
    s.tools([{"name": "get_order", "description": "", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}},
             {"name": "get_weather", "description": "", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])
    s.user("my blender arrived broken")
    reports = []
    for i in range(3):  # on track: the order and the blender
        s.assistant(f"Looking up order W123 for the blender refund ({i})",
                    tool_calls=[{"id": f"o{i}", "name": "get_order", "arguments": {"order_id": "W123"}}])
        s.tool_result(f"o{i}", "blender, damaged")
        reports.append(s.build().manifest.guidance["recitation"])
    assert [r["recited"] for r in reports] == [False, False, False]
    assert reports[-1]["drift"] is False and reports[-1]["overlap"] > 0.2
    s.assistant("Checking the weather", tool_calls=[{"id": "w0", "name": "get_weather", "arguments": {"city": "Oslo"}}])
    s.tool_result("w0", "rain")
    pack = s.build()
    rep = pack.manifest.guidance["recitation"]
    assert rep["turn"] == 4 and rep["reason"] == "period" and rep["recited"]  # turn 4: on schedule
    assert pack.neutral.tail.endswith("Still open: refund issued")
    for i in range(1, 4):  # three actions that have nothing to do with the goal
        s.assistant("Checking the weather", tool_calls=[{"id": f"w{i}", "name": "get_weather", "arguments": {"city": "Oslo"}}])
        s.tool_result(f"w{i}", "rain")
    pack = s.build()
    rep = pack.manifest.guidance["recitation"]
    assert rep == {"turn": 7, "period": 4, "overlap": 0.0, "drift": True, "recited": True, "reason": "drift"}
    tail = pack.neutral.tail
    assert tail.rstrip().splitlines()[-1].startswith("Drift: the last 3 actions (checking, get_weather, oslo, rain, weather) share 0%")  # results count
    assert tail.index("## FOCUS") > tail.index("## ACCEPTANCE")


# ---------------------------------------------------------------------------------------------- JSON repair

SPEC = ws.ToolSpec.from_dict(BASH)


@pytest.mark.parametrize(("raw", "args", "changes"), [
    ('{"command": "ls -la"', {"command": "ls -la"}, ["invalid JSON repaired"]),
    ("{'command': 'ls', 'timeout': 5,}", {"command": "ls", "timeout": 5}, ["invalid JSON repaired"]),
    ('{"command": "ls", "timeout": "30"}', {"command": "ls", "timeout": 30}, ["Coerced string to integer at $.timeout"]),
])
def test_repair_arguments(raw, args, changes):
    fix = repair_arguments(raw, SPEC)
    assert fix.arguments == args and fix.changed and fix.valid
    assert all(c in fix.changes for c in changes)


def test_repair_reports_what_the_schema_still_rejects():
    fix = repair_arguments('{"timeout": 5', SPEC)
    assert fix.changed and not fix.valid and fix.arguments == {"timeout": 5}
    assert fix.errors == ("$: 'command' is a required property",)
    ok = repair_arguments({"command": "ls"}, SPEC)
    assert not ok.changed and ok.valid


def test_session_repairs_arguments_and_logs_each_repair(make_engine, tmp_path):
    engine = make_engine()
    s = engine.session("j")
    s.tools([BASH])
    s.user("list files")
    # what the OpenAI parsers produce for arguments that are not JSON
    s.add({"role": "assistant", "content": [{"type": "tool_call", "id": "c1", "name": "bash",
                                             "arguments": {"_raw": '{"command": "ls", "timeout": "30"'}}]})
    call = s.messages[-1].tool_calls[0]
    assert dict(call.arguments) == {"command": "ls", "timeout": 30}
    events = [e for e in engine.store.events(s.id) if e.kind == "meta" and e.data.get("type") == "repair"]
    assert len(events) == 1
    d = events[0].data
    assert d["call_id"] == "c1" and d["raw"] == '{"command": "ls", "timeout": "30"' and d["valid"] is True
    assert d["changes"] == ["invalid JSON repaired", "Coerced string to integer at $.timeout"]
    s.tool_result("c1", "a.txt")
    pack = s.build()
    assert [r["what"] for r in pack.manifest.repairs] == [d["what"]]
    assert "arguments repaired" in d["what"]
    rendered = pack.request["messages"][1]["content"][0]
    assert rendered["type"] == "tool_use" and rendered["input"] == {"command": "ls", "timeout": 30}
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "ws.db") as again:  # the log alone rebuilds it
        assert again.session("j").build().manifest.checksum == pack.manifest.checksum


def test_repair_keeps_secrets_out_of_the_log(make_engine, tmp_path):
    engine = make_engine()
    s = engine.session("sec")
    s.tools([BASH])
    s.user("deploy")
    key = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    s.add({"role": "assistant", "content": [{"type": "tool_call", "id": "c1", "name": "bash",
                                             "arguments": {"_raw": '{"command": "deploy --key ' + key + '"'}}]})
    engine.close()
    assert key.encode() not in (tmp_path / "ws.db").read_bytes()


def test_repair_can_be_turned_off(make_engine):
    s = make_engine(ingest=ws.IngestConfig(repair_arguments=False)).session("off")
    s.tools([BASH])
    s.user("x")
    s.add({"role": "assistant", "content": [{"type": "tool_call", "id": "c1", "name": "bash", "arguments": {"_raw": "{bad"}}]})
    assert dict(s.messages[-1].tool_calls[0].arguments) == {"_raw": "{bad"}
    assert not s.state.repairs


# ---------------------------------------------------------------------------------------------- the cached prefix

CASES = [
    ("tau-bench/gpt-4o-airline.json", 13),
    ("mini-swe-agent/django__django-16560.traj.json", 0),
    ("openhands/msb_example_output.jsonl", 1),
]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses", "gemini"])
@pytest.mark.parametrize(("path", "idx"), CASES)
def test_guidance_layers_keep_the_cache_prefix_on_real_traces(traces_dir, tmp_path, fmt, path, idx):
    model = {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-pro"}.get(fmt, "gpt-4.1")
    trace = load_traces(traces_dir / path)[idx]
    with ws.Engine(model=model, store=tmp_path / "w.db", layers=guided_layers) as engine:
        packs = _replay_packs(engine, trace, fmt, "g")
    sections = {h for p in packs for h in ("FAILURES", "FOCUS") if f"## {h}" in (p.neutral.tail or "")}
    assert sections == {"FAILURES", "FOCUS"}, "both guidance sections appear on these traces"
    assert_prefix_kept_between_compactions(packs, fmt, tools=True)


OUTCOMES = st.sampled_from(["ok", "FAILED test_a.py::t - assert 0\n1 failed", "cat: f: No such file or directory\nexit code 1",
                            "Traceback (most recent call last):\nTypeError: bad"])


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["ls", "pytest", "cat f", "python x.py"]), OUTCOMES), min_size=1, max_size=12))
def test_guidance_changes_nothing_but_the_tail(tmp_path_factory, steps):
    path = tmp_path_factory.mktemp("g") / "w.db"
    with ws.Engine(model="claude-sonnet-4-5", store=path) as plain, \
            ws.Engine(model="claude-sonnet-4-5", store=path, layers=guided_layers) as guided:
        s = plain.session("p", goal="make pytest pass", acceptance=["pytest passes"])
        s.tools([BASH])
        s.user("fix it")
        for i, (cmd, out) in enumerate(steps):
            s.assistant(tool_calls=[{"id": f"c{i}", "name": "bash", "arguments": {"command": cmd}}])
            s.tool_result(f"c{i}", out)
        a, b = s.build().neutral, guided.session("p").build().neutral
    assert (a.tools, a.system, a.session, a.messages) == (b.tools, b.system, b.session, b.messages)
    assert b.tail.startswith(a.tail)


def test_broken_arguments_in_a_provider_response_are_repaired_when_recorded(make_engine):
    s = make_engine(model="gpt-4.1").session("resp")
    s.tools([BASH])
    s.user("list files")
    pack = s.build("openai-chat")
    s.record({"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4.1",
              "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                  "role": "assistant", "content": None, "tool_calls": [{
                      "id": "call_1", "type": "function",
                      "function": {"name": "bash", "arguments": '{"command": "ls -la", "timeout": "10",}'}}]}}],
              "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59}}, pack=pack)
    assert dict(s.messages[-1].tool_calls[0].arguments) == {"command": "ls -la", "timeout": 10}
    (rep,) = s.state.repairs
    assert "call_1" in rep.what and "invalid JSON repaired" in rep.what
