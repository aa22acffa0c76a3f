"""The bench's peers against the peers' own code (the ``bench-peers`` extra: langchain>=1.0 and
strands-agents), on real shared runs: the re-implementation must send the same messages.

Differences, explained (and kept out of the comparison):

* LangChain's ``SummarizationMiddleware`` also triggers on the previous response's reported
  ``total_tokens`` when the response's provider matches the model's. The fake chat model used here
  reports none, so the bench's strategy runs without that trigger too (``reported`` stays 0).
* Both sides count with windowsmith's exact counter (gpt-4.1, no token factor), which the real
  middlewares accept as ``token_counter`` / ``count_tokens``; their default is an approximate count.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import needs_data
from windowsmith.bench.base import BenchConfig, messages_tokens
from windowsmith.bench.metrics import prepare
from windowsmith.bench.peers import (
    LANGCHAIN_SUMMARY_PREFIX,
    LangChainClearToolUses,
    LangChainSummarization,
    StrandsSlidingWindow,
)
from windowsmith.compaction.base import Summary
from windowsmith.model import Message, Text, ToolCall, ToolResult
from windowsmith.registry import load_registry
from windowsmith.traces import load_traces

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
GPT41 = load_registry().get("gpt-4.1")
RETAIL = DATA / "tau2-bench" / "gpt-4.1_retail_default_1trial.json"

pytestmark = pytest.mark.skipif(not RETAIL.exists(), reason="needs ../shared/data/traces")


def runs(n: int = 8) -> list[Any]:
    return [prepare(t) for t in load_traces(RETAIL)[:n]]


def texts(msgs: list[Message] | tuple[Message, ...]) -> list[tuple[str, str]]:
    out = []
    for m in msgs:
        if m.role == "tool":
            out += [("tool", r.call_id + ":" + r.text) for r in m.tool_results]
        else:
            out.append((m.role, m.text + "|" + ",".join(c.id for c in m.tool_calls)))
    return out


# ---------------------------------------------------------------------------------------------------
# strands-agents SlidingWindowConversationManager
# ---------------------------------------------------------------------------------------------------


def to_strands(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "user", "content": [{"toolResult": {"toolUseId": r.call_id, "status": "success",
                                                            "content": [{"text": r.text}]}} for r in m.tool_results]}
    blocks: list[dict[str, Any]] = [{"text": m.text}] if m.text else []
    blocks += [{"toolUse": {"toolUseId": c.id, "name": c.name, "input": dict(c.arguments)}} for c in m.tool_calls]
    return {"role": m.role, "content": blocks}


def from_strands(d: dict[str, Any]) -> Message:
    blocks: list[Any] = []
    for b in d["content"]:
        if "text" in b:
            blocks.append(Text(b["text"]))
        elif "toolUse" in b:
            u = b["toolUse"]
            blocks.append(ToolCall(u["toolUseId"], u["name"], u["input"]))
        else:
            r = b["toolResult"]
            blocks.append(ToolResult(r["toolUseId"], (Text(r["content"][0]["text"]),)))
    role = "tool" if blocks and isinstance(blocks[0], ToolResult) else d["role"]
    return Message(role, tuple(blocks))


@pytest.mark.slow
@needs_data
@pytest.mark.parametrize("per_turn", [False, True])
def test_strands_sliding_window_matches_the_real_manager(per_turn):
    swc = pytest.importorskip("strands.agent.conversation_manager.sliding_window_conversation_manager")
    cfg = BenchConfig.make(GPT41, 8000)
    checked = overflows = 0
    swe = DATA / "openhands" / "msb_example_output.jsonl"
    for run in [*runs(), *(prepare(t) for t in load_traces(swe)[:2])]:
        real = swc.SlidingWindowConversationManager(per_turn=per_turn)
        agent = SimpleNamespace(messages=[])
        ours = StrandsSlidingWindow(cfg, per_turn=per_turn)
        ours.start(run.id, run.system, run.tools, native_tools=run.native_tools)
        calls = set(run.calls)
        for i, m in enumerate(run.messages):
            if i in calls:
                if per_turn:
                    real.apply_management(agent)
                while ours.over([from_strands(d) for d in agent.messages]):
                    real.reduce_context(agent, e=RuntimeError("context window exceeded"))
                    overflows += 1
                built = ours.build()
                assert texts(built.request.messages) == texts([from_strands(d) for d in agent.messages]), (run.id, i)
                checked += 1
            if m.role == "user" and i > 0 and agent.messages:
                real.apply_management(agent)  # an invocation ends when the next human message arrives
            agent.messages.append(to_strands(m))
            ours.observe(m)
    assert checked > 50 and overflows > 0  # the overflow reaction (truncate, then trim) was exercised


# ---------------------------------------------------------------------------------------------------
# LangChain ClearToolUsesEdit and SummarizationMiddleware
# ---------------------------------------------------------------------------------------------------


def to_lc(m: Message) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    if m.role == "user":
        return [HumanMessage(m.text)]
    if m.role == "assistant":
        return [AIMessage(m.text, tool_calls=[{"id": c.id, "name": c.name, "args": dict(c.arguments)}
                                              for c in m.tool_calls])]
    return [ToolMessage(r.text, tool_call_id=r.call_id) for r in m.tool_results]


def from_lc(msgs: list[Any]) -> list[Message]:
    from langchain_core.messages import AIMessage, HumanMessage

    out: list[Message] = []
    for x in msgs:
        if isinstance(x, HumanMessage):
            out.append(Message.user(x.content))
        elif isinstance(x, AIMessage):
            blocks: list[Any] = [Text(x.content)] if x.content else []
            blocks += [ToolCall(c["id"], c["name"], c["args"]) for c in x.tool_calls]
            out.append(Message("assistant", tuple(blocks)))
        elif out and out[-1].role == "tool":
            out[-1] = Message("tool", (*out[-1].content, ToolResult(x.tool_call_id, (Text(x.content),))))
        else:
            out.append(Message("tool", (ToolResult(x.tool_call_id, (Text(x.content),)),)))
    return out


def test_clear_tool_uses_matches_the_real_edit():
    ce = pytest.importorskip("langchain.agents.middleware.context_editing")
    cfg = BenchConfig.make(GPT41, 8000)
    checked = cleared = 0
    for run in runs():
        ours = LangChainClearToolUses(cfg)
        ours.trigger = 1500  # low enough that the retail runs (messages only) cross it
        ours.start(run.id, run.system, run.tools, native_tools=run.native_tools)
        for i, m in enumerate(run.messages):
            if i in set(run.calls):
                lc = [x for h in ours.history for x in to_lc(h)]
                n = messages_tokens(ours.history, cfg.counter)
                ce.ClearToolUsesEdit(trigger=ours.trigger).apply(lc, count_tokens=lambda _msgs, n=n: n)
                built = ours.build()
                assert texts(built.request.messages) == texts(from_lc(lc)), (run.id, i)
                cleared += bool(built.events.get("cleared"))
                checked += 1
            ours.observe(m)
    assert checked > 50 and cleared > 5


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.n = 0

    def summarize(self, messages, *, goal=None, previous=None, budget_tokens=1024):
        self.n += 1
        return Summary(f"summary {self.n} of {len(messages)} messages")


def test_summarization_matches_the_real_middleware():
    sm = pytest.importorskip("langchain.agents.middleware.summarization")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import RemoveMessage

    cfg = BenchConfig.make(GPT41, 8000)
    checked = summaries = 0
    for run in runs():
        rec = Recorder()
        ours = LangChainSummarization(cfg, summarizer=rec)
        ours.trigger = 2500  # low enough that the retail runs (messages only) cross it
        ours.start(run.id, run.system, run.tools, native_tools=run.native_tools)
        real_calls = {"n": 0}

        def summarizer(msgs: list[Any], real_calls=real_calls) -> str:
            real_calls["n"] += 1
            return f"summary {real_calls['n']} of {len(from_lc(msgs))} messages"

        def counter(msgs: Any) -> int:
            return messages_tokens(from_lc(list(msgs)), cfg.counter)

        mw = sm.SummarizationMiddleware(GenericFakeChatModel(messages=iter(())), trigger=("tokens", ours.trigger),
                                        keep=("messages", 20), token_counter=counter, summarizer=summarizer)
        state: list[Any] = []
        for i, m in enumerate(run.messages):
            if i in set(run.calls):
                upd = mw.before_model({"messages": state}, None)
                if upd is not None:
                    new = upd["messages"]
                    assert isinstance(new[0], RemoveMessage)
                    state = list(new[1:])
                built = ours.build()
                assert texts(built.request.messages) == texts(from_lc(state)), (run.id, i)
                if upd is not None:
                    assert state[0].content.startswith(LANGCHAIN_SUMMARY_PREFIX)
                    summaries += 1
                checked += 1
            state.extend(to_lc(m))
            ours.observe(m)
    assert checked > 50 and summaries > 3
