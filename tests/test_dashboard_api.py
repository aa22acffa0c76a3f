"""The JSON routes the dashboard reads beyond the log: the session index, a session's overview (headline figures,
header, calibrated layers), the request last sent, a referenced artifact (redacted, as text) and the what-if replay
under the bench's strategies; each one scoped to the caller's tenant."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from server_agents import TRACE, run_openai_agent, task_and_observations  # noqa: E402
from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

pytestmark = pytest.mark.skipif(not TRACE.exists(), reason=f"needs the shared traces ({TRACE.name})")

TOKEN_A, TOKEN_B = "a" * 24, "b" * 24
SECRET = "AKIAIOSFODNN7EXAMPLE"


@dataclass
class Served:
    url: str

    def get(self, path: str, token: str | None = TOKEN_A) -> httpx.Response:
        h = {"Authorization": "Bearer " + token} if token else {}
        return httpx.get(self.url + path, headers=h, timeout=120)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Tenant A's session of 12 calls whose observations are large (so offloaded) and hold a secret; tenant B's
    session of one call."""
    tmp = tmp_path_factory.mktemp("dash-api")
    _, _, obs = task_and_observations()
    big = [o + "\n" + ("\n".join(f"line {k}: value_{k} = {k * 7}" for k in range(400))) + f"\naws key {SECRET}\n"
           for o in obs]
    with BackgroundServer(FakeUpstream()) as up:
        app = create_app(ServerConfig(store=tmp / "d.db", openai_base_url=up.url + "/v1", model_window=6000,
                                      tokens={TOKEN_A: "tenant-a", TOKEN_B: "tenant-b"}))
        with BackgroundServer(app) as p:
            for token, sid, turns, o in ((TOKEN_A, "a-long", 12, big), (TOKEN_B, "b-short", 1, None)):
                c = openai.OpenAI(base_url=p.url + "/v1", api_key="sk-test", max_retries=0)
                try:
                    run_openai_agent(c, "gpt-4o", turns, observations=o,
                                     headers={"X-Windowsmith-Session": sid, "X-Windowsmith-Token": token})
                finally:
                    c.close()
            yield Served(p.url)


def test_index_lists_cost_calls_and_last_activity_of_the_tenants_sessions(served: Served) -> None:
    a = served.get("/api/index").json()
    assert [s["id"] for s in a] == ["a-long"]
    row = a[0]
    detail = served.get("/api/sessions/a-long").json()
    assert row["calls"] == len(detail["calls"]) == 12
    assert row["cost"] == pytest.approx(detail["cost"])
    assert row["model"] == "gpt-4o" and row["last_activity"] >= row["created_at"][:19]
    assert [s["id"] for s in served.get("/api/index", TOKEN_B).json()] == ["b-short"]


def test_overview_gives_headline_figures_header_and_calibrated_layers(served: Served) -> None:
    ov = served.get("/api/sessions/a-long/overview").json()
    detail = served.get("/api/sessions/a-long").json()
    calls = detail["calls"]
    prompt = sum(c["cache_read"] + c["cache_write"] + c["uncached"] for c in calls)
    assert (ov["model"], ov["window"], ov["provider"], ov["format"]) == ("gpt-4o", 6000, "OpenAI", "openai-chat")
    assert ov["cost"] == pytest.approx(detail["cost"]) and ov["calls"] == 12
    assert ov["cache_hit_rate"] == pytest.approx(sum(c["cache_read"] for c in calls) / prompt)
    # OpenAI wording: prefix caching and prompt_cache_key, never Anthropic's breakpoints
    assert "prompt_cache_key" in ov["cache"] and "breakpoint" not in ov["cache"]
    full = ov["full_history"]
    assert len(full["per_call"]) == 12 and full["tokens"] == sum(full["per_call"])
    assert ov["tokens_saved"] == full["tokens"] - prompt > 0  # the window is small: the history was compacted
    assert ov["cost_saved"] == pytest.approx(full["cost"] - ov["cost"])
    assert full["per_call"] == sorted(full["per_call"])  # the full history only grows
    assert "priced" in ov["full_history_note"]
    packs = served.get("/api/sessions/a-long/packs").json()
    last = ov["turn_layers"][-1]
    assert last["pack_id"] == packs[-1]["pack_id"]
    assert sum(last["layers"].values()) == pytest.approx(packs[-1]["tokens"], abs=len(last["layers"]))


