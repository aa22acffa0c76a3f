"""Calls to the upstream provider through its official SDK, returning its bytes unchanged.

Non-streaming calls use ``with_raw_response`` (the body as the provider sent it, plus its status and
headers); streaming calls use ``with_streaming_response`` and pass each chunk on as it arrives, while
:class:`OpenAIStream` / :class:`AnthropicStream` rebuild the final response from the server-sent events
so the proxy can record it. The SDK clients never retry (the agent's own client decides that) and get
the caller's credentials per request; nothing here logs a header. A stream that breaks (a dropped connection, an
event that is not what the provider documents, an end before the last event) ends for the client with an error
event in the provider's format, and the reason is logged.
"""

from __future__ import annotations

import abc
import contextlib
import inspect
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from ..errors import ProviderResponseError, RuntimeFailure, UsageError
from .conversation import ANTHROPIC, OPENAI, RESPONSES

#: Upstream response headers never passed back (hop-by-hop, or describing bytes httpx already decoded).
DROP_HEADERS = frozenset({"content-length", "date", "server", "content-encoding", "transfer-encoding", "connection", "keep-alive"})

log = logging.getLogger("windowsmith.server")


@dataclass
class UpstreamReply:
    status: int
    headers: dict[str, str]
    body: bytes


class UpstreamError(RuntimeFailure):
    """The upstream answered with an error status (passed back as is) or could not be reached (502)."""

    def __init__(self, status: int, body: bytes, headers: Mapping[str, str], original: BaseException) -> None:
        super().__init__(f"upstream returned HTTP {status}")
        self.status = status
        self.body = body
        self.headers = dict(headers)
        self.original = original


def pass_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in DROP_HEADERS}


