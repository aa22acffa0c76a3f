"""LangChain v1 agent (create_agent + WindowsmithMiddleware) driving a multi-turn tool-using loop against
a mock Anthropic/OpenAI transport: what reaches the transport is windowsmith's pack (budgeted, cache
breakpoints, compacting at a small window), and usage is recorded from LangChain's responses."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

pytest.importorskip("langchain", minversion="1.0", reason="needs the langchain extra: pip install 'windowsmith[langchain]'")
pytest.importorskip("langchain_anthropic", reason="needs langchain-anthropic (windowsmith[langchain])")

from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

import windowsmith as ws
from sdk_mock import MockModel, anthropic_reply, assert_cache_prefix_kept, chat_reply
from windowsmith.integrations.langchain import WindowsmithMiddleware, to_neutral

N_TURNS = 16
FILE_BODY = "\n".join(f"def f{i}(x):\n    return x + {i}  # helper {i} of the module" for i in range(120))
BIG_BODY = "\n".join(f"2026-12-01T00:{i % 60:02d}:00 INFO worker-{i % 7} handled request {i} in {i % 97} ms"
                     for i in range(1_600))  # ~117 KB: one large tool result


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return f"# {path}\n{BIG_BODY if path == 'm5.py' else FILE_BODY}"


def _anthropic_script() -> list[dict[str, Any]]:
    usage = {"input_tokens": 900, "output_tokens": 40, "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 100}
    replies = [anthropic_reply(f"Reading m{i}.py.", [(f"toolu_{i}", "read_file", {"path": f"m{i}.py"})],
                               thinking=i == 0, usage=usage) for i in range(N_TURNS)]
    replies.append(anthropic_reply("All modules read: the bug is in m3.py.", [], thinking=False, usage=usage))
    return replies


def _model(mock: MockModel) -> ChatAnthropic:
    model = ChatAnthropic(model="claude-sonnet-5-5", api_key="test", max_retries=0, max_tokens=1000)
    model.__dict__["_client"] = anthropic.Anthropic(api_key="test", http_client=mock.client(), max_retries=0)
    model.__dict__["_async_client"] = anthropic.AsyncAnthropic(api_key="test", http_client=mock.async_client(),
                                                               max_retries=0)
    return model


def _norm(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """LangChain spells out ``is_error: false`` on tool results; the pack leaves it out (same meaning)."""
    return [{**m, "content": [{k: v for k, v in b.items() if not (k == "is_error" and v is False)}
                              for b in m["content"]]} for m in messages]


def _check_run(mock: MockModel, session: ws.Session, mw: WindowsmithMiddleware, result: dict[str, Any]) -> None:
    assert len(mock.bodies) == N_TURNS + 1
    assert result["messages"][-1].text == "All modules read: the bug is in m3.py."
    # LangChain's state keeps everything; windowsmith's log has the same conversation
    assert len([m for m in result["messages"] if isinstance(m, ToolMessage)]) == N_TURNS
    assert [c.id for m in session.messages for c in m.tool_calls] == [f"toolu_{i}" for i in range(N_TURNS)]
    # every request is windowsmith's pack, sent as is (thinking passed back, markers in place)
    for body, pack in zip(mock.bodies, mw.packs, strict=True):
        assert _norm(body["messages"]) == pack.request["messages"]
        assert body["system"] == pack.request["system"]
        # the tools' and system's markers as the pack planned them (after a fold batch, the folds' end takes the
        # tools' place: the pinned request's breakpoint covers the tools)
        assert body["tools"][-1].get("cache_control") == ({"type": "ephemeral"} if pack.neutral.cache.tools else None)
        assert body["system"][-1].get("cache_control") == ({"type": "ephemeral"} if pack.neutral.cache.system else None)
        assert pack.neutral.cache.count <= 4
        assert pack.tokens <= pack.manifest.available
    assert any(b.get("type") == "thinking" for m in mock.bodies[-1]["messages"] for b in m["content"]
               if isinstance(b, dict)) or any(a["kind"] in ("mask", "summary", "emergency") for p in mw.packs for a in p.manifest.actions)
    marked = [b for m in mock.bodies[-1]["messages"] for b in m["content"] if "cache_control" in b]
    assert marked, "the message breakpoint reached the transport"
    assert any("artifact://" in json.dumps(b["messages"]) for b in mock.bodies)  # the large result offloaded
    assert [p for _, _, p in session.state.usages] == [p.id for p in mw.packs]  # once per call, each its own pack
    # compaction at the small window: later requests are smaller than the log they stand for
    assert assert_cache_prefix_kept(mw.packs) >= 3  # the cached prefix only grows between compactions
    kinds = {a["kind"] for p in mw.packs for a in p.manifest.actions}
    assert kinds & {"mask", "summary", "emergency", "truncate", "drop"}, kinds
    assert len(mock.bodies[-1]["messages"]) < 2 * N_TURNS + 1
    # usage recorded from LangChain's AIMessages
    assert len(session.state.usages) == N_TURNS + 1
    u = session.state.usages[-1][1]
    # the scripted cache split where it fits, the prompt as billed for what was sent
    n = mock.billed[-1]
    read = min(2000, n)
    assert (u.cache_read_tokens, u.cache_write_tokens, u.output_tokens) == (read, min(100, n - read), 40)
    assert u.prompt_tokens == mock.billed[-1]


@pytest.mark.slow
def test_langchain_agent_runs_on_windowsmith_packs(make_engine: Callable[..., ws.Engine]) -> None:
    mock = MockModel("anthropic", _anthropic_script(), bill_prompt=True)
    session = make_engine("claude-sonnet-5-5", window=6_000,
                          budget=ws.BudgetConfig(reserved_output=1_000)).session("lc")
    mw = WindowsmithMiddleware(session)
    agent = create_agent(_model(mock), [read_file], system_prompt="You review Python modules.", middleware=[mw])
    result = agent.invoke({"messages": [HumanMessage("Read m0..m7 and find the bug.")]})
    _check_run(mock, session, mw, result)
    assert session.state.system == {"system": "You review Python modules."}


@pytest.mark.slow
def test_langchain_agent_async(make_engine: Callable[..., ws.Engine]) -> None:
    mock = MockModel("anthropic", _anthropic_script(), bill_prompt=True)
    session = make_engine("claude-sonnet-5-5", window=6_000,
                          budget=ws.BudgetConfig(reserved_output=1_000)).session("lc-async")
    mw = WindowsmithMiddleware(session)
    agent = create_agent(_model(mock), [read_file], system_prompt="You review Python modules.", middleware=[mw])
    result = asyncio.run(agent.ainvoke({"messages": [HumanMessage("Read m0..m7 and find the bug.")]}))
    _check_run(mock, session, mw, result)


@pytest.mark.slow
def test_langchain_agent_streaming(make_engine: Callable[..., ws.Engine]) -> None:
    mock = MockModel("anthropic", _anthropic_script(), bill_prompt=True)
    session = make_engine("claude-sonnet-5-5", window=6_000,
                          budget=ws.BudgetConfig(reserved_output=1_000)).session("lc-stream")
    mw = WindowsmithMiddleware(session)
    model = _model(mock)
    model.streaming = True
    agent = create_agent(model, [read_file], system_prompt="You review Python modules.", middleware=[mw])
    chunks = list(agent.stream({"messages": [HumanMessage("Read m0..m7 and find the bug.")]}, stream_mode="values"))
    assert all(b.get("stream") is True for b in mock.bodies)  # the model really streamed
    _check_run(mock, session, mw, chunks[-1])


def test_langchain_openai_model_gets_the_chat_pack(make_engine: Callable[..., ws.Engine]) -> None:
    replies = [chat_reply("", [("call_1", "read_file", {"path": "a.py"})]), chat_reply("Done.", [])]
    mock = MockModel("openai-chat", replies)
    model = ChatOpenAI(model="gpt-4.1", api_key="test", max_retries=0)
    model.root_client = openai.OpenAI(api_key="test", http_client=mock.client(), max_retries=0)
    model.client = model.root_client.chat.completions
    session = make_engine("gpt-4.1").session("lc-openai")
    mw = WindowsmithMiddleware(session)
    agent = create_agent(model, [read_file], system_prompt="Be brief.", middleware=[mw])
    agent.invoke({"messages": [HumanMessage("read a.py")]})
    assert len(mock.bodies) == 2
    def chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:  # LangChain re-serializes arguments
        out = []
        for m in messages:
            m = {k: v for k, v in m.items() if v is not None}
            if "tool_calls" in m:
                m["tool_calls"] = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                                   for c in m["tool_calls"]]
            out.append(m)
        return out

    for body, pack in zip(mock.bodies, mw.packs, strict=True):
        assert chat(body["messages"]) == chat(pack.request["messages"])
        assert body["prompt_cache_key"] == pack.request["prompt_cache_key"]
    assert [u.cache_read_tokens for _, u, _ in session.state.usages] == [2048, 2048]


def test_mapping_keeps_pairing_thinking_and_images() -> None:
    png = base64.b64encode(b"\x89PNG" + b"0" * 20).decode()
    msgs = [
        HumanMessage(content=[{"type": "text", "text": "look"},
                              {"type": "image", "base64": png, "mime_type": "image/png"}]),
        AIMessage(content=[{"type": "thinking", "thinking": "hmm", "signature": "c2ln"},
                           {"type": "text", "text": "two calls"}],
                  tool_calls=[{"id": "a", "name": "read_file", "args": {"path": "x"}},
                              {"id": "b", "name": "read_file", "args": {"path": "y"}}]),
        ToolMessage(content="X", tool_call_id="a"),
        ToolMessage(content="boom", tool_call_id="b", status="error"),
        AIMessage(content="", tool_calls=[{"id": "c", "name": "read_file", "args": {"path": "z"}}]),
    ]
    neutral, system, repairs = to_neutral(msgs)
    assert [m.role for m in neutral] == ["user", "assistant", "tool", "assistant"]
    assert isinstance(neutral[0].content[1], ws.Image) and neutral[0].content[1].data == png
    assert isinstance(neutral[1].content[0], ws.Thinking) and neutral[1].content[0].data["signature"] == "c2ln"
    assert [(r.call_id, r.is_error) for r in neutral[2].tool_results] == [("a", False), ("b", True)]
    assert [c.id for c in neutral[3].tool_calls] == ["c"]  # still open: the agent runs it next
    assert system is None and repairs == []


def test_missing_extra_or_bad_arguments_say_what_to_do() -> None:
    with pytest.raises(ws.UsageError, match="Session or a function"):
        WindowsmithMiddleware("ticket-1")  # type: ignore[arg-type]
    with pytest.raises(ws.UsageError, match="'anthropic' and 'openai-chat'"):
        WindowsmithMiddleware(lambda r: None, format="gemini")  # type: ignore[arg-type, return-value]


def test_mapping_repairs_are_recorded_in_the_log(engine: ws.Engine) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    session = engine.session("lc-repairs")
    model = GenericFakeChatModel(messages=iter([AIMessage("ok"), AIMessage("ok again")]))
    agent = create_agent(model, tools=[], middleware=[WindowsmithMiddleware(session, format="anthropic")])
    odd = HumanMessage(content=[{"type": "text", "text": "see attached"}, {"type": "file", "file_id": "f-1"}])
    state = agent.invoke({"messages": [odd]})
    agent.invoke({"messages": [*state["messages"], HumanMessage("and?")]})
    whats = [r.what for r in session.state.repairs]
    assert whats == ["load neutral: messages[0].content[1]: content block of type 'file' kept as JSON text"]
    assert whats[0] in [r["what"] for r in session.packs()[-1].repairs]
    assert [m.text for m in session.messages][1:] == ["ok", "and?", "ok again"]


def _openai_model(mock: MockModel) -> ChatOpenAI:
    model = ChatOpenAI(model="gpt-4.1", api_key="test", max_retries=0)
    model.root_client = openai.OpenAI(api_key="test", http_client=mock.client(), max_retries=0)
    model.client = model.root_client.chat.completions
    return model


def test_one_middleware_keeps_a_session_per_thread(make_engine: Callable[..., ws.Engine]) -> None:
    """The engine form: each LangGraph thread gets its own session, opened once, and two threads in flight at
    once never record against each other's packs."""
    from concurrent.futures import ThreadPoolExecutor

    from langgraph.checkpoint.memory import InMemorySaver

    engine = make_engine("gpt-4.1")
    opened: list[str] = []
    real = engine.session

    def counting(sid: str) -> ws.Session:
        opened.append(sid)
        return real(sid)

    engine.session = counting  # type: ignore[method-assign]
    script = [chat_reply("", [(f"call_{i}", "read_file", {"path": f"m{i}.py"})]) for i in range(3)]
    script.append(chat_reply("Done.", []))
    mocks = {t: MockModel("openai-chat", script, bill_prompt=True) for t in ("t1", "t2")}
    mw = WindowsmithMiddleware(engine)
    agents = {t: create_agent(_openai_model(m), [read_file], middleware=[mw], checkpointer=InMemorySaver())
              for t, m in mocks.items()}

    def run(t: str) -> None:
        agents[t].invoke({"messages": [HumanMessage("read m0..m2")]}, {"configurable": {"thread_id": t}})

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(run, mocks))
    assert sorted(opened) == ["t1", "t2"]  # once per thread, not per model call
    for t, mock in mocks.items():
        s = real(t)
        assert len(s.state.usages) == 4 == len(mock.bodies)
        assert [u.prompt_tokens for _, u, _ in s.state.usages] == mock.billed
        assert {m.pack_id for m in s.packs()} == {p for _, _, p in s.state.usages}
        keys = {p.neutral.cache_key for p in mw.packs if p.manifest.session_id == t}
        assert len(keys) == 1 and {b["prompt_cache_key"] for b in mock.bodies} == keys  # its own session's key


