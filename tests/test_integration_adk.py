"""Google ADK (LlmAgent + Runner) with WindowsmithPlugin driving a multi-turn tool-using agent against
a mock Gemini transport: the contents that reach the transport are windowsmith's pack (budgeted,
compacting at a small window), and usage is recorded from ADK's responses."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="needs the adk extra: pip install 'windowsmith[adk]'")

from google import genai
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.models import Gemini
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types as gtypes

import windowsmith as ws
from sdk_mock import MockModel, assert_cache_prefix_kept, gemini_reply
from windowsmith.integrations.adk import WindowsmithCallbacks, WindowsmithPlugin
from windowsmith.tokens import count_text

N_TURNS = 16
FILE_BODY = "\n".join(f"def f{i}(x):\n    return x + {i}  # helper {i} of the module" for i in range(120))
BIG_BODY = "\n".join(f"2026-12-01T00:{i % 60:02d}:00 INFO worker-{i % 7} handled request {i} in {i % 97} ms"
                     for i in range(1_600))  # ~117 KB: one large tool result


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return f"# {path}\n{BIG_BODY if path == 'm5.py' else FILE_BODY}"


def billed_for(body: dict[str, Any]) -> int:
    return 40 + count_text(json.dumps(body.get("contents", [])))


class BilledMock(MockModel):
    """Bills the prompt it is sent (its contents as o200k counts them), as a provider does: the billed usage
    calibrates windowsmith's counts, so a fixed one would tell it the requests never grow."""

    def reply(self) -> dict[str, Any]:
        r = super().reply()
        prompt = billed_for(self.bodies[-1])
        r["usageMetadata"].update(promptTokenCount=prompt, cachedContentTokenCount=min(prompt, 2048),
                                  totalTokenCount=prompt + 40)
        return r


def _script() -> list[dict[str, Any]]:
    usage = {"promptTokenCount": 3000, "cachedContentTokenCount": 2048, "candidatesTokenCount": 30,
             "thoughtsTokenCount": 10, "totalTokenCount": 3040}
    replies = [gemini_reply(f"Reading m{i}.py.", [("read_file", {"path": f"m{i}.py"})], usage=usage)
               for i in range(N_TURNS)]
    replies.append(gemini_reply("The bug is in m3.py.", [], usage=usage))
    replies.append(gemini_reply("Yes: f3 adds 3.", [], usage=usage))
    return replies


def _text(e: Any) -> str:
    return "".join(p.text or "" for p in (e.content.parts if e.content else []) if not p.thought)


