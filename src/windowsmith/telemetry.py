"""OpenTelemetry by the GenAI semantic conventions, for the library, the adapters and the server alike (the
``otel`` extra: ``opentelemetry-api``, imported lazily; without it every call here is a no-op).

One model call is one trace:

* a CLIENT span named ``"{gen_ai.operation.name} {gen_ai.request.model}"`` (``chat gpt-4.1``) from the build
  to the recorded response, with ``gen_ai.operation.name``, ``gen_ai.provider.name`` (``anthropic``,
  ``openai``, ``gcp.gemini``), ``gen_ai.request.model``, ``gen_ai.conversation.id`` (the session id),
  ``gen_ai.request.max_tokens``, ``server.address``/``server.port`` where known, and once answered
  ``gen_ai.response.finish_reasons``, ``gen_ai.response.model``/``id``, ``gen_ai.usage.input_tokens`` (the whole
  prompt, cached tokens included, as the conventions define it), ``gen_ai.usage.output_tokens``,
  ``gen_ai.usage.cache_read.input_tokens`` and ``gen_ai.usage.cache_creation.input_tokens``;
* INTERNAL children: ``windowsmith.build`` per build of the call (tokens per layer, cache prefix, the
  manifest's actions as events) with a ``windowsmith.compaction.<stage>`` child for each compaction stage
  that ran (a stage that appended nothing leaves no span), and whatever the caller adds (the server's
  ``windowsmith.ingest``);
* metrics ``gen_ai.client.token.usage`` (histogram of tokens, by ``gen_ai.token.type`` ``input``/``output``)
  and ``gen_ai.client.operation.duration`` (seconds).

No message text, tool argument or header goes on a span. The providers are the global ones unless
:func:`configure` names others (tests pass the SDK's in-memory exporter and metric reader this way).

Where it is hooked: a build (``Session.build``/``abuild``/``call``, ``ModelCall.build``) opens the session's
call when none is open, and its builds until the response is recorded (the rebuild after an overflow) are
children of that call; ``Session.record`` ends it with the usage (usage marked estimated is flagged
``windowsmith.usage.estimated``); the adapters add the finish reasons they read; the server opens each
proxied call before it ingests the request.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# packs, compactors and usages are typed Any here: this module sits under build.py, which imports it


#: ``gen_ai.provider.name`` of each request format
PROVIDERS = {"anthropic": "anthropic", "openai-chat": "openai", "openai-responses": "openai", "gemini": "gcp.gemini"}
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


@dataclass
class _Config:
    tracer_provider: Any = None
    meter_provider: Any = None
    tracer: Any = None
    instruments: tuple[Any, Any] | None = None
    resolved: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


_config = _Config()


def configure(*, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Send windowsmith's spans and metrics to these providers (default: OpenTelemetry's global ones)."""
    with _config.lock:
        _config.tracer_provider, _config.meter_provider = tracer_provider, meter_provider
        _config.tracer, _config.instruments, _config.resolved = None, None, False


def _resolve() -> None:
    if _config.resolved:
        return
    with _config.lock:
        if _config.resolved:
            return
        try:
            from opentelemetry import metrics, trace
        except ImportError:  # the otel extra is not installed: a no-op
            _config.resolved = True
            return
        tp = _config.tracer_provider or trace.get_tracer_provider()
        mp = _config.meter_provider or metrics.get_meter_provider()
        _config.tracer = tp.get_tracer("windowsmith")
        meter = mp.get_meter("windowsmith")
        _config.instruments = (
            meter.create_histogram("gen_ai.client.token.usage", unit="{token}",
                                   description="Number of input and output tokens used",
                                   explicit_bucket_boundaries_advisory=list(_TOKEN_BUCKETS)),
            meter.create_histogram("gen_ai.client.operation.duration", unit="s",
                                   description="GenAI operation duration",
                                   explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS)))
        _config.resolved = True


def tracer() -> Any:
    """The tracer windowsmith's spans come from, or None without ``opentelemetry-api``."""
    _resolve()
    return _config.tracer


def provider_name(fmt: str) -> str:
    """``gen_ai.provider.name`` of a request format."""
    return PROVIDERS.get(fmt, fmt)


def max_tokens(request: Mapping[str, Any]) -> int | None:
    """The output cap a rendered request sets, whatever its format spells it."""
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if isinstance(request.get(key), int):
            return int(request[key])
    config = request.get("config") or request.get("generationConfig") or {}
    for key in ("max_output_tokens", "maxOutputTokens"):
        if isinstance(config, Mapping) and isinstance(config.get(key), int):
            return int(config[key])
    return None


