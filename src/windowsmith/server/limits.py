"""What the server accepts from a client, and how it says no.

:class:`Guard` wraps the whole app (one ASGI middleware): a body over ``max_body`` bytes is a 413 (refused up
front from its ``Content-Length``, else counted as it streams in, so no more than ``max_body`` bytes are ever held),
a body not in after ``body_timeout`` seconds a 408; a client that disconnects before its response has ended
cancels the work still pending for it (an upstream call is cancelled, and the session lock its turn held is
released); an exception nothing else handled is logged with its reason and answered as a 500. :func:`read_json`
parses a body strictly: nesting deeper than :data:`MAX_DEPTH` is measured on the raw bytes before any parser
recurses, and ``NaN`` / ``Infinity`` (or a number that overflows to them) are refused. Every refusal is
:class:`RequestRejected`, answered by :func:`error_response` in the shape the route's clients parse: the
OpenAI, Anthropic or Gemini error format on the proxy routes, ``{"error": "..."}`` on the JSON API and the dashboard.
:class:`HeaderTimeoutH11` closes a connection whose request headers are not in within :data:`HEADER_TIMEOUT`.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from itertools import accumulate
from typing import Any

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import BudgetBlockedError, BudgetExceededError, ConflictError, UsageError

log = logging.getLogger("windowsmith.server")

#: the default largest request body, in bytes (``windowsmith serve --max-body``)
MAX_BODY = 8 * 1024 * 1024
#: the default seconds a client has to send its whole body
BODY_TIMEOUT = 60.0
#: seconds a connection has to send its request headers (on connecting, and between two requests)
HEADER_TIMEOUT = 10.0
#: the deepest JSON nesting a request body may have (agent requests nest well under 20)
MAX_DEPTH = 128


class RequestRejected(UsageError):
    """The request is refused with ``status`` (400 malformed, 408 too slow, 413 too large)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# -- error bodies -----------------------------------------------------------------------------------------------

_GEMINI_STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 405: "INVALID_ARGUMENT",
                    408: "DEADLINE_EXCEEDED", 413: "INVALID_ARGUMENT", 504: "DEADLINE_EXCEEDED"}
_ANTHROPIC_KINDS = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                    408: "timeout_error", 413: "request_too_large", 500: "api_error"}


def error_response(path: str, status: int, message: str) -> Response:
    """``message`` as an error body of ``status`` in the shape the clients of ``path`` parse."""
    body: dict[str, Any]
    if path.startswith("/v1beta/"):  # Gemini
        body = {"error": {"code": status, "message": message, "status": _GEMINI_STATUSES.get(status, "INTERNAL")}}
    elif path.rstrip("/").endswith("/v1/messages"):
        body = {"type": "error", "error": {"type": _ANTHROPIC_KINDS.get(status, "api_error" if status >= 500
                                                                          else "invalid_request_error"),
                                           "message": message}}
    elif path.startswith("/v1/"):
        body = {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error",
                          "param": None, "code": None}}
    else:
        body = {"error": message}
    return Response(json.dumps(body), status_code=status, media_type="application/json")


def client_message(exc: BaseException) -> str:
    """A library error as an HTTP client reads it: what was wrong with the request and what to send instead, without
    the Python API's advice (``BudgetConfig(...)``, ``session.refresh()``) or a trace importer's list of formats."""
    if isinstance(exc, ConflictError):
        return "another request on this session was written first, and nothing of this one was: retry it"
    if isinstance(exc, BudgetBlockedError):
        return (f"the request needs {exc.needed:,} tokens, over this server's limit of {exc.limit:,} for the model "
                f"even after compaction (the largest part is {exc.layer!r}): shorten it, or send a model with a "
                "larger window")
    if isinstance(exc, BudgetExceededError):
        return (f"the request's required context needs {exc.needed:,} tokens but the model's window leaves "
                f"{exc.available:,} (the largest part is {exc.layer!r}): shorten it, or send a model with a larger "
                "window")
    if isinstance(exc, UsageError):
        return str(exc).split("; supported formats:")[0]
    return f"windowsmith could not work on this request ({type(exc).__name__}); the server log has the details"


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (unknown path 404, wrong method 405) in the route's error shape."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    message = f"{detail}: {request.method} {request.url.path}"
    headers = getattr(exc, "headers", None)
    response = error_response(request.url.path, status, message)
    if headers:
        response.headers.update(headers)
    return response