@pytest.mark.slow
@pytest.mark.parametrize("streaming", [False, True])
def test_adk_agent_runs_on_windowsmith_packs(make_engine: Callable[..., ws.Engine], streaming: bool) -> None:
    mock = BilledMock("gemini", _script())
    # the free cut at 85% of the budget (default 95%) and a 4.6K window, so this short run compacts at least
    # once (its EVIDENCE notes no longer repeat the results its history shows, so its requests are smaller)
    session = make_engine("gemini-2.5-flash", window=4_600, budget=ws.BudgetConfig(reserved_output=1_000),
                          compaction=ws.CompactionConfig(cut_at=0.85)).session("adk")
    cb = WindowsmithPlugin(session)
    client = genai.Client(api_key="test", http_options=gtypes.HttpOptions(httpx_async_client=mock.async_client()))
    agent = LlmAgent(name="reviewer", model=Gemini(model="gemini-2.5-flash", client=client),
                     instruction="You review Python modules.", tools=[read_file])
    service = InMemorySessionService()
    runner = Runner(app=App(name="review", root_agent=agent, plugins=[cb]), session_service=service)

    async def run() -> list[str]:
        await service.create_session(app_name="review", user_id="u", session_id="s1")
        finals = []
        for text in ("Read m0..m7 and find the bug.", "Are you sure?"):
            events = [e async for e in runner.run_async(
                user_id="u", session_id="s1", new_message=gtypes.Content(role="user", parts=[gtypes.Part(text=text)]),
                run_config=RunConfig(streaming_mode=StreamingMode.SSE if streaming else StreamingMode.NONE))]
            finals.append(_text(events[-1]))
        await runner.close()
        return finals

    finals = asyncio.run(run())
    assert finals == ["The bug is in m3.py.", "Yes: f3 adds 3."]
    assert len(mock.bodies) == N_TURNS + 2 == len(cb.packs)
    assert all(("streamGenerateContent" in u) == streaming for u in mock.urls)
    for body, pack in zip(mock.bodies, cb.packs, strict=True):
        sent = [gtypes.Content.model_validate(c).model_dump(mode="json", exclude_none=True) for c in body["contents"]]
        want = [gtypes.Content.model_validate(c).model_dump(mode="json", exclude_none=True)
                for c in pack.request["contents"]]
        assert sent == want  # the contents ADK sent are the pack's
        assert body["systemInstruction"]["parts"][0]["text"].startswith("You review Python modules.")
        assert pack.tokens <= pack.manifest.available
    assert assert_cache_prefix_kept(cb.packs) >= 3  # the cached prefix only grows between compactions
    # Gemini's stable prefix on the wire: between compactions the next request starts with the previous one's
    # system instruction, tools and contents but its newest turn
    kept = 0
    for prev, cur, pack in zip(mock.bodies, mock.bodies[1:], cb.packs[1:], strict=False):
        if any(a["kind"] in ("mask", "summary", "emergency", "truncate") for a in pack.manifest.actions):
            continue
        assert cur.get("tools") == prev.get("tools")
        if cur["systemInstruction"] == prev["systemInstruction"]:
            assert cur["contents"][: len(prev["contents"]) - 1] == prev["contents"][:-1]
            kept += 1
    assert kept >= 3
    assert any("artifact://" in json.dumps(b["contents"]) for b in mock.bodies)  # the large result offloaded
    assert [p for _, _, p in session.state.usages] == [p.id for p in cb.packs]  # each against its own pack
    kinds = {a["kind"] for p in cb.packs for a in p.manifest.actions}
    assert kinds & {"mask", "summary", "emergency", "truncate"}, kinds
    # ADK strips its call ids before the model call: the log numbers them by position, stable across
    # calls, and paired each with its response, once
    calls = [c for m in session.messages for c in m.tool_calls]
    assert [c.id for c in calls] == [f"gemini_call_{i + 1}" for i in range(N_TURNS)]
    assert sum(len(m.tool_results) for m in session.messages) == N_TURNS
    assert [m.text for m in session.messages if m.role == "user"] == ["Read m0..m7 and find the bug.", "Are you sure?"]
    assert session.messages[-1].text == "Yes: f3 adds 3."
    assert len(session.state.usages) == N_TURNS + 2
    billed = billed_for(mock.bodies[-1])  # what the last call billed
    cached = min(billed, 2048)
    assert session.state.usages[-1][1] == ws.Usage(input_tokens=billed - cached, output_tokens=40, cache_read_tokens=cached)


def test_plugin_checks_its_argument() -> None:
    with pytest.raises(ws.UsageError, match="Session or a function"):
        WindowsmithPlugin("s")  # type: ignore[arg-type]
    assert WindowsmithCallbacks is WindowsmithPlugin  # the earlier name, for one agent's callbacks


