"""Real traces through ``windowsmith serve``: for each family in the shared traces, the recorded conversation is
driven the way its agent drove it (the client resends its growing history every turn, with its provider's SDK) and a
scripted upstream answers each call with the trace's own next assistant message. Every call stays within budget,
the cache prefix holds between compactions, and every turn is recorded once."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from windowsmith.manifest import Manifest  # noqa: E402
from windowsmith.model import Message  # noqa: E402
from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.store import open_store  # noqa: E402
from windowsmith.testing import BackgroundServer  # noqa: E402
from windowsmith.traces import load_traces  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
FAMILIES = {"mini-swe-agent": "openai", "swe-agent": "openai", "openhands": "openai", "tau-bench": "openai",
            "tau2-bench": "anthropic"}
MAX_CALLS = 24
WINDOW = 9000

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not DATA.exists(), reason="needs the shared traces")]


def openai_messages(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        return [{"role": "tool", "tool_call_id": r.call_id, "content": r.text or "(empty)"} for r in m.tool_results]
    out: dict[str, Any] = {"role": m.role, "content": m.text or ("" if m.role == "assistant" else "(empty)")}
    if m.role == "assistant" and m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.name, "arguments": json.dumps(dict(c.arguments))}} for c in m.tool_calls]
    return [out]


def anthropic_message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": r.call_id,
                                             "content": r.text or "(empty)"} for r in m.tool_results]}
    blocks: list[dict[str, Any]] = [{"type": "text", "text": m.text}] if m.text.strip() else []
    if m.role == "assistant":
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)} for c in m.tool_calls]
    return {"role": m.role, "content": blocks or [{"type": "text", "text": "(empty)"}]}


class Script:
    """An upstream that answers call k with the trace's k-th answered assistant message."""

    def __init__(self, replies: list[Message]) -> None:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        self.replies = replies
        self.requests: list[dict[str, Any]] = []

        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            m = openai_messages(self.replies[len(self.requests) - 1])[0]
            size = len(json.dumps(body)) // 4
            return JSONResponse({"id": f"c{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
                                 "model": body["model"], "choices": [{"index": 0, "message": m, "finish_reason": "stop"}],
                                 "usage": {"prompt_tokens": size, "completion_tokens": 20, "total_tokens": size + 20}})

        async def messages(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            m = anthropic_message(self.replies[len(self.requests) - 1])
            return JSONResponse({"id": f"m{len(self.requests)}", "type": "message", "role": "assistant",
                                 "model": body["model"], "content": m["content"], "stop_reason": "end_turn",
                                 "stop_sequence": None, "usage": {"input_tokens": len(json.dumps(body)) // 4,
                                                                  "output_tokens": 20}})

        self.app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                                     Route("/v1/messages", messages, methods=["POST"])])

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_real_trace_through_the_proxy(tmp_path: Path, family: str) -> None:
    path = sorted(p for p in (DATA / family).iterdir() if p.is_file())[0]
    trace = load_traces(path)[0]
    msgs = list(trace.messages)
    # the calls: each assistant message that follows a user or tool message (what an agent asked the model for)
    calls = [i for i in range(1, len(msgs)) if msgs[i].role == "assistant" and msgs[i - 1].role != "assistant"
             and any(m.role == "user" for m in msgs[:i])][:MAX_CALLS]
    script = Script([msgs[i] for i in calls])
    sdk = FAMILIES[family]
    model = "claude-sonnet-4-5" if sdk == "anthropic" else "gpt-4o"
    with BackgroundServer(script) as u:
        app = create_app(ServerConfig(store=tmp_path / "t.db", openai_base_url=u.url + "/v1", anthropic_base_url=u.url,
                                      model_window=WINDOW))
        with BackgroundServer(app) as p:
            h = {"X-Windowsmith-Session": "trace"}
            if sdk == "openai":
                client: Any = openai.OpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0)
                for i in calls:
                    history = ([{"role": "system", "content": trace.system}] if trace.system else []) + \
                        [x for m in msgs[:i] for x in openai_messages(m)]
                    client.chat.completions.create(model=model, messages=history, extra_headers=h)
            else:
                client = anthropic.Anthropic(base_url=p.url, api_key="k", max_retries=0)
                for i in calls:
                    history = [anthropic_message(m) for m in msgs[:i]]
                    while history and history[0]["role"] != "user":
                        history.pop(0)
                    kw = {"system": trace.system} if trace.system else {}
                    client.messages.create(model=model, max_tokens=1024, messages=history, extra_headers=h, **kw)
            client.close()
    assert len(script.requests) == len(calls)
    with open_store(str(tmp_path / "t.db")) as st:
        manifests = [Manifest.from_dict(m) for m in st.list_packs("trace")]
        events = st.events("trace")
    assert sum(e.kind == "usage" for e in events) == len(calls)  # every turn recorded once
    assert all(m.tokens <= m.available for m in manifests)  # within budget
    compactions = [e.seq for e in events if e.kind == "compaction"]
    key = "messages"
    held = pairs = 0
    for (a, ra), (b, rb) in itertools.pairwise(zip(manifests, script.requests, strict=False)):
        if any(a.seq < s <= b.seq for s in compactions):
            continue
        pairs += 1
        n = len(ra[key]) - 1
        strip = json.dumps([{k: v for k, v in m.items() if k != "cache_control"} if isinstance(m, dict) else m
                            for m in ra[key][:n]], sort_keys=True)
        now = json.dumps([{k: v for k, v in m.items() if k != "cache_control"} if isinstance(m, dict) else m
                          for m in rb[key][:n]], sort_keys=True)
        held += strip == now
    assert pairs > 0, f"{family}: every pair of turns spans a compaction: nothing checks the cache prefix"
    assert held / pairs >= 0.8, f"{family}: cache prefix held in {held} of {pairs} turns"