class Upstream:
    """One provider's SDK client (shared connection pool), copied per request with its credentials."""

    def __init__(self, fmt: str, base_url: str | None, *, timeout: float = 600.0) -> None:
        self.format = fmt
        self.timeout = timeout
        self._sdk: Any
        if fmt in (OPENAI, RESPONSES):
            import openai

            self._sdk = openai
            self._client: Any = openai.AsyncOpenAI(api_key="unset", base_url=base_url, max_retries=0, timeout=timeout)
            self._known = set(inspect.signature(self._resource(self._client).create).parameters)
        elif fmt == ANTHROPIC:
            import anthropic

            self._sdk = anthropic
            self._client = anthropic.AsyncAnthropic(api_key="unset", base_url=base_url, max_retries=0, timeout=timeout)
            self._known = set(inspect.signature(self._client.messages.create).parameters)
        else:
            raise UsageError(f"unknown upstream format {fmt!r}; use {OPENAI!r} or {ANTHROPIC!r}")

    def client_for(self, headers: Mapping[str, str]) -> Any:
        """A copy of the client with the caller's credentials (never stored beyond this request)."""
        opts: dict[str, Any] = {}
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if self.format in (OPENAI, RESPONSES):
            if bearer:
                opts["api_key"] = bearer
        else:
            key = headers.get("x-api-key")
            if key:
                opts["api_key"] = key
            if bearer:
                opts["auth_token"] = bearer
                if not key:
                    opts["api_key"] = None
        return self._client.with_options(**opts) if opts else self._client

    def _kwargs(self, request: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        known = {k: v for k, v in request.items() if k in self._known and not k.startswith("extra_")}
        extra = {k: v for k, v in request.items() if k not in self._known}
        if extra:
            known["extra_body"] = extra
        fwd = {k: v for k, v in headers.items()
               if k.lower().startswith(("anthropic-beta", "openai-organization", "openai-project"))}
        if fwd:
            known["extra_headers"] = fwd
        return known

    def _resource(self, client: Any) -> Any:
        if self.format == RESPONSES:
            return client.responses
        return client.chat.completions if self.format == OPENAI else client.messages

    def _error(self, exc: BaseException) -> UpstreamError:
        sdk = self._sdk
        if isinstance(exc, sdk.APIStatusError):
            r = exc.response
            return UpstreamError(r.status_code, r.content, pass_headers(r.headers), exc)
        status = 502
        msg = f"windowsmith could not reach the upstream provider ({type(exc).__name__}); check --{'anthropic' if self.format == ANTHROPIC else 'openai'}-base-url"
        if isinstance(exc, sdk.APITimeoutError):
            status = 504
            msg = (f"the upstream provider did not answer within {self.timeout:g} s (windowsmith serve "
                   "--upstream-timeout); retry, or raise the timeout")
        body: dict[str, Any]
        if self.format != ANTHROPIC:
            body = {"error": {"message": msg, "type": "upstream_unreachable", "code": None, "param": None}}
        else:
            body = {"type": "error", "error": {"type": "timeout_error" if status == 504 else "api_error", "message": msg}}
        return UpstreamError(status, json.dumps(body).encode(), {"content-type": "application/json"}, exc)

    def _retryable(self, exc: BaseException, attempt: int) -> bool:
        """A dropped connection (a pooled keep-alive connection the server closed as we reused it) is
        retried once, as the SDKs do by default; a timeout or any answer from the upstream is not."""
        sdk = self._sdk
        return attempt == 0 and isinstance(exc, sdk.APIConnectionError) and not isinstance(exc, sdk.APITimeoutError)

    async def send(self, request: Mapping[str, Any], headers: Mapping[str, str]) -> UpstreamReply:
        client = self.client_for(headers)
        for attempt in range(2):
            try:
                raw = await self._resource(client).with_raw_response.create(**self._kwargs(request, headers))
                break
            except self._sdk.APIError as exc:
                if self._retryable(exc, attempt):
                    continue
                raise self._error(exc) from None
        r = raw.http_response
        return UpstreamReply(r.status_code, pass_headers(r.headers), r.content)

    async def list_models(self, headers: Mapping[str, str]) -> UpstreamReply:
        """``GET /models`` of an OpenAI-compatible upstream, its bytes unchanged."""
        client = self.client_for(headers)
        try:
            raw = await client.models.with_raw_response.list()
        except self._sdk.APIError as exc:
            raise self._error(exc) from None
        r = raw.http_response
        return UpstreamReply(r.status_code, pass_headers(r.headers), r.content)

    async def open_stream(self, request: Mapping[str, Any], headers: Mapping[str, str]) -> tuple[UpstreamReply, AsyncGenerator[bytes, None]]:
        """Start a streaming call: the status and headers once the upstream accepted it (errors raise
        :class:`UpstreamError` before any byte is sent to the client), and the body's chunks."""
        client = self.client_for(headers)
        for attempt in range(2):
            cm = self._resource(client).with_streaming_response.create(**self._kwargs(request, headers))
            try:
                resp = await cm.__aenter__()
                break
            except self._sdk.APIError as exc:
                if self._retryable(exc, attempt):
                    continue
                raise self._error(exc) from None

        r = resp.http_response
        return (UpstreamReply(r.status_code, pass_headers(r.headers), b""),
                body_chunks(r.aiter_bytes(), lambda: cm.__aexit__(None, None, None)))

    async def close(self) -> None:
        await self._client.close()


async def body_chunks(chunks: AsyncIterator[bytes], close: Callable[[], Awaitable[Any]]) -> AsyncGenerator[bytes, None]:
    """An upstream stream's chunks. A broken connection (dropped, reset, timed out) ends them with its reason logged
    (the accumulator's ``end()`` then tells the client); ``close`` releases the response even when the client left."""
    try:
        async for chunk in chunks:
            yield chunk
    except Exception as e:
        log.warning("the upstream stream broke off: %s: %s", type(e).__name__, e)
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await close()


class SSEParser:
    """Incremental server-sent-events parser: feed bytes, get (event, data) pairs."""

    def __init__(self) -> None:
        self._buf = b""
        self._raw: list[bytes] = []
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str | None, str, bytes]]:
        """Complete events in ``chunk`` (with what came before): (event name, data, the event's bytes)."""
        self._buf += chunk
        out: list[tuple[str | None, str, bytes]] = []
        while True:
            i = self._buf.find(b"\n")
            if i < 0:
                break
            raw_line = self._buf[: i + 1]
            self._raw.append(raw_line)
            line = self._buf[:i].rstrip(b"\r").decode("utf-8", "replace")
            self._buf = self._buf[i + 1:]
            if not line:
                out.append((self._event, "\n".join(self._data), b"".join(self._raw)))
                self._event, self._data, self._raw = None, [], []
            elif line.startswith("event:"):
                self._event = line[6:].strip()
            elif line.startswith("data:"):
                self._data.append(line[5:].lstrip(" "))
        return out

    def rest(self) -> bytes:
        """Bytes of an event the stream ended in the middle of (passed on as they are)."""
        return b"".join(self._raw) + self._buf


