"""OpenTelemetry spans of the proxy, read back with the SDK's in-memory exporter."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="needs opentelemetry-sdk (the test extra)")

from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

from server_agents import TRACE, run_anthropic_agent, run_openai_agent  # noqa: E402
from windowsmith import telemetry  # noqa: E402
from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

pytestmark = [pytest.mark.skipif(not TRACE.exists(), reason=f"needs the shared traces ({TRACE.name})"), pytest.mark.slow]

KEY = "sk-proj-otel" + "z" * 40


@pytest.fixture
def traced(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, InMemorySpanExporter, FakeUpstream]]:
    window, limit = getattr(request, "param", (8000, 1_000_000))
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    up = FakeUpstream(max_context_tokens=limit)
    with BackgroundServer(up) as u:
        app = create_app(ServerConfig(store=tmp_path / "otel.db", openai_base_url=u.url + "/v1", anthropic_base_url=u.url,
                                      model_window=window, tracer_provider=provider))
        with BackgroundServer(app) as p:
            yield p.url, exporter, up
    telemetry.configure()
    provider.shutdown()


def by_name(spans: Any, name: str) -> list[Any]:
    return [s for s in spans if s.name == name]


def test_spans_for_build_compaction_offload_and_upstream_with_genai_attributes(traced: Any) -> None:
    url, exporter, _ = traced
    with openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0) as client:
        out = run_openai_agent(client, "gpt-4o", 12, stream_every=3)
    # a streamed call's span ends in the server task after the client has read the last event: wait for it
    # (bounded), then count
    for _ in range(100):
        spans = exporter.get_finished_spans()
        if len(by_name(spans, "chat gpt-4o")) >= 12:
            break
        time.sleep(0.05)
    builds = by_name(spans, "windowsmith.build")
    calls = by_name(spans, "chat gpt-4o")
    assert len(calls) >= 12 and len(builds) >= 12
    # GenAI semantic conventions: a CLIENT span per call, with the billed usage of that call
    first = calls[0]
    assert all(c.kind == SpanKind.CLIENT for c in calls)
    a = first.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "openai"
    assert "gen_ai.system" not in a  # deprecated
    assert a["gen_ai.request.model"] == "gpt-4o" and a["gen_ai.response.model"] == "gpt-4o"
    assert a["gen_ai.conversation.id"] and a["server.address"] == "127.0.0.1" and isinstance(a["server.port"], int)
    assert a["gen_ai.response.finish_reasons"] and a["gen_ai.request.max_tokens"] > 0
    assert a["gen_ai.usage.input_tokens"] == out[0].usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == out[0].usage.completion_tokens
    assert a["gen_ai.response.id"] == out[0].id
    streamed = [s for s in calls if s.attributes.get("windowsmith.stream")]
    assert streamed and all(s.attributes["gen_ai.usage.output_tokens"] > 0 for s in streamed)
    assert sum(1 for s in calls if s.attributes.get("gen_ai.usage.cache_read.input_tokens", 0) > 0) >= 8
    # one trace per call: its ingest, builds and offloads are INTERNAL spans under its CLIENT span
    by_id = {s.context.span_id: s for s in spans}

    def root(s: Any) -> Any:
        while s.parent is not None and s.parent.span_id in by_id:
            s = by_id[s.parent.span_id]
        return s

    assert all(root(s).kind == SpanKind.CLIENT for s in spans), {s.name for s in spans if root(s).kind != SpanKind.CLIENT}
    assert len({s.context.trace_id for s in calls}) == len(calls)
    assert all(s.kind == SpanKind.INTERNAL for s in spans if s.name.startswith("windowsmith."))
    # the build: tokens per layer and the pack id the call carries too
    b = builds[-1].attributes
    assert b["windowsmith.layer.history.tokens"] > 0 and b["windowsmith.layer.tools.tokens"] > 0
    assert b["windowsmith.pack.tokens"] <= b["windowsmith.pack.available"]
    assert {s.attributes["windowsmith.pack.id"] for s in builds} >= {s.attributes["windowsmith.pack.id"] for s in calls}
    # compaction stages that ran (and only those) are children of a build
    stages = [s for s in spans if s.name.startswith("windowsmith.compaction.")]
    assert stages and all(s.attributes["windowsmith.compaction.records"] > 0 for s in stages)
    build_ids = {s.context.span_id for s in builds}
    assert all(s.parent is not None and s.parent.span_id in build_ids for s in stages)
    # offload: large tool results were stored as artifacts
    offloads = by_name(spans, "windowsmith.offload")
    assert offloads and sum(s.attributes["windowsmith.offloaded"] for s in offloads) >= 1
    # nothing secret on any span
    for s in spans:
        assert KEY not in repr(dict(s.attributes or {}))


@pytest.mark.parametrize("traced", [(12000, 6000)], indirect=True)  # the upstream refuses what the proxy thinks fits
def test_overflow_retry_shows_in_the_trace(traced: Any) -> None:
    url, exporter, _ = traced
    with anthropic.Anthropic(base_url=url, api_key="sk-ant-x", max_retries=0) as client:
        run_anthropic_agent(client, "claude-sonnet-5-5", 14, stream_every=0)
    spans = exporter.get_finished_spans()
    calls = by_name(spans, "chat claude-sonnet-5-5")
    refused = [s for s in calls if any(e.name == "windowsmith.overflow" for e in s.events)]
    assert refused, "the fake upstream refuses over 7,000 tokens: some call must have overflowed"
    reactive = by_name(spans, "windowsmith.compaction.reactive")
    assert reactive and {r.context.trace_id for r in reactive} <= {c.context.trace_id for c in refused}
    assert len(calls) == 14  # one CLIENT span per call, its retry included
    ok = [s for s in calls if "gen_ai.usage.output_tokens" in s.attributes]
    assert len(ok) == 14 and not any("error.type" in s.attributes for s in calls)  # every call succeeded
    u = ok[-1].attributes
    assert u["gen_ai.usage.input_tokens"] >= u["gen_ai.usage.cache_read.input_tokens"]