def test_two_sessions_in_flight_record_against_their_own_packs(make_engine: Callable[..., ws.Engine]) -> None:
    """One plugin, two ADK sessions at once, 50 ms of model latency: every usage names its own session's pack."""
    engine = make_engine("gemini-2.5-flash")
    opened: list[str] = []

    def open_session(ctx: Any) -> ws.Session:
        opened.append(ctx.session.id)
        return engine.session(f"adk-{ctx.session.id}")

    script = [gemini_reply("", [("read_file", {"path": f"m{i}.py"})]) for i in range(3)]
    script.append(gemini_reply("Done.", []))

    class Slow(MockModel):
        async def handle(self, request: Any) -> Any:
            await asyncio.sleep(0.05)
            return self(request)

        def async_client(self) -> Any:
            import httpx2

            return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))

    mocks = {sid: Slow("gemini", script) for sid in ("s1", "s2")}
    plugin = WindowsmithPlugin(open_session)
    service = InMemorySessionService()

    def agent_for(sid: str) -> LlmAgent:
        client = genai.Client(api_key="test", http_options=gtypes.HttpOptions(httpx_async_client=mocks[sid].async_client()))
        return LlmAgent(name="reviewer", model=Gemini(model="gemini-2.5-flash", client=client),
                        instruction="Be brief.", tools=[read_file])

    runners = {sid: Runner(app=App(name="review", root_agent=agent_for(sid), plugins=[plugin]), session_service=service)
               for sid in mocks}

    async def run(sid: str) -> None:
        await service.create_session(app_name="review", user_id="u", session_id=sid)
        async for _ in runners[sid].run_async(user_id="u", session_id=sid, new_message=gtypes.Content(
                role="user", parts=[gtypes.Part(text="read m0..m2")])):
            pass

    async def both() -> None:
        await asyncio.gather(run("s1"), run("s2"))
        for r in runners.values():
            await r.close()

    asyncio.run(both())
    for sid in mocks:
        s = engine.session(f"adk-{sid}")
        pack_ids = {m.pack_id for m in s.packs()}
        assert len(s.state.usages) == 4 == len(mocks[sid].bodies)
        assert all(p in pack_ids for _, _, p in s.state.usages)  # never the other session's pack
        assert len({p for _, _, p in s.state.usages}) == 4  # one pack per call, each answered once
    assert sorted(opened) == ["s1", "s2"]  # each session opened once for its invocation, not per model call
    assert not plugin._sent and not plugin._open  # per-invocation state is dropped when the run ends


def test_gemini_schema_goes_through_google_genai_conversion() -> None:
    from windowsmith.integrations.adk import _tools

    fd = gtypes.FunctionDeclaration(name="find", description="Find.", parameters=gtypes.Schema(
        type="OBJECT", properties={"q": gtypes.Schema(type="STRING", nullable=True)}, required=["q"]))
    config = gtypes.GenerateContentConfig(tools=[gtypes.Tool(function_declarations=[fd])])
    [tool] = _tools(config)
    assert tool["parameters"] == {"type": "object", "properties": {"q": {"type": ["null", "string"]}}, "required": ["q"]}


def test_the_plugin_covers_sub_agents(make_engine: Callable[..., ws.Engine]) -> None:
    """One plugin on the App: the root agent's call and its sub-agent's calls all go through windowsmith, each
    agent with its own log (the session function keys them by agent)."""
    engine = make_engine("gemini-2.5-flash")
    script = [gemini_reply("", [("transfer_to_agent", {"agent_name": "reader"})]),
              gemini_reply("", [("read_file", {"path": "m0.py"})]),
              gemini_reply("m0.py adds 0.", [])]
    mock = MockModel("gemini", script)
    client = genai.Client(api_key="test", http_options=gtypes.HttpOptions(httpx_async_client=mock.async_client()))
    model = Gemini(model="gemini-2.5-flash", client=client)
    reader = LlmAgent(name="reader", model=model, instruction="You read files.", tools=[read_file])
    root = LlmAgent(name="root", model=model, instruction="Hand file questions to reader.", sub_agents=[reader])
    plugin = WindowsmithPlugin(lambda ctx: engine.session(f"{ctx.session.id}/{ctx.agent_name}"))
    service = InMemorySessionService()
    runner = Runner(app=App(name="review", root_agent=root, plugins=[plugin]), session_service=service)

    async def run() -> list[Any]:
        await service.create_session(app_name="review", user_id="u", session_id="s")
        events = [e async for e in runner.run_async(user_id="u", session_id="s", new_message=gtypes.Content(
            role="user", parts=[gtypes.Part(text="What does m0.py do?")]))]
        await runner.close()
        return events

    events = asyncio.run(run())
    assert _text(events[-1]) == "m0.py adds 0."
    assert len(mock.bodies) == len(plugin.packs) == 3  # every model call, the sub-agent's too, got a pack
    root_log, reader_log = engine.session("s/root"), engine.session("s/reader")
    assert len(root_log.state.usages) == 1 and len(reader_log.state.usages) == 2
    assert [c.name for m in reader_log.messages for c in m.tool_calls] == ["read_file"]
