"""Broken and unusual inputs: every repair is recorded, every failure is a TraceFormatError that says where."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from windowsmith.errors import TraceFormatError
from windowsmith.model import Image, Thinking
from windowsmith.traces import FORMATS, LARGE_OUTPUT_BYTES, NO_RESULT_TEXT, detect_format, iter_trace_files, load_traces


def write(tmp_path: Path, name: str, value: Any) -> Path:
    p = tmp_path / name
    if isinstance(value, bytes):
        p.write_bytes(value)
    elif isinstance(value, str):
        p.write_text(value, encoding="utf-8")
    else:
        p.write_text(json.dumps(value), encoding="utf-8")
    return p


def call(cid: str, name: str, args: str = "{}") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


# ---------------------------------------------------------------------------------------------------
# Repairs
# ---------------------------------------------------------------------------------------------------


def test_tool_call_without_result_gets_synthetic_error_result(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "unpaired.json",
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1", "lookup"), call("c2", "fetch")]},
            {"role": "tool", "tool_call_id": "c2", "content": "fetched"},
            {"role": "user", "content": "and?"},
        ],
    )
    [t] = load_traces(p)
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "user"]
    r1, r2 = t.messages[2].tool_results
    assert (r1.call_id, r1.name, r1.is_error, r1.text) == ("c1", "lookup", True, NO_RESULT_TEXT)
    assert (r2.call_id, r2.name, r2.is_error, r2.text) == ("c2", "fetch", False, "fetched")
    assert len(t.repairs) == 1 and "'c1'" in t.repairs[0] and "no result" in t.repairs[0]


def test_tool_call_at_the_end_without_result(tmp_path: Path) -> None:
    p = write(
        tmp_path, "end.json", [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call("z", "f")]}]
    )
    [t] = load_traces(p)
    assert t.messages[-1].role == "tool" and t.messages[-1].tool_results[0].text == NO_RESULT_TEXT


def test_tool_result_without_call_becomes_user_text(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "orphan.json",
        [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "ghost", "name": "search", "content": "orphan output"},
            {"role": "assistant", "content": "ok"},
        ],
    )
    [t] = load_traces(p)
    assert [m.role for m in t.messages] == ["user", "user", "assistant"]
    assert "orphan output" in t.messages[1].text and "ghost" in t.messages[1].text
    assert t.tool_calls == ()
    assert any("'ghost'" in r and "no matching tool call" in r for r in t.repairs)


def test_orphan_result_between_results_does_not_break_pairing(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "interleaved.json",
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [call("a", "f"), call("b", "g")]},
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "tool", "tool_call_id": "nope", "content": "stray"},
            {"role": "tool", "tool_call_id": "b", "content": "B"},
        ],
    )
    [t] = load_traces(p)
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "user"]
    assert [r.text for r in t.messages[2].tool_results] == ["A", "B"]
    assert "stray" in t.messages[3].text


def test_empty_turns_are_dropped_with_a_note(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "empty.json",
        [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": ""},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "user", "content": "   "},
            {"role": "assistant", "content": "answer"},
        ],
    )
    [t] = load_traces(p)
    assert [(m.role, m.text) for m in t.messages] == [("user", "hello"), ("assistant", "answer")]
    assert sum("empty assistant turn" in r for r in t.repairs) == 2
    assert sum("empty user turn" in r for r in t.repairs) == 1
    assert any("[1]" in r for r in t.repairs)  # says which message


def test_non_utf8_bytes_are_replaced_and_noted(tmp_path: Path) -> None:
    body = b'[{"role": "user", "content": "caf\xe9 \xff ok"}, {"role": "assistant", "content": "fine"}]'
    p = write(tmp_path, "latin1.json", body)
    [t] = load_traces(p)
    assert t.messages[0].text == "caf\ufffd \ufffd ok"
    assert any("latin1.json" in r and "invalid UTF-8" in r for r in t.repairs)


def test_lone_surrogate_escapes_are_replaced_and_noted(tmp_path: Path) -> None:
    p = write(tmp_path, "surrogate.json", '[{"role": "user", "content": "bad \\ud800 char"}]')
    [t] = load_traces(p)
    # jsonvalues.clean_text replaces a lone surrogate (it is not an escaped byte) with "?"
    assert "\ud800" not in t.messages[0].text and t.messages[0].text.startswith("bad ")
    t.messages[0].text.encode("utf-8")
    assert any("[0]" in r and "surrogate" in r for r in t.repairs)


def test_tool_output_over_1mb_is_kept_whole_and_noted(tmp_path: Path) -> None:
    big = "x" * (LARGE_OUTPUT_BYTES + 50_000)
    p = write(
        tmp_path,
        "big.json",
        [
            {"role": "user", "content": "dump it"},
            {"role": "assistant", "tool_calls": [call("c", "cat")]},
            {"role": "tool", "tool_call_id": "c", "content": big},
        ],
    )
    [t] = load_traces(p)
    assert t.messages[2].tool_results[0].text == big
    [entry] = t.meta["large_outputs"]
    assert entry["bytes"] == len(big) and entry["call_id"] == "c"
    assert t.repairs == ()


def test_invalid_json_arguments_kept_raw_with_note(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "badargs.json",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [call("c", "run", '{"cmd": "ls')]},
            {"role": "tool", "tool_call_id": "c", "content": "done"},
        ],
    )
    [t] = load_traces(p)
    assert dict(t.tool_calls[0].arguments) == {"_raw": '{"cmd": "ls'}
    assert any("'run'" in r and "_raw" in r for r in t.repairs)


def test_text_and_tool_calls_in_one_turn_keep_both(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "both.json",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [call("c", "look", '{"q": 1}')]},
            {"role": "tool", "tool_call_id": "c", "content": "seen"},
        ],
    )
    [t] = load_traces(p)
    m = t.messages[1]
    assert m.text == "Let me check." and m.tool_calls[0].arguments == {"q": 1}


def test_truncated_json_file_names_the_position(tmp_path: Path) -> None:
    text = json.dumps([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], indent=1)
    p = write(tmp_path, "cut.json", text[: len(text) // 2])
    with pytest.raises(TraceFormatError) as e:
        load_traces(p)
    msg = str(e.value)
    assert "cut.json" in msg and "line" in msg and "column" in msg and "truncated" in msg
    assert "openai-chat" in msg and "tau-bench" in msg  # lists the supported formats


def test_truncated_jsonl_last_line_is_skipped_with_note(tmp_path: Path) -> None:
    convs = [
        json.dumps({"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]})
        for i in range(3)
    ]
    p = write(tmp_path, "runs.jsonl", "\n".join([*convs[:2], convs[2][:25]]))
    traces = load_traces(p)
    assert len(traces) == 2
    assert [t.source for t in traces] == [f"{p}:1", f"{p}:2"]
    assert all(any("line 3" in r and "truncated" in r for r in t.repairs) for t in traces)


def test_broken_jsonl_middle_line_raises_with_line(tmp_path: Path) -> None:
    good = json.dumps({"messages": [{"role": "user", "content": "q"}]})
    p = write(tmp_path, "mid.jsonl", "\n".join([good, '{"messages": [', good]))
    with pytest.raises(TraceFormatError, match=r"mid\.jsonl at line 2"):
        load_traces(p)


def test_jsonl_one_message_per_line_is_one_conversation(tmp_path: Path) -> None:
    lines = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call("c", "f")]},
        {"role": "tool", "tool_call_id": "c", "content": "r"},
        {"role": "assistant", "content": "done"},
    ]
    p = write(tmp_path, "msgs.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    assert detect_format(p) == "openai-chat"
    [t] = load_traces(p)
    assert t.system == "be brief" and [m.role for m in t.messages] == ["user", "assistant", "tool", "assistant"]


def test_unknown_format_lists_supported_formats(tmp_path: Path) -> None:
    p = write(tmp_path, "mystery.json", {"foo": 1, "bar": [1, 2]})
    with pytest.raises(TraceFormatError) as e:
        load_traces(p)
    msg = str(e.value)
    assert "mystery.json" in msg and "not a recognised trace format" in msg and "foo" in msg
    for f in FORMATS:
        assert f in msg
    with pytest.raises(TraceFormatError, match=r"mystery\.json"):
        detect_format(p)


def test_unknown_format_name_and_missing_file(tmp_path: Path) -> None:
    p = write(tmp_path, "x.json", [{"role": "user", "content": "q"}])
    with pytest.raises(TraceFormatError, match=r"unknown format 'langsmith'.*supported formats"):
        load_traces(p, format="langsmith")
    with pytest.raises(TraceFormatError, match="cannot read"):
        load_traces(tmp_path / "absent.json")
    with pytest.raises(TraceFormatError, match="empty"):
        load_traces(write(tmp_path, "blank.json", "  \n"))


def test_structural_errors_name_the_key_path(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "tau.json",
        [
            {"task_id": 0, "trial": 0, "reward": 1, "traj": [{"role": "user", "content": "q"}]},
            {"task_id": 1, "trial": 0, "reward": 1, "traj": "oops"},
        ],
    )
    with pytest.raises(TraceFormatError, match=r"tau\.json at \[1\]\.traj: expected array"):
        load_traces(p)
    p2 = write(tmp_path, "tau2.json", {"info": {}, "simulations": [{"id": "s", "messages": [{"role": "robot"}]}]})
    with pytest.raises(TraceFormatError, match=r"simulations\[0\]\.messages\[0\]\.role: unknown role 'robot'"):
        load_traces(p2)
    p3 = write(tmp_path, "chat.json", [{"role": "user", "content": "q"}, "not a message"])
    with pytest.raises(TraceFormatError, match=r"chat\.json at \[1\]: expected a JSON object"):
        load_traces(p3)


def test_format_override(tmp_path: Path) -> None:
    # plain user/assistant text is valid as both chat formats; detection says openai-chat
    p = write(tmp_path, "plain.json", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    assert detect_format(p) == "openai-chat"
    [t] = load_traces(p, format="anthropic-messages")
    assert t.format == "anthropic-messages" and [m.text for m in t.messages] == ["q", "a"]
    with pytest.raises(TraceFormatError, match=r"plain\.json: expected a JSON object, got array"):
        load_traces(p, format="tau2-bench")


# ---------------------------------------------------------------------------------------------------
# Detection and the log formats
# ---------------------------------------------------------------------------------------------------


def test_detect_each_log_format_by_content_not_extension(tmp_path: Path) -> None:
    chat = {"messages": [{"role": "user", "content": "q"}], "tools": [{"type": "function", "function": {"name": "f"}}]}
    anth = {"system": "s", "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]}
    anth_list = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
    ]
    resp = [{"role": "user", "content": "q"}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]
    for name, value, fmt in [
        ("a.log", chat, "openai-chat"),
        ("b.txt", anth, "anthropic-messages"),
        ("c.data", anth_list, "anthropic-messages"),
        ("d", resp, "openai-responses"),
        ("e.json", {"input": resp, "instructions": "sys"}, "openai-responses"),
        ("f.json", {"info": {}, "simulations": []}, "tau2-bench"),
        ("g.json", [{"task_id": 1, "traj": []}], "tau-bench"),
        ("h.json", {"trajectory": [{"action": "ls", "observation": "x", "response": "ls"}]}, "swe-agent"),
        (
            "i.json",
            {"history": [{"id": 0, "source": "user", "action": "message", "args": {"content": "q"}}]},
            "openhands",
        ),
        ("j.json", {"messages": [], "trajectory_format": "mini-swe-agent-1"}, "mini-swe-agent"),
    ]:
        assert detect_format(write(tmp_path, name, value)) == fmt, name


def test_anthropic_messages_with_thinking_and_tool_results(tmp_path: Path) -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig=="}
    doc = {
        "system": [{"type": "text", "text": "You are terse."}],
        "tools": [{"name": "get_weather", "description": "w", "input_schema": {"type": "object", "properties": {}}}],
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    thinking,
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "tu1", "name": "get_weather", "input": {"city": "Oslo"}},
                ],
                "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100},
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "tu1",
                        "content": [{"type": "text", "text": "rain"}],
                        "is_error": False,
                    },
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
    }
    [t] = load_traces(write(tmp_path, "anth.json", doc))
    assert t.system == "You are terse." and [s.name for s in t.tools] == ["get_weather"]
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "user"]
    th = t.messages[1].content[0]
    assert (
        isinstance(th, Thinking) and th.provider == "anthropic" and th.data["signature"] == "sig==" and th.text == "hmm"
    )
    assert t.messages[2].tool_results[0].name == "get_weather" and t.messages[2].tool_results[0].text == "rain"
    assert t.billed[1].prompt_tokens == 110 and t.billed[1].cache_read_tokens == 100


def test_openai_responses_items(tmp_path: Path) -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "plan"}],
        "encrypted_content": "enc",
    }
    doc = {
        "instructions": "Be exact.",
        "tools": [{"type": "function", "name": "add", "parameters": {"type": "object", "properties": {}}}],
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "1+1?"}]},
            reasoning,
            {"type": "function_call", "call_id": "fc1", "name": "add", "arguments": '{"a": 1, "b": 1}'},
            {"type": "function_call_output", "call_id": "fc1", "output": "2"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "2"}]},
        ],
    }
    [t] = load_traces(write(tmp_path, "resp.json", doc))
    assert t.format == "openai-responses" and t.system == "Be exact." and t.tools[0].name == "add"
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "assistant"]
    th = t.messages[1].content[0]
    assert isinstance(th, Thinking) and th.provider == "openai" and th.data["encrypted_content"] == "enc"
    assert t.messages[1].tool_calls[0].arguments == {"a": 1, "b": 1}
    assert t.messages[2].tool_results[0].text == "2" and t.messages[3].text == "2"


def test_openai_chat_images_and_usage(tmp_path: Path) -> None:
    doc = [
        {"role": "developer", "content": "sys"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": "a cat",
            "usage": {"prompt_tokens": 900, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 512}},
        },
    ]
    [t] = load_traces(write(tmp_path, "img.json", doc))
    img = t.messages[0].content[1]
    assert isinstance(img, Image) and img.media_type == "image/png" and img.data == "AAAA"
    u = t.billed[1]
    assert (u.prompt_tokens, u.input_tokens, u.cache_read_tokens, u.output_tokens) == (900, 388, 512, 3)


def test_tau2_tool_defs_when_present(tmp_path: Path) -> None:
    doc = {
        "info": {
            "agent_info": {"llm": "m"},
            "environment_info": {
                "domain_name": "retail",
                "policy": "# Policy",
                "tool_defs": {
                    "lookup": {
                        "type": "function",
                        "function": {
                            "name": "lookup",
                            "description": "d",
                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                        },
                    }
                },
            },
        },
        "simulations": [
            {
                "id": "s1",
                "messages": [
                    {"role": "assistant", "content": "Hi!"},
                    {"role": "user", "content": "find x", "usage": {"prompt_tokens": 50, "completion_tokens": 2}},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "t1", "name": "lookup", "arguments": {"q": "x"}, "requestor": "assistant"}
                        ],
                        "usage": {"prompt_tokens": 700, "completion_tokens": 9},
                    },
                    {"role": "tool", "id": "t1", "content": "found", "requestor": "assistant", "error": False},
                    {
                        "role": "user",
                        "content": None,
                        "tool_calls": [
                            {"id": "u1", "name": "toggle_airplane_mode", "arguments": {}, "requestor": "user"}
                        ],
                    },
                    {"role": "tool", "id": "u1", "content": "airplane mode off", "requestor": "user", "error": False},
                ],
            }
        ],
    }
    # tool_defs may be a mapping name -> schema as well as a list
    doc_list = json.loads(json.dumps(doc))
    doc_list["info"]["environment_info"]["tool_defs"] = list(doc["info"]["environment_info"]["tool_defs"].values())
    [t] = load_traces(write(tmp_path, "tau2.json", doc_list))
    assert t.system == "# Policy" and [s.name for s in t.tools] == ["lookup"] and t.meta["tools_recorded"] is True
    assert list(t.billed) == [2] and t.billed[2].prompt_tokens == 700
    assert t.messages[3].tool_results[0].text == "found"
    # the simulated user's own tool call and result never reach the agent's prompt: left out, counted
    assert len(t.messages) == 4 and t.meta["user_side_messages"] == 2
    assert not any("toggle_airplane_mode" in m.text or "airplane mode off" in m.text for m in t.messages)
    [t2] = load_traces(write(tmp_path, "tau2map.json", doc))
    assert [s.name for s in t2.tools] == ["lookup"]


def test_iter_trace_files_recursive(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("a/x.json", "a/b/y.jsonl", "a/b/z.traj", "a/notes.md", "a/.hidden.json"):
        (tmp_path / name).write_text("[]")
    assert [p.relative_to(tmp_path).as_posix() for p in iter_trace_files(tmp_path)] == [
        "a/b/y.jsonl",
        "a/b/z.traj",
        "a/x.json",
    ]
    with pytest.raises(TraceFormatError):
        iter_trace_files(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------------
# Never a raw traceback
# ---------------------------------------------------------------------------------------------------

_KEYS = st.sampled_from(
    [
        "role",
        "content",
        "tool_calls",
        "id",
        "name",
        "arguments",
        "function",
        "type",
        "messages",
        "traj",
        "task_id",
        "simulations",
        "info",
        "history",
        "source",
        "action",
        "observation",
        "args",
        "tool_call_metadata",
        "tool_call_id",
        "input",
        "output",
        "call_id",
        "system",
        "tools",
        "trajectory",
        "extra",
        "usage",
        "text",
        "tool_use_id",
        "thinking",
        "requestor",
        "error",
        "environment_info",
        "tool_defs",
        "policy",
        "model_response",
        "choices",
        "message",
        "trajectory_format",
    ]
)
_LEAF = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(
        [
            "user",
            "assistant",
            "tool",
            "system",
            "function_call",
            "message",
            "text",
            "tool_use",
            "tool_result",
            "run",
            "agent",
            "{}",
            "mini-swe-agent-1",
        ]
    )
)
_VALUE = st.recursive(_LEAF, lambda i: st.lists(i, max_size=4) | st.dictionaries(_KEYS, i, max_size=5), max_leaves=30)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_VALUE, st.none() | st.sampled_from(FORMATS))
def test_arbitrary_json_imports_or_raises_trace_format_error(value: Any, fmt: str | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "fuzz.json"
        p.write_text(json.dumps(value))
        try:
            traces = load_traces(p, format=fmt)
        except TraceFormatError as e:
            assert "fuzz.json" in str(e) and "supported formats" in str(e)
            return
        for t in traces:
            for i, m in enumerate(t.messages):
                if m.tool_calls:
                    assert t.messages[i + 1].role == "tool"
