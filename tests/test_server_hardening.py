"""The server under hostile or unlucky input, over real HTTP on loopback: tenant tokens on the proxy, clients that
leave, hung upstreams, malformed and oversized bodies, broken upstream streams, and the shape of every error."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

ANTHROPIC_MODEL = "claude-sonnet-5-5"
TOKEN_A, TOKEN_B = "a" * 32, "b" * 32


class Rig:
    def __init__(self, upstream: Any, url: str, app: Any) -> None:
        self.upstream = upstream
        self.url = url
        self.app = app

    @property
    def state(self) -> Any:
        return self.app.state.windowsmith

    def openai(self, **kw: Any) -> Any:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="sk-test", max_retries=0, **kw)

    def anthropic(self, **kw: Any) -> Any:
        return anthropic.Anthropic(base_url=self.url, api_key="sk-ant-test", max_retries=0, **kw)

    def post(self, path: str, **kw: Any) -> Any:
        return httpx.post(self.url + path, timeout=kw.pop("timeout", 30), **kw)


@contextmanager
def rig(tmp_path: Path, upstream: Any = None, **config: Any) -> Iterator[Rig]:
    up = upstream if upstream is not None else FakeUpstream()
    with BackgroundServer(up) as u:
        app = create_app(ServerConfig(store=tmp_path / "proxy.db", openai_base_url=u.url + "/v1",
                                      anthropic_base_url=u.url, **config))
        with BackgroundServer(app) as p:
            yield Rig(up, p.url, app)


def hi(text: str = "hi") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# -- tenant tokens on the proxy ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_tenant_tokens_drive_the_proxy_concurrently(tmp_path: Path) -> None:
    """A tenant-scoped token's first proxy call used to deadlock the server (the engine's lock taken twice)."""
    with rig(tmp_path, tokens={TOKEN_A: "tenant-a", TOKEN_B: "tenant-b"}) as r:
        def turn(job: tuple[str, int]) -> str:
            token, n = job
            with r.openai(timeout=30) as c:
                reply = c.chat.completions.create(model="gpt-4o", messages=hi(f"task {n}"),
                                                  extra_headers={"X-Windowsmith-Token": token,
                                                                 "X-Windowsmith-Session": f"s-{token[0]}-{n}"})
            return reply.choices[0].message.content or ""

        jobs = [(TOKEN_A if i % 2 else TOKEN_B, i) for i in range(12)]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(turn, jobs))
        assert all(answers)
        with r.anthropic(timeout=30) as c:  # the other proxy route, same tenants
            c.messages.create(model=ANTHROPIC_MODEL, max_tokens=10, messages=hi("x"),
                              extra_headers={"X-Windowsmith-Token": TOKEN_A, "X-Windowsmith-Session": "s-a-anth"})
        seen = {}
        for tok, tenant in ((TOKEN_A, "a"), (TOKEN_B, "b")):
            resp = httpx.get(r.url + "/api/sessions", headers={"Authorization": "Bearer " + tok}, timeout=30)
            assert resp.status_code == 200
            seen[tenant] = sorted(s["id"] for s in resp.json())
        assert seen["a"] == sorted([f"s-a-{i}" for i in range(1, 12, 2)] + ["s-a-anth"])
        assert seen["b"] == sorted(f"s-b-{i}" for i in range(0, 12, 2))


# -- malformed and oversized bodies -----------------------------------------------------------------------------


class CountingApp:
    """The app behind a receive that counts the body bytes the server handed it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.read = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            msg = await receive()
            self.read += len(msg.get("body", b""))
            return msg

        await self.app(scope, counted, send)


@contextmanager
def counted_server(tmp_path: Path, **config: Any) -> Iterator[tuple[CountingApp, str]]:
    with BackgroundServer(FakeUpstream()) as u:
        app = CountingApp(create_app(ServerConfig(store=tmp_path / "proxy.db", openai_base_url=u.url + "/v1",
                                                  anthropic_base_url=u.url, **config)))
        with BackgroundServer(app) as p:
            yield app, p.url


def openai_error(resp: Any, status: int) -> str:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return str(err["message"])


def anthropic_error(resp: Any, status: int) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    return str(body["error"]["message"])


