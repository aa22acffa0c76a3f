"""OpenTelemetry spans for the proxy (the ``otel`` extra; without it every helper is a no-op).

Spans: ``windowsmith.ingest`` (appending what is new), ``windowsmith.build`` (one per pack, with the
tokens of each layer, the compaction stages that ran and what was offloaded), ``windowsmith.compaction``
(the reactive pass after an upstream overflow), and ``chat {model}`` for the upstream call, named and
attributed after the GenAI semantic conventions (``gen_ai.operation.name``, ``gen_ai.system``,
``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` /
``output_tokens``, ``gen_ai.usage.cache_read.input_tokens`` / ``cache_creation.input_tokens``).
The tracer is the global one: configure a provider and exporter as usual (``opentelemetry-sdk``).
Nothing secret is put on a span: no header, no message text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .conversation import OPENAI

if TYPE_CHECKING:
    from ..build import Pack
    from ..engine import Session

try:  # the otel extra
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised without the extra
    _trace = None  # type: ignore[assignment]


def system_name(fmt: str) -> str:
    return "openai" if fmt == OPENAI else "anthropic"


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attrs: Mapping[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        pass


def _tracer() -> Any:
    return None if _trace is None else _trace.get_tracer("windowsmith")


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    tracer = _tracer()
    if tracer is None:
        yield _NoSpan()
        return
    with tracer.start_as_current_span(name, attributes=dict(attributes or {})) as s:
        yield s


@contextmanager
def build_span(session: Session, fmt: str) -> Iterator[Any]:
    with span("windowsmith.build", {"windowsmith.session.id": session.id, "gen_ai.system": system_name(fmt),
                                    "gen_ai.request.model": session.engine.model}) as s:
        yield s


def pack_attributes(s: Any, pack: Pack) -> None:
    m = pack.manifest
    s.set_attribute("windowsmith.pack.id", m.pack_id)
    s.set_attribute("windowsmith.pack.tokens", m.tokens)
    s.set_attribute("windowsmith.pack.available", m.available)
    s.set_attribute("windowsmith.pack.status", m.status)
    for name, v in m.layers.items():
        s.set_attribute(f"windowsmith.layer.{name}.tokens", int(v.get("used", 0)))
    s.set_attribute("windowsmith.cache.prefix_parts", int(m.cache.get("prefix_parts", 0)))
    stages: dict[str, int] = {}
    for a in m.actions:
        kind = str(a.get("kind", "?"))
        stages[kind] = stages.get(kind, 0) + 1
    for kind, n in sorted(stages.items()):
        # one event per kind of action the build took (mask, summary, emergency, truncate, drop, shrink…)
        s.add_event(f"windowsmith.action.{kind}", {"windowsmith.action.count": n})
    s.set_attribute("windowsmith.artifacts", len(m.artifacts))


@contextmanager
def upstream_span(fmt: str, p: Any) -> Iterator[Any]:
    model = str(p.request.get("model", ""))
    with span(f"chat {model}", {"gen_ai.operation.name": "chat", "gen_ai.system": system_name(fmt),
                               "gen_ai.request.model": model, "windowsmith.pack.id": p.pack.id,
                               "windowsmith.pack.tokens": p.pack.tokens}) as s:
        yield s


def reply_attributes(s: Any, fmt: str, body: bytes) -> None:
    try:
        d = json.loads(body)
    except ValueError:
        return
    if not isinstance(d, dict):
        return
    usage_attributes(s, fmt, d)


def usage_attributes(s: Any, fmt: str, d: Mapping[str, Any]) -> None:
    if isinstance(d.get("model"), str):
        s.set_attribute("gen_ai.response.model", d["model"])
    if isinstance(d.get("id"), str):
        s.set_attribute("gen_ai.response.id", d["id"])
    u = d.get("usage") or {}
    if not isinstance(u, Mapping):
        return
    if fmt == OPENAI:
        details = u.get("prompt_tokens_details") or {}
        pairs = {"gen_ai.usage.input_tokens": u.get("prompt_tokens"), "gen_ai.usage.output_tokens": u.get("completion_tokens"),
                 "gen_ai.usage.cache_read.input_tokens": details.get("cached_tokens") if isinstance(details, Mapping) else None}
    else:
        pairs = {"gen_ai.usage.input_tokens": u.get("input_tokens"), "gen_ai.usage.output_tokens": u.get("output_tokens"),
                 "gen_ai.usage.cache_read.input_tokens": u.get("cache_read_input_tokens"),
                 "gen_ai.usage.cache_creation.input_tokens": u.get("cache_creation_input_tokens")}
    for k, v in pairs.items():
        if isinstance(v, int):
            s.set_attribute(k, v)
