"""windowsmith.testing: the fake provider users run their own tests against, served on loopback."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import httpx

from windowsmith.errors import UsageError
from windowsmith.testing import BackgroundServer, FakeUpstream


def test_the_fake_provider_answers_as_openai_and_anthropic_do_and_models_a_prompt_cache():
    up = FakeUpstream(turns_per_task=1)
    with BackgroundServer(up) as srv:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi " * 200}]}
        first = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=30).json()
        again = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=30).json()
        msg = httpx.post(srv.url + "/v1/messages", json={"model": "claude-sonnet-4-5", "max_tokens": 10,
                                                        "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert first["choices"][0]["message"]["content"] == up.output_text
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # the same prefix, read from its cache
    assert msg.json()["type"] == "message" and [r["format"] for r in up.requests] == ["openai", "openai", "anthropic"]


def test_without_the_server_extra_it_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "starlette.applications", None)
    with pytest.raises(UsageError, match=r"pip install 'windowsmith\[server\]'"):
        FakeUpstream()