@pytest.mark.slow
@pytest.mark.parametrize("size_mb", [32, 64])
def test_oversized_bodies_are_413_without_being_read(tmp_path: Path, size_mb: int) -> None:
    payload = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "' + b"x" * (size_mb << 20) + b'"}]}'
    with counted_server(tmp_path, max_body=1 << 20) as (app, url):
        with_length = httpx.post(url + "/v1/chat/completions", content=payload, timeout=60,
                                 headers={"content-type": "application/json"})
        assert "over the server's limit" in openai_error(with_length, 413)
        assert app.read == 0  # refused from its Content-Length: not a byte of the body read

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams in
            for i in range(0, len(payload), 1 << 16):
                yield payload[i:i + (1 << 16)]

        chunked = httpx.post(url + "/v1/messages", content=chunks(), timeout=60)
        assert "--max-body" in anthropic_error(chunked, 413)
        assert app.read <= (1 << 20) + (1 << 19)  # the limit and at most a socket read or two (256 KiB) beyond it


@pytest.mark.parametrize(("body", "why"), [
    (b'{"model": "gpt-4o", "temperature": NaN, "messages": [{"role": "user", "content": "hi"}]}', "NaN"),
    (b'{"model": "gpt-4o", "temperature": Infinity, "messages": []}', "Infinity"),
    (b'{"model": "gpt-4o", "temperature": -Infinity, "messages": []}', "-Infinity"),
    (b'{"model": "gpt-4o", "temperature": 1e999, "messages": []}', "out of range"),
    (b'{"model": "gpt-4o", "messages": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "5002 levels deep"),
    (b'{"model": "gpt-4o", "metadata": {"a": ' + b'{"b": ' * 60000 + b"1" + b"}" * 60000 + b"}}", "levels deep"),
    (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "[[[[{{{{"}]', "not valid JSON"),
    (b'\xff\xfe{"model"', "not valid JSON"),
    (b'{"n": ' + b"9" * 5000 + b"}", "not valid JSON"),
])
def test_malformed_bodies_are_400_in_the_provider_shape(tmp_path: Path, body: bytes, why: str) -> None:
    with counted_server(tmp_path) as (_, url):
        r = httpx.post(url + "/v1/chat/completions", content=body, timeout=30)
        assert why in openai_error(r, 400)
        r = httpx.post(url + "/v1/messages", content=body, timeout=30)
        assert why in anthropic_error(r, 400)
        r = httpx.post(url + "/v1beta/models/gemini-2.5-pro:generateContent", content=body, timeout=30)
        assert r.status_code == 400 and why in r.json()["error"]["message"]


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    from windowsmith.server.limits import json_depth, parse_json

    assert json_depth(b'{"a": "[[[[{{{{\\"[[[", "b": [[1], {"c": []}]}') == 4
    deep_text = json.dumps({"content": "[" * 10000})
    assert parse_json(deep_text.encode()) == {"content": "[" * 10000}


def test_unknown_routes_and_methods_answer_in_the_route_shape(tmp_path: Path) -> None:
    with counted_server(tmp_path) as (_, url):
        assert anthropic_error(httpx.get(url + "/v1/messages", timeout=30), 405)
        assert openai_error(httpx.post(url + "/v1/nope", timeout=30), 404)
        r = httpx.get(url + "/api/nope", timeout=30)
        assert r.status_code == 404 and "GET /api/nope" in r.json()["error"]
        r = httpx.get(url + "/v1beta/models/gemini-2.5-pro:generateContent", timeout=30)
        assert r.status_code == 405 and r.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_a_gemini_body_over_the_limit_is_413_in_gemini_shape(tmp_path: Path) -> None:
    with counted_server(tmp_path, max_body=1000) as (app, url):
        r = httpx.post(url + "/v1beta/models/gemini-2.5-pro:generateContent", content=b"{" + b" " * 5000 + b"}",
                       timeout=30)
        assert r.status_code == 413 and app.read == 0
        err = r.json()["error"]
        assert err["code"] == 413 and err["status"] == "INVALID_ARGUMENT" and "--max-body" in err["message"]


# -- clients that leave, upstreams that hang --------------------------------------------------------------------