def test_openai_tool_errors_come_from_the_tool_message_status(make_engine: Callable[..., ws.Engine]) -> None:
    from langchain.agents.middleware import wrap_model_call

    seen: list[Any] = []

    @wrap_model_call
    def capture(request: Any, handler: Callable[[Any], Any]) -> Any:  # inside ours: sees the pack's messages
        seen.append(request.messages)
        return handler(request)

    mock = MockModel("openai-chat", [chat_reply("Done.", [])])
    session = make_engine("gpt-4.1").session("lc-errors")
    agent = create_agent(_openai_model(mock), [read_file], middleware=[WindowsmithMiddleware(session), capture])
    history = [HumanMessage("go"),
               AIMessage("", tool_calls=[{"id": "call_1", "name": "read_file", "args": {"path": "a"}},
                                         {"id": "call_2", "name": "read_file", "args": {"path": "b"}}]),
               ToolMessage("disk on fire", tool_call_id="call_1", status="error"),
               ToolMessage("Error: the log line this file starts with", tool_call_id="call_2")]
    agent.invoke({"messages": history})
    results = {r.call_id: r.is_error for m in session.messages for r in m.tool_results}
    assert results == {"call_1": True, "call_2": False}
    sent = {m.tool_call_id: m.status for m in seen[0] if isinstance(m, ToolMessage)}
    assert sent == {"call_1": "error", "call_2": "success"}  # a result starting "Error: " is no error


