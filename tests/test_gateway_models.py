"""``serve`` for any model, without limits the client did not ask for, with an access log: a model no registry
knows runs with a declared window, a registry file adds models, the pack's output reservation never becomes a
cap, and every call writes one access line."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from click.testing import CliRunner  # noqa: E402

from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.server.logs import JsonFormatter  # noqa: E402
from windowsmith.store import open_store  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

MSGS = [{"role": "user", "content": "Say hello."}]


def serve(tmp_path: Path, **config: Any) -> Iterator[tuple[FakeUpstream, str]]:
    up = FakeUpstream()
    with BackgroundServer(up) as u:
        app = create_app(ServerConfig(store=tmp_path / "m.db", openai_base_url=u.url + "/v1", anthropic_base_url=u.url,
                                      **config))
        with BackgroundServer(app) as p:
            yield up, p.url


def test_an_unknown_model_names_the_options_that_admit_it(tmp_path: Path) -> None:
    for _, url in serve(tmp_path):
        with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as c, \
                pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model="llama3:8b", messages=MSGS)
        assert "--default-window" in str(e.value) and "--registry" in str(e.value)
        assert "Engine(" not in str(e.value)


def test_an_unknown_model_runs_with_the_default_window_and_calibrates(tmp_path: Path) -> None:
    for up, url in serve(tmp_path, default_window=32_000):
        with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as c:
            msgs: list[dict[str, Any]] = list(MSGS)
            for _ in range(3):
                r = c.chat.completions.create(model="llama3:8b", messages=msgs)
                msgs += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "More."}]
        assert [q["body"]["model"] for q in up.requests] == ["llama3:8b"] * 3
        with open_store(str(tmp_path / "m.db")) as st:
            (s,) = st.list_sessions()
            manifests = st.list_packs(s.id)
            assert len(manifests) == 3 and all(m["available"] <= 32_000 for m in manifests)
            assert [e.kind for e in st.events(s.id)].count("usage") == 3


def test_a_registry_file_adds_a_model(tmp_path: Path) -> None:
    reg = tmp_path / "models.toml"
    reg.write_text('[models."acme-coder"]\nprovider = "openai"\ndefault_format = "openai-chat"\n'
                   'context_window = 64000\nmax_output = 4096\ntokenizer = "o200k_base"\n'
                   'prices = { input = 1.0, output = 2.0, cache_write = 1.0, cache_read = 0.5 }\n')
    for up, url in serve(tmp_path, registry=reg):
        with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as c:
            c.chat.completions.create(model="acme-coder", messages=MSGS)
        assert up.requests[0]["body"]["model"] == "acme-coder"


def test_no_output_cap_the_client_did_not_ask_for(tmp_path: Path) -> None:
    for up, url in serve(tmp_path):
        with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as c:
            c.chat.completions.create(model="gpt-4o", messages=MSGS)
            c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Other."}], max_tokens=77)
        first, second = (q["body"] for q in up.requests)
        assert "max_completion_tokens" not in first and "max_tokens" not in first
        assert second["max_tokens"] == 77 and "max_completion_tokens" not in second
        with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as a:
            a.messages.create(model="claude-sonnet-4-5", max_tokens=55, messages=MSGS)
        assert up.requests[-1]["body"]["max_tokens"] == 55


def test_one_access_line_per_call(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for _, url in serve(tmp_path):
        with caplog.at_level(logging.INFO, "windowsmith.access"), \
                openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as c:
            h = {"X-Windowsmith-Session": "logged"}
            c.chat.completions.create(model="gpt-4o", messages=MSGS, extra_headers=h)
            list(c.chat.completions.create(model="gpt-4o", messages=[*MSGS, {"role": "assistant", "content": "Hi"},
                                                                      {"role": "user", "content": "Again"}],
                                           stream=True, extra_headers=h))
            c.chat.completions.create(model="gpt-4o", messages=MSGS, extra_headers={"X-Windowsmith-Session": "o"})
            c.chat.completions.create(model="gpt-4o", messages=MSGS, extra_headers={"X-Windowsmith-Session": "o"})
        lines = [r for r in caplog.records if r.name == "windowsmith.access"]
        assert len(lines) == 4
        f = [r.access for r in lines]  # type: ignore[attr-defined]
        assert [x["session"] for x in f] == ["logged", "logged", "o", "o"]
        assert [x["status"] for x in f] == [200] * 4
        assert [x["outcome"] for x in f] == ["forwarded", "forwarded", "forwarded", "replayed"]
        assert all(x["tokens_in"] and x["tokens_out"] and x["pack"] for x in f[:3])
        assert all(x["added_ms"] >= 0 for x in f)
        assert "session=logged" in lines[0].getMessage() and "cache_read=" in lines[0].getMessage()
        out = json.loads(JsonFormatter().format(lines[0]))
        assert out["logger"] == "windowsmith.access" and out["session"] == "logged" and out["tokens_in"] > 0


def test_serve_reads_every_option_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from windowsmith.cli import main
    from windowsmith.cli import serve as serve_mod

    seen: dict[str, Any] = {}

    def fake(config: Any, host: str, port: int, workers: int, logs: tuple[str, str]) -> None:
        seen.update(config=config, host=host, port=port, workers=workers, logs=logs)

    monkeypatch.setattr(serve_mod, "_serve", fake)
    env = {"WINDOWSMITH_HOST": "0.0.0.0", "WINDOWSMITH_PORT": "9999", "WINDOWSMITH_STORE": str(tmp_path / "e.db"),
           "WINDOWSMITH_OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "WINDOWSMITH_DEFAULT_WINDOW": "40000",
           "WINDOWSMITH_MODEL_WINDOW": "9000", "WINDOWSMITH_LOG_FORMAT": "json", "WINDOWSMITH_LOG_LEVEL": "warning",
           "WINDOWSMITH_WORKERS": "2"}
    r = CliRunner().invoke(main, ["serve"], env=env)
    assert r.exit_code == 0, r.output
    c = seen["config"]
    assert (seen["host"], seen["port"], seen["workers"], seen["logs"]) == ("0.0.0.0", 9999, 2, ("warning", "json"))
    assert (c.default_window, c.model_window, c.openai_base_url) == (40000, 9000, "http://127.0.0.1:1/v1")


def test_health_readiness_and_the_model_list(tmp_path: Path) -> None:
    import httpx

    for _, url in serve(tmp_path):
        assert httpx.get(url + "/healthz").json() == {"status": "ok"}
        r = httpx.get(url + "/readyz")
        assert r.status_code == 200 and r.json()["store"] == "ok"
        with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as c:
            assert [m.id for m in c.models.list()] == ["gpt-4o", "gpt-4.1", "llama3:8b"]
