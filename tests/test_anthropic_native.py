"""Anthropic's native controls: 1-hour cache breakpoints on the stable prefix (planned, rendered, priced) and
server-side context editing (``context_management`` with its beta), sent through the real SDK."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

import windowsmith as ws
from sdk_mock import anthropic_reply
from windowsmith.cache import CacheConfig, plan_cache
from windowsmith.compaction.config import CompactionConfig
from windowsmith.compaction.context_editing import ContextEditing
from windowsmith.costs import call_cost
from windowsmith.errors import ConfigError
from windowsmith.model import Message, Text, ToolSpec
from windowsmith.registry import load_registry
from windowsmith.request import NeutralRequest, Segment
from windowsmith.tokens import TokenCounter

TOOL = {"name": "read_file", "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}


class Recorder:
    """A loopback Anthropic endpoint for the real client: keeps each request's body and headers."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.headers: list[httpx2.Headers] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        self.headers.append(request.headers)
        return httpx2.Response(200, json=anthropic_reply(thinking=False))

    def client(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(self)))


def _session(e: ws.Engine, sid: str = "s") -> ws.Session:
    s = e.session(sid)
    s.system("You are a careful coding agent. " * 40)
    s.tools([TOOL])
    s.user("Fix the failing test in parser.py")
    return s


def _controls(body: dict) -> list[dict]:
    """Every cache_control of a Messages body, in cache order (tools, system, messages)."""
    out = [t["cache_control"] for t in body.get("tools", []) if "cache_control" in t]
    out += [b["cache_control"] for b in body.get("system", []) if "cache_control" in b]
    out += [b["cache_control"] for m in body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if "cache_control" in b]
    return out


def test_one_hour_ttl_on_the_stable_prefix_five_minutes_on_the_history(tmp_path) -> None:
    rec = Recorder()
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", cache=CacheConfig(stable_ttl="1h")) as e:
        s = _session(e)
        s.assistant("Reading it.", tool_calls=[{"id": "toolu_1", "name": "read_file", "arguments": {"path": "p.py"}}])
        s.tool_result("toolu_1", "def parse(): ...")
        pack = s.build("anthropic")
    rec.client().messages.create(**pack.request)
    controls = _controls(rec.bodies[0])
    assert 2 <= len(controls) <= 4
    ttls = [c.get("ttl", "5m") for c in controls]
    assert ttls[0] == "1h" and ttls[-1] == "5m" and ttls == sorted(ttls, key=lambda t: t != "1h")  # 1h ones first
    assert all(c["type"] == "ephemeral" for c in controls)


def test_default_plan_writes_no_ttl(tmp_path) -> None:
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db") as e:
        pack = _session(e).build("anthropic")
    assert all("ttl" not in c for c in _controls(pack.request))


def test_one_hour_plan_keeps_a_stable_breakpoint_within_four() -> None:
    msgs = tuple(Message("user" if i % 2 == 0 else "assistant", (Text(f"m{i}"),)) for i in range(12))
    req = NeutralRequest("claude-sonnet-4-5", (Segment("sys", "system"),), (Segment("ctx", "session"),),
                         (ToolSpec("t", "d", {"type": "object"}),), msgs, None, 1000, "k", head=2, carry=4, fold=6)
    five = plan_cache(req, 4)
    assert not (five.system or five.session or five.tools) and five.count == 4
    hour = plan_cache(req, 4, stable_ttl="1h")
    assert hour.count == 4 and hour.session and hour.message_index == 11 and hour.stable_ttl == "1h"
    assert plan_cache(req, 1, stable_ttl="1h").names == ("message",)


def test_the_cost_model_prices_one_hour_writes_at_twice_the_input_price() -> None:
    spec = load_registry().get("claude-sonnet-4-5")
    p = spec.prices
    assert spec.cost(0, 0, 0, 100_000) == pytest.approx(p.cache_write / 10)  # (under the long-context tier)
    assert p.cache_write == pytest.approx(1.25 * p.input)
    assert spec.cost(0, 0, 0, 100_000, cache_write_1h_tokens=100_000) == pytest.approx(2 * p.input / 10)
    counter = TokenCounter(spec.tokenizer, "anthropic", spec.token_factor)
    req = NeutralRequest(spec.name, (Segment("You are a careful agent. " * 400, "system"),), (), (),
                         (Message("user", (Text("hi " * 300),)),), None, 1000, "k")
    five = req.__class__(**{**req.__dict__, "cache": plan_cache(req, 4)})
    hour = req.__class__(**{**req.__dict__, "cache": plan_cache(req, 4, stable_ttl="1h")})
    n = counter.request(five)
    c5, _ = call_cost(spec, "anthropic", None, five, counter, prompt_tokens=n)
    c1, _ = call_cost(spec, "anthropic", None, hour, counter, prompt_tokens=n)
    assert c5.cache_write_tokens == c1.cache_write_tokens > 0 and c5.cache_write_1h_tokens == 0
    assert 0 < c1.cache_write_1h_tokens < c1.cache_write_tokens  # the system prompt, not the message
    extra = c1.cache_write_1h_tokens * (2 * p.input - p.cache_write) / 1e6
    assert c1.usd == pytest.approx(c5.usd + extra)
    assert c1.to_dict()["cache_write_1h_tokens"] == c1.cache_write_1h_tokens and "cache_write_1h_tokens" not in c5.to_dict()


def test_bad_ttl_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="stable_ttl"):
        CacheConfig(stable_ttl="24h")


def test_context_editing_goes_out_with_its_beta_through_the_sdk(tmp_path) -> None:
    editing = ContextEditing(clear_at_least=20_000, thinking_keep=1)
    rec = Recorder()
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db",
                   compaction=CompactionConfig(server_editing=editing)) as e:
        s = _session(e)
        pack = s.build("anthropic")
        other = s.build("openai-chat", model="gpt-4.1")
    assert "context_management" not in other.request  # only Anthropic has it
    rec.client().beta.messages.create(**pack.request)
    body, headers = rec.bodies[0], rec.headers[0]
    assert "context-management-2025-06-27" in headers["anthropic-beta"]
    edits = body["context_management"]["edits"]
    assert [x["type"] for x in edits] == ["clear_thinking_20251015", "clear_tool_uses_20250919"]
    assert edits[0]["keep"] == {"type": "thinking_turns", "value": 1}
    assert edits[1] == {"type": "clear_tool_uses_20250919", "clear_at_least": {"type": "input_tokens", "value": 20_000}}
    assert "betas" not in body


def test_context_editing_defaults_leave_the_api_defaults() -> None:
    assert ContextEditing().to_param() == {"edits": [{"type": "clear_tool_uses_20250919"}]}
    full = ContextEditing(trigger=50_000, keep=5, exclude_tools=("memory",), clear_tool_inputs=True).to_param()
    assert full["edits"][0] == {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 50_000},
                                "keep": {"type": "tool_uses", "value": 5}, "exclude_tools": ["memory"],
                                "clear_tool_inputs": True}
    with pytest.raises(ConfigError):
        ContextEditing(tool_uses=False)
