"""OpenAI Agents SDK (Runner + WindowsmithSession) driving a multi-turn tool-using agent against a mock
Responses transport: the model gets windowsmith's pack (budgeted, compacting at a small window), the
history is the session's log, usage is recorded from the SDK's responses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import openai
import pytest

pytest.importorskip("agents", reason="needs the openai-agents extra: pip install 'windowsmith[openai-agents]'")

from agents import Agent, OpenAIResponsesModel, RunHooks, Runner, function_tool

import windowsmith as ws
from sdk_mock import MockModel, assert_cache_prefix_kept, responses_reply
from windowsmith.integrations.openai_agents import WindowsmithSession

N_TURNS = 16
FILE_BODY = "\n".join(f"def f{i}(x):\n    return x + {i}  # helper {i} of the module" for i in range(120))
BIG_BODY = "\n".join(f"2026-12-01T00:{i % 60:02d}:00 INFO worker-{i % 7} handled request {i} in {i % 97} ms"
                     for i in range(1_600))  # ~117 KB: one large tool result


@function_tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return f"# {path}\n{BIG_BODY if path == 'm5.py' else FILE_BODY}"


class AppHooks(RunHooks):  # type: ignore[misc]
    """An app's own run hooks: they keep working next to windowsmith's session."""

    def __init__(self) -> None:
        self.ends = 0

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.ends += 1


def _script() -> list[dict[str, Any]]:
    usage = {"input_tokens": 3000, "input_tokens_details": {"cached_tokens": 2048}, "output_tokens": 30,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 3030}
    replies = [responses_reply("" if i else "Reading the modules.", [(f"call_{i}", "read_file", {"path": f"m{i}.py"})],
                               usage=usage, n=i) for i in range(N_TURNS)]
    replies.append(responses_reply("The bug is in m3.py.", [], usage=usage, n=N_TURNS))
    replies.append(responses_reply("Yes: f3 adds 3.", [], usage=usage, n=N_TURNS + 1))
    return replies


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True])
def test_openai_agents_runner_uses_windowsmith_packs(make_engine: Callable[..., ws.Engine], streamed: bool) -> None:
    mock = MockModel("openai-responses", _script(), bill_prompt=True)
    session = make_engine("gpt-4.1", window=6_000, budget=ws.BudgetConfig(reserved_output=1_000)).session("oa")
    memory = WindowsmithSession(session)
    model = OpenAIResponsesModel(model="gpt-4.1", openai_client=openai.AsyncOpenAI(
        api_key="test", http_client=mock.async_client(), max_retries=0))
    agent = Agent(name="reviewer", instructions="You review Python modules.", tools=[read_file], model=model)

    hooks = AppHooks()

    async def turn(text: str) -> Any:
        options: dict[str, Any] = {"session": memory, "max_turns": 30, "hooks": hooks,
                                   "run_config": memory.run_config(tracing_disabled=True)}
        if not streamed:
            return await Runner.run(agent, text, **options)
        result = Runner.run_streamed(agent, text, **options)
        async for _ in result.stream_events():
            pass
        return result

    async def run() -> tuple[Any, Any]:
        return await turn("Read m0..m7 and find the bug."), await turn("Are you sure?")

    first, second = asyncio.run(run())
    assert first.final_output == "The bug is in m3.py." and second.final_output == "Yes: f3 adds 3."
    assert len(mock.bodies) == N_TURNS + 2 == len(memory.packs)
    assert all(bool(b.get("stream")) == streamed for b in mock.bodies)
    # every request carried windowsmith's pack as its input, and no separate instructions
    for body, pack in zip(mock.bodies, memory.packs, strict=True):
        assert body["input"] == pack.request["input"]
        assert body["prompt_cache_key"] == pack.neutral.cache_key  # the pack's key, not one the SDK made up
        assert "instructions" not in body or body["instructions"] is None
        assert body["input"][0] == {"type": "message", "role": "system", "content": "You review Python modules."}
        assert pack.tokens <= pack.manifest.available
    assert assert_cache_prefix_kept(memory.packs) >= 3  # the cached prefix only grows between compactions
    kinds = {a["kind"] for p in memory.packs for a in p.manifest.actions}
    assert kinds & {"mask", "summary", "emergency", "truncate"}, kinds
    assert any("artifact://" in str(b["input"]) for b in mock.bodies)  # large results offloaded
    # the log holds the whole conversation once, in order
    calls = [c.id for m in session.messages for c in m.tool_calls]
    assert calls == [f"call_{i}" for i in range(N_TURNS)]
    texts = [m.text for m in session.messages if m.role == "user"]
    assert texts == ["Read m0..m7 and find the bug.", "Are you sure?"]
    assert session.messages[-1].text == "Yes: f3 adds 3."
    # usage recorded from the SDK's responses, one per model call
    assert len(session.state.usages) == N_TURNS + 2 == hooks.ends
    assert [p for _, _, p in session.state.usages] == [p.id for p in memory.packs]  # each against its own pack
    billed = mock.billed[-1]  # the prompt as billed for what was sent, the scripted cached share (at most the prompt)
    cached = min(2048, billed)
    assert session.state.usages[-1][1] == ws.Usage(input_tokens=billed - cached, output_tokens=30,
                                                   cache_read_tokens=cached)
    # the SDK reads its history from the log
    items = asyncio.run(memory.get_items())
    assert sum(1 for i in items if i.get("type") == "function_call") == N_TURNS
    assert asyncio.run(memory.get_items(limit=2))[-1]["content"] == "Yes: f3 adds 3."


def test_the_log_is_append_only_and_arguments_are_checked(engine: ws.Engine) -> None:
    memory = WindowsmithSession(engine.session("x"))
    with pytest.raises(ws.UsageError, match="append-only"):
        asyncio.run(memory.pop_item())
    with pytest.raises(ws.UsageError, match="append-only"):
        asyncio.run(memory.clear_session())
    with pytest.raises(ws.UsageError, match="takes a windowsmith Session"):
        WindowsmithSession("x")  # type: ignore[arg-type]


def test_two_sessions_in_flight_keep_their_own_usage(make_engine: Callable[..., ws.Engine]) -> None:
    engine = make_engine("gpt-4.1")
    script = [responses_reply("", [(f"call_{i}", "read_file", {"path": f"m{i}.py"})], n=i) for i in range(3)]
    script.append(responses_reply("Done.", [], n=3))
    runs = []
    for name in ("a", "b"):
        mock = MockModel("openai-responses", script, bill_prompt=True)
        memory = WindowsmithSession(engine.session(f"oa-{name}"))
        model = OpenAIResponsesModel(model="gpt-4.1", openai_client=openai.AsyncOpenAI(
            api_key="test", http_client=mock.async_client(), max_retries=0))
        runs.append((mock, memory, Agent(name=name, instructions="Be brief.", tools=[read_file], model=model)))

    async def both() -> None:
        await asyncio.gather(*(Runner.run(agent, "read m0..m2", session=memory, max_turns=10,
                                          run_config=memory.run_config(tracing_disabled=True))
                               for _, memory, agent in runs))

    asyncio.run(both())
    for mock, memory, _ in runs:
        usages = memory.session.state.usages
        assert len(usages) == len(mock.bodies) == len(memory.packs) == 4
        assert [p for _, _, p in usages] == [p.id for p in memory.packs]
        assert [u.prompt_tokens for _, u, _ in usages] == mock.billed
        assert {b["prompt_cache_key"] for b in mock.bodies} == {memory.packs[0].neutral.cache_key}
    assert runs[0][1].packs[0].neutral.cache_key != runs[1][1].packs[0].neutral.cache_key
