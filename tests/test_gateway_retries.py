"""Idempotent turns through ``windowsmith serve``: SDK retries, exact resends, a client that timed out, an
upstream that failed, tool-call ids an upstream reuses. Every call is recorded once, usage complete, the
session never wedges, and the upstream only ever receives the conversation the client sent."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.store import open_store  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
A_TOOLS = [{"name": "bash", "description": "Run a shell command.",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]
CLAUDE = "claude-sonnet-4-5"


class Rig:
    def __init__(self, upstream: FakeUpstream, url: str, store: Path) -> None:
        self.upstream, self.url, self.store = upstream, url, store

    def openai(self, **kw: Any) -> Any:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="k", max_retries=kw.pop("max_retries", 0), **kw)

    def anthropic(self, **kw: Any) -> Any:
        return anthropic.Anthropic(base_url=self.url, api_key="k", max_retries=kw.pop("max_retries", 0), **kw)

    def events(self, sid: str) -> list[Any]:
        with open_store(str(self.store)) as st:
            return st.events(sid)

    def sessions(self) -> list[str]:
        with open_store(str(self.store)) as st:
            return [s.id for s in st.list_sessions()]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    yield from make_rig(tmp_path, FakeUpstream())


def make_rig(tmp_path: Path, up: FakeUpstream, **config: Any) -> Iterator[Rig]:
    with BackgroundServer(up) as u:
        store = tmp_path / "gw.db"
        app = create_app(ServerConfig(store=store, openai_base_url=u.url + "/v1", anthropic_base_url=u.url,
                                      model_window=8000, **config))
        with BackgroundServer(app) as p:
            yield Rig(up, p.url, store)


def kinds(events: list[Any]) -> list[str]:
    out = []
    for e in events:
        if e.kind == "message":
            out.append(e.data["message"]["role"])
        elif e.kind == "usage":
            out.append("usage")
    return out


def echo(msg: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"role": "assistant", "content": msg.content}
    if msg.tool_calls:
        d["tool_calls"] = [c.model_dump() for c in msg.tool_calls]
    return d


def assert_client_conversations(up: FakeUpstream) -> None:
    """Every upstream request alternates as a client's would: never two assistant messages in a row, never an
    assistant message last (a prefill the client did not send)."""
    for q in up.requests:
        roles = [m["role"] for m in q["body"]["messages"]]
        assert roles[-1] != "assistant", roles
        assert all(not (a == b == "assistant") for a, b in itertools.pairwise(roles)), roles


H = {"X-Windowsmith-Session": "retry-1"}


def test_exact_resend_after_a_text_reply_replays_it(rig: Rig) -> None:
    c = rig.openai()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say done."}]
    first = c.chat.completions.create(model="gpt-4o", messages=msgs, extra_headers=H)
    again = c.chat.completions.with_raw_response.create(model="gpt-4o", messages=msgs, extra_headers=H)
    third = c.chat.completions.create(model="gpt-4o", messages=msgs, extra_headers=H)
    assert again.headers["x-windowsmith-replay"] == "recorded"
    assert again.parse().choices[0].message.content == first.choices[0].message.content == \
        third.choices[0].message.content
    assert len(rig.upstream.requests) == 1  # the retries cost no upstream call
    assert kinds(rig.events("retry-1")) == ["user", "assistant", "usage"]
    # and the conversation goes on
    msgs += [echo(first.choices[0].message), {"role": "user", "content": "Again."}]
    c.chat.completions.create(model="gpt-4o", messages=msgs, extra_headers=H)
    assert kinds(rig.events("retry-1")) == ["user", "assistant", "usage", "user", "assistant", "usage"]
    assert_client_conversations(rig.upstream)


@pytest.mark.parametrize("header", [True, False])
def test_resend_after_a_tool_call_never_wedges(rig: Rig, header: bool) -> None:
    c = rig.openai()
    h = H if header else {}
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "List the files."}]
    for _turn in range(4):
        r = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS, extra_headers=h)
        for _ in range(2):  # a double resend: the same answer, never "have no result yet"
            again = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS, extra_headers=h)
            assert again.choices[0].message.tool_calls[0].id == r.choices[0].message.tool_calls[0].id
        msgs.append(echo(r.choices[0].message))
        msgs.append({"role": "tool", "tool_call_id": r.choices[0].message.tool_calls[0].id, "content": "a.py b.py"})
    assert len(rig.upstream.requests) == 4
    (sid,) = rig.sessions()
    assert kinds(rig.events(sid)) == ["user"] + ["assistant", "usage", "tool"] * 3 + ["assistant", "usage"]
    assert_client_conversations(rig.upstream)


def test_a_client_that_timed_out_retries_into_the_same_request(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    up = FakeUpstream()
    for r in make_rig(tmp_path, up):
        c = r.openai()
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
        first = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS, extra_headers=H)
        msgs += [echo(first.choices[0].message), {"role": "tool", "content": "ok",
                                                   "tool_call_id": first.choices[0].message.tool_calls[0].id}]
        up.latency = 2.0
        with caplog.at_level(logging.WARNING, "windowsmith.server"), pytest.raises(openai.APITimeoutError):
            c.with_options(timeout=1.0).chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS,
                                                                extra_headers=H)
        up.latency = 0.0
        retried = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS, extra_headers=H)
        assert "session=retry-1" in caplog.text and "client left" in caplog.text
        a, b = up.requests[-2]["body"], up.requests[-1]["body"]
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # the same request, byte for byte
        msgs += [echo(retried.choices[0].message), {"role": "tool", "content": "ok",
                                                     "tool_call_id": retried.choices[0].message.tool_calls[0].id}]
        c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS, extra_headers=H)
        ks = kinds(r.events("retry-1"))
        # the undelivered reply: its upstream call was cancelled when the client left; the retry's reply is the one the
        # log holds
        assert ks == ["user", "assistant", "usage", "tool", "assistant", "usage", "tool", "assistant", "usage"]
        assert_client_conversations(up)


def test_a_failed_upstream_call_is_retried_with_the_same_bytes(rig: Rig) -> None:
    c = rig.anthropic()
    msgs = [{"role": "user", "content": "Hello there, how are you today?"}]
    rig.upstream.fail_with = [500, 503]
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError):
            c.messages.create(model=CLAUDE, max_tokens=100, messages=msgs, extra_headers=H)
    c.messages.create(model=CLAUDE, max_tokens=100, messages=msgs, extra_headers=H)
    bodies = {json.dumps(q["body"], sort_keys=True) for q in rig.upstream.requests}
    assert len(rig.upstream.requests) == 3 and len(bodies) == 1
    assert kinds(rig.events("retry-1")) == ["user", "assistant", "usage"]


def test_an_overflow_nothing_can_shrink_is_not_sent_again(tmp_path: Path) -> None:
    up = FakeUpstream(max_context_tokens=5)
    for r in make_rig(tmp_path, up):
        with pytest.raises(anthropic.BadRequestError) as e:
            r.anthropic().messages.create(model=CLAUDE, max_tokens=100, extra_headers=H,
                                          messages=[{"role": "user", "content": "Hello there."}])
        assert "prompt is too long" in str(e.value)
        assert len(up.requests) == 1  # compaction had nothing to cut: no byte-identical second call


def test_a_streamed_retry_of_an_answered_turn_gets_the_reply_as_a_stream(rig: Rig) -> None:
    c = rig.anthropic()
    msgs = [{"role": "user", "content": "Run the tests."}]
    first = c.messages.create(model=CLAUDE, max_tokens=100, messages=msgs, tools=A_TOOLS, extra_headers=H)
    with c.messages.stream(model=CLAUDE, max_tokens=100, messages=msgs, tools=A_TOOLS, extra_headers=H) as s:
        again = s.get_final_message()
    assert [b.model_dump() for b in again.content] == [b.model_dump() for b in first.content]
    oc = rig.openai()
    omsgs = [{"role": "user", "content": "Run the linters."}]
    o1 = oc.chat.completions.create(model="gpt-4o", messages=omsgs, tools=TOOLS, extra_headers={"X-Windowsmith-Session": "o"})
    chunks = list(oc.chat.completions.create(model="gpt-4o", messages=omsgs, tools=TOOLS, stream=True,
                                             extra_headers={"X-Windowsmith-Session": "o"}))
    assert chunks[0].choices[0].delta.tool_calls[0].id == o1.choices[0].message.tool_calls[0].id
    assert len(rig.upstream.requests) == 2


def test_reused_upstream_call_ids_are_renamed_and_recorded(tmp_path: Path) -> None:
    up = FakeUpstream(reuse_call_ids=True)
    for r in make_rig(tmp_path, up):
        c = r.openai()
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
        for i in range(6):
            stream = i % 2 == 1
            if stream:
                chunks = list(c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS, stream=True,
                                                        extra_headers=H))
                cid = next(ch.choices[0].delta.tool_calls[0].id for ch in chunks
                           if ch.choices and ch.choices[0].delta.tool_calls)
                m = {"role": "assistant", "content": "", "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
            else:
                res = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS, extra_headers=H)
                cid = res.choices[0].message.tool_calls[0].id
                m = echo(res.choices[0].message)
            assert cid == "call_0"  # the client sees the upstream's ids unchanged
            msgs += [m, {"role": "tool", "tool_call_id": cid, "content": f"out {i}"}]
        events = r.events("retry-1")
        assert kinds(events).count("usage") == 6 and kinds(events).count("assistant") == 6
        ids = [c["id"] for e in events if e.kind == "message" for c in e.data["message"]["content"]
               if c.get("type") == "tool_call"]
        assert ids == ["call_0"] + [f"call_0~{k}" for k in range(2, 7)]
        upstream_ids = [tc["id"] for tc in [m for m in up.requests[-1]["body"]["messages"]
                                            if m.get("tool_calls")][-1]["tool_calls"]]
        assert upstream_ids == ["call_0~5"]  # what the upstream sees is consistent (unique ids)
        assert_client_conversations(up)


def test_a_diverging_history_forks_without_a_header_and_is_a_409_with_one(rig: Rig) -> None:
    c = rig.openai()
    for h in ({}, H):
        base = [{"role": "user", "content": "Start."}]
        r1 = c.chat.completions.create(model="gpt-4o", messages=base, tools=TOOLS, extra_headers=h)
        call = r1.choices[0].message.tool_calls[0].id
        c.chat.completions.create(model="gpt-4o", extra_headers=h, tools=TOOLS, messages=[
            *base, echo(r1.choices[0].message), {"role": "tool", "tool_call_id": call, "content": "x"}])
        edited = [*base, echo(r1.choices[0].message), {"role": "tool", "tool_call_id": call, "content": "edited"}]
        if not h:  # the same run started again, differently: a fork of the hashed id
            c.chat.completions.create(model="gpt-4o", messages=edited, tools=TOOLS)
            ids = rig.sessions()
            assert len(ids) == 2 and ids[1] == ids[0] + ".2"
            continue
        with pytest.raises(openai.ConflictError) as e:
            c.chat.completions.create(model="gpt-4o", messages=edited, tools=TOOLS, extra_headers=h)
        text = str(e.value)
        assert "X-Windowsmith-Session header" in text and "session." not in text and "()" not in text
    assert_client_conversations(rig.upstream)


def test_a_reply_whose_sync_write_was_lost_is_replayed_from_the_log(rig: Rig) -> None:
    """A process stopped between recording a reply and writing the sync state: the retry finds the reply in
    the log and replays it (no second upstream call, no refusal)."""
    from windowsmith.server.conversation import SYNC_SCOPE

    c = rig.openai()
    msgs = [{"role": "user", "content": "Go."}]
    first = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS, extra_headers=H)
    with open_store(str(rig.store)) as st:
        sync = st.get_kv(SYNC_SCOPE, "retry-1")
        seq_before_reply = sync["turn"]["seq"]
        st.set_kv(SYNC_SCOPE, "retry-1", {**sync, "pending": None, "seq": seq_before_reply,
                                          "turn": {k: v for k, v in sync["turn"].items() if k != "reply"}})
    server = rig.openai()
    again = server.chat.completions.with_raw_response.create(model="gpt-4o", messages=msgs, tools=TOOLS,
                                                             extra_headers=H)
    assert again.headers["x-windowsmith-replay"] == "recorded"
    assert again.parse().choices[0].message.tool_calls[0].id == first.choices[0].message.tool_calls[0].id
    assert len(rig.upstream.requests) == 1
