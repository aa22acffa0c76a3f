"""Streamed responses: each SDK's stream, its final message, or the list of its events/chunks, turned
into the one response the format's ``parse_response`` reads, so a streamed call records the same
message and usage as the non-streamed one.

    stream = client.messages.create(**pack.request, stream=True)
    for event in stream: ...                 # show the text as it arrives, keep the events
    session.record(events)                   # or session.record(stream) if nothing iterated it yet

Accepted, per format:

* ``anthropic``: ``Stream`` of raw events, ``MessageStream`` (``client.messages.stream()``; its final
  message), a list of events (``message_start`` … ``message_stop``);
* ``openai-chat``: ``Stream`` of ``ChatCompletionChunk`` (ask for ``stream_options={"include_usage":
  True}``, or the usage is zero), ``ChatCompletionStream`` (its final completion), a list of chunks;
* ``openai-responses``: ``Stream`` of events, ``ResponseStream`` (its final response), a list of events
  (the ``response.completed``/``incomplete``/``failed`` event carries the whole response);
* ``gemini``: the iterator of ``generate_content_stream`` or a list of its chunks (parts are merged:
  consecutive text pieces of the same kind join, the last chunk's usage and finish reason win).

Async streams (``AsyncStream``, async iterators, async stream managers) go through ``aresolve``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import ProviderResponseError, UsageError
from . import anthropic, gemini, openai_chat, openai_responses
from .base import WORKAROUND, to_plain

_FINAL_METHODS = ("get_final_message", "get_final_completion", "get_final_response")

#: format -> (whether a dict is one streamed event, the fold of a stream's events into one response)
_STREAMS: dict[str, tuple[Callable[[Mapping[str, Any]], bool], Callable[[list[dict[str, Any]]], dict[str, Any]]]] = {
    "anthropic": (anthropic.is_stream_event, anthropic.accumulate_stream),
    "openai-chat": (openai_chat.is_stream_event, openai_chat.accumulate_stream),
    "openai-responses": (openai_responses.is_stream_event, openai_responses.accumulate_stream),
    "gemini": (gemini.is_stream_event, gemini.accumulate_stream),
}


def _plain_events(chunks: Iterable[Any], fmt: str) -> list[dict[str, Any]]:
    out = []
    for i, c in enumerate(chunks):
        try:
            out.append(to_plain(c, what="a stream event", by_alias=fmt != "gemini"))
        except ProviderResponseError:
            raise UsageError(f"cannot record item {i} of the stream ({type(c).__name__}) as a {fmt} stream event; "
                             + WORKAROUND) from None
    return out


def is_event(fmt: str, d: Mapping[str, Any]) -> bool:
    """Whether ``d`` is one streamed event/chunk of ``fmt`` rather than a whole response."""
    stream = _STREAMS.get(fmt)
    return stream is not None and stream[0](d)


def _is_stream(obj: Any) -> bool:
    if isinstance(obj, str | bytes | bytearray | Mapping) or hasattr(obj, "model_dump"):
        return False
    return isinstance(obj, list | tuple) or hasattr(obj, "__iter__") or hasattr(obj, "__next__")


def resolve(fmt: str, response: Any) -> Any:
    """``response`` as something ``parse_response`` reads: streams and event lists are accumulated."""
    if inspect.isawaitable(response) or hasattr(response, "__aiter__"):
        if inspect.iscoroutine(response):
            response.close()
        raise UsageError(f"record() got an async {type(response).__name__}: use `await session.arecord(...)` "
                         "(or await the call first and record its result)")
    if hasattr(response, "__enter__") and not hasattr(response, "__iter__") and not hasattr(response, "model_dump"):
        raise UsageError(f"record() got a stream manager ({type(response).__name__}): record inside its `with` block, "
                         "e.g. `with client.messages.stream(**pack.request) as stream: session.record(stream)`")
    for name in _FINAL_METHODS:
        final = getattr(response, name, None)
        if callable(final):
            return final()
    if _is_stream(response):
        return accumulate(fmt, _plain_events(response, fmt))
    if isinstance(response, Mapping) or hasattr(response, "model_dump"):
        try:
            d = to_plain(response, what="a response", by_alias=fmt != "gemini")
        except ProviderResponseError:
            return response
        if is_event(fmt, d):
            return accumulate(fmt, [d])
    return response


async def aresolve(fmt: str, response: Any) -> Any:
    """``resolve`` for async SDKs: awaits coroutines, async final-message methods and async iterators."""
    if inspect.isawaitable(response):
        response = await response
    if hasattr(response, "__aenter__") and not hasattr(response, "__aiter__"):
        raise UsageError(f"arecord() got a stream manager ({type(response).__name__}): record inside its `async with` "
                         "block, e.g. `async with client.messages.stream(**pack.request) as s: await session.arecord(s)`")
    for name in _FINAL_METHODS:
        final = getattr(response, name, None)
        if callable(final):
            value = final()
            return await value if inspect.isawaitable(value) else value
    if hasattr(response, "__aiter__"):
        return accumulate(fmt, _plain_events([c async for c in response], fmt))
    return resolve(fmt, response)


def accumulate(fmt: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold a list of plain stream events/chunks of ``fmt`` into the non-streamed response dict."""
    if not events:
        raise UsageError("the stream had no events (was it already iterated?); " + WORKAROUND)
    try:
        return _STREAMS[fmt][1](events)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        if fmt not in _STREAMS:
            raise UsageError(f"unknown request format {fmt!r}") from None
        raise UsageError(f"the stream events do not look like a {fmt} stream ({type(exc).__name__}: {exc}); "
                         + WORKAROUND) from None


__all__ = ["accumulate", "aresolve", "is_event", "resolve"]
