"""pydantic-ai agent (WindowsmithCapability) driving a multi-turn tool-using run against a mock Anthropic
transport, sync and async: the request is windowsmith's pack (budgeted, breakpoints, compacting at a
small window) and usage is recorded from pydantic-ai's responses."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

pytest.importorskip("pydantic_ai", reason="needs the pydantic-ai extra: pip install 'windowsmith[pydantic-ai]'")

from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.providers.anthropic import AnthropicProvider

import windowsmith as ws
from sdk_mock import MockModel, anthropic_reply, assert_cache_prefix_kept
from windowsmith.integrations.pydantic_ai import WindowsmithCapability

N_TURNS = 8
FILE_BODY = "\n".join(f"def f{i}(x):\n    return x + {i}  # helper {i} of the module" for i in range(120))


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return f"# {path}\n{FILE_BODY}"


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
        assert body["system"][-1].get("cache_control") and body["tools"][-1].get("cache_control")
        assert pack.tokens <= pack.manifest.available
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