def finish_reasons(fmt: str, response: Any) -> list[str]:
    """The finish reasons of a provider response (a dict or an SDK object), as the provider spells them."""
    if hasattr(response, "model_dump"):
        try:
            response = response.model_dump(mode="json")
        except Exception:  # an SDK object that does not dump: no reasons
            return []
    if not isinstance(response, Mapping):
        return []
    if fmt == "anthropic":
        return [str(response["stop_reason"])] if response.get("stop_reason") else []
    if fmt == "openai-chat":
        return [str(c["finish_reason"]) for c in response.get("choices") or [] if isinstance(c, Mapping)
                and c.get("finish_reason")]
    if fmt == "openai-responses":
        details = response.get("incomplete_details")
        if isinstance(details, Mapping) and details.get("reason"):
            return [str(details["reason"])]
        return [str(response["status"])] if response.get("status") else []
    if fmt == "gemini":
        out = []
        for c in response.get("candidates") or []:
            if isinstance(c, Mapping) and (c.get("finishReason") or c.get("finish_reason")):
                out.append(str(c.get("finishReason") or c.get("finish_reason")))
        return out
    return []


class _Call:
    """One model call's CLIENT span, the build spans under it and its start time."""

    def __init__(self, tr: Any, fmt: str, model: str, conversation_id: str, operation: str,
                 server: tuple[str | None, int | None]) -> None:
        from opentelemetry import trace

        self.fmt, self.model, self.operation = fmt, model, operation
        attrs: dict[str, Any] = {"gen_ai.operation.name": operation, "gen_ai.provider.name": provider_name(fmt),
                                 "gen_ai.request.model": model, "gen_ai.conversation.id": conversation_id}
        if server[0]:
            attrs["server.address"] = server[0]
        if server[1]:
            attrs["server.port"] = server[1]
        self.span = tr.start_span(f"{operation} {model}", kind=trace.SpanKind.CLIENT, attributes=attrs)
        self.context = trace.set_span_in_context(self.span)
        self.started = time.perf_counter()
        self.build: Any = None  # the build span in progress (the parent of compaction stages)
        self.ended = False

    def end(self, usage: Any = None, reasons: Sequence[str] = (), response: Mapping[str, Any] | None = None,
            error: str | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        s = self.span
        if reasons:
            s.set_attribute("gen_ai.response.finish_reasons", list(reasons))
        if response is not None:
            if isinstance(response.get("model"), str):
                s.set_attribute("gen_ai.response.model", response["model"])
            if isinstance(response.get("id"), str):
                s.set_attribute("gen_ai.response.id", response["id"])
        metric_attrs: dict[str, Any] = {"gen_ai.operation.name": self.operation,
                                        "gen_ai.provider.name": provider_name(self.fmt),
                                        "gen_ai.request.model": self.model}
        if error is not None:
            s.set_attribute("error.type", error)
            metric_attrs["error.type"] = error
            from opentelemetry.trace import Status, StatusCode

            s.set_status(Status(StatusCode.ERROR))
        if usage is not None:
            s.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
            s.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            s.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
            s.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)
        s.end()
        instruments = _config.instruments
        if instruments is not None:
            tokens, duration = instruments
            duration.record(time.perf_counter() - self.started, metric_attrs)
            if usage is not None:
                tokens.record(usage.prompt_tokens, {**metric_attrs, "gen_ai.token.type": "input"})
                tokens.record(usage.output_tokens, {**metric_attrs, "gen_ai.token.type": "output"})


#: the open call of each session (keyed by its log), until its response is recorded
_open: weakref.WeakKeyDictionary[Any, _Call] = weakref.WeakKeyDictionary()
_open_lock = threading.Lock()
#: the session (its log) each recent pack was built for, so the code that sends a pack finds its call
_by_pack: dict[str, weakref.ref[Any]] = {}
_BY_PACK_SIZE = 4096


_by_conversation: dict[str, weakref.ref[Any]] = {}


def key_of_conversation(conversation_id: str) -> Any:
    """The session key (its log) of the newest call opened for ``conversation_id``, else None."""
    ref = _by_conversation.get(conversation_id)
    return ref() if ref is not None else None


def key_of(pack: Any) -> Any:
    """The session key (its log) ``pack`` was built for, while its call may be open, else None."""
    ref = _by_pack.get(pack.id)
    return ref() if ref is not None else None


def rename(key: Any, fmt: str, model: str) -> None:
    """Name ``key``'s open call after the request actually sent (the server learns format and model late)."""
    call = _open.get(key) if tracer() is not None else None
    if call is None or call.ended:
        return
    call.fmt, call.model = fmt, model
    call.span.update_name(f"{call.operation} {model}")
    call.span.set_attribute("gen_ai.provider.name", provider_name(fmt))
    call.span.set_attribute("gen_ai.request.model", model)


def current(key: Any) -> Any:
    """The CLIENT span of ``key``'s open call, or None."""
    call = _open.get(key) if tracer() is not None else None
    return call.span if call is not None and not call.ended else None