def test_request_is_the_last_pack_sent(served: Served) -> None:
    r = served.get("/api/sessions/a-long/request").json()
    packs = served.get("/api/sessions/a-long/packs").json()
    assert r["ok"] and r["pack_id"] == packs[-1]["pack_id"] and r["provider"] == "OpenAI"
    roles = [m["role"] for m in r["body"]["messages"]]
    assert roles[0] == "system" and "tool" in roles and "assistant" in roles
    assert SECRET not in str(r["body"])


def test_artifact_route_serves_the_redacted_text_of_a_referenced_artifact(served: Served) -> None:
    packs = served.get("/api/sessions/a-long/packs").json()
    refs = sorted({a for m in packs for a in m["artifacts"]})
    assert refs, "the large observations should have been offloaded"
    texts = []
    for ref in refs:
        resp = served.get("/api/sessions/a-long/artifacts/" + ref.removeprefix("artifact://"))
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
        texts.append(resp.text)
    assert all(SECRET not in t for t in texts)
    assert any("[REDACTED:aws_access_key_id]" in t for t in texts)
    sha = refs[0].removeprefix("artifact://")
    # another tenant, another session of the tenant, an unknown digest: not found
    assert served.get("/api/sessions/a-long/artifacts/" + sha, TOKEN_B).status_code == 404
    assert served.get("/api/sessions/b-short/artifacts/" + sha, TOKEN_B).status_code == 404
    assert served.get("/api/sessions/a-long/artifacts/" + "0" * 64).status_code == 404
    assert served.get("/api/sessions/a-long/artifacts/" + sha, None).status_code == 401


def test_whatif_replays_the_session_under_the_bench_strategies(served: Served) -> None:
    w = served.get("/api/sessions/a-long/whatif").json()
    assert w["ok"] and w["calls"] == 12 and w["window"] == 6000
    names = [r["strategy"] for r in w["rows"]]
    assert {"full", "sliding", "sticky", "clear", "summarize-langchain", "summarize-openhands", "windowsmith"} <= set(names)
    for r in w["rows"]:
        assert r["error"] is None and r["calls"] == 12 and r["cost"] > 0
        assert r["peak"] <= w["available"]
    assert served.get("/api/sessions/a-long/whatif").json() == w  # cached per head: the same answer
    short = served.get("/api/sessions/b-short/whatif", TOKEN_B).json()
    assert short["ok"] is False and "too short" in short["message"]


@pytest.mark.parametrize("path", ["overview", "request", "whatif"])
def test_new_routes_are_tenant_scoped(served: Served, path: str) -> None:
    assert served.get(f"/api/sessions/a-long/{path}", TOKEN_B).status_code == 404
    assert served.get(f"/api/sessions/a-long/{path}", None).status_code == 401
    assert served.get(f"/api/sessions/a-long/{path}", "c" * 24).status_code == 401
    assert served.get("/api/index", None).status_code == 401


def test_cache_wording_is_the_providers_own() -> None:
    from windowsmith.manifest import Manifest
    from windowsmith.server.insights import cache_wording, calibrated_layers, provider_of

    def pack(fmt: str) -> Manifest:
        return Manifest("pk", "s", 3, None, "m", fmt, 8000, 1000, 7000, 900,
                        {"history": {"used": 600}, "system": {"used": 300}, "tools": {"used": 100}}, {},
                        cache={"breakpoints": 3, "prefix_tokens": 500}, tokens_counted=1000)

    assert cache_wording(pack("anthropic")) == "3 cache_control breakpoints; cacheable prefix 500 tokens"
    for fmt in ("openai-chat", "openai-responses"):
        said = cache_wording(pack(fmt))
        assert "prompt_cache_key" in said and "breakpoint" not in said
    gemini = cache_wording(pack("gemini"))
    assert "implicit" in gemini and "cachedContents" in gemini and "breakpoint" not in gemini
    assert [provider_of(f) for f in ("anthropic", "openai-chat", "openai-responses", "gemini")] == \
        ["Anthropic", "OpenAI", "OpenAI", "Google Gemini"]
    # layers scaled to the calibrated total (900 of 1,000 counted)
    assert calibrated_layers(pack("anthropic")) == {"history": 540, "system": 270, "tools": 90}
