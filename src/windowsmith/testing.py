"""Test doubles for your own tests: a local stand-in for the OpenAI and Anthropic APIs, served on loopback.

    from windowsmith.testing import BackgroundServer, FakeUpstream

    with BackgroundServer(FakeUpstream()) as upstream:
        client = openai.OpenAI(base_url=upstream.url + "/v1", api_key="test")

No request leaves the machine. It needs the ``server`` extra (``pip install 'windowsmith[server]'``: starlette
and uvicorn); without it, constructing either class says so. ``python -m windowsmith.testing --port 8751`` runs the
stand-in as a process (the proxy's load test does).

``FakeUpstream`` is an ASGI app that answers ``POST /v1/chat/completions`` and ``POST /v1/messages``
the way the providers do (same JSON shapes, same server-sent events when ``stream`` is set, same
error bodies) so the official SDKs parse its replies. It plays a simple agent: it calls the tool it
was given (``tool_calls`` / ``tool_use``) until ``turns_per_task`` tool results are in the window, then
answers in text. Its usage block models a prompt cache: the tokens of the request's longest prefix
seen before (by any earlier request, whole messages) are billed as cache reads, the rest as new
input (Anthropic: written to the cache when the request marks a breakpoint). A request over
``max_context_tokens`` gets the provider's "prompt too long" 400. It keeps every request it
received, and never logs or stores the caller's key beyond ``seen_keys`` (the last value only, for
tests that check forwarding).

Token counts are ``o200k_base`` counts of each message's JSON (exact for the text, close to what a
provider bills); they only need to be consistent.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .errors import RuntimeFailure, UsageError
from .tokens import get_encoding

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

SERVER_EXTRA = "pip install 'windowsmith[server]'"


def _needs_server_extra(e: ModuleNotFoundError) -> UsageError:
    return UsageError(f"windowsmith.testing needs {e.name!r} to serve the fake provider, which is not installed: "
                      f"{SERVER_EXTRA}")


class FakeUpstream:
    """An ASGI app answering ``POST /v1/chat/completions`` and ``POST /v1/messages`` as the providers do."""

    def __init__(self, *, max_context_tokens: int = 1_000_000, turns_per_task: int = 1_000_000,
                 output_text: str = "Done: the change is in place and the tests pass.", latency: float = 0.0,
                 tool_output_hint: str = "", reuse_call_ids: bool = False) -> None:
        self.max_context_tokens = max_context_tokens
        #: answer every tool call with the same id (``call_0`` / ``toolu_0``), as some OpenAI-compatible servers do
        self.reuse_call_ids = reuse_call_ids
        #: statuses to answer the next requests with, in order (a provider error body each), before answering normally
        self.fail_with: list[int] = []
        self.turns_per_task = turns_per_task
        self.output_text = output_text
        self.latency = latency
        self.requests: list[dict[str, Any]] = []
        self.last_key: str | None = None
        self._prefixes: set[str] = set()
        self._lock = threading.Lock()
        self._enc = get_encoding("o200k_base")
        self._n = 0
        #: response id -> seconds the fake spent on it (request read to last byte), for the load test
        self.timings: dict[str, float] = {}
        try:
            from starlette.applications import Starlette
            from starlette.routing import Route
        except ModuleNotFoundError as e:
            raise _needs_server_extra(e) from None
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._openai, methods=["POST"]),
            Route("/v1/messages", self._anthropic, methods=["POST"]),
            Route("/_timings", self._timings, methods=["GET"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/responses", self._responses, methods=["POST"]),
            Route("/v1beta/models/{target:path}", self._gemini, methods=["POST"]),
        ])

    async def _timings(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        return JSONResponse(self.timings)

    async def _models(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in ("gpt-4o", "gpt-4.1", "llama3:8b")]})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    # ------------------------------------------------------------------ the simulated model

    def _tokens(self, v: Any) -> int:
        return len(self._enc.encode(json.dumps(v, sort_keys=True, ensure_ascii=False), disallowed_special=()))

    def _cache(self, pieces: list[Any]) -> tuple[int, int]:
        """(cached tokens, total tokens): the longest run of leading pieces some earlier request had."""
        h = hashlib.sha256()
        digests = []
        for p in pieces:
            h.update(json.dumps(p, sort_keys=True).encode())
            digests.append(h.hexdigest())
        counts = [self._tokens(p) for p in pieces]
        with self._lock:
            hit = 0
            for i, d in enumerate(digests):
                if d in self._prefixes:
                    hit = i + 1
            self._prefixes.update(digests)
        return sum(counts[:hit]), sum(counts)

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._n += 1
            return f"{prefix}{self._n:06d}"

    def _call_id(self, prefix: str) -> str:
        return f"{prefix}0" if self.reuse_call_ids else self._next_id(prefix)

    def _tool_results(self, messages: list[Any], fmt: str) -> int:
        if fmt == "gemini":
            return sum(1 for m in messages if isinstance(m, dict) for p in m.get("parts") or []
                       if isinstance(p, dict) and ("functionResponse" in p or "function_response" in p))
        if fmt == "responses":
            return sum(1 for m in messages if isinstance(m, dict) and m.get("type") == "function_call_output")
        if fmt == "openai":
            return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
        return sum(1 for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list)
                   for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")

    def _decide(self, body: dict[str, Any], fmt: str) -> tuple[str | None, tuple[str, dict[str, Any]] | None]:
        tools = body.get("tools") or []
        key = {"responses": "input", "gemini": "contents"}.get(fmt, "messages")
        done = self._tool_results(body.get(key) or [], fmt)
        if fmt == "gemini":
            tools = [d for t in tools for d in t.get("functionDeclarations") or []]
        if tools and done < self.turns_per_task:
            t = tools[0]
            name = t["function"]["name"] if fmt == "openai" else t["name"]
            return f"Step {done + 1}: running {name}.", (name, {"command": f"step {done + 1}", "n": done + 1})
        return self.output_text, None

    async def _pre(self, request: Request, fmt: str) -> dict[str, Any] | Response:
        request.state.t0 = time.perf_counter()
        body = await request.json()
        key = request.headers.get("x-api-key") or request.headers.get("authorization")
        with self._lock:
            self.requests.append({"format": fmt, "body": body, "time": time.time()})
            self.last_key = key
        if self.latency:
            await asyncio.sleep(self.latency)
        with self._lock:
            status = self.fail_with.pop(0) if self.fail_with else None
        if status is not None:
            from starlette.responses import JSONResponse

            err = {"message": f"the fake upstream failed this request with HTTP {status}", "type": "api_error"}
            return JSONResponse({"error": err} if fmt == "openai" else {"type": "error", "error": err},
                                status_code=status)
        return body

    # ------------------------------------------------------------------ OpenAI

    async def _openai(self, request: Request) -> Response:
        from starlette.responses import JSONResponse, StreamingResponse

        body = await self._pre(request, "openai")
        if not isinstance(body, dict):
            return body
        pieces = [{"tools": body.get("tools")}, *list(body.get("messages") or [])]
        cached, total = self._cache(pieces)
        if total > self.max_context_tokens:
            return JSONResponse({"error": {
                "message": f"This model's maximum context length is {self.max_context_tokens} tokens. However, your "
                           f"messages resulted in {total} tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}, status_code=400)
        text, call = self._decide(body, "openai")
        cid = self._next_id("chatcmpl-fake")
        msg: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if call:
            msg["tool_calls"] = [{"id": self._call_id("call_"), "type": "function",
                                  "function": {"name": call[0], "arguments": json.dumps(call[1])}}]
        out_tokens = self._tokens(msg)
        usage = {"prompt_tokens": total, "completion_tokens": out_tokens, "total_tokens": total + out_tokens,
                 "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                               "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
        finish = "tool_calls" if call else "stop"
        model = body.get("model", "gpt-4o")
        t0 = request.state.t0
        if not body.get("stream"):
            self.timings[cid] = time.perf_counter() - t0
            return JSONResponse({"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                                 "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}],
                                 "usage": usage, "service_tier": "default", "system_fingerprint": "fp_fake"})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def events() -> AsyncIterator[bytes]:
            base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                    "system_fingerprint": "fp_fake"}

            def ev(choices: list[Any], **extra: Any) -> bytes:
                return b"data: " + json.dumps({**base, "choices": choices, **extra}).encode() + b"\n\n"

            yield ev([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
            for word in (text or "").split(" "):
                yield ev([{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}])
            if call:
                tc = msg["tool_calls"][0]
                yield ev([{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": tc["id"], "type": "function",
                                                                  "function": {"name": call[0], "arguments": ""}}]},
                           "finish_reason": None}])
                args = tc["function"]["arguments"]
                for i in range(0, len(args), 8):
                    yield ev([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + 8]}}]},
                               "finish_reason": None}])
            yield ev([{"index": 0, "delta": {}, "finish_reason": finish}])
            if include_usage:
                yield ev([], usage=usage)
            self.timings[cid] = time.perf_counter() - t0
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    # ------------------------------------------------------------------ OpenAI Responses

    async def _responses(self, request: Request) -> Response:
        """``POST /v1/responses``: a reasoning item (opaque ``encrypted_content``, as with ``store: false``), then a
        function call or a message."""
        from starlette.responses import JSONResponse, StreamingResponse

        body = await self._pre(request, "responses")
        if not isinstance(body, dict):
            return body
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
        cached, total = self._cache([{"tools": body.get("tools")}, {"instructions": body.get("instructions")}, *items])
        if total > self.max_context_tokens:
            return JSONResponse({"error": {
                "message": f"Your input exceeds the context window of this model ({total} > {self.max_context_tokens}).",
                "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}, status_code=400)
        text, call = self._decide(body, "responses")
        rid = self._next_id("resp_fake")
        output: list[dict[str, Any]] = [{"type": "reasoning", "id": self._next_id("rs_fake"), "summary": [],
                                         "encrypted_content": "gAAAA" + hashlib.sha256(rid.encode()).hexdigest()}]
        if text:
            output.append({"type": "message", "id": self._next_id("msg_fake"), "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]})
        if call:
            output.append({"type": "function_call", "id": self._next_id("fc_fake"), "call_id": self._call_id("call_"),
                           "name": call[0], "arguments": json.dumps(call[1]), "status": "completed"})
        out_tokens = self._tokens(output)
        usage = {"input_tokens": total, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": out_tokens,
                 "output_tokens_details": {"reasoning_tokens": 8}, "total_tokens": total + out_tokens}
        response = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "completed",
                    "model": body.get("model", "gpt-5"), "output": output, "parallel_tool_calls": True,
                    "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [], "usage": usage,
                    "store": body.get("store", True)}
        self.timings[rid] = time.perf_counter() - request.state.t0
        if not body.get("stream"):
            return JSONResponse(response)
        events = _responses_events(response)

        async def stream() -> AsyncIterator[bytes]:
            for e in events:
                yield e

        return StreamingResponse(stream(), media_type="text/event-stream")

    # ------------------------------------------------------------------ Gemini

    async def _gemini(self, request: Request) -> Response:
        """``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse`` (REST camelCase)."""
        from starlette.responses import JSONResponse, StreamingResponse

        body = await self._pre(request, "gemini")
        if not isinstance(body, dict):
            return body
        model, _, method = request.path_params["target"].rpartition(":")
        contents = list(body.get("contents") or [])
        cached, total = self._cache([{"tools": body.get("tools")}, {"system": body.get("systemInstruction")}, *contents])
        if total > self.max_context_tokens:
            return JSONResponse({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                                           f"The input token count ({total}) exceeds the maximum number of tokens "
                                           f"allowed ({self.max_context_tokens})."}}, status_code=400)
        text, call = self._decide(body, "gemini")
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        if call:
            parts.append({"functionCall": {"name": call[0], "args": call[1]}})
        out_tokens = self._tokens(parts)
        usage = {"promptTokenCount": total, "candidatesTokenCount": out_tokens, "totalTokenCount": total + out_tokens,
                 "cachedContentTokenCount": cached}
        rid = self._next_id("gem_fake")
        self.timings[rid] = time.perf_counter() - request.state.t0
        whole = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": usage, "modelVersion": model, "responseId": rid}
        if method != "streamGenerateContent":
            return JSONResponse(whole)
        chunks: list[dict[str, Any]] = []
        words = (text or "").split(" ")
        for i, w in enumerate(words):
            chunks.append({"candidates": [{"content": {"role": "model", "parts": [{"text": w if i == 0 else " " + w}]},
                                           "index": 0}], "modelVersion": model, "responseId": rid})
        last_parts = [{"functionCall": {"name": call[0], "args": call[1]}}] if call else [{"text": ""}]
        chunks.append({"candidates": [{"content": {"role": "model", "parts": last_parts}, "finishReason": "STOP",
                                       "index": 0}], "usageMetadata": usage, "modelVersion": model, "responseId": rid})

        async def stream() -> AsyncIterator[bytes]:
            for ch in chunks:
                yield b"data: " + json.dumps(ch).encode() + b"\r\n\r\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    # ------------------------------------------------------------------ Anthropic

    async def _anthropic(self, request: Request) -> Response:
        from starlette.responses import JSONResponse, StreamingResponse

        body = await self._pre(request, "anthropic")
        if not isinstance(body, dict):
            return body
        pieces = [{"tools": body.get("tools")}, {"system": body.get("system")}, *list(body.get("messages") or [])]
        cached, total = self._cache(pieces)
        if total > self.max_context_tokens:
            return JSONResponse({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {total} tokens > {self.max_context_tokens} maximum"}}, status_code=400)
        marks = json.dumps(body).count('"cache_control"')
        written = (total - cached) if marks else 0
        text, call = self._decide(body, "anthropic")
        mid = self._next_id("msg_fake")
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        if call:
            content.append({"type": "tool_use", "id": self._call_id("toolu_"), "name": call[0], "input": call[1]})
        out_tokens = self._tokens(content)
        usage = {"input_tokens": total - cached - written, "cache_creation_input_tokens": written,
                 "cache_read_input_tokens": cached, "output_tokens": out_tokens}
        stop = "tool_use" if call else "end_turn"
        model = body.get("model", "claude-sonnet-4-5")
        message = {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
                   "stop_reason": stop, "stop_sequence": None, "usage": usage}
        t0 = request.state.t0
        if not body.get("stream"):
            self.timings[mid] = time.perf_counter() - t0
            return JSONResponse(message)

        async def events() -> AsyncIterator[bytes]:
            def ev(name: str, data: dict[str, Any]) -> bytes:
                return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

            start = {**message, "content": [], "stop_reason": None,
                     "usage": {**usage, "output_tokens": 1}}
            yield ev("message_start", {"type": "message_start", "message": start})
            for i, block in enumerate(content):
                if block["type"] == "text":
                    yield ev("content_block_start", {"type": "content_block_start", "index": i,
                                                     "content_block": {"type": "text", "text": ""}})
                    for word in block["text"].split(" "):
                        yield ev("content_block_delta", {"type": "content_block_delta", "index": i,
                                                         "delta": {"type": "text_delta", "text": word + " "}})
                else:
                    yield ev("content_block_start", {"type": "content_block_start", "index": i, "content_block":
                                                     {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
                    raw = json.dumps(block["input"])
                    for k in range(0, len(raw), 8):
                        yield ev("content_block_delta", {"type": "content_block_delta", "index": i,
                                                         "delta": {"type": "input_json_delta", "partial_json": raw[k:k + 8]}})
                yield ev("content_block_stop", {"type": "content_block_stop", "index": i})
            yield ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                       "usage": {"output_tokens": out_tokens}})
            self.timings[mid] = time.perf_counter() - t0
            yield ev("message_stop", {"type": "message_stop"})

        return StreamingResponse(events(), media_type="text/event-stream")


def _responses_events(response: dict[str, Any]) -> list[bytes]:
    """A Responses API answer as the stream the API sends (item by item, text in words)."""
    out: list[bytes] = []

    def ev(kind: str, **data: Any) -> None:
        payload = {"type": kind, "sequence_number": len(out), **data}
        out.append(f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode())

    ev("response.created", response={**response, "status": "in_progress", "output": [], "usage": None})
    for i, item in enumerate(response["output"]):
        if item["type"] == "message":
            ev("response.output_item.added", output_index=i, item={**item, "content": [], "status": "in_progress"})
            part = {"type": "output_text", "text": "", "annotations": []}
            ev("response.content_part.added", item_id=item["id"], output_index=i, content_index=0, part=part)
            text = item["content"][0]["text"]
            for word in text.split(" "):
                ev("response.output_text.delta", item_id=item["id"], output_index=i, content_index=0,
                   delta=word if not word or word == text.split(" ")[0] else " " + word, logprobs=[])
            ev("response.output_text.done", item_id=item["id"], output_index=i, content_index=0, text=text, logprobs=[])
            ev("response.content_part.done", item_id=item["id"], output_index=i, content_index=0,
               part=item["content"][0])
        else:
            ev("response.output_item.added", output_index=i, item=item)
        ev("response.output_item.done", output_index=i, item=item)
    ev("response.completed", response=response)
    return out


class BackgroundServer:
    """Run an ASGI app on uvicorn in a thread on a free loopback port (tests, benchmarks, demos).

        with BackgroundServer(app) as srv:
            client = openai.OpenAI(base_url=srv.url + "/v1", api_key="...")
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        try:
            import uvicorn
        except ModuleNotFoundError as e:
            raise _needs_server_extra(e) from None

        self.config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeFailure(f"the server did not start on {self.config.host}:{self.config.port} within 30 s: "
                                     "is the port in use? pass port=0 for a free one")
            time.sleep(0.01)
        sock = self.server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


__all__ = ["BackgroundServer", "FakeUpstream"]


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - a process for benchmarks and demos
    """``python -m windowsmith.testing --port 8751 [--latency 0.2]``"""
    import argparse

    try:
        import uvicorn
    except ModuleNotFoundError as e:
        raise _needs_server_extra(e) from None

    ap = argparse.ArgumentParser(description="A local stand-in for the OpenAI and Anthropic APIs.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8751)
    ap.add_argument("--latency", type=float, default=0.0, help="seconds each answer waits, as a model would")
    ap.add_argument("--max-context-tokens", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    up = FakeUpstream(latency=args.latency, max_context_tokens=args.max_context_tokens)
    uvicorn.run(up, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":  # pragma: no cover
    main()
