"""OpenTelemetry spans for the proxy (the ``otel`` extra; without it every span is a no-op).

Per proxied call: ``windowsmith.ingest`` (appending what is new) with a ``windowsmith.offload`` child
per tool-result message; ``windowsmith.build`` (one per pack: tokens per layer, cache prefix, status, the
manifest's actions as events) with a ``windowsmith.compaction.<stage>`` child for each compaction stage
(mask, summary, emergency: whether it appended records, and how many); and the upstream call, named
and attributed after the GenAI semantic conventions: span ``chat {model}``, ``gen_ai.operation.name``,
``gen_ai.system``, ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.response.id``,
``gen_ai.usage.input_tokens`` / ``output_tokens`` / ``cache_read.input_tokens`` /
``cache_creation.input_tokens`` (the counts the format's ``usage_counts`` reads). The tracer comes from
``ServerConfig.tracer_provider`` or the global provider. Nothing secret goes on a span: no header, no
message text.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..formats import anthropic, openai_chat
from .conversation import OPENAI

if TYPE_CHECKING:
    from ..build import Pack
    from ..session import Session

try:  # the otel extra
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised without the extra
    _trace = None  # type: ignore[assignment]


#: the GenAI semantic-convention attribute of each count a format's ``usage_counts`` reads
_USAGE_ATTRIBUTES = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
    "cache_write_tokens": "gen_ai.usage.cache_creation.input_tokens",
}


def system_name(fmt: str) -> str:
    return "openai" if fmt == OPENAI else "anthropic"


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        pass

    def end(self) -> None:
        pass


class Telemetry:
    """Spans of one server (a no-op without ``opentelemetry-api``)."""

    def __init__(self, tracer_provider: Any = None) -> None:
        self.tracer: Any
        if _trace is None:
            self.tracer = None
        elif tracer_provider is not None:
            self.tracer = tracer_provider.get_tracer("windowsmith")
        else:
            self.tracer = _trace.get_tracer("windowsmith")

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
        if self.tracer is None:
            yield _NoSpan()
            return
        with self.tracer.start_as_current_span(name, attributes=dict(attributes or {})) as s:
            yield s

    def instrument(self, session: Session) -> None:
        """Wrap the session's compaction stages in spans (once per session object)."""
        compactor = session.compactor
        if compactor.stage_hook is not None or self.tracer is None:
            return

        @contextlib.contextmanager
        def stage(name: str) -> Iterator[None]:
            before = len(session.state.compactions)
            with self.span(f"windowsmith.compaction.{name}", {"windowsmith.session.id": session.id}) as s:
                yield
                added = len(session.state.compactions) - before
                s.set_attribute("windowsmith.compaction.ran", added > 0)
                s.set_attribute("windowsmith.compaction.records", added)

        compactor.stage_hook = stage

    @contextlib.contextmanager
    def build_span(self, session: Session, fmt: str) -> Iterator[Any]:
        with self.span("windowsmith.build", {"windowsmith.session.id": session.id, "gen_ai.system": system_name(fmt),
                                             "gen_ai.request.model": session.engine.model}) as s:
            yield s

    @staticmethod
    def pack_attributes(s: Any, pack: Pack) -> None:
        m = pack.manifest
        s.set_attribute("windowsmith.pack.id", m.pack_id)
        s.set_attribute("windowsmith.pack.tokens", m.tokens)
        s.set_attribute("windowsmith.pack.available", m.available)
        s.set_attribute("windowsmith.pack.status", m.status)
        for name, v in m.layers.items():
            s.set_attribute(f"windowsmith.layer.{name}.tokens", int(v.get("used", 0)))
        s.set_attribute("windowsmith.cache.prefix_tokens", int(m.cache.get("prefix_tokens", 0)))
        s.set_attribute("windowsmith.artifacts", len(m.artifacts))
        for a in m.actions:
            s.add_event("windowsmith.action", {k: v for k, v in a.items() if isinstance(v, str | int | float | bool)})

    def start_upstream_span(self, fmt: str, request: Mapping[str, Any], pack: Pack) -> Any:
        """The upstream span of a stream, ended by the caller when the stream ends (a generator cannot
        hold a current-span context across its yields)."""
        if self.tracer is None:
            return _NoSpan()
        model = str(request.get("model", ""))
        return self.tracer.start_span(f"chat {model}", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.system": system_name(fmt), "gen_ai.request.model": model,
            "windowsmith.pack.id": pack.id, "windowsmith.pack.tokens": pack.tokens, "windowsmith.stream": True})

    @contextlib.contextmanager
    def upstream_span(self, fmt: str, request: Mapping[str, Any], pack: Pack) -> Iterator[Any]:
        model = str(request.get("model", ""))
        with self.span(f"chat {model}", {"gen_ai.operation.name": "chat", "gen_ai.system": system_name(fmt),
                                         "gen_ai.request.model": model, "windowsmith.pack.id": pack.id,
                                         "windowsmith.pack.tokens": pack.tokens}) as s:
            yield s

    @staticmethod
    def reply_attributes(s: Any, fmt: str, body: bytes | Mapping[str, Any]) -> None:
        if isinstance(body, bytes | bytearray):
            try:
                d = json.loads(body)
            except ValueError:
                return
        else:
            d = body
        if not isinstance(d, Mapping):
            return
        if isinstance(d.get("model"), str):
            s.set_attribute("gen_ai.response.model", d["model"])
        if isinstance(d.get("id"), str):
            s.set_attribute("gen_ai.response.id", d["id"])
        u = d.get("usage") or {}
        if not isinstance(u, Mapping):
            return
        counts = openai_chat.usage_counts(u) if fmt == OPENAI else anthropic.usage_counts(u)
        for key, v in counts.items():
            if isinstance(v, int):
                s.set_attribute(_USAGE_ATTRIBUTES[key], v)