class HangingUpstream(FakeUpstream):
    """The fake provider, whose calls hang while ``hang`` is set (until the caller leaves, counted in ``abandoned``,
    or the test ends)."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.abandoned = 0
        self.release = threading.Event()

    async def _pre(self, request: Any, fmt: str) -> Any:
        body = await super()._pre(request, fmt)
        if self.hang:
            while not self.release.is_set():
                if await request.is_disconnected():
                    self.abandoned += 1
                    break
                await asyncio.sleep(0.02)
        return body


def eventually(check: Any, what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_cancels_the_upstream_call_and_frees_the_session(
        tmp_path: Path, stream: bool, caplog: pytest.LogCaptureFixture) -> None:
    up = HangingUpstream()
    try:
        with rig(tmp_path, up) as r, caplog.at_level(logging.INFO, "windowsmith.server"):
            H = {"X-Windowsmith-Session": "hung"}
            up.hang = True
            with r.openai(timeout=1.0) as c, pytest.raises(openai.APITimeoutError):
                c.chat.completions.create(model="gpt-4o", messages=hi(), stream=stream, extra_headers=H)
            lock = r.state.session_lock(None, "hung")
            eventually(lambda: not lock.locked(), "the session stays locked after its client left")
            eventually(lambda: up.abandoned == 1, "the upstream call was not cancelled")
            assert not up.release.is_set()  # (the upstream would still be hanging)
            assert "disconnected before its response ended" in caplog.text
            up.hang = False
            with r.openai(timeout=30) as c:  # the retry goes through at once
                reply = c.chat.completions.create(model="gpt-4o", messages=hi(), extra_headers=H)
            assert reply.choices[0].message.content
    finally:
        up.release.set()


@pytest.mark.slow
def test_upstream_timeout_is_a_504_naming_the_option(tmp_path: Path) -> None:
    up = HangingUpstream()
    try:
        with rig(tmp_path, up, upstream_timeout=0.5) as r:
            up.hang = True
            resp = r.post("/v1/messages", json={"model": ANTHROPIC_MODEL, "max_tokens": 10, "messages": hi()},
                          headers={"x-api-key": "k"})
            assert "--upstream-timeout" in anthropic_error(resp, 504)
            assert not r.state.session_lock(None, "x").locked()
    finally:
        up.release.set()


# -- broken upstream streams ------------------------------------------------------------------------------------


def scripted_upstream(events: list[bytes], drop: bool) -> Any:
    """A provider answering every call with these server-sent events, then ending (or dropping the connection)."""
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def answer(request: Any) -> Any:
        await request.body()

        async def body() -> Any:
            for e in events:
                yield e
                await asyncio.sleep(0.01)
            if drop:
                raise ConnectionResetError("the scripted upstream drops the connection")

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"]),
                             Route("/v1/messages", answer, methods=["POST"]),
                             Route("/v1beta/models/{target:path}", answer, methods=["POST"])])


def sse(data: dict[str, Any], event: str | None = None) -> bytes:
    return (f"event: {event}\n" if event else "").encode() + b"data: " + json.dumps(data).encode() + b"\n\n"


OPENAI_START = sse({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]})
ANTHROPIC_START = [
    sse({"type": "message_start", "message": {"id": "m1", "type": "message", "role": "assistant", "content": [],
                                              "model": ANTHROPIC_MODEL, "usage": {"input_tokens": 5}}}, "message_start"),
    sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start"),
    sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}, "content_block_delta"),
]


@pytest.mark.parametrize("drop", [True, False])
def test_a_broken_gemini_stream_ends_with_an_error_event(tmp_path: Path, drop: bool,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    start = sse({"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}, "index": 0}]})
    with BackgroundServer(scripted_upstream([start], drop)) as u, \
            rig(tmp_path, FakeUpstream(), gemini_base_url=u.url) as r, caplog.at_level(logging.WARNING):
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        with httpx.stream("POST", r.url + "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", json=body,
                          headers={"x-goog-api-key": "k"}, timeout=30) as resp:
            text = resp.read().decode()
        assert resp.status_code == 200, text
        *_, last = [e for e in text.split("\n\n") if e.strip()]
        err = json.loads(last.removeprefix("data: "))["error"]
        assert err["code"] == 500 and "ended before its last event" in err["message"]
        assert "ended before its last event" in caplog.text and "Traceback" not in caplog.text


@pytest.mark.parametrize(("fmt", "events", "drop", "why"), [
    ("openai", [OPENAI_START, sse({"id": "c1", "choices": {"0": {"delta": {}}}})], False, "malformed stream event"),
    ("openai", [OPENAI_START], True, "ended before its last event"),
    ("openai", [OPENAI_START], False, "ended before its last event"),
    ("anthropic", [*ANTHROPIC_START, sse({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}},
                                         "content_block_delta")], False, "malformed stream event"),
    ("anthropic", ANTHROPIC_START, True, "ended before its last event"),
])
def test_a_broken_upstream_stream_ends_with_an_error_event(tmp_path: Path, fmt: str, events: list[bytes], drop: bool,
                                                           why: str, caplog: pytest.LogCaptureFixture) -> None:
    with rig(tmp_path, scripted_upstream(events, drop)) as r, caplog.at_level(logging.WARNING, "windowsmith.server"):
        if fmt == "openai":
            path, body, headers = "/v1/chat/completions", {"model": "gpt-4o", "messages": hi(), "stream": True}, {}
        else:
            path, headers = "/v1/messages", {"x-api-key": "k"}
            body = {"model": ANTHROPIC_MODEL, "max_tokens": 10, "messages": hi(), "stream": True}
        with httpx.stream("POST", r.url + path, json=body, headers=headers, timeout=30) as resp:
            text = resp.read().decode()
        assert resp.status_code == 200
        *_, last = [e for e in text.split("\n\n") if e.strip()]
        assert "Hel" in text  # what came before the break was passed on
        if fmt == "openai":
            err = json.loads(last.removeprefix("data: "))["error"]
            assert set(err) == {"message", "type", "param", "code"} and why in err["message"]
        else:
            name, data = last.split("\n")
            assert name == "event: error"
            err = json.loads(data.removeprefix("data: "))
            assert err["type"] == "error" and why in err["error"]["message"]
        assert why in caplog.text  # the reason is logged
        assert "Traceback" not in caplog.text
        # and the SDKs raise it as an API error
        with pytest.raises((openai.APIError, anthropic.APIError), match=why):
            if fmt == "openai":
                with r.openai(timeout=30) as c:
                    list(c.chat.completions.create(model="gpt-4o", messages=hi("again"), stream=True))
            else:
                with r.anthropic(timeout=30) as c:
                    list(c.messages.create(model=ANTHROPIC_MODEL, max_tokens=10, messages=hi("again"), stream=True))


# -- slow sockets -----------------------------------------------------------------------------------------------


@contextmanager
def uvicorn_with_limits(app: Any) -> Iterator[tuple[str, int]]:
    """The app on uvicorn with the read timeouts ``windowsmith serve`` runs it with."""
    import uvicorn

    from windowsmith.cli.serve import _uvicorn_limits

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on",
                                           **_uvicorn_limits()))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    eventually(lambda: server.started, "uvicorn did not start")
    try:
        yield server.servers[0].sockets[0].getsockname()[:2]
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def read_all(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


@pytest.mark.slow
def test_slow_sockets_are_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from windowsmith.server import limits

    monkeypatch.setattr(limits, "HEADER_TIMEOUT", 0.3)
    app = create_app(ServerConfig(store=tmp_path / "slow.db", body_timeout=0.3))
    with uvicorn_with_limits(app) as addr:
        # headers that never end: the connection is closed (and nothing was answered)
        with socket.create_connection(addr) as s:
            s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
            assert read_all(s) == b""
        # a connection that never says anything: closed as well
        with socket.create_connection(addr) as s:
            assert read_all(s) == b""
        # a body that never ends: a 408 in the route's shape
        with socket.create_connection(addr) as s:
            s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\": ")
            reply = read_all(s)
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408")
        err = json.loads(body)
        assert err["type"] == "error" and "did not arrive in time" in err["error"]["message"]
        # an idle keep-alive connection after an answer: closed too
        with socket.create_connection(addr) as s:
            s.sendall(b"GET /api/sessions HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_all(s).startswith(b"HTTP/1.1 200")



@pytest.mark.slow
def test_a_client_that_leaves_a_stalled_stream_frees_the_session(tmp_path: Path) -> None:
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    seen = {"abandoned": 0}
    release = threading.Event()

    async def answer(request: Any) -> Any:  # one event, then nothing until the caller leaves
        await request.body()

        async def body() -> Any:
            try:
                yield OPENAI_START
                while not release.is_set():
                    await asyncio.sleep(0.02)
            finally:  # (starlette cancels a stream whose caller left)
                seen["abandoned"] += not release.is_set()

        return StreamingResponse(body(), media_type="text/event-stream")

    up = Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])
    try:
        with rig(tmp_path, up) as r:
            body = {"model": "gpt-4o", "messages": hi(), "stream": True}
            with httpx.stream("POST", r.url + "/v1/chat/completions", json=body, timeout=30,
                              headers={"X-Windowsmith-Session": "stalled"}) as resp:
                first = next(resp.iter_bytes())
                assert b"Hel" in first
            lock = r.state.session_lock(None, "stalled")
            eventually(lambda: not lock.locked(), "the session stays locked after its client left a stalled stream")
            eventually(lambda: seen["abandoned"] == 1, "the stalled upstream stream was not closed")
    finally:
        release.set()



def test_a_client_that_leaves_mid_body_is_no_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with rig(tmp_path) as r, caplog.at_level(logging.INFO, "windowsmith.server"):
        host, port = r.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\": ")
            time.sleep(0.2)
        eventually(lambda: "disconnected while sending its body" in caplog.text, "the early disconnect was not seen")
        assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]


# -- the serve command ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "warns"), [
    (["--host", "0.0.0.0"], True),
    (["--host", "192.168.1.20"], True),
    (["--host", "0.0.0.0", "--token", "t" * 32], False),
    ([], False),
    (["--host", "::1"], False),
    (["--host", "localhost"], False),
])
def test_serve_warns_when_it_binds_beyond_loopback_without_tokens(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                  args: list[str], warns: bool) -> None:
    from click.testing import CliRunner

    from windowsmith.cli import main
    from windowsmith.cli import serve as serve_mod

    seen: dict[str, Any] = {}
    monkeypatch.setattr(serve_mod, "_serve", lambda config, *a: seen.update(config=config))
    monkeypatch.delenv("WINDOWSMITH_TOKENS", raising=False)
    r = CliRunner().invoke(main, ["serve", "--store", str(tmp_path / "w.db"), "--max-body", "1000",
                                  "--upstream-timeout", "12.5", "--body-timeout", "3", *args])
    assert r.exit_code == 0, r.output
    assert ("--token" in r.output and "without --token" in r.output) is warns
    c = seen["config"]
    assert (c.max_body, c.upstream_timeout, c.body_timeout) == (1000, 12.5, 3.0)


# -- every error in the route's shape, in HTTP terms ------------------------------------------------------------

PYTHON_ADVICE = ("BudgetConfig", "refresh()", "supported formats", "Traceback", "Session(", "Engine(", "window=")


@pytest.mark.parametrize(("body", "status", "why"), [
    ({"model": "gpt-4o", "messages": [{"role": "system", "content": "word " * 20000},
                                      {"role": "user", "content": "hi"}]}, 400, "send a model with a larger window"),
    ({"model": "gpt-4o", "messages": [{"role": "wizard", "content": "hi"}]}, 400, "unknown role 'wizard'"),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": "x"}, 400, "expected a JSON array"),
    ({"model": "gpt-4o", "messages": "hi"}, 400, "'messages' array"),
    ([1], 400, "must be a JSON object"),
])
def test_proxy_errors_speak_http_not_python(tmp_path: Path, body: Any, status: int, why: str) -> None:
    with rig(tmp_path, model_window=4000) as r:
        resp = r.post("/v1/chat/completions", json=body)
        message = openai_error(resp, status)
        assert why in message and not any(a in message for a in PYTHON_ADVICE), message


def test_an_unexpected_failure_is_a_logged_500_in_the_route_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    from windowsmith.server.proxy import Proxy

    def boom(*a: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(Proxy, "_identify", boom)
    with rig(tmp_path) as r, caplog.at_level(logging.ERROR, "windowsmith.server"):
        resp = r.post("/v1/messages", json={"model": ANTHROPIC_MODEL, "max_tokens": 5, "messages": hi()})
        message = anthropic_error(resp, 500)
        assert "RecursionError" in message and "server log" in message
        assert "POST /v1/messages failed: RecursionError" in caplog.text