def start_call(key: Any, fmt: str, model: str, conversation_id: str, *, operation: str = "chat",
               server_address: str | None = None, server_port: int | None = None) -> None:
    """Open the CLIENT span of ``key``'s next model call (a call still open, never answered, ends first)."""
    tr = tracer()
    if tr is None:
        return
    call = _Call(tr, fmt, model, conversation_id, operation, (server_address, server_port))
    with _open_lock:
        previous = _open.get(key)
        _open[key] = call
        _by_conversation.pop(conversation_id, None)
        _by_conversation[conversation_id] = weakref.ref(key)
        while len(_by_conversation) > _BY_PACK_SIZE:
            del _by_conversation[next(iter(_by_conversation))]
    if previous is not None:
        previous.end()


def open_call(key: Any) -> bool:
    """Whether ``key`` has a model call open (a build not answered yet)."""
    return tracer() is not None and key in _open and not _open[key].ended


def end_call(key: Any, *, usage: Any = None, reasons: Sequence[str] = (),
             response: Mapping[str, Any] | None = None, error: str | None = None) -> None:
    """End ``key``'s open model call with what the response said (no-op when none is open)."""
    if tracer() is None:
        return
    with _open_lock:
        call = _open.pop(key, None)
    if call is not None:
        call.end(usage, reasons, response, error)


def annotate(key: Any, attributes: Mapping[str, Any]) -> None:
    """Set attributes on ``key``'s open model call (the adapters' finish reasons, the server's address)."""
    call = _open.get(key) if tracer() is not None else None
    if call is not None and not call.ended:
        for k, v in attributes.items():
            if v is not None:
                call.span.set_attribute(k, v)


@contextlib.contextmanager
def child(key: Any, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """An INTERNAL span under ``key``'s open model call (a root span when none is open)."""
    tr = tracer()
    if tr is None:
        yield None
        return
    call = _open.get(key)
    ctx = call.context if call is not None and not call.ended else None
    span = tr.start_span(name, context=ctx, attributes=dict(attributes or {}))
    try:
        yield span
    finally:
        span.end()


@contextlib.contextmanager
def build(key: Any, compactor: Any, compactions: Callable[[], int], fmt: str, model: str,
          conversation_id: str) -> Iterator[Callable[[Any], Any]]:
    """A ``windowsmith.build`` span under ``key``'s model call, opening the call when none is open; compaction
    stages that run inside it (``compactions()`` grows: the session's compaction records) become its children.
    Yields ``done(pack)``, which puts the pack's attributes on the spans."""
    if tracer() is None:
        yield lambda pack: pack
        return
    if not open_call(key):
        start_call(key, fmt, model, conversation_id)
    _hook_stages(key, compactor, compactions)
    call = _open.get(key)
    with child(key, "windowsmith.build", {"gen_ai.conversation.id": conversation_id}) as span:
        if call is not None:
            call.build = span

        def done(pack: Any) -> Any:
            if span.is_recording():
                _by_pack[pack.id] = weakref.ref(key)
                while len(_by_pack) > _BY_PACK_SIZE:
                    del _by_pack[next(iter(_by_pack))]
                pack_attributes(span, pack)
                annotate(key, {"gen_ai.request.max_tokens": max_tokens(pack.request), "windowsmith.pack.id": pack.id})
            return pack

        try:
            yield done
        finally:
            if call is not None:
                call.build = None


def _hook_stages(key: Any, compactor: Any, compactions: Callable[[], int]) -> None:
    """Have ``compactor``'s stages that run leave a span under the build in progress (once per compactor)."""
    if getattr(compactor, "stage_hook", None) is not None:
        return
    ref = weakref.ref(key)

    @contextlib.contextmanager
    def stage(name: str) -> Iterator[None]:
        started = time.time_ns()
        before = compactions()
        yield
        added = compactions() - before
        owner = ref()
        call = _open.get(owner) if owner is not None else None
        tr = tracer()
        if added <= 0 or tr is None or call is None or call.build is None:
            return
        from opentelemetry import trace

        span = tr.start_span(f"windowsmith.compaction.{name}", context=trace.set_span_in_context(call.build),
                             start_time=started, attributes={"windowsmith.compaction.records": added})
        span.end()

    compactor.stage_hook = stage


def pack_attributes(s: Any, pack: Any) -> None:
    """A pack's tokens, layers, cache prefix and actions on a span (nothing of its text)."""
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


__all__ = ["PROVIDERS", "annotate", "build", "child", "configure", "current", "end_call", "finish_reasons", "key_of",
           "key_of_conversation", "max_tokens", "open_call", "pack_attributes", "provider_name", "rename", "start_call", "tracer"]
