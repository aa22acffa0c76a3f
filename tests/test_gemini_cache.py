"""Explicit Gemini context caching through the real google-genai client, against a loopback fake endpoint."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from google import genai
from google.genai import types

import windowsmith as ws
from sdk_mock import gemini_reply
from windowsmith.errors import ConfigError
from windowsmith.formats.gemini_cache import GeminiContextCache
from windowsmith.registry import load_registry

FLASH = load_registry().get("gemini-2.5-flash")
TOOL = {"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}


class FakeGemini:
    """``cachedContents`` create/delete and ``generateContent`` on 127.0.0.1; keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                outer.calls.append(("POST", self.path, body))
                if self.path.startswith("/v1beta/cachedContents"):
                    k = sum(1 for m, p, _ in outer.calls if m == "POST" and "cachedContents" in p)
                    self._reply({"name": f"cachedContents/c{k}", "model": body.get("model"),
                                 "expireTime": "2030-01-01T00:00:00Z", "usageMetadata": {"totalTokenCount": 3000}})
                else:
                    self._reply(gemini_reply(calls=[]))

            def do_DELETE(self) -> None:
                outer.calls.append(("DELETE", self.path, {}))
                self._reply({})

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def client(self) -> genai.Client:
        port = self.server.server_address[1]
        return genai.Client(api_key="t", http_options=types.HttpOptions(base_url=f"http://127.0.0.1:{port}"))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    f = FakeGemini()
    yield f
    f.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _pack(e: ws.Engine, system: str) -> ws.Pack:
    s = e.session("g" + str(abs(hash(system)) % 1000))
    s.system(system)
    s.tools([TOOL])
    s.user("Fix the failing test in parser.py")
    return s.build("gemini")


def test_created_reused_replaced_and_deleted_when_it_pays(fake, tmp_path) -> None:
    clock = Clock()
    client = fake.client()
    cache = GeminiContextCache(client, FLASH, ttl=3600, clock=clock)
    with ws.Engine(model="gemini-2.5-flash", store=tmp_path / "w.db") as e:
        pack = _pack(e, "You are a careful coding agent. " * 500)
        big = pack.manifest.components["system"] + pack.manifest.components["tools"]
        assert big >= 2048
        sent = []
        for _ in range(3):  # a call a minute: 60 reads an hour pay for the storage
            req = cache.request(pack.request, prefix_tokens=big)
            client.models.generate_content(**req)
            sent.append(req)
            clock.now += 60
        assert "cached_content" not in sent[0]["config"]  # one call says nothing of the rate yet
        assert sent[1]["config"]["cached_content"] == sent[2]["config"]["cached_content"] == "cachedContents/c1"
        assert "system_instruction" not in sent[1]["config"] and "tools" not in sent[1]["config"]
        assert sent[1]["contents"] == pack.request["contents"]
        assert cache.created == 1 and cache.reused == 1
        create = next(b for m, p, b in fake.calls if m == "POST" and "cachedContents" in p)
        assert create["ttl"] == "3600s" and "systemInstruction" in create and "tools" in create
        gen = [b for m, p, b in fake.calls if "generateContent" in p]
        assert gen[1]["cachedContent"] == "cachedContents/c1" and "systemInstruction" not in gen[1]
        # the prefix changes: the old cache is deleted and a new one made
        other = _pack(e, "You are a terse coding agent. " * 500)
        req = cache.request(other.request, prefix_tokens=big)
        assert req["config"]["cached_content"] == "cachedContents/c2"
        assert ("DELETE", "/v1beta/cachedContents/c1", {}) in fake.calls
        # after its TTL the server let it go: a new one
        clock.now += 3600
        cache.calls_per_hour = 60
        assert cache.request(other.request, prefix_tokens=big)["config"]["cached_content"] == "cachedContents/c3"
        # the rate falls to where storage no longer pays: deleted now, the request goes out whole
        cache.calls_per_hour = 0.1
        assert cache.request(other.request, prefix_tokens=big) == dict(other.request)
        assert ("DELETE", "/v1beta/cachedContents/c3", {}) in fake.calls and cache.name is None
        cache.close()


def test_under_the_minimum_or_a_slow_rate_never_creates(fake) -> None:
    clock = Clock()
    cache = GeminiContextCache(fake.client(), FLASH, clock=clock, calls_per_hour=600)
    body = {"model": "gemini-2.5-flash", "contents": [], "config": {"system_instruction": {"parts": [{"text": "x"}]}}}
    assert cache.request(body, prefix_tokens=2047) == body
    assert not cache.pays(100_000, 0.5) and cache.pays(100_000, 60)
    assert not fake.calls


def test_a_model_without_a_storage_price_is_refused() -> None:
    with pytest.raises(ConfigError, match="cache_storage_per_hour"):
        GeminiContextCache(object(), load_registry().get("gpt-4.1"))
