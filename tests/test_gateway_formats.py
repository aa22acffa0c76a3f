"""Each provider API through ``windowsmith serve`` with its official SDK, in 20-turn tool loops, streamed and
not: the upstream receives the client's conversation (compacted), never a message the client did not send, and
every turn is recorded once."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
openai = pytest.importorskip("openai")

from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.store import open_store  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

TURNS = 20
OBS = "total 48\n" + "\n".join(f"-rw-r--r-- 1 dev dev {i * 37} Nov 30 file_{i}.py" for i in range(40))


class Rig:
    def __init__(self, upstream: FakeUpstream, url: str, store: Path) -> None:
        self.upstream, self.url, self.store = upstream, url, store

    def events(self) -> tuple[str, list[Any]]:
        with open_store(str(self.store)) as st:
            (s,) = st.list_sessions()
            return s.id, st.events(s.id)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    up = FakeUpstream()
    with BackgroundServer(up) as u:
        app = create_app(ServerConfig(store=tmp_path / "f.db", openai_base_url=u.url + "/v1", anthropic_base_url=u.url,
                                      gemini_base_url=u.url, model_window=6000))
        with BackgroundServer(app) as p:
            yield Rig(up, p.url, tmp_path / "f.db")


def recorded_once(rig: Rig, turns: int) -> list[Any]:
    _, events = rig.events()
    usage = [e for e in events if e.kind == "usage"]
    replies = [e for e in events if e.kind == "message" and e.data["message"]["role"] == "assistant"]
    assert len(usage) == len(replies) == turns
    return events


RESPONSES_TOOLS = [{"type": "function", "name": "shell", "description": "Run a shell command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


def test_openai_responses_sdk_for_20_turns_streamed_and_not(rig: Rig) -> None:
    """Codex CLI's way: the full input every turn with ``store: false``, reasoning items carried back with their
    ``encrypted_content``."""
    client = openai.OpenAI(base_url=rig.url + "/v1", api_key="k", max_retries=0)
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "Find the failing test and fix it."}]
    for turn in range(TURNS):
        kw: dict[str, Any] = {"model": "gpt-5", "instructions": "You are a coding agent.", "input": items,
                              "tools": RESPONSES_TOOLS, "store": False, "include": ["reasoning.encrypted_content"]}
        if turn % 2:
            final = None
            for event in client.responses.create(stream=True, **kw):
                if event.type == "response.completed":
                    final = event.response
            assert final is not None
            resp = final
        else:
            resp = client.responses.create(**kw)
        output = [o.model_dump(exclude_none=True) for o in resp.output]
        assert output[0]["type"] == "reasoning" and output[0]["encrypted_content"].startswith("gAAAA")
        items += output
        for o in output:
            if o["type"] == "function_call":
                items.append({"type": "function_call_output", "call_id": o["call_id"], "output": OBS + f"\n#{turn}"})
    reqs = [q["body"] for q in rig.upstream.requests]
    assert len(reqs) == TURNS
    for i, body in enumerate(reqs):
        assert "max_output_tokens" not in body and body["store"] is False
        sent = body["input"]
        assert sent[-1]["type"] == "function_call_output" or sent[-1].get("role") == "user"
        # reasoning items go back verbatim and in order (those compaction kept)
        reasoning = [x for x in sent if x.get("type") == "reasoning"]
        client_reasoning = [x for x in items if x.get("type") == "reasoning"][:i]
        assert all(r in client_reasoning for r in reasoning)
        order = [client_reasoning.index(r) for r in reasoning]
        assert order == sorted(order)
    assert [x["encrypted_content"] for x in reqs[1]["input"] if x.get("type") == "reasoning"] == \
        [items[1]["encrypted_content"]]
    recorded_once(rig, TURNS)
    # a retry of the last turn replays it; previous_response_id is a clear 400
    last_input = items[:-(len(output) + 1)]
    again = client.responses.create(model="gpt-5", instructions="You are a coding agent.", input=last_input,
                                    tools=RESPONSES_TOOLS, store=False)
    assert again.id == resp.id and len(rig.upstream.requests) == TURNS
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="gpt-5", input="go on", previous_response_id=resp.id)
    assert "full input" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:  # calls without their results: said in HTTP terms
        client.responses.create(model="gpt-5", instructions="You are a coding agent.", input=items[:-1],
                                tools=RESPONSES_TOOLS, store=False)
    assert "no result" in str(e.value) and "session." not in str(e.value)
    client.close()


def test_google_genai_sdk_for_20_turns_streamed_and_not(rig: Rig) -> None:
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=rig.url))
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="shell", description="Run a shell command.",
        parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})])
    config = types.GenerateContentConfig(system_instruction="You are a coding agent.", tools=[tool],
                                         automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="Find the failing test and fix it.")])]
    for turn in range(TURNS):
        if turn % 2:
            parts: list[Any] = []
            for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents=contents,
                                                               config=config):
                for part in chunk.candidates[0].content.parts or []:
                    if part.text and parts and parts[-1].text is not None and part.function_call is None:
                        parts[-1] = types.Part(text=parts[-1].text + part.text)
                    elif part.text or part.function_call:
                        parts.append(part)
            content = types.Content(role="model", parts=parts)
        else:
            content = client.models.generate_content(model="gemini-2.5-flash", contents=contents,
                                                     config=config).candidates[0].content
        contents.append(content)
        calls = [p.function_call for p in content.parts if p.function_call]
        assert calls, f"turn {turn}: the fake calls its tool every turn"
        contents.append(types.Content(role="user", parts=[
            types.Part.from_function_response(name=c.name, response={"output": OBS + f"\n#{turn}"}) for c in calls]))
    reqs = [q["body"] for q in rig.upstream.requests]
    assert len(reqs) == TURNS
    for body in reqs:
        assert "maxOutputTokens" not in (body.get("generationConfig") or {})
        last = body["contents"][-1]
        assert last["role"] == "user"
        roles = [c["role"] for c in body["contents"]]
        assert all(not (a == b == "model") for a, b in itertools.pairwise(roles))
        assert body["systemInstruction"]["parts"][0]["text"].startswith("You are a coding agent.")
    recorded_once(rig, TURNS)


ANTHROPIC_TOOLS = [{"name": "shell", "description": "Run a shell command.",
                    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]


def test_anthropic_sdk_for_20_turns_streamed_and_not(rig: Rig) -> None:
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=rig.url, api_key="k", max_retries=0)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Find the failing test and fix it."}]
    for turn in range(TURNS):
        kw: dict[str, Any] = {"model": "claude-sonnet-4-5", "system": "You are a coding agent.", "max_tokens": 2048,
                              "messages": msgs, "tools": ANTHROPIC_TOOLS}
        if turn % 2:
            with client.messages.stream(**kw) as s:
                r = s.get_final_message()
        else:
            r = client.messages.create(**kw)
        content = [b.model_dump(exclude_none=True) for b in r.content]
        msgs.append({"role": "assistant", "content": content})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"],
                                                  "content": OBS + f"\n#{turn}"} for b in content
                                                 if b["type"] == "tool_use"]})
    reqs = [q["body"] for q in rig.upstream.requests]
    assert len(reqs) == TURNS and all(b["max_tokens"] == 2048 for b in reqs)
    for body in reqs:
        roles = [m["role"] for m in body["messages"]]
        assert roles[-1] == "user" and all(a != b for a, b in itertools.pairwise(roles))
    recorded_once(rig, TURNS)
    client.close()
