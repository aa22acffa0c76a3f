"""The proxy and JSON API, end to end: the real openai and anthropic SDKs talk to ``windowsmith serve``
(uvicorn on loopback), which talks to a local fake upstream through the same SDKs."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from server_agents import TRACE, run_anthropic_agent, run_openai_agent  # noqa: E402
from windowsmith.manifest import Manifest  # noqa: E402
from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.store import open_store  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

pytestmark = pytest.mark.skipif(not TRACE.exists(), reason=f"needs the shared traces ({TRACE.name})")

OPENAI_KEY = "sk-proj-Zx81" + "q" * 40
ANTHROPIC_KEY = "sk-ant-api03-" + "w" * 80
ANTHROPIC_MODEL = "claude-sonnet-5-5"


class Rig:
    def __init__(self, upstream: FakeUpstream, proxy_url: str, store: Path) -> None:
        self.upstream = upstream
        self.url = proxy_url
        self.store_path = store
        self.clients: list[Any] = []

    def openai(self, **kw: Any) -> Any:
        c = openai.OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", OPENAI_KEY), max_retries=0, **kw)
        self.clients.append(c)
        return c

    def anthropic(self, **kw: Any) -> Any:
        c = anthropic.Anthropic(base_url=self.url, api_key=kw.pop("api_key", ANTHROPIC_KEY), max_retries=0, **kw)
        self.clients.append(c)
        return c

    def close(self) -> None:
        for c in self.clients:
            c.close()

    def get(self, path: str, **kw: Any) -> Any:
        return httpx.get(self.url + path, timeout=30, **kw)

    def post(self, path: str, **kw: Any) -> Any:
        return httpx.post(self.url + path, timeout=30, **kw)


def rig(tmp_path: Path, *, window: int = 6000, upstream: FakeUpstream | None = None, **config: Any) -> Iterator[Rig]:
    up = upstream or FakeUpstream()
    with BackgroundServer(up) as u:
        store = tmp_path / "proxy.db"
        app = create_app(ServerConfig(store=store, openai_base_url=u.url + "/v1", anthropic_base_url=u.url,
                                      model_window=window, **config))
        with BackgroundServer(app) as p:
            r = Rig(up, p.url, store)
            try:
                yield r
            finally:
                r.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Rig]:
    yield from rig(tmp_path)


def strip_cache_control(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: strip_cache_control(x) for k, x in v.items() if k != "cache_control"}
    if isinstance(v, list):
        return [strip_cache_control(x) for x in v]
    return v


def check_budget_and_cache_order(r: Rig, fmt: str, n_calls: int) -> dict[str, Any]:
    """Every upstream request is a pack (within budget); between compactions each request starts with
    the previous one's cacheable prefix, byte for byte."""
    reqs = [q["body"] for q in r.upstream.requests if q["format"] == fmt]
    assert len(reqs) == n_calls
    with open_store(str(r.store_path)) as st:
        (sid,) = [s.id for s in st.list_sessions()]
        manifests = [Manifest.from_dict(m) for m in st.list_packs(sid)]
        events = st.events(sid)
    assert len(manifests) == n_calls
    compaction_seqs = [e.seq for e in events if e.kind == "compaction"]
    usage = [e.data for e in events if e.kind == "usage"]
    assert len(usage) == n_calls  # usage recorded for every call, streamed or not, tied to its pack
    assert [u["pack_id"] for u in usage] == [m.pack_id for m in manifests]
    for m in manifests:
        assert m.tokens <= m.available
    kept = 0
    for i in range(1, n_calls):
        a, b = manifests[i - 1], manifests[i]
        if any(a.seq < s <= b.seq for s in compaction_seqs):
            continue
        prev, cur = reqs[i - 1]["messages"], reqs[i]["messages"]
        n = len(prev) - 1  # the final user turn carries the dynamic tail; everything before it is prefix
        assert strip_cache_control(cur[:n]) == strip_cache_control(prev[:n]), f"cache prefix broke at call {i}"
        kept += 1
    assert compaction_seqs, "a 6,000-token window over this run must compact"
    assert kept >= n_calls // 2
    return {"manifests": manifests, "usage": usage, "requests": reqs, "events": events}