# -- the JSON of a body -----------------------------------------------------------------------------------------

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_DEPTH_STEP = [0] * 256
_DEPTH_STEP[ord("[")] = _DEPTH_STEP[ord("{")] = 1
_DEPTH_STEP[ord("]")] = _DEPTH_STEP[ord("}")] = -1
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(raw: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``raw`` nest (brackets inside strings do not count), without
    recursing: strings are cut out, the brackets kept, and their running sum's maximum taken."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _no_constant(name: str) -> Any:
    raise RequestRejected(400, f"the request body holds {name}, which JSON does not allow: send numbers only")


def _finite(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise RequestRejected(400, f"the number {text[:40]} in the request body is out of range: send a finite number")
    return v


def parse_json(raw: bytes) -> Any:
    """The JSON value of ``raw``, or :class:`RequestRejected` (400) saying what is wrong with it."""
    depth = json_depth(raw)
    if depth > MAX_DEPTH:
        raise RequestRejected(400, f"the request body nests {depth} levels deep; at most {MAX_DEPTH} are accepted")
    try:
        return json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RequestRejected:
        raise
    except (ValueError, RecursionError) as e:  # (UnicodeDecodeError, an over-long integer: ValueErrors too)
        raise RequestRejected(400, f"the request body is not valid JSON ({str(e)[:120]})") from None


async def read_json(request: Request) -> Any:
    """The request's body, read within :class:`Guard`'s limits and parsed by :func:`parse_json`."""
    return parse_json(await request.body())


# -- the middleware ---------------------------------------------------------------------------------------------


class _Exchange:
    """One request's receive and send as the app sees them: the body counted and timed, the response watched."""

    def __init__(self, receive: Any, send: Any, max_body: int, body_timeout: float) -> None:
        self._receive, self._send = receive, send
        self.max_body = max_body
        self.deadline = time.monotonic() + body_timeout
        self.read = 0
        self.body_in = anyio.Event()
        self.started = self.ended = False

    async def receive(self) -> Any:
        if self.body_in.is_set():
            return await self._receive()
        try:
            with anyio.fail_after(max(0.0, self.deadline - time.monotonic())):
                msg = await self._receive()
        except TimeoutError:
            raise RequestRejected(408, "the request body did not arrive in time: send it faster, or split the "
                                       "request") from None
        if msg["type"] == "http.request":
            self.read += len(msg.get("body", b""))
            if self.read > self.max_body:
                raise RequestRejected(413, f"the request body is over the server's limit of {self.max_body:,} bytes "
                                           "(windowsmith serve --max-body)")
            if not msg.get("more_body", False):
                self.body_in.set()
        return msg

    async def send(self, msg: Any) -> None:
        if msg["type"] == "http.response.start":
            self.started = True
        elif msg["type"] == "http.response.body" and not msg.get("more_body", False):
            self.ended = True  # (before the send: the server reports the end to receive() as a disconnect)
        await self._send(msg)

    async def watch(self, scope: anyio.CancelScope, path: str) -> None:
        """Once the body is in, wait for the client to leave; if its response has not ended, cancel its work."""
        await self.body_in.wait()
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if not self.ended:
            log.info("the client of %s disconnected before its response ended: cancelling the request", path)
            scope.cancel()


class Guard:
    """The ASGI middleware enforcing the limits above on every HTTP request (see the module's docstring)."""

    def __init__(self, app: Any, max_body: int = MAX_BODY, body_timeout: float = BODY_TIMEOUT) -> None:
        self.app = app
        self.max_body = max_body
        self.body_timeout = body_timeout

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            await error_response(path, 413, f"the request body ({int(length):,} bytes) is over the server's limit of "
                                            f"{self.max_body:,} bytes (windowsmith serve --max-body)")(scope, receive, send)
            return
        ex = _Exchange(receive, send, self.max_body, self.body_timeout)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ex.watch, tg.cancel_scope, path)
            try:
                await self.app(scope, ex.receive, ex.send)
            except RequestRejected as e:
                if not ex.started:
                    await error_response(path, e.status, str(e))(scope, receive, send)
            except ClientDisconnect:
                log.info("the client of %s disconnected while sending its body", path)
            except Exception as e:  # the last resort: a logged reason and a 500 in the route's shape, never a traceback
                log.error("%s %s failed: %s: %s", scope.get("method"), path, type(e).__name__, e, exc_info=e)
                if not ex.started:
                    await error_response(path, 500, f"windowsmith failed on this request ({type(e).__name__}); "
                                                    "the server log has the details")(scope, receive, send)
            finally:
                tg.cancel_scope.cancel()


class HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that has not sent a request's headers within
    :data:`HEADER_TIMEOUT` seconds (of connecting, or of its previous response), so slow sockets cannot hold the
    server (uvicorn's own keep-alive timeout stops at the first byte)."""

    _header_timer: Any = None

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT, self._headers_late)

    def _headers_late(self) -> None:
        self._header_timer = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()


__all__ = ["BODY_TIMEOUT", "HEADER_TIMEOUT", "MAX_BODY", "MAX_DEPTH", "Guard", "HeaderTimeoutH11", "RequestRejected",
           "client_message", "error_response", "http_error", "json_depth", "parse_json", "read_json"]