def stream_error_event(fmt: str, message: str) -> bytes:
    """An error event ending a stream, in the provider's format (the SDKs raise it as an API error)."""
    data: dict[str, Any]
    if fmt == "gemini":
        return b"data: " + json.dumps({"error": {"code": 500, "message": message, "status": "INTERNAL"}}).encode() + b"\n\n"
    if fmt == RESPONSES:
        data = {"type": "error", "code": "server_error", "message": message, "param": None, "sequence_number": 0}
        return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"
    if fmt == OPENAI:
        data = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
        return b"data: " + json.dumps(data).encode() + b"\n\n"
    data = {"type": "error", "error": {"type": "api_error", "message": message}}
    return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


class StreamAccumulator(abc.ABC):
    """What both streams share: the parser, and a broken stream turned into one error event for the client."""

    format = OPENAI

    def __init__(self) -> None:
        self.parser = SSEParser()
        self.done = False
        self.failed: str | None = None  # why the stream was cut (then nothing more is passed on)

    @abc.abstractmethod
    def response(self) -> dict[str, Any]:
        """The final response as the provider would have answered it unstreamed (what is recorded)."""

    @abc.abstractmethod
    def _take(self, data: str) -> bool:
        """Fold one event's data in; False to keep the event from the client."""

    def _complete(self) -> bool:
        return self.done

    def feed(self, chunk: bytes) -> list[bytes]:
        """Take upstream bytes; return the events to pass on, byte for byte (or, at an event that is not what the
        provider documents, an error event, after which the stream is over)."""
        if self.failed:
            return []
        out: list[bytes] = []
        for _, data, raw in self.parser.feed(chunk):
            try:
                keep = self._take(data)
            except (ProviderResponseError, TypeError, KeyError, AttributeError, ValueError, IndexError) as e:
                out.append(self._fail(f"the upstream sent a malformed stream event ({type(e).__name__}: {str(e)[:80]})"))
                break
            if keep:
                out.append(raw)
        return out

    def end(self) -> list[bytes]:
        """What follows the upstream's last byte: an error event if the stream ended before the provider's last event
        (a dropped connection, a cut body), else the bytes of a trailing partial event, passed on as they are."""
        if self.failed:
            return []
        if not self._complete():
            return [self._fail("the upstream stream ended before its last event (the connection dropped or the "
                               "provider cut it): retry the request")]
        rest = self.parser.rest()
        return [rest] if rest else []

    def _fail(self, reason: str) -> bytes:
        self.failed = reason
        log.warning("ending a broken %s stream with an error event: %s", self.format, reason)
        return stream_error_event(self.format, reason)


class OpenAIStream(StreamAccumulator):
    """Rebuilds a ``chat.completion`` from ``chat.completion.chunk`` events."""

    format = OPENAI

    def __init__(self, drop_usage_chunk: bool = False) -> None:
        super().__init__()
        self.drop_usage_chunk = drop_usage_chunk  # we asked for usage; the client did not
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.meta: dict[str, Any] = {}

    def _complete(self) -> bool:
        return self.done or self.finish is not None  # (a compatible server may end without [DONE])

    def _take(self, data: str) -> bool:
        if data.strip() == "[DONE]":
            self.done = True
            return True
        try:
            d = json.loads(data)
        except ValueError:
            return True
        if not isinstance(d, dict):
            return True
        if isinstance(d.get("error"), dict):  # the provider's own error event: passed on, and the stream is over
            self.failed = "the upstream ended the stream with an error event"
            log.warning("the upstream ended an %s stream with an error event", self.format)
            return True
        choices = d.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise ProviderResponseError(f"'choices' is a {type(choices).__name__}, not a list")
        for k in ("id", "model", "created"):
            if k in d:
                self.meta.setdefault(k, d[k])
        keep = True
        if d.get("usage"):
            self.usage = dict(d["usage"])
            if self.drop_usage_chunk and not choices:
                keep = False  # the usage-only chunk the client did not ask for
        for ch in choices or []:
            if ch.get("index", 0) != 0:
                continue
            delta = ch.get("delta") or {}
            if delta.get("content"):
                self.content.append(str(delta["content"]))
            if delta.get("refusal"):
                self.refusal.append(str(delta["refusal"]))
            for tc in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(int(tc.get("index", 0)), {"id": "", "name": "", "arguments": ""})
                if tc.get("id"):
                    slot["id"] = str(tc["id"])
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["name"] += str(fn["name"])
                if fn.get("arguments"):
                    slot["arguments"] += str(fn["arguments"])
            if ch.get("finish_reason"):
                self.finish = ch["finish_reason"]
        return keep

    def response(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.refusal:
            msg["refusal"] = "".join(self.refusal)
        if self.calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"] or "{}"}}
                                 for _, c in sorted(self.calls.items())]
        return {"object": "chat.completion", **self.meta,
                "choices": [{"index": 0, "message": msg, "finish_reason": self.finish}],
                "usage": self.usage or {}}