@pytest.mark.slow
def test_openai_sdk_through_the_proxy_for_22_turns(server: Rig) -> None:
    client = server.openai()
    out = run_openai_agent(client, "gpt-4o", 22, stream_every=2)
    got = check_budget_and_cache_order(server, "openai", 22)
    # the client saw the upstream's answers unchanged (its ids, its usage)
    first = out[0]
    assert first.id.startswith("chatcmpl-fake") and first.choices[0].message.tool_calls[0].function.name == "bash"
    recorded = got["usage"]
    non_streamed = [(i, r) for i, r in enumerate(out) if not isinstance(r, list)]
    for i, r in non_streamed:
        cached = r.usage.prompt_tokens_details.cached_tokens
        assert recorded[i]["usage"]["cache_read_tokens"] == cached
        assert recorded[i]["usage"]["input_tokens"] == r.usage.prompt_tokens - cached
    streamed = [r for r in out if isinstance(r, list)]
    # the client did not ask for stream usage, so the proxy's usage-only chunk is not passed on ...
    assert all(ch.choices for chunks in streamed for ch in chunks)
    # ... but the streamed calls' usage was recorded all the same
    assert all(recorded[i]["usage"]["output_tokens"] > 0 for i in range(1, 22, 2))
    # the cache works: after the first call most of every request is read from the (modelled) cache
    reads = [u["usage"]["cache_read_tokens"] for u in recorded]
    assert sum(1 for x in reads[1:] if x > 0) >= 15
    # budgeted: late requests carry far fewer messages than the client's conversation
    assert len(got["requests"][-1]["messages"]) < 2 + 2 * 21
    # the proxy's extra parameter (prompt_cache_key) went upstream; the client's max_tokens won
    assert all(q["max_tokens"] == 1024 and "max_completion_tokens" not in q for q in got["requests"])
    assert all(q.get("prompt_cache_key", "").startswith("ws-") for q in got["requests"])


@pytest.mark.slow
def test_anthropic_sdk_through_the_proxy_for_22_turns(server: Rig) -> None:
    client = server.anthropic()
    out = run_anthropic_agent(client, ANTHROPIC_MODEL, 22, stream_every=2)
    got = check_budget_and_cache_order(server, "anthropic", 22)
    assert out[0].id.startswith("msg_fake") and out[0].content[-1].type == "tool_use"
    for i, r in enumerate(out):
        u = got["usage"][i]["usage"]
        assert (u["input_tokens"], u["cache_read_tokens"], u["cache_write_tokens"], u["output_tokens"]) == (
            r.usage.input_tokens, r.usage.cache_read_input_tokens, r.usage.cache_creation_input_tokens, r.usage.output_tokens)
    # cache breakpoints are placed (the pack is cache-ordered: tools -> system -> messages)
    for q in got["requests"]:
        assert q["system"][-1].get("cache_control") == {"type": "ephemeral"}
        assert q["tools"][0]["name"] == "bash"


