"""pydantic-ai agent (WindowsmithCapability) driving a multi-turn tool-using run against a mock Anthropic
transport, sync and async: the request is windowsmith's pack (budgeted, breakpoints, compacting at a
small window) and usage is recorded from pydantic-ai's responses."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

pytest.importorskip("pydantic_ai", reason="needs the pydantic-ai extra: pip install 'windowsmith[pydantic-ai]'")

from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.providers.anthropic import AnthropicProvider

import windowsmith as ws
from sdk_mock import MockModel, anthropic_reply, assert_cache_prefix_kept
from windowsmith.integrations.pydantic_ai import WindowsmithCapability

N_TURNS = 16
FILE_BODY = "\n".join(f"def f{i}(x):\n    return x + {i}  # helper {i} of the module" for i in range(120))
BIG_BODY = "\n".join(f"2026-12-01T00:{i % 60:02d}:00 INFO worker-{i % 7} handled request {i} in {i % 97} ms"
                     for i in range(1_600))  # ~117 KB: one large tool result


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return f"# {path}\n{BIG_BODY if path == 'm5.py' else FILE_BODY}"


def marked(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Where a request's message breakpoints are: (message, block), a tool result's inner marker counted on it."""
    return [(i, j) for i, m in enumerate(messages) for j, b in enumerate(m["content"]) if isinstance(b, dict)
            and ("cache_control" in b or any("cache_control" in x for x in b.get("content") or []
                                             if isinstance(x, dict)))]


