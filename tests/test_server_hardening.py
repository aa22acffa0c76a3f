"""The server under hostile or unlucky input, over real HTTP on loopback: tenant tokens on the proxy, clients that
leave, hung upstreams, malformed and oversized bodies, broken upstream streams, and the shape of every error."""

from __future__ import annotations

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
