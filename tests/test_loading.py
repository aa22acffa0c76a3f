"""Loading provider-native histories into a session: the same conversation in all four shapes loads to
the same neutral messages; only new messages are appended; repairs are recorded; a history that does not
continue the log is refused before anything is written."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

import windowsmith as ws

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"0" * 40).decode()
TOOLS = [{"name": "read_file", "description": "Read a file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]

HISTORIES: dict[str, list[dict[str, Any]]] = {
    "openai-chat": [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": [{"type": "text", "text": "Fix calc.add."},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]},
        {"role": "assistant", "content": "Reading it.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "calc.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "def add(a, b): return a - b"},
        {"role": "assistant", "content": "The sign is wrong."},
        {"role": "user", "content": "Fix it then."},
    ],
    "openai-responses": [
        {"type": "message", "role": "system", "content": "You fix bugs."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Fix calc.add."},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading it."}]},
        {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": '{"path": "calc.py"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "def add(a, b): return a - b"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The sign is wrong."}]},
        {"type": "message", "role": "user", "content": "Fix it then."},
    ],
    "anthropic": [
        {"role": "user", "content": [{"type": "text", "text": "Fix calc.add."},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": PNG}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Reading it."},
                                          {"type": "tool_use", "id": "c1", "name": "read_file",
                                           "input": {"path": "calc.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                      "content": "def add(a, b): return a - b"}]},
        {"role": "assistant", "content": "The sign is wrong."},
        {"role": "user", "content": "Fix it then."},
    ],
    "gemini": [
        {"role": "user", "parts": [{"text": "Fix calc.add."},
                                   {"inline_data": {"mime_type": "image/png", "data": PNG}}]},
        {"role": "model", "parts": [{"text": "Reading it."},
                                    {"function_call": {"id": "c1", "name": "read_file", "args": {"path": "calc.py"}}}]},
        {"role": "user", "parts": [{"function_response": {"id": "c1", "name": "read_file",
                                                          "response": {"output": "def add(a, b): return a - b"}}}]},
        {"role": "model", "parts": [{"text": "The sign is wrong."}]},
        {"role": "user", "parts": [{"text": "Fix it then."}]},
    ],
}
SYSTEM = {"anthropic": "You fix bugs.", "gemini": "You fix bugs."}


def _shape(s: ws.Session) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(m.role, m.text or " ".join(r.text for r in m.tool_results), tuple(c.id for c in m.tool_calls) + tuple(r.call_id for r in m.tool_results))
            for m in s.messages]


@pytest.mark.parametrize("fmt", list(HISTORIES))
def test_every_format_loads_the_same_conversation(make_engine: Callable[..., ws.Engine], fmt: str) -> None:
    e = make_engine()
    s = e.load(f"s-{fmt}", HISTORIES[fmt], fmt, tools=TOOLS, system=SYSTEM.get(fmt))
    assert _shape(s) == [
        ("user", "Fix calc.add.", ()),
        ("assistant", "Reading it.", ("c1",)),
        ("tool", "def add(a, b): return a - b", ("c1",)),
        ("assistant", "The sign is wrong.", ()),
        ("user", "Fix it then.", ()),
    ]
    assert any(isinstance(b, ws.Image) for b in s.messages[0].content)
    assert s.state.system == {"system": "You fix bugs."}
    assert [t.name for t in s.state.tools] == ["read_file"]
    pack = s.build("anthropic")
    assert pack.request["messages"][-1]["content"][-1]["text"].endswith("Fix it then.") or \
        "Fix it then." in str(pack.request["messages"][-1])


@pytest.mark.parametrize("fmt", list(HISTORIES))
def test_loading_again_appends_only_new_messages(make_engine: Callable[..., ws.Engine], fmt: str) -> None:
    e = make_engine()
    full = HISTORIES[fmt]
    cut = {"openai-chat": 3, "openai-responses": 4, "anthropic": 2, "gemini": 2}[fmt]  # ends on the open call
    s = e.load("inc", full[:cut], fmt, tools=TOOLS)
    assert s.state.open_calls == {"c1"}  # the framework runs it next: not closed with an error
    r = s.load(full[: cut + 1], fmt)
    assert [m.role for m in r.appended] == ["tool"] and not s.state.open_calls
    r = s.load(full, fmt)
    assert [m.role for m in r.appended] == ["assistant", "user"]
    seq = s.state.seq
    assert s.load(full, fmt).appended == () and s.state.seq == seq  # nothing twice


def test_a_history_that_does_not_continue_the_log_is_refused_before_writing(engine: ws.Engine) -> None:
    s = engine.load("div", HISTORIES["openai-chat"], "openai-chat")
    seq = s.state.seq
    other = [{"role": "user", "content": "hi"},
             {"role": "assistant", "tool_calls": [{"id": "zz", "type": "function",
                                                   "function": {"name": "read_file", "arguments": "{}"}}]}]
    with pytest.raises(ws.UsageError, match=r"does not continue this session.*new session"):
        s.load(other + [{"role": "tool", "tool_call_id": "zz", "content": "x"}] * 0 + HISTORIES["openai-chat"][2:], "openai-chat")
    assert s.state.seq == seq
    with pytest.raises(ws.UsageError, match=r"unknown message format 'chat'"):
        s.load([], "chat")
    with pytest.raises(ws.UsageError, match=r"takes a list"):
        s.load({"role": "user"}, "openai-chat")  # type: ignore[arg-type]


def test_repairs_are_recorded_once_and_reach_the_manifest(engine: ws.Engine) -> None:
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "tool", "tool_call_id": "ghost", "content": "orphan output"},
        {"role": "user", "content": "next"},
    ]
    s = engine.load("rep", msgs, "openai-chat")
    s.load(msgs, "openai-chat")
    whats = [r.what for r in s.state.repairs]
    assert len(whats) == len(set(whats)) == 3
    assert any("'ghost'" in w and "converted to a user text message" in w for w in whats)
    assert any("not a JSON object" in w for w in whats)
    assert any("arguments repaired" in w for w in whats)  # then JSON repair (issue 16) records its own fix
    assert any("ghost" in r["what"] for r in s.build().manifest.repairs)
    # the repaired history is what the log holds, and a new process rebuilds it identically
    again = ws.Engine(engine.model, store=engine.store).session("rep")
    assert [r.what for r in again.state.repairs] == whats


def test_gemini_calls_without_ids_pair_by_name_and_keep_signatures(engine: ws.Engine) -> None:
    contents = [
        {"role": "user", "parts": [{"text": "weather in Paris and Rome?"}]},
        {"role": "model", "parts": [
            {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"},
            {"functionCall": {"name": "time", "args": {"city": "Rome"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "time", "response": {"output": "10:00"}}},
            {"functionResponse": {"name": "weather", "response": {"error": "service down"}}}]},
    ]
    s = engine.load("gem", contents, "gemini")
    calls = s.messages[1].tool_calls
    assert [c.id for c in calls] == ["gemini_call_1", "gemini_call_2"]
    results = {r.call_id: r for r in s.messages[2].tool_results}
    assert results["gemini_call_2"].text == "10:00" and results["gemini_call_1"].is_error
    assert any(isinstance(b, ws.Thinking) and b.data == {"thought_signature": "c2ln"} for b in s.messages[1].content)
    body = s.build("gemini", model="gemini-2.5-pro").request["contents"]
    assert body[1]["parts"][0]["thought_signature"] == "c2ln"


def test_sdk_objects_load_like_dicts(engine: ws.Engine) -> None:
    from google.genai import types as gtypes

    contents = [gtypes.Content.model_validate(c) for c in HISTORIES["gemini"]]
    s = engine.load("objs", contents, "gemini")
    assert len(s.messages) == 5 and s.messages[1].tool_calls[0].id == "c1"


def test_overlap_mode_skips_what_the_log_already_has(engine: ws.Engine) -> None:
    chat = HISTORIES["openai-chat"]
    s = engine.load("ov", chat[:3], "openai-chat")  # ... assistant with open call c1
    r = s.load(chat[2:5], "openai-chat", overlap=True)  # repeats the assistant turn, adds result + reply
    assert [m.role for m in r.appended] == ["tool", "assistant"]
    r = s.load(chat[4:], "openai-chat", overlap=True)  # repeats the reply, adds the new user message
    assert [m.role for m in r.appended] == ["user"]
    assert s.load(chat[5:], "openai-chat", overlap=True).appended == ()
    # the same text again later is a new message, not an overlap, once something came in between
    s.assistant("ok")
    assert [m.text for m in s.load([{"role": "user", "content": "Fix it then."}], "openai-chat",
                                   overlap=True).appended] == ["Fix it then."]
    # compared redacted, as the log stores it
    secret = "my key is sk-ant-api03-" + "a" * 80
    s.load([{"role": "assistant", "content": secret}], "openai-chat", overlap=True)
    assert s.load([{"role": "assistant", "content": secret}], "openai-chat", overlap=True).appended == ()


def test_hosted_tool_items_are_kept_as_assistant_text(engine: ws.Engine) -> None:
    items = [
        {"type": "message", "role": "user", "content": "latest python?"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "python release"}},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "3.14"}]},
    ]
    s = engine.load("hosted", items, "openai-responses")
    assert [m.role for m in s.messages] == ["user", "assistant"]
    assert '[web_search_call] {"id": "ws_1"' in s.messages[1].text and s.messages[1].text.endswith("3.14")
    assert any("web_search_call item kept as assistant text" in r.what for r in s.state.repairs)
    assert s.load(items, "openai-responses").appended == ()
