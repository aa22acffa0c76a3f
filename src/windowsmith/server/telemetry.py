"""OpenTelemetry for the proxy, by the GenAI semantic conventions, over :mod:`windowsmith.telemetry` (the ``otel``
extra; without it every span is a no-op).

Each proxied call is one trace: its CLIENT span ``chat {model}`` opens when the request arrives
(:meth:`Telemetry.instrument`, before the ingest) and ends when the reply is recorded, with
``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.conversation.id``
(the session), ``server.address``/``server.port`` of the upstream, ``gen_ai.request.max_tokens``,
``gen_ai.response.model``/``id``/``finish_reasons`` and the usage (``gen_ai.usage.input_tokens`` /
``output_tokens`` / ``cache_read.input_tokens`` / ``cache_creation.input_tokens``). Its INTERNAL children:
``windowsmith.ingest`` (appending what is new, a ``windowsmith.offload`` child per tool-result message),
``windowsmith.build`` per build (tokens per layer, cache prefix, the manifest's actions as events) with a
``windowsmith.compaction.<stage>`` child for each stage that ran, and ``windowsmith.compaction.reactive`` after
an upstream overflow. The GenAI client metrics come with it. The tracer comes from
``ServerConfig.tracer_provider`` (it becomes windowsmith's, :func:`windowsmith.telemetry.configure`) or the
global provider. Nothing secret goes on a span: no header, no message text.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .. import telemetry
from ..formats import anthropic, is_context_overflow, openai_chat
from .conversation import ANTHROPIC, OPENAI

if TYPE_CHECKING:
    from ..build import Pack
    from ..session import Session

#: the GenAI semantic-convention attribute of each count a format's ``usage_counts`` reads
_USAGE_ATTRIBUTES = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
    "cache_write_tokens": "gen_ai.usage.cache_creation.input_tokens",
}
_DEFAULT_UPSTREAMS = {OPENAI: "https://api.openai.com/v1", ANTHROPIC: "https://api.anthropic.com"}

#: the session (its log) whose call the code running now belongs to (set by ``instrument``)
_call_key: contextvars.ContextVar[Any] = contextvars.ContextVar("windowsmith_call_key", default=None)


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        pass

    def end(self) -> None:
        pass


class _CallHandle:
    """A proxied call's CLIENT span as the proxy's code handles it: attributes go on the span while the call is
    open; ``end()`` ends the call if the recorded reply has not (a stream whose reply could not be recorded)."""

    def __init__(self, key: Any) -> None:
        self.key = key
        self.error: str | None = None

    def set_attribute(self, key: str, value: Any) -> None:
        if key in ("error.type", "http.response.status_code"):  # an attempt's refusal: the call may still succeed
            if key == "error.type":
                self.error = str(value)
            self.add_event("windowsmith.upstream_error", {key: value})
            return
        telemetry.annotate(self.key, {key: value})

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        span = telemetry.current(self.key)
        if span is not None:
            span.add_event(name, dict(attributes or {}))

    def end(self) -> None:
        telemetry.end_call(self.key, error=self.error)


def _server(url: str | None) -> tuple[str | None, int | None]:
    if not url:
        return None, None
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80 if parts.scheme == "http" else None)
    return parts.hostname, port


class Telemetry:
    """Spans of one server (a no-op without ``opentelemetry-api``)."""

    def __init__(self, tracer_provider: Any = None, upstreams: Mapping[str, str | None] | None = None) -> None:
        if tracer_provider is not None:
            telemetry.configure(tracer_provider=tracer_provider)
        urls = {**_DEFAULT_UPSTREAMS, **{k: v for k, v in (upstreams or {}).items() if v}}
        self.servers = {fmt: _server(url) for fmt, url in urls.items()}

    @property
    def tracer(self) -> Any:
        return telemetry.tracer()

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
        """An INTERNAL span in the call in progress (nested under the span current here, if it is ours)."""
        if self.tracer is None:
            yield _NoSpan()
            return
        from opentelemetry import trace

        sid = (attributes or {}).get("windowsmith.session.id")
        key = telemetry.key_of_conversation(str(sid)) if sid else _call_key.get()
        here = trace.get_current_span()
        parent = telemetry.current(key) if key is not None and not here.is_recording() else None
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        with self.tracer.start_as_current_span(name, context=ctx, attributes=dict(attributes or {})) as s:
            yield s

    def instrument(self, session: Session) -> None:
        """Open the CLIENT span of the proxied call about to be ingested and built for ``session`` (named after
        the engine's model and format until :meth:`upstream_span` names it after the request sent)."""
        if self.tracer is None:
            return
        eng = session.engine
        fmt = eng.format or eng.spec.default_format
        telemetry.start_call(session.log, fmt, eng.model, session.id)
        _call_key.set(session.log)

    def _open(self, fmt: str, request: Mapping[str, Any], pack: Pack) -> _CallHandle | None:
        key = telemetry.key_of(pack)
        if key is None or not telemetry.open_call(key):
            return None
        model = str(request.get("model", ""))
        telemetry.rename(key, fmt, model)
        host, port = self.servers.get(fmt, (None, None))
        telemetry.annotate(key, {"server.address": host, "server.port": port, "windowsmith.pack.id": pack.id,
                                 "windowsmith.pack.tokens": pack.tokens,
                                 "gen_ai.request.max_tokens": telemetry.max_tokens(request)})
        return _CallHandle(key)

    def start_upstream_span(self, fmt: str, request: Mapping[str, Any], pack: Pack) -> Any:
        """The call's span for a stream: ``end()`` when the stream ends (the recorded reply ends it first)."""
        handle = self._open(fmt, request, pack)
        if handle is None:
            return _NoSpan()
        handle.set_attribute("windowsmith.stream", True)
        return handle

    @contextlib.contextmanager
    def upstream_span(self, fmt: str, request: Mapping[str, Any], pack: Pack) -> Iterator[Any]:
        """The call's span around one upstream request; a refusal ends the call with its ``error.type``, except
        an overflow, which the proxy compacts and sends again within the same call."""
        handle = self._open(fmt, request, pack)
        if handle is None:
            yield _NoSpan()
            return
        try:
            yield handle
        except Exception as exc:
            if is_context_overflow(getattr(exc, "original", exc)):  # compacted and sent again, in this call
                handle.add_event("windowsmith.overflow", {"http.response.status_code": getattr(exc, "status", 400)})
                raise
            status = getattr(exc, "status", None)
            telemetry.end_call(handle.key, error=str(status) if status is not None else type(exc).__qualname__)
            raise

    @staticmethod
    def reply_attributes(s: Any, fmt: str, body: bytes | Mapping[str, Any]) -> None:
        """The reply's model, id and usage as reported (the recorded usage, when it is, says the same)."""
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
        reasons = telemetry.finish_reasons(fmt, d)
        if reasons:
            s.set_attribute("gen_ai.response.finish_reasons", reasons)
        u = d.get("usage") or {}
        if not isinstance(u, Mapping):
            return
        counts = openai_chat.usage_counts(u) if fmt == OPENAI else anthropic.usage_counts(u)
        for key, v in counts.items():
            if isinstance(v, int):
                s.set_attribute(_USAGE_ATTRIBUTES[key], v)