def _script() -> list[dict[str, Any]]:
    usage = {"input_tokens": 900, "output_tokens": 40, "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 100}
    replies = [anthropic_reply(f"Reading m{i}.py.", [(f"toolu_{i}", "read_file", {"path": f"m{i}.py"})],
                               thinking=i == 0, usage=usage) for i in range(N_TURNS)]
    replies.append(anthropic_reply("The bug is in m3.py.", [], thinking=False, usage=usage))
    return replies


def _agent(mock: MockModel, cap: WindowsmithCapability) -> Agent[None, str]:
    client = anthropic.AsyncAnthropic(api_key="test", http_client=mock.async_client(), max_retries=0)
    model = AnthropicModel("claude-sonnet-5-5", provider=AnthropicProvider(anthropic_client=client),
                           settings=AnthropicModelSettings(max_tokens=1000))
    return Agent(model, tools=[read_file], instructions="You review Python modules.", capabilities=[cap])


def _check(mock: MockModel, session: ws.Session, cap: WindowsmithCapability) -> None:
    assert len(mock.bodies) == N_TURNS + 1 == len(cap.packs)
    for body, pack in zip(mock.bodies, cap.packs, strict=True):
        req = pack.request
        # what reached the transport is the pack: same system text, same turns, same tool calls and results
        assert [b["text"] for b in body["system"]] == [b["text"] for b in req["system"]]
        assert [m["role"] for m in body["messages"]] == [m["role"] for m in req["messages"]]
        ids = [[b.get("id") or b.get("tool_use_id") for b in m["content"] if b["type"] in ("tool_use", "tool_result")]
               for m in body["messages"]]
        assert ids == [[b.get("id") or b.get("tool_use_id") for b in m["content"]
                        if b["type"] in ("tool_use", "tool_result")] for m in req["messages"]]
        # every breakpoint the pack planned reached the wire, the one after the newest tool result included
        assert bool(body["system"][-1].get("cache_control")) == bool(req["system"][-1].get("cache_control"))
        assert bool(body["tools"][-1].get("cache_control")) == bool(req["tools"][-1].get("cache_control"))
        assert marked(body["messages"]) == marked(req["messages"])
        assert pack.tokens <= pack.manifest.available
    tool_marks = [b for body in mock.bodies for b in body["messages"][-1]["content"]
                  if b["type"] == "tool_result" and "cache_control" in b]
    assert len(tool_marks) >= N_TURNS // 2  # the tool loop's newest result is a breakpoint
    assert any("artifact://" in str(b["messages"]) for b in mock.bodies)  # the large result offloaded
    assert assert_cache_prefix_kept(cap.packs) >= 3  # the cached prefix only grows between compactions
    kinds = {a["kind"] for p in cap.packs for a in p.manifest.actions}
    assert kinds & {"mask", "summary", "emergency", "truncate"}, kinds
    first_thinking = [b for m in mock.bodies[1]["messages"] for b in m["content"] if b["type"] == "thinking"]
    assert first_thinking and first_thinking[0]["signature"] == "c2lnLTE="  # thinking passed back
    assert [c.id for m in session.messages for c in m.tool_calls] == [f"toolu_{i}" for i in range(N_TURNS)]
    assert session.messages[-1].text == "The bug is in m3.py."
    assert len(session.state.usages) == N_TURNS + 1
    u = session.state.usages[-1][1]
    billed = mock.billed[-1]  # the scripted split (2,000 read, 100 written) within the prompt the mock billed
    read = min(2000, billed)
    assert (u.cache_read_tokens, u.cache_write_tokens, u.output_tokens) == (read, min(100, billed - read), 40)
    assert u.prompt_tokens == billed


@pytest.mark.slow
def test_pydantic_ai_run_sync_on_windowsmith_packs(make_engine: Callable[..., ws.Engine]) -> None:
    mock = MockModel("anthropic", _script(), bill_prompt=True)
    session = make_engine("claude-sonnet-5-5", window=6_000,
                          budget=ws.BudgetConfig(reserved_output=1_000)).session("pai")
    cap = WindowsmithCapability(session)
    result = _agent(mock, cap).run_sync("Read m0..m7 and find the bug.")
    with warnings.catch_warnings():  # run_sync leaves its event loop open; close it here, not at GC time
        warnings.simplefilter("ignore", DeprecationWarning)
        loop = asyncio.get_event_loop_policy().get_event_loop()
    loop.close()
    asyncio.set_event_loop(None)
    assert result.output == "The bug is in m3.py."
    _check(mock, session, cap)
    # the run's own history is untouched: pydantic-ai keeps every message
    assert len(result.all_messages()) == 2 * (N_TURNS + 1)


@pytest.mark.slow
def test_pydantic_ai_async_run(make_engine: Callable[..., ws.Engine]) -> None:
    mock = MockModel("anthropic", _script(), bill_prompt=True)
    session = make_engine("claude-sonnet-5-5", window=6_000,
                          budget=ws.BudgetConfig(reserved_output=1_000)).session("pai-async")
    cap = WindowsmithCapability(session)
    result = asyncio.run(_agent(mock, cap).run("Read m0..m7 and find the bug."))
    assert result.output == "The bug is in m3.py."
    _check(mock, session, cap)


def test_pydantic_ai_run_stream(make_engine: Callable[..., ws.Engine]) -> None:
    replies = [anthropic_reply("", [(f"toolu_{i}", "read_file", {"path": f"m{i}.py"})], thinking=False)
               for i in range(3)]
    replies.append(anthropic_reply("The bug is in m1.py.", [], thinking=False))
    mock = MockModel("anthropic", replies)
    session = make_engine("claude-sonnet-5-5").session("pai-stream")
    cap = WindowsmithCapability(session)

    async def run() -> str:
        async with _agent(mock, cap).run_stream("Read m0..m2.") as result:
            return await result.get_output()

    assert asyncio.run(run()) == "The bug is in m1.py."
    assert all(b.get("stream") is True for b in mock.bodies) and len(mock.bodies) == 4 == len(cap.packs)
    assert [c.id for m in session.messages for c in m.tool_calls] == ["toolu_0", "toolu_1", "toolu_2"]
    assert session.messages[-1].text == "The bug is in m1.py."
    u = session.state.usages[-1][1]
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (812, 1536, 57)


def test_capability_checks_its_argument() -> None:
    with pytest.raises(ws.UsageError, match="takes a windowsmith Session"):
        WindowsmithCapability("s")  # type: ignore[arg-type]


def test_pydantic_ai_openai_model_gets_the_session_cache_key(make_engine: Callable[..., ws.Engine]) -> None:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from sdk_mock import chat_reply

    mock = MockModel("openai-chat", [chat_reply("", [("call_1", "read_file", {"path": "a.py"})]), chat_reply("Done.", [])])
    session = make_engine("gpt-4.1").session("pai-openai")
    cap = WindowsmithCapability(session)
    client = openai.AsyncOpenAI(api_key="test", http_client=mock.async_client(), max_retries=0)
    agent = Agent(OpenAIChatModel("gpt-4.1", provider=OpenAIProvider(openai_client=client)), tools=[read_file],
                  instructions="Be brief.", capabilities=[cap])
    assert asyncio.run(agent.run("read a.py")).output == "Done."
    keys = {b.get("prompt_cache_key") for b in mock.bodies}
    assert keys == {cap.packs[0].neutral.cache_key} and len(mock.bodies) == 2
    assert not any("cache_control" in str(b) for b in mock.bodies)  # no Anthropic marker on an OpenAI wire


def test_estimated_usage_is_recorded_but_never_calibrates(make_engine: Callable[..., ws.Engine]) -> None:
    from pydantic_ai.models.test import TestModel

    engine = make_engine("claude-sonnet-5-5")
    session = engine.session("pai-test-model")
    cap = WindowsmithCapability(session)
    agent = Agent(TestModel(), tools=[read_file], instructions="Be brief.", capabilities=[cap])
    asyncio.run(agent.run("read a file"))
    events = [e for e in engine.store.events(session.id) if e.kind == "usage"]
    assert len(events) == len(session.state.usages) == len(cap.packs) >= 2
    assert all(e.data.get("estimated") is True for e in events)
    assert session.counter("anthropic").calibration.observations == 0  # nothing was fitted
    # a new session of the model starts from the registry's factor, not from the test model's made-up usage
    fresh = engine.session("pai-after-test-model")
    assert fresh.counter("anthropic").calibration.slope == 1.0
    assert fresh.counter("anthropic").calibration.observations == 0


def test_stacked_after_process_history_is_a_replacement(make_engine: Callable[..., ws.Engine]) -> None:
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    def keep_recent(messages: list[Any]) -> list[Any]:  # a summary in place of all but the newest turns
        if len(messages) <= 4:
            return messages
        return [ModelRequest(parts=[UserPromptPart("Summary: earlier files were read.")]), *messages[-3:]]

    replies = [anthropic_reply("", [(f"toolu_{i}", "read_file", {"path": f"m{i}.py"})], thinking=False)
               for i in range(4)]
    replies.append(anthropic_reply("The bug is in m1.py.", [], thinking=False))
    mock = MockModel("anthropic", replies)
    session = make_engine("claude-sonnet-5-5").session("pai-stacked")
    cap = WindowsmithCapability(session)
    client = anthropic.AsyncAnthropic(api_key="test", http_client=mock.async_client(), max_retries=0)
    model = AnthropicModel("claude-sonnet-5-5", provider=AnthropicProvider(anthropic_client=client),
                           settings=AnthropicModelSettings(max_tokens=1000))
    agent = Agent(model, tools=[read_file], instructions="Review.", capabilities=[ProcessHistory(keep_recent), cap])
    assert asyncio.run(agent.run("Read m0..m3.")).output == "The bug is in m1.py."
    # the log keeps every turn once, the framework's summary is not in it, and the manifest says what happened
    assert [c.id for m in session.messages for c in m.tool_calls] == [f"toolu_{i}" for i in range(4)]
    assert not any("Summary:" in m.text for m in session.messages if m.role == "user")
    assert any("history rewritten" in r.what for r in session.state.repairs)


def test_one_capability_two_conversations_in_flight(make_engine: Callable[..., ws.Engine]) -> None:
    """The engine form: each pydantic-ai conversation gets its own session, each run its own instance, so two
    runs of one agent in flight at once record usage against their own packs."""
    engine = make_engine("claude-sonnet-5-5")
    replies = [anthropic_reply("", [(f"toolu_{i}", "read_file", {"path": f"m{i}.py"})], thinking=False)
               for i in range(3)]
    replies.append(anthropic_reply("Done.", [], thinking=False))

    class Slow(MockModel):  # 20 ms of latency; answers each request by how far its conversation got
        def reply(self) -> dict[str, Any]:
            turn = sum(1 for m in self.bodies[-1]["messages"] if m["role"] == "assistant")
            return replies[min(turn, len(replies) - 1)]

        async def handle(self, request: Any) -> Any:
            await asyncio.sleep(0.02)
            return self(request)

        def async_client(self) -> Any:
            import httpx2

            return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))

    mock = Slow("anthropic", replies)  # one server for both: their requests interleave
    cap = WindowsmithCapability(engine)
    agent = _agent(mock, cap)

    async def both() -> None:
        await asyncio.gather(agent.run("Read m0..m2.", conversation_id="c1"),
                             agent.run("Read m0..m2.", conversation_id="c2"))

    asyncio.run(both())
    for cid in ("c1", "c2"):
        s = engine.session(cid)
        own = {m.pack_id for m in s.packs()}
        assert len(s.state.usages) == len(own) >= 2
        assert {p for _, _, p in s.state.usages} == own  # every usage names this conversation's own packs
    assert len(cap.packs) == len(mock.bodies)


def test_an_engine_of_another_provider_is_refused(make_engine: Callable[..., ws.Engine]) -> None:
    mock = MockModel("anthropic", [anthropic_reply("Done.", [], thinking=False)])
    cap = WindowsmithCapability(make_engine("gpt-4.1").session("pai-mismatch"))
    with pytest.raises(ws.UsageError, match="openai model but the agent's chat model is anthropic"):
        asyncio.run(_agent(mock, cap).run("hi"))
    assert mock.bodies == []