@pytest.mark.slow
def test_credentials_are_forwarded_never_stored_or_logged(server: Rig, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("windowsmith", "uvicorn", "uvicorn.error", "starlette"):
        caplog.set_level(logging.DEBUG, logger=name)
    run_openai_agent(server.openai(), "gpt-4o", 3)
    run_anthropic_agent(server.anthropic(), ANTHROPIC_MODEL, 3)
    assert server.upstream.last_key is not None and ANTHROPIC_KEY in server.upstream.last_key
    assert any(q["format"] == "openai" for q in server.upstream.requests)
    data = b""
    for p in server.store_path.parent.glob("proxy.db*"):
        data += p.read_bytes()
    assert data and OPENAI_KEY.encode() not in data and ANTHROPIC_KEY.encode() not in data
    assert b"sk-proj-Zx81" not in data
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert OPENAI_KEY not in text and ANTHROPIC_KEY not in text


@pytest.mark.slow
def test_session_id_from_header_or_a_stable_hash(server: Rig) -> None:
    c = server.openai()
    run_openai_agent(c, "gpt-4o", 2, headers={"X-Windowsmith-Session": "agent-7"})
    run_openai_agent(c, "gpt-4o", 2)
    run_openai_agent(c, "gpt-4o", 3)  # the same task started again: a fork of the hashed id
    ids = [s["id"] for s in server.get("/api/sessions").json()]
    assert ids[0] == "agent-7"
    (hashed, fork) = ids[1:]
    assert hashed.startswith("px-") and fork == hashed + ".2"
    assert [len(server.get(f"/api/sessions/{i}").json()["calls"]) for i in ids] == [2, 2, 3]


@pytest.mark.slow
def test_a_rewritten_history_is_refused_with_409(server: Rig) -> None:
    c = server.openai()
    h = {"X-Windowsmith-Session": "edit-me"}
    run_openai_agent(c, "gpt-4o", 2, headers=h)
    with pytest.raises(openai.ConflictError) as e:
        c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "a different start"}],
                                  extra_headers=h)
    assert "append-only" in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["../etc/passwd", "a b", "x" * 200, "ünï"])
def test_bad_session_ids_are_refused(server: Rig, bad: str) -> None:
    r = server.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"X-Windowsmith-Session": bad.encode("utf-8")})
    assert r.status_code == 400 and "X-Windowsmith-Session".lower() in r.json()["error"]["message"].lower()
    assert server.upstream.requests == []


@pytest.mark.slow
def test_upstream_errors_pass_through_with_their_status(tmp_path: Path) -> None:
    up = FakeUpstream()
    for r in rig(tmp_path, upstream=up):
        # an unknown model is the upstream's business: windowsmith must know the model to budget it, so it says so
        with pytest.raises(openai.BadRequestError) as e:
            r.openai().chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
        assert "no-such-model" in str(e.value)
        # the upstream's own error: its status and body come back unchanged
        bad = r.post("/v1/messages", json={"model": ANTHROPIC_MODEL, "max_tokens": 10,
                                           "messages": [{"role": "user", "content": "hi"}], "temperature": 7},
                     headers={"x-api-key": "k"})
        assert bad.status_code == 200  # the fake accepts any temperature: the proxy does not second-guess
        r.upstream.max_context_tokens = 5  # nothing fits now, even after compaction: the 400 passes through
        with pytest.raises(anthropic.BadRequestError) as e2:
            r.anthropic().messages.create(model=ANTHROPIC_MODEL, max_tokens=10, messages=[{"role": "user", "content": "hello"}])
        assert e2.value.status_code == 400 and "prompt is too long" in str(e2.value)


def test_unreachable_upstream_is_a_502_in_the_provider_format(tmp_path: Path) -> None:
    app = create_app(ServerConfig(store=tmp_path / "x.db", openai_base_url="http://127.0.0.1:9/v1"))
    with BackgroundServer(app) as p, openai.OpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0) as c:
        with pytest.raises(openai.APIStatusError) as e:
            c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert e.value.status_code == 502 and "openai-base-url" in str(e.value)


@pytest.mark.slow
def test_upstream_overflow_compacts_and_retries_once(tmp_path: Path) -> None:
    # The proxy thinks the window is 12,000 tokens; the upstream refuses anything over 6,000 (below where the
    # calibrated count, which follows the billed usage, starts compacting on its own).
    up = FakeUpstream(max_context_tokens=6000)
    for r in rig(tmp_path, upstream=up, window=12000):
        out = run_anthropic_agent(r.anthropic(), ANTHROPIC_MODEL, 14, stream_every=3)
        assert len(out) == 14  # every call succeeded for the client
        with open_store(str(r.store_path)) as st:
            (sid,) = [s.id for s in st.list_sessions()]
            events = st.events(sid)
        rejected = [e for e in events if e.kind == "compaction" and "rejected" in e.data.get("reason", "")]
        assert rejected, "an overflow must trigger a recorded compaction"
        sizes = [q["body"] for q in up.requests]
        assert len(sizes) > 14  # the retries went upstream too


