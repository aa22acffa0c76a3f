"""LangChain / LangGraph message histories saved as JSON (``messages_to_dict``, ``dumpd``, a graph state's
``messages``), written here by a real LangChain v1 agent (``create_agent``, a real tool) whose model is
ChatAnthropic over the real anthropic SDK against a local mock transport: only the provider's network edge is
scripted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import pytest

pytest.importorskip("langchain", minversion="1.0", reason="needs the langchain extra: pip install 'windowsmith[langchain]'")
pytest.importorskip("langchain_anthropic", reason="needs langchain-anthropic (windowsmith[langchain])")

from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_core.load import dumpd
from langchain_core.messages import HumanMessage, messages_to_dict
from langchain_core.tools import tool

from sdk_mock import MockModel, anthropic_reply
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import prepare
from windowsmith.bench.run import run_strategy
from windowsmith.bench.strategies import WindowsmithStrategy
from windowsmith.errors import TraceFormatError
from windowsmith.model import Thinking
from windowsmith.registry import load_registry
from windowsmith.traces import detect_format, load_traces

ORDERS = {"W2378156": "delivered: mechanical keyboard KB-981, usb hub UH-12"}


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its id."""
    return f"order {order_id}: {ORDERS.get(order_id, 'not found')}"


def _run() -> list[Any]:
    usage = {"input_tokens": 700, "output_tokens": 30, "cache_read_input_tokens": 1200, "cache_creation_input_tokens": 90}
    script = [anthropic_reply("Looking the order up.", [("toolu_1", "lookup_order", {"order_id": "W2378156"})],
                              thinking=True, usage=usage),
              anthropic_reply("Order W2378156 was delivered: keyboard KB-981 and hub UH-12.", [], thinking=False,
                              usage=usage)]
    mock = MockModel("anthropic", script)
    model = ChatAnthropic(model="claude-sonnet-4-5", api_key="test", max_retries=0, max_tokens=1000)
    model.__dict__["_client"] = anthropic.Anthropic(api_key="test", http_client=mock.client(), max_retries=0)
    agent = create_agent(model, [lookup_order], system_prompt="You are an order-support agent.")
    result = agent.invoke({"messages": [HumanMessage("What is in order W2378156?")]})
    return list(result["messages"])


def _check(t) -> None:
    assert t.format == "langchain"
    assert [m.role for m in t.messages] == ["user", "assistant", "tool", "assistant"]
    first = t.messages[1]
    assert first.text == "Looking the order up." and [c.name for c in first.tool_calls] == ["lookup_order"]
    assert dict(first.tool_calls[0].arguments) == {"order_id": "W2378156"}
    assert any(isinstance(b, Thinking) and b.provider == "anthropic" for b in first.content)
    assert t.messages[2].tool_results[0].text == "order W2378156: delivered: mechanical keyboard KB-981, usb hub UH-12"
    # usage_metadata: LangChain's input_tokens include the cache reads and writes
    u = t.billed[1]
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens) == (700, 1200, 90, 30)


def test_a_langchain_agents_history_imports_in_each_saved_form(tmp_path: Path):
    messages = _run()
    forms = {"dict.json": messages_to_dict(messages), "state.json": {"messages": messages_to_dict(messages)},
             "dumpd.json": [dumpd(m) for m in messages]}
    for name, value in forms.items():
        p = tmp_path / name
        p.write_text(json.dumps(value), encoding="utf-8")
        assert detect_format(p) == "langchain", name
        (t,) = load_traces(p)
        _check(t)
    # the system prompt is the agent's (create_agent does not store it in the state): none here
    assert not t.system
    rm = run_strategy(prepare(t), WindowsmithStrategy(BenchConfig.make(load_registry().get("claude-sonnet-4-5"), 8000)))
    assert rm.error is None and rm.calls == 2 and rm.blind_calls == 0 and rm.strict_hits == rm.targets > 0


def test_an_error_tool_message_and_a_bad_entry(tmp_path: Path):
    from langchain_core.messages import AIMessage, ToolMessage

    msgs = [HumanMessage("go"), AIMessage("", tool_calls=[{"name": "lookup_order", "args": {"order_id": "X"}, "id": "c1"}]),
            ToolMessage("order X: no such order", tool_call_id="c1", status="error")]
    p = tmp_path / "err.json"
    p.write_text(json.dumps(messages_to_dict(msgs)), encoding="utf-8")
    (t,) = load_traces(p, format="langchain")
    assert t.messages[2].tool_results[0].is_error
    bad = [*messages_to_dict(msgs), {"type": "ai", "oops": 1}]
    q = tmp_path / "bad.json"
    q.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"\[3\].*not a serialized LangChain message"):
        load_traces(q, format="langchain")
