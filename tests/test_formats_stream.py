"""Streaming and async through the real SDKs over a mock transport serving real SSE: a streamed response
records the same message and usage as the non-streamed one, in every accepted shape, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as gtypes

import windowsmith as ws
from sdk_mock import MockModel, anthropic_reply, chat_reply, gemini_reply, responses_reply
from test_store_postgres import schema  # noqa: F401  (the fixture)
from windowsmith.model import Message, Usage

REPLIES = {"anthropic": anthropic_reply(), "openai-chat": chat_reply(), "openai-responses": responses_reply(),
           "gemini": gemini_reply()}
MODELS = {"anthropic": "claude-sonnet-5-5", "openai-chat": "gpt-4.1", "openai-responses": "gpt-4.1",
          "gemini": "gemini-2.5-pro"}


def _session(make_engine: Callable[..., ws.Engine], fmt: str, name: str) -> ws.Session:
    s = make_engine(MODELS[fmt], format=fmt).session(name)
    s.system("You fix bugs.")
    s.tools([{"name": "read_file", "description": "Read a file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}])
    s.user("calc.add returns the wrong sign; fix it.")
    return s


def _send(fmt: str, mock: MockModel, *, stream: bool, manager: bool = False) -> Callable[[dict[str, Any]], Any]:
    if fmt == "anthropic":
        a = anthropic.Anthropic(api_key="t", http_client=mock.client(), max_retries=0)
        if manager:
            return lambda req: a.messages.stream(**req)
        return lambda req: a.messages.create(**req, stream=stream)
    if fmt in ("openai-chat", "openai-responses"):
        o = openai.OpenAI(api_key="t", http_client=mock.client(), max_retries=0)
        if fmt == "openai-chat":
            if manager:
                return lambda req: o.chat.completions.stream(**req, stream_options={"include_usage": True})
            extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
            return lambda req: o.chat.completions.create(**req, **extra)
        if manager:
            return lambda req: o.responses.stream(**req)
        return lambda req: o.responses.create(**req, stream=stream)
    g = genai.Client(api_key="t", http_options=gtypes.HttpOptions(httpx_client=mock.client()))
    if stream:
        return lambda req: g.models.generate_content_stream(**req)
    return lambda req: g.models.generate_content(**req)


def _last(s: ws.Session) -> tuple[Message, Usage]:
    return s.messages[-1], s.state.usages[-1][1]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(REPLIES))
@pytest.mark.parametrize("shape", ["stream", "events", "manager"])
def test_streamed_response_records_the_same_message_and_usage(make_engine: Callable[..., ws.Engine], fmt: str,
                                                             shape: str) -> None:
    if fmt == "gemini" and shape == "manager":
        pytest.skip("google-genai has no stream manager with a final message")
    mock = MockModel(fmt, [REPLIES[fmt]])
    plain = _session(make_engine, fmt, "plain")
    plain.call(_send(fmt, mock, stream=False))
    expected = _last(plain)
    assert expected[0].tool_calls and expected[1].output_tokens > 0

    s = _session(make_engine, fmt, f"streamed-{shape}")
    pack = s.build()
    if shape == "manager":
        with _send(fmt, mock, stream=True, manager=True)(pack.request) as stream:
            s.record(stream)
    else:
        stream = _send(fmt, mock, stream=True)(pack.request)
        s.record(list(stream) if shape == "events" else stream)
    assert _last(s) == expected
    if fmt != "gemini":
        assert mock.bodies[-1].get("stream") is True  # it really streamed
    else:
        assert "streamGenerateContent" in mock.urls[-1]


@pytest.mark.parametrize("fmt", list(REPLIES))
def test_events_as_dicts_and_a_single_final_chunk_list(make_engine: Callable[..., ws.Engine], fmt: str) -> None:
    from sdk_mock import EVENTS
    from windowsmith.formats import get_renderer
    from windowsmith.formats.stream import accumulate

    reply = REPLIES[fmt]
    r = get_renderer(fmt)
    want = r.parse_response(reply)
    events = EVENTS[fmt](reply)
    if fmt == "gemini":  # plain dicts in the SDK's snake_case, as model_dump() gives them
        events = [gtypes.GenerateContentResponse.model_validate(e).model_dump(mode="json", exclude_none=True) for e in events]
        want = r.parse_response(gtypes.GenerateContentResponse.model_validate(reply))
    got = r.parse_response(accumulate(fmt, events))
    assert (got.message, got.usage, got.stop_reason) == (want.message, want.usage, want.stop_reason)


def _async_send(fmt: str, mock: MockModel, *, stream: bool) -> Callable[[dict[str, Any]], Any]:
    if fmt == "anthropic":
        a = anthropic.AsyncAnthropic(api_key="t", http_client=mock.async_client(), max_retries=0)
        return lambda req: a.messages.create(**req, stream=stream)
    if fmt in ("openai-chat", "openai-responses"):
        o = openai.AsyncOpenAI(api_key="t", http_client=mock.async_client(), max_retries=0)
        if fmt == "openai-chat":
            extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
            return lambda req: o.chat.completions.create(**req, **extra)
        return lambda req: o.responses.create(**req, stream=stream)
    g = genai.Client(api_key="t", http_options=gtypes.HttpOptions(async_client_args={"transport": None},
                                                                  httpx_async_client=mock.async_client()))
    if stream:
        return lambda req: g.aio.models.generate_content_stream(**req)
    return lambda req: g.aio.models.generate_content(**req)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(REPLIES))
def test_async_call_and_async_streams_record_like_sync(make_engine: Callable[..., ws.Engine], fmt: str) -> None:
    mock = MockModel(fmt, [REPLIES[fmt]])
    plain = _session(make_engine, fmt, "plain")
    plain.call(_send(fmt, mock, stream=False))
    expected = _last(plain)

    async def run() -> None:
        s = _session(make_engine, fmt, "acall")
        await s.acall(_async_send(fmt, mock, stream=False))
        assert _last(s) == expected
        t = _session(make_engine, fmt, "astream")
        pack = await t.abuild()
        stream = await _async_send(fmt, mock, stream=True)(pack.request)
        await t.arecord(stream)
        assert _last(t) == expected

    asyncio.run(run())


def test_concurrent_acalls_on_one_session_run_one_after_the_other(make_engine: Callable[..., ws.Engine]) -> None:
    replies = [anthropic_reply(f"answer {i}", [], thinking=False) for i in range(3)]
    mock = MockModel("anthropic", replies)
    s = _session(make_engine, "anthropic", "concurrent")
    client = anthropic.AsyncAnthropic(api_key="t", http_client=mock.async_client(), max_retries=0)

    async def send(req: dict[str, Any]) -> Any:
        await asyncio.sleep(0)  # let the other tasks run: they must wait until this call is recorded
        return await client.messages.create(**req)

    async def run() -> None:
        await asyncio.gather(s.acall(send), s.acall(send), s.acall(send))

    asyncio.run(run())
    texts = [[b.get("text") for m in body["messages"] if m["role"] == "assistant" for b in m["content"]]
             for body in mock.bodies]
    assert texts == [[], ["answer 0"], ["answer 0", "answer 1"]]  # each call saw the previous ones recorded
    assert [m.text for m in s.messages[1:]] == ["answer 0", "answer 1", "answer 2"]
    assert len(s.state.usages) == 3


def test_sync_call_with_an_async_client_names_acall(make_engine: Callable[..., ws.Engine]) -> None:
    mock = MockModel("anthropic", [anthropic_reply()])
    s = _session(make_engine, "anthropic", "wrong")
    client = anthropic.AsyncAnthropic(api_key="t", http_client=mock.async_client(), max_retries=0)
    with pytest.raises(ws.UsageError, match=r"acall"):
        s.call(lambda req: client.messages.create(**req))

    async def send(req: dict[str, Any]) -> Any:
        return await client.messages.create(**req)

    with pytest.raises(ws.UsageError, match=r"await session.acall\(send\)"):
        s.call(send)
    assert not s.state.usages and len(s.messages) == 1  # nothing recorded


def test_unsupported_stream_shapes_name_the_workaround(make_engine: Callable[..., ws.Engine]) -> None:
    s = _session(make_engine, "openai-chat", "bad")
    s.build()
    with pytest.raises(ws.UsageError, match=r"list of the events/chunks"):
        s.record([object(), object()])
    with pytest.raises(ws.UsageError, match=r"already iterated"):
        s.record(iter([]))
    with pytest.raises(ws.UsageError, match=r"list of the events/chunks"):
        s.record([{"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": 3}}]}}]}])
    mock = MockModel("anthropic", [anthropic_reply()])
    a = make_engine(MODELS["anthropic"], format="anthropic").session("mgr")
    a.user("hi")
    pack = a.build()
    client = anthropic.Anthropic(api_key="t", http_client=mock.client(), max_retries=0)
    with pytest.raises(ws.UsageError, match=r"inside its `with` block"):
        a.record(client.messages.stream(**pack.request))
    assert not s.state.usages and not a.state.usages


@pytest.mark.slow
@pytest.mark.postgres
def test_async_sessions_on_postgres_run_concurrently_and_stay_consistent(schema: str) -> None:  # noqa: F811
    from conftest import PG_DSN
    from windowsmith.store.postgres import PostgresStore

    replies = [anthropic_reply(f"answer {i}", [], thinking=False) for i in range(6)]
    mock = MockModel("anthropic", replies)
    client = anthropic.AsyncAnthropic(api_key="t", http_client=mock.async_client(), max_retries=0)
    store = PostgresStore(PG_DSN, schema=schema)
    engine = ws.Engine("claude-sonnet-5-5", store=store)
    sessions = [engine.session(f"pg-{k}") for k in range(2)]
    for s in sessions:
        s.user("hello")

    async def send(req: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        return await client.messages.create(**req)

    async def run() -> None:
        await asyncio.gather(*(s.acall(send) for s in sessions for _ in range(3)))

    asyncio.run(run())
    for s in sessions:
        again = ws.Engine("claude-sonnet-5-5", store=store).session(s.id)  # what the store holds
        assert [m.role for m in again.messages] == ["user", "assistant", "assistant", "assistant"]
        assert len(again.state.usages) == 3 and again.state.head == s.state.head
    store.close()