@pytest.mark.slow
def test_json_api(server: Rig) -> None:
    run_openai_agent(server.openai(), "gpt-4o", 8, headers={"X-Windowsmith-Session": "api-1"})
    sessions = server.get("/api/sessions").json()
    assert [s["id"] for s in sessions] == ["api-1"]
    d = server.get("/api/sessions/api-1").json()
    assert len(d["turns"]) == 8 and len(d["calls"]) == 8 and d["cost"] > 0
    assert d["turns"][0]["layers"]["tools"] > 0 and d["turns"][-1]["layers"]["history"] > 0
    packs = server.get("/api/sessions/api-1/packs").json()
    assert [p["pack_id"] for p in packs] == [t["pack_id"] for t in d["turns"]]
    m = server.get(f"/api/packs/{packs[3]['pack_id'][:12]}").json()
    assert m == packs[3]
    df = server.get(f"/api/diff?a={packs[2]['pack_id']}&b={packs[3]['pack_id']}").json()
    assert df["tokens"]["b"] == packs[3]["tokens"] and df["same_session"] is True
    c = server.post("/api/sessions/api-1/compact").json()
    assert c["session"] == "api-1" and "description" in c
    assert server.get("/api/sessions/nope").status_code == 404
    assert server.get("/api/packs/pk_nope").status_code == 404
    assert server.get("/api/diff?a=x").status_code == 400
    assert server.post("/api/sessions/nope/compact").status_code == 404


@pytest.mark.slow
def test_tokens_guard_the_api_dashboard_and_proxy(tmp_path: Path) -> None:
    tok = "t" * 32
    for r in rig(tmp_path, tokens={tok: None}):
        assert r.get("/api/sessions").status_code == 401
        assert r.get("/").status_code == 401
        assert r.get("/api/sessions", headers={"Authorization": "Bearer " + "x" * 32}).status_code == 401
        with pytest.raises(openai.AuthenticationError) as e:
            r.openai().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert "X-Windowsmith-Token" in str(e.value)
        run_openai_agent(r.openai(), "gpt-4o", 2, headers={"X-Windowsmith-Token": tok})
        assert len(r.get("/api/sessions", headers={"Authorization": "Bearer " + tok}).json()) == 1
        page = r.get("/?token=" + tok)
        assert page.status_code == 200 and f"&amp;token={tok}" in page.text  # session links stay authorized
        assert r.upstream.last_key == "Bearer " + OPENAI_KEY  # the provider key still went upstream


@pytest.mark.slow
def test_dashboard_page_is_self_contained(server: Rig) -> None:
    run_openai_agent(server.openai(), "gpt-4o", 2, headers={"X-Windowsmith-Session": "dash"})
    html = server.get("/").text
    assert "dash" in html and "<script>" in html
    assert "http://" not in html and "https://" not in html  # no CDN, nothing fetched from elsewhere


@pytest.mark.slow
def test_sqlite_file_holds_the_sync_state_not_the_conversation_twice(server: Rig) -> None:
    run_openai_agent(server.openai(), "gpt-4o", 6, headers={"X-Windowsmith-Session": "dup"})
    with sqlite3.connect(server.store_path) as db:
        kinds = [k for (k,) in db.execute("SELECT kind FROM events")]
    # the task, 6 assistant messages (recorded from the responses, their echoes skipped) and the 5 tool
    # results sent since: never a message twice
    assert kinds.count("message") == 1 + 6 + 5
    assert kinds.count("usage") == 6
    d = server.get("/api/sessions/dup").json()
    assert d["messages"] == 12
    assert json.loads(json.dumps(d))  # plain JSON
