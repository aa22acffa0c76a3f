"""Gemini's REST API through the proxy: ``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent`` (``?alt=sse``), as google-genai and Gemini CLI call it.

The wire speaks camelCase JSON; windowsmith's Gemini format (``formats/gemini.py``) speaks the SDK's snake_case.
:func:`to_snake` / :func:`to_rest` convert keys, never inside what the user or model wrote (a call's ``args``, a
result's ``response``, a tool's schema). :class:`GeminiUpstream` forwards with httpx (the google-genai SDK has no
way to hand back the provider's bytes), with the caller's ``x-goog-api-key``; :class:`GeminiStream` rebuilds the
final response from the streamed chunks.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from ..errors import ProviderResponseError
from ..formats.gemini import accumulate_stream
from .conversation import GEMINI
from .upstream import StreamAccumulator, UpstreamError, UpstreamReply, body_chunks, pass_headers

#: the Gemini API's own endpoint (``--gemini-base-url`` replaces it)
DEFAULT_BASE = "https://generativelanguage.googleapis.com"
#: keys whose values are the user's or the model's data: their keys are never converted
OPAQUE = frozenset({"args", "response", "parameters", "parameters_json_schema", "parametersJsonSchema",
                    "response_schema", "responseSchema", "response_json_schema", "responseJsonSchema"})
_CAMEL = re.compile(r"_([a-z])")
_SNAKE = re.compile(r"(?<=[a-z0-9])([A-Z])")


def _convert(v: Any, key: Any) -> Any:
    if isinstance(v, Mapping):
        return {key(k): (x if k in OPAQUE else _convert(x, key)) for k, x in v.items()}
    if isinstance(v, list):
        return [_convert(x, key) for x in v]
    return v


def to_rest(v: Any) -> Any:
    """SDK snake_case keys as the REST API's camelCase."""
    return _convert(v, lambda k: _CAMEL.sub(lambda m: m.group(1).upper(), k) if isinstance(k, str) else k)


def to_snake(v: Any) -> Any:
    """REST camelCase keys as the SDK's snake_case (what ``formats/gemini.py`` reads)."""
    return _convert(v, lambda k: _SNAKE.sub(lambda m: "_" + m.group(1).lower(), k) if isinstance(k, str) else k)


def merge_request(body: Mapping[str, Any], pack_request: Mapping[str, Any]) -> dict[str, Any]:
    """The client's generateContent body with windowsmith's window (contents, system instruction, tools, tool
    config) in place of its conversation; the output reservation is not sent as ``maxOutputTokens``."""
    out = {k: v for k, v in body.items() if k not in ("contents", "systemInstruction", "system_instruction", "tools")}
    config = dict(pack_request.get("config") or {})
    config.pop("max_output_tokens", None)
    out["contents"] = to_rest(pack_request["contents"])
    for k in ("system_instruction", "tools", "tool_config"):
        if k in config:
            out[_CAMEL.sub(lambda m: m.group(1).upper(), k)] = to_rest(config[k])
    return out


class GeminiStream(StreamAccumulator):
    """Rebuilds a ``GenerateContentResponse`` from ``streamGenerateContent?alt=sse`` chunks."""

    format = GEMINI

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[dict[str, Any]] = []

    def _take(self, data: str) -> bool:
        d = json.loads(data)
        if not isinstance(d, dict):
            raise ProviderResponseError("a Gemini stream chunk is not an object")
        self.chunks.append(to_snake(d))
        if any(isinstance(c, Mapping) and c.get("finishReason") for c in d.get("candidates") or []):
            self.done = True
        return True

    def response(self) -> dict[str, Any]:
        return to_rest(accumulate_stream(self.chunks))  # type: ignore[no-any-return]


class GeminiUpstream:
    """Gemini's REST API over httpx, with the caller's API key per request."""

    format = GEMINI

    def __init__(self, base_url: str | None, *, timeout: float = 600.0) -> None:
        import httpx

        self._httpx = httpx
        self.base = (base_url or DEFAULT_BASE).rstrip("/")
        self.timeout = timeout
        self._client = httpx.AsyncClient(timeout=timeout)

    def _url(self, request: Mapping[str, Any], stream: bool) -> str:
        model = request["model"]
        return f"{self.base}/v1beta/models/{model}:" + ("streamGenerateContent?alt=sse" if stream else "generateContent")

    @staticmethod
    def _headers(headers: Mapping[str, str]) -> dict[str, str]:
        out = {"content-type": "application/json"}
        for k in ("x-goog-api-key", "authorization", "x-goog-user-project"):
            if headers.get(k):
                out[k] = headers[k]
        return out

    def _error(self, exc: BaseException) -> UpstreamError:
        timeout = isinstance(exc, self._httpx.TimeoutException)
        msg = (f"the upstream provider did not answer within {self.timeout:g} s" if timeout else
               f"windowsmith could not reach the upstream provider ({type(exc).__name__}); check --gemini-base-url")
        status = 504 if timeout else 502
        body = {"error": {"code": status, "message": msg, "status": "UNAVAILABLE"}}
        return UpstreamError(status, json.dumps(body).encode(), {"content-type": "application/json"}, exc)

    async def send(self, request: Mapping[str, Any], headers: Mapping[str, str]) -> UpstreamReply:
        body = {k: v for k, v in request.items() if k not in ("model", "stream")}
        try:
            r = await self._client.post(self._url(request, False), json=body, headers=self._headers(headers))
        except self._httpx.HTTPError as exc:
            raise self._error(exc) from None
        if r.status_code >= 400:
            raise UpstreamError(r.status_code, r.content, pass_headers(r.headers), ProviderResponseError(r.text[:200]))
        return UpstreamReply(r.status_code, pass_headers(r.headers), r.content)

    async def open_stream(self, request: Mapping[str, Any],
                          headers: Mapping[str, str]) -> tuple[UpstreamReply, AsyncGenerator[bytes, None]]:
        body = {k: v for k, v in request.items() if k not in ("model", "stream")}
        req = self._client.build_request("POST", self._url(request, True), json=body, headers=self._headers(headers))
        try:
            resp = await self._client.send(req, stream=True)
        except self._httpx.HTTPError as exc:
            raise self._error(exc) from None
        if resp.status_code >= 400:
            content = await resp.aread()
            await resp.aclose()
            raise UpstreamError(resp.status_code, content, pass_headers(resp.headers), ProviderResponseError(content[:200]))

        return UpstreamReply(resp.status_code, pass_headers(resp.headers), b""), body_chunks(resp.aiter_bytes(), resp.aclose)

    async def close(self) -> None:
        await self._client.aclose()


__all__ = ["GeminiStream", "GeminiUpstream", "merge_request", "to_rest", "to_snake"]
