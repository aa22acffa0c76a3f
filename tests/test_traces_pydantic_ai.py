"""Pydantic AI message histories (``result.all_messages_json()``), written here by a real Pydantic AI agent with a
real tool; the model is Pydantic AI's own ``FunctionModel`` (the LLM's edge, scripted): it calls the tool with a
bad id first (the tool raises ``ModelRetry``: a retry prompt goes back), then a good one, then answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="needs the pydantic-ai extra: pip install 'windowsmith[pydantic-ai]'")

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import prepare
from windowsmith.bench.run import run_strategy
from windowsmith.bench.strategies import WindowsmithStrategy
from windowsmith.errors import TraceFormatError
from windowsmith.model import Thinking
from windowsmith.registry import load_registry
from windowsmith.traces import detect_format, load_traces


def _model(messages, info: AgentInfo) -> ModelResponse:
    n = sum(1 for m in messages if m.kind == "response")
    if n == 0:
        return ModelResponse(parts=[ThinkingPart("The user gives an order id; look it up."),
                                    TextPart("Looking the order up."),
                                    ToolCallPart("lookup_order", {"order_id": "2378156"}, tool_call_id="c1")])
    if n == 1:
        return ModelResponse(parts=[ToolCallPart("lookup_order", '{"order_id": "W2378156"}', tool_call_id="c2")])
    return ModelResponse(parts=[TextPart("Order W2378156 was delivered: keyboard KB-981 and hub UH-12.")])


def _history(tmp_path: Path) -> Path:
    agent = Agent(FunctionModel(_model), system_prompt="You are an order-support agent.")

    @agent.tool_plain
    def lookup_order(order_id: str) -> str:
        """Look up an order by its id."""
        if not order_id.startswith("W"):
            raise ModelRetry(f"order ids start with W; {order_id!r} is not one")
        return f"order {order_id}: delivered: mechanical keyboard KB-981, usb hub UH-12"

    result = agent.run_sync("What is in order W2378156?")
    p = tmp_path / "history.json"
    p.write_bytes(result.all_messages_json())
    return p


def test_a_pydantic_ai_history_imports_as_the_model_saw_it(tmp_path: Path):
    p = _history(tmp_path)
    assert detect_format(p) == "pydantic-ai"
    (t,) = load_traces(p)
    assert t.format == "pydantic-ai" and t.system == "You are an order-support agent."
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    first = t.messages[1]
    assert first.text == "Looking the order up." and any(isinstance(b, Thinking) for b in first.content)
    bad, good = t.tool_calls
    assert dict(bad.arguments) == {"order_id": "2378156"} and dict(good.arguments) == {"order_id": "W2378156"}
    retry = t.messages[2].tool_results[0]
    assert retry.is_error and "order ids start with W" in retry.text and retry.call_id == "c1"
    assert t.messages[4].tool_results[0].text == "order W2378156: delivered: mechanical keyboard KB-981, usb hub UH-12"
    assert len(t.billed) == 3 and all(u.prompt_tokens > 0 for u in t.billed.values())
    rm = run_strategy(prepare(t), WindowsmithStrategy(BenchConfig.make(load_registry().get("claude-sonnet-4-5"), 8000)))
    assert rm.error is None and rm.calls == 3 and rm.blind_calls == 0 and rm.strict_hits == rm.targets > 0


def test_usage_input_includes_cache_reads_and_writes(tmp_path: Path):
    """Pydantic AI's input_tokens include its cache_read_tokens and cache_write_tokens."""
    doc = json.loads(_history(tmp_path).read_text(encoding="utf-8"))
    doc[1]["usage"].update({"input_tokens": 1000, "cache_read_tokens": 600, "cache_write_tokens": 100})
    q = tmp_path / "cached.json"
    q.write_text(json.dumps(doc), encoding="utf-8")
    (t,) = load_traces(q)
    u = t.billed[1]
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.prompt_tokens) == (300, 600, 100, 1000)


def test_an_unknown_part_is_an_error_naming_it(tmp_path: Path):
    doc = json.loads(_history(tmp_path).read_text(encoding="utf-8"))
    doc[0]["parts"].append({"part_kind": "telepathy", "content": "?"})
    q = tmp_path / "bad.json"
    q.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"\[0\]\.parts\[2\]\.part_kind: unknown request part 'telepathy'"):
        load_traces(q, format="pydantic-ai")