class AnthropicStream(StreamAccumulator):
    """Rebuilds a ``message`` from Anthropic's streaming events."""

    format = ANTHROPIC

    def __init__(self) -> None:
        super().__init__()
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json_parts: dict[int, list[str]] = {}

    def _take(self, data: str) -> bool:
        try:
            d = json.loads(data)
        except ValueError:
            return True
        t = d.get("type") if isinstance(d, dict) else None
        if t == "message_start":
            self.message = dict(d.get("message") or {})
            self.message["usage"] = dict(self.message.get("usage") or {})
        elif t == "content_block_start":
            self.blocks[self._index(d)] = dict(d.get("content_block") or {})
        elif t == "content_block_delta":
            i = self._index(d)
            b = self.blocks.setdefault(i, {"type": "text", "text": ""})
            delta = d.get("delta") or {}
            dt = delta.get("type")
            if dt == "text_delta":
                b["text"] = b.get("text", "") + str(delta.get("text", ""))
            elif dt == "input_json_delta":
                self.json_parts.setdefault(i, []).append(str(delta.get("partial_json", "")))
            elif dt == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + str(delta.get("thinking", ""))
            elif dt == "signature_delta":
                b["signature"] = delta.get("signature", "")
        elif t == "message_delta":
            delta = d.get("delta") or {}
            self.message.update({k: v for k, v in delta.items() if k in ("stop_reason", "stop_sequence")})
            usage = self.message.setdefault("usage", {})
            usage.update({k: v for k, v in (d.get("usage") or {}).items() if v is not None})
        elif t == "message_stop":
            self.done = True
        elif t == "error":  # the provider's own error event: passed on, and the stream is over
            self.failed = "the upstream ended the stream with an error event"
            log.warning("the upstream ended an %s stream with an error event", self.format)
        return True

    @staticmethod
    def _index(d: dict[str, Any]) -> int:
        i = d["index"]
        if isinstance(i, bool) or not isinstance(i, int):
            raise ProviderResponseError(f"'index' is a {type(i).__name__}, not an integer")
        return i

    def response(self) -> dict[str, Any]:
        content = []
        for i, b in sorted(self.blocks.items()):
            b = dict(b)
            if b.get("type") == "tool_use" and i in self.json_parts:
                raw = "".join(self.json_parts[i])
                try:
                    b["input"] = json.loads(raw) if raw.strip() else {}
                except ValueError:
                    b["input"] = {}
                    log.warning("a streamed tool call's input is not valid JSON; recorded as {}")
            content.append(b)
        return {**self.message, "content": content}


class ResponsesStream(StreamAccumulator):
    """Keeps the final ``response`` of a Responses API stream (its ``response.completed`` event, or the
    ``response.incomplete`` / ``response.failed`` one)."""

    format = RESPONSES
    FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self) -> None:
        super().__init__()
        self.final: dict[str, Any] = {}

    def _take(self, data: str) -> bool:
        if '"response.' not in data[:200] or not any(f in data[:200] for f in self.FINAL):
            return True
        d = json.loads(data)
        if not isinstance(d, dict):
            raise ProviderResponseError("a Responses stream event is not an object")
        if d.get("type") in self.FINAL:
            if not isinstance(d.get("response"), dict):
                raise ProviderResponseError(f"the {d['type']} event has no response object")
            self.final = d["response"]
            self.done = True
        return True

    def response(self) -> dict[str, Any]:
        return self.final


def stream_accumulator(fmt: str, drop_usage_chunk: bool = False) -> StreamAccumulator:
    if fmt == RESPONSES:
        return ResponsesStream()
    return OpenAIStream(drop_usage_chunk) if fmt == OPENAI else AnthropicStream()