def test_an_engine_of_another_provider_is_refused(make_engine: Callable[..., ws.Engine]) -> None:
    mock = MockModel("openai-chat", [chat_reply("Done.", [])])
    session = make_engine("claude-sonnet-5-5").session("lc-mismatch")
    agent = create_agent(_openai_model(mock), [read_file], middleware=[WindowsmithMiddleware(session)])
    with pytest.raises(ws.UsageError, match="anthropic model but the agent's chat model is openai"):
        agent.invoke({"messages": [HumanMessage("hi")]})
    assert mock.bodies == []


def test_stacked_after_summarization_middleware_is_a_replacement(make_engine: Callable[..., ws.Engine]) -> None:
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    script = [chat_reply("", [(f"call_{i}", "read_file", {"path": f"m{i}.py"})]) for i in range(6)]
    script.append(chat_reply("Done.", []))
    mock = MockModel("openai-chat", script)
    summarizer = GenericFakeChatModel(messages=iter([AIMessage("Summary: files were read.")] * 20))
    session = make_engine("gpt-4.1").session("lc-summarized")
    agent = create_agent(_openai_model(mock), [read_file], middleware=[
        SummarizationMiddleware(summarizer, trigger=("messages", 6), keep=("messages", 3)),
        WindowsmithMiddleware(session)])
    agent.invoke({"messages": [HumanMessage("read m0..m5")]})
    assert len(mock.bodies) == 7
    assert [c.id for m in session.messages for c in m.tool_calls] == [f"call_{i}" for i in range(6)]
    assert sum(len(m.tool_results) for m in session.messages) == 6  # every result once, the summary not in the log
    assert not any("Summary:" in m.text for m in session.messages)
    assert any("history rewritten" in r.what for r in session.state.repairs)
