"""The library path's OpenTelemetry by the GenAI semantic conventions, read back with the SDK's in-memory span
exporter and metric reader: one trace per model call, a CLIENT span with the conventions' attributes, the build
and the compaction stages that ran as INTERNAL children, and the two GenAI client metrics."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="needs opentelemetry-sdk (the test extra)")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

import windowsmith as ws  # noqa: E402
from sdk_mock import anthropic_reply, chat_reply  # noqa: E402
from windowsmith import telemetry  # noqa: E402

SECRET = "the launch code is 0000"


@pytest.fixture
def otel() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    exporter = InMemorySpanExporter()
    tracer_provider = sdk_trace.TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield exporter, reader
    telemetry.configure()
    tracer_provider.shutdown()
    meter_provider.shutdown()


def _metrics(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


def test_session_call_is_one_trace_with_a_client_span(make_engine: Callable[..., ws.Engine], otel: Any) -> None:
    exporter, reader = otel
    session = make_engine("claude-sonnet-4-5").session("otel-lib")
    session.user(SECRET)
    session.call(lambda req: anthropic_reply("Done.", [], thinking=False))
    spans = exporter.get_finished_spans()
    [client] = [s for s in spans if s.kind == SpanKind.CLIENT]
    assert client.name == "chat claude-sonnet-4-5"
    a = client.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "anthropic"
    assert a["gen_ai.request.model"] == "claude-sonnet-4-5" and a["gen_ai.conversation.id"] == "otel-lib"
    assert "gen_ai.system" not in a  # the deprecated attribute is gone
    assert a["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert a["gen_ai.request.max_tokens"] == session.last_pack.request["max_tokens"]
    # input tokens are the whole prompt (cached included), as the conventions define them
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (812 + 1536 + 64, 57)
    assert (a["gen_ai.usage.cache_read.input_tokens"], a["gen_ai.usage.cache_creation.input_tokens"]) == (1536, 64)
    [build] = [s for s in spans if s.name == "windowsmith.build"]
    assert build.kind == SpanKind.INTERNAL and build.parent.span_id == client.context.span_id
    assert {s.context.trace_id for s in spans} == {client.context.trace_id}  # one trace per call
    assert not [s for s in spans if s.name.startswith("windowsmith.compaction.")]  # no stage ran, no stage span
    # nothing of the conversation on a span
    assert SECRET not in json.dumps([dict(s.attributes) for s in spans] + [[dict(e.attributes) for e in s.events]
                                                                            for s in spans])
    m = _metrics(reader)
    usage = {dict(p.attributes)["gen_ai.token.type"]: p.sum for p in m["gen_ai.client.token.usage"]}
    assert usage == {"input": 812 + 1536 + 64, "output": 57}
    [duration] = m["gen_ai.client.operation.duration"]
    assert duration.count == 1 and dict(duration.attributes)["gen_ai.provider.name"] == "anthropic"


def test_build_then_record_is_one_call_and_each_call_its_own_trace(make_engine: Callable[..., ws.Engine],
                                                                    otel: Any) -> None:
    exporter, _ = otel
    session = make_engine("gpt-4.1").session("otel-two")
    for turn in range(2):
        session.user(f"question {turn}")
        session.build()
        session.record(chat_reply("Answer.", []))
    clients = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert [c.name for c in clients] == ["chat gpt-4.1"] * 2
    assert all(c.attributes["gen_ai.provider.name"] == "openai" for c in clients)
    assert clients[0].context.trace_id != clients[1].context.trace_id
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in clients] == [2400, 2400]


def test_compaction_stages_that_ran_are_children_of_the_build(make_engine: Callable[..., ws.Engine],
                                                              otel: Any) -> None:
    exporter, _ = otel
    session = make_engine("gpt-4.1", window=4_000, budget=ws.BudgetConfig(reserved_output=500)).session("otel-c")
    body = "\n".join(f"line {i}: value {i * 7}" for i in range(300))
    for i in range(12):
        session.user(f"step {i}")
        session.assistant("", tool_calls=[{"id": f"c{i}", "name": "read", "arguments": {"i": i}}])
        session.tool_result(f"c{i}", body)
        session.build()
        session.record(chat_reply("ok", []))
    spans = exporter.get_finished_spans()
    stages = [s for s in spans if s.name.startswith("windowsmith.compaction.")]
    assert stages, "a compaction ran at this window"
    builds = {s.context.span_id: s for s in spans if s.name == "windowsmith.build"}
    assert all(s.parent.span_id in builds for s in stages)
    # each compaction record a stage wrote is counted by that stage's span (a "truncate" record is the build's own
    # history fit, written outside the stages)
    staged = [c for c in session.state.compactions if c["type"] != "truncate"]
    assert sum(s.attributes["windowsmith.compaction.records"] for s in stages) == len(staged)


def test_without_a_provider_configured_nothing_breaks(make_engine: Callable[..., ws.Engine]) -> None:
    session = make_engine("gpt-4.1").session("otel-none")
    session.user("hi")
    assert session.call(lambda req: chat_reply("Hello.", []))["choices"][0]["message"]["content"] == "Hello."


def test_an_adapter_run_is_one_client_span_per_model_call(make_engine: Callable[..., ws.Engine], otel: Any) -> None:
    """LangChain over the real ChatOpenAI client: each model call the agent makes is one trace, named for the
    session, with the finish reason LangChain read and the usage recorded once."""
    pytest.importorskip("langchain", minversion="1.0")
    import openai
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    from sdk_mock import MockModel
    from windowsmith.integrations.langchain import WindowsmithMiddleware

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"# {path}\nprint(1)"

    exporter, reader = otel
    mock = MockModel("openai-chat", [chat_reply("", [(f"call_{i}", "read_file", {"path": f"m{i}.py"})])
                                     for i in range(3)] + [chat_reply("Done.", [])])
    model = ChatOpenAI(model="gpt-4.1", api_key="test", max_retries=0)
    model.root_client = openai.OpenAI(api_key="test", http_client=mock.client(), max_retries=0)
    model.client = model.root_client.chat.completions
    session = make_engine("gpt-4.1").session("otel-lc")
    create_agent(model, [read_file], middleware=[WindowsmithMiddleware(session)]).invoke(
        {"messages": [HumanMessage("read m0..m2")]})
    clients = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert len(clients) == len(mock.bodies) == 4
    assert {c.attributes["gen_ai.conversation.id"] for c in clients} == {"otel-lc"}
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in clients] == [("tool_calls",)] * 3 + [("stop",)]
    assert all(c.attributes["gen_ai.usage.input_tokens"] == 2400 for c in clients)
    m = _metrics(reader)
    [duration] = m["gen_ai.client.operation.duration"]
    assert duration.count == 4
