"""The provider-compatible endpoints: ``POST /v1/chat/completions`` and ``POST /v1/messages``.

Per request: read the client's full conversation → append what is new to the session log → build the
window (compaction as due) → forward it upstream through the official SDK → return the upstream bytes
unchanged → record the response and its usage. An upstream "prompt too long" error triggers the same
reactive compaction and single retry as :meth:`windowsmith.Session.call`. Work on the session (store,
token counting) runs in a worker thread under a per-session lock, so the event loop keeps serving.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from anyio import get_cancelled_exc_class, to_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..build import ModelCall, Pack
from ..errors import BudgetExceededError, ConflictError, RuntimeFailure, UsageError
from ..formats import get_renderer, is_context_overflow
from ..model import Message, ToolCall
from ..store.base import check_session_id
from .conversation import (
    ANTHROPIC,
    GEMINI,
    OPENAI,
    RESPONSES,
    SYNC_SCOPE,
    ConversationDivergedError,
    ConversationError,
    Plan,
    Sync,
    message_digest,
    pack_json,
    parse_conversation,
    plan_turn,
    reconcile,
    stable_session_id,
    unique_call_ids,
    unpack_json,
    with_unique_call_ids,
)
from .gemini import GeminiStream, to_snake
from .gemini import merge_request as gemini_merge
from .limits import RequestRejected, client_message, read_json
from .logs import CallLog
from .replay import REPLAY_HEADER, replay_response, reply_from_message
from .telemetry import Telemetry
from .upstream import UpstreamError, stream_accumulator

if TYPE_CHECKING:
    from ..session import Session
    from .locks import SessionLock
    from .state import ServerState

log = logging.getLogger("windowsmith.server")

SESSION_HEADER = "x-windowsmith-session"
#: the ASGI scope key under which a route puts body fields its path carries (Gemini's model and method)
BODY_FROM_PATH = "windowsmith.body_from_path"
#: How many restarts of the same conversation start (same system prompt and first message) get their
#: own session under one hashed id before the proxy refuses.
MAX_FORKS = 1000
#: Session ids the server accepts from a header: printable, no spaces or slashes (they appear in URLs).
SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}")


def error_body(fmt: str, status: int, message: str, kind: str = "invalid_request_error") -> Response:
    if fmt == GEMINI:
        statuses = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 409: "ABORTED", 413: "INVALID_ARGUMENT"}
        return Response(json.dumps({"error": {"code": status, "message": message,
                                              "status": statuses.get(status, "INTERNAL")}}),
                        status_code=status, media_type="application/json")
    if fmt != ANTHROPIC:
        body: dict[str, Any] = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    else:
        body = {"type": "error", "error": {"type": kind, "message": message}}
    return Response(json.dumps(body), status_code=status, media_type="application/json")


def session_id_from(headers: Mapping[str, str], fmt: str, conv: Any, tenant: str | None = None) -> str:
    sid = headers.get(SESSION_HEADER)
    if sid is None:
        return stable_session_id(fmt, conv, tenant)
    if not SESSION_ID_RE.fullmatch(sid):
        raise UsageError(
            f"the {SESSION_HEADER} header {sid[:40]!r} is not a valid session id: use 1-128 characters "
            "from A-Z a-z 0-9 . _ : @ + - starting with a letter or digit"
        )
    return check_session_id(sid)


@dataclass
class Prepared:
    session: Session
    pack: Pack
    call: ModelCall
    sync: Sync
    request: dict[str, Any]
    replay: dict[str, Any] | None = None  # a retry of an answered turn: the recorded reply, sent again
    log: CallLog = field(default_factory=lambda: CallLog(""))
    client: Mapping[str, Any] = field(default_factory=dict)  # the client's request body


def merge_request(fmt: str, body: Mapping[str, Any], pack_request: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`merge_fields`, or for Gemini its REST body (:func:`windowsmith.server.gemini.merge_request`)."""
    return gemini_merge(body, pack_request) if fmt == GEMINI else merge_fields(body, pack_request)


def merge_fields(body: Mapping[str, Any], pack_request: Mapping[str, Any]) -> dict[str, Any]:
    """The client's parameters with windowsmith's window in place of its conversation. The client's model name
    wins over the pack's, and so does its output limit: the pack's output reservation is a budget the window
    leaves free, not a cap, so a request without one gets none (an API that requires one, like Anthropic's, has
    it from the client). Everything else the client sent passes on."""
    out = {k: v for k, v in body.items() if k not in ("messages", "tools", "functions", "system", "input", "instructions")}
    for k, v in pack_request.items():
        if k in ("model", "max_tokens", "max_completion_tokens", "max_output_tokens"):
            continue
        out[k] = v
    return out


def echo_ids(body: Mapping[str, Any], response: Mapping[str, Any], message: Message) -> Message:
    """A Gemini reply with the tool-call ids its echo will get: Gemini's calls carry no id, so the history
    reader numbers them by position; the reply is read as the last message of the conversation that echoes it."""
    content = ((response.get("candidates") or [{}])[0] or {}).get("content")
    if not isinstance(content, Mapping):
        return message
    echoed = parse_conversation(GEMINI, {**body, "contents": [*body["contents"], content]})
    ids = iter([c.id for c in with_unique_call_ids(echoed.messages)[-1].tool_calls])
    return Message(message.role, tuple(replace(b, id=next(ids, b.id)) if isinstance(b, ToolCall) else b
                                       for b in message.content))


class Proxy:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        #: replies the proxy passed on but could not record (each logged with its session, turn and reason)
        self.unrecorded = 0

    def tenant(self, request: Request) -> str | Response | None:
        """The tenant of the ``X-Windowsmith-Token`` header, or the 401 error response in the request's format."""
        ok, tenant = self.state.token_tenant(request.headers.get("x-windowsmith-token"))
        if not ok:
            fmt = ANTHROPIC if request.url.path.endswith("/messages") else OPENAI
            return error_body(fmt, 401, "missing or unknown windowsmith token: send it in the X-Windowsmith-Token "
                                        "header (the Authorization header carries your provider key)",
                              "authentication_error")
        return tenant

    # ------------------------------------------------------------------ session work (in a thread)

    def _identify(self, fmt: str, body: dict[str, Any], headers: Mapping[str, str],
                  tenant: str | None) -> tuple[Any, str]:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise UsageError("the request needs a 'model' string")
        conv = parse_conversation(fmt, body)
        sid = session_id_from(headers, fmt, conv, tenant)
        return replace(conv, messages=with_unique_call_ids(conv.messages)), sid

    def _find(self, fmt: str, body: dict[str, Any], conv: Any, sid: str, tenant: str | None,
              explicit: bool) -> tuple[Session, Sync, Plan]:
        """The session this conversation continues and what the request asks of it (:func:`plan_turn`). A hashed
        id whose log the conversation does not continue (the same task started again) forks to ``<id>.2``,
        ``<id>.3``, ...; a header id that diverges is a 409."""
        base = sid
        for k in range(1, MAX_FORKS + 1):
            sid = base if k == 1 else f"{base}.{k}"
            session = self.state.session(tenant, body["model"], sid)
            session.refresh()
            st = session.state
            sync = reconcile(Sync.from_dict(session.store.get_kv(SYNC_SCOPE, sid)), st.messages, st.message_seqs,
                             st.seq, conv.messages)
            try:
                return session, sync, plan_turn(sync, conv.messages)
            except ConversationDivergedError:
                if explicit or k == MAX_FORKS:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _prepare(self, fmt: str, body: dict[str, Any], conv: Any, sid: str, tenant: str | None,
                 explicit: bool) -> Prepared:
        """Find the session, append what is new, build (or take the retried turn's request or reply)."""
        session, sync, plan = self._find(fmt, body, conv, sid, tenant, explicit)
        turn = sync.turn or {}
        if plan.kind == "replay":
            said = next((m for m in reversed(session.state.messages) if m.role == "assistant"), None)
            reply = unpack_json(turn["reply"]) if turn.get("reply") else \
                reply_from_message(fmt, said, body["model"]) if said is not None else None
            if reply is not None:
                return Prepared(session, None, None, sync, {}, replay=reply)  # type: ignore[arg-type]
            plan = Plan("append", (), plan.known)
        if plan.kind == "append":
            self._ingest(session, sync, conv, plan)
        if session.state.open_calls:
            raise ConversationError(
                f"the conversation ends with tool call(s) {sorted(session.state.open_calls)} that have no result: "
                "send their results (tool messages, tool_result blocks or function_call_output items) with it")
        call = session.begin_call(fmt)  # the same pipeline Session.call runs, with the call's breaker
        last = session.last_pack
        if plan.kind == "resend" and last is not None and last.id == turn.get("pack"):
            pack = last  # the turn's own pack (another process, or a restart, builds it again: same log, same pack)
        else:
            pack = self._build(session, call)
        window = unpack_json(turn["request"]) if plan.kind == "resend" else pack.request
        p = Prepared(session, pack, call, sync, merge_request(fmt, body, window), client=body)
        self._save_turn(p, window)
        return p

    def _ingest(self, session: Session, sync: Sync, conv: Any, plan: Plan) -> None:
        """Append the request's new messages (and its system prompt and tools), the sync state after each."""
        sid = session.id
        store = session.store
        digests = [message_digest(m) for m in conv.messages]
        known = plan.known
        tel = self.state.telemetry
        tel.instrument(session)
        with tel.span("windowsmith.ingest", {"windowsmith.session.id": sid, "windowsmith.messages.new": len(plan.new)}):
            if conv.system:
                session.system(conv.system)
            if conv.tools or session.state.tools:
                session.tools(conv.tools)
            if known != len(sync.digests):  # the echoed assistant message was skipped
                sync.digests = digests[:known]
                sync.pending = None
                sync.seq = session.state.seq
                store.set_kv(SYNC_SCOPE, sid, sync.to_dict())
            for i, m in enumerate(plan.new):
                if m.role == "tool":
                    with tel.span("windowsmith.offload", {"windowsmith.tool_results": len(m.tool_results)}) as span:
                        stored = session.add(m)
                        span.set_attribute("windowsmith.offloaded", sum(
                            1 for r in stored.tool_results for b in r.content
                            if "is stored as artifact://" in getattr(b, "text", "")))
                else:
                    session.add(m)
                sync.digests = digests[: known + i + 1]
                sync.pending = None
                sync.seq = session.state.seq
                store.set_kv(SYNC_SCOPE, sid, sync.to_dict())

    def _save_turn(self, p: Prepared, window: Mapping[str, Any]) -> None:
        """Keep the window this turn forwards, so that a retry sends the same bytes."""
        s = p.session
        p.sync.turn = {"at": len(p.sync.digests), "seq": s.state.seq, "pack": p.pack.id, "request": pack_json(window)}
        p.sync.seq = s.state.seq
        s.store.set_kv(SYNC_SCOPE, s.id, p.sync.to_dict())

    def _build(self, session: Session, call: ModelCall) -> Pack:
        return call.build()  # traced by the build itself (windowsmith.telemetry), in the call's trace

    def _compact_and_rebuild(self, p: Prepared, fmt: str, exc: UpstreamError) -> None:
        with self.state.telemetry.span("windowsmith.compaction.reactive", {"windowsmith.session.id": p.session.id,
                                                                          "http.response.status_code": exc.status}):
            p.call.compact_harder(f"the provider rejected {p.pack.tokens:,} tokens as too long (HTTP {exc.status})")
        p.pack = self._build(p.session, p.call)
        body = {k: v for k, v in p.request.items()}
        p.request = merge_request(fmt, body, p.pack.request)
        self._save_turn(p, p.pack.request)

    async def _retry_smaller(self, p: Prepared, fmt: str, exc: UpstreamError) -> None:
        """Compact after an upstream overflow; raise ``exc`` (passed to the client) when nothing got smaller, rather
        than send the same request again."""
        before = p.request
        await to_thread.run_sync(self._compact_and_rebuild, p, fmt, exc)
        if p.request == before:
            log.info("overflow not retried: session=%s pack=%s: compaction could not shrink the request",
                     p.session.id, p.pack.id)
            raise exc

    def _record(self, p: Prepared, response: dict[str, Any], delivered: bool = True) -> None:
        """Record the reply (tool-call ids the session holds already renamed as :func:`unique_call_ids` renames
        the client's) and its usage, then the sync state that says the turn is answered. ``delivered=False``:
        the client left first: only the billed usage is recorded, and the turn stays open for its retry."""
        s = p.session
        parsed = get_renderer(p.pack.format).parse_response(to_snake(response) if p.pack.format == GEMINI else response)
        p.log.pack = p.pack.id
        p.log.usage(parsed.usage)
        msg = None
        if parsed.message.content and delivered:
            msg = echo_ids(p.client, response, parsed.message) if p.pack.format == GEMINI else \
                unique_call_ids(parsed.message, set(s.state.call_names), {})
        recorded = s.record(message=msg, usage=parsed.usage, pack=p.pack)
        if recorded is not None:
            p.sync.pending = message_digest(recorded)
            p.sync.seq = s.state.seq
            if p.sync.turn is not None:
                p.sync.turn["reply"] = pack_json(response)
            s.store.set_kv(SYNC_SCOPE, s.id, p.sync.to_dict())

    def _unrecorded(self, p: Prepared, reason: str) -> None:
        self.unrecorded += 1
        log.warning("did not record a reply: session=%s turn=%d pack=%s reason=%s (unrecorded so far: %d)",
                    p.session.id, len(p.sync.digests), p.pack.id, reason, self.unrecorded)

    async def _try_record(self, p: Prepared, response: Any, request: Request | None) -> None:
        """Record ``response`` unless the client has gone (then it never got it: only its usage is recorded, the
        turn stays open, and the client's retry forwards the same request again). ``request``: the client's, to
        ask whether it is still there (None in a stream, whose relay is cancelled when the client leaves)."""
        if not isinstance(response, dict):
            self._unrecorded(p, "the upstream body is not a JSON object")
            return
        delivered = request is None or not await request.is_disconnected()
        try:
            await to_thread.run_sync(self._record, p, response, delivered)
            if not delivered:
                self._unrecorded(p, "the client left before the reply arrived (usage recorded); its retry resends "
                                    "the turn")
        except (UsageError, RuntimeFailure) as e:
            self._unrecorded(p, f"{type(e).__name__}: {e}")

    # ------------------------------------------------------------------ the endpoint

    async def handle(self, request: Request, fmt: str) -> Response:
        """One proxied call, and its access line (written here, or by the relay when a stream ends)."""
        call_log = CallLog(request.url.path)
        try:
            response = await self._handle(request, fmt, call_log)
        except BaseException:
            call_log.status = 500
            call_log.emit()
            raise
        call_log.status = response.status_code
        if response.headers.get(REPLAY_HEADER):
            call_log.outcome = "replayed"
        if not call_log.streaming:
            call_log.emit()
        return response

    async def _handle(self, request: Request, fmt: str, call_log: CallLog) -> Response:
        tenant = self.tenant(request)
        if isinstance(tenant, Response):
            return tenant
        try:
            body = await read_json(request)
        except RequestRejected as e:
            return error_body(fmt, e.status, str(e))
        if not isinstance(body, dict):
            return error_body(fmt, 400, "the request body must be a JSON object")
        body.update(request.scope.get(BODY_FROM_PATH) or {})  # (Gemini names the model and streaming in its path)
        headers = {k.lower(): v for k, v in request.headers.items()}
        upstream = self.state.upstream(fmt)
        try:
            conv, sid = await to_thread.run_sync(self._identify, fmt, body, headers, tenant)
        except UsageError as e:
            return error_body(fmt, 400, client_message(e))
        call_log.session = sid
        lock = self.state.session_lock(tenant, sid)
        await lock.acquire()
        handed_over = False
        p: Prepared | None = None
        try:
            try:
                p = await to_thread.run_sync(self._prepare, fmt, body, conv, sid, tenant, SESSION_HEADER in headers)
            except ConversationDivergedError as e:
                return error_body(fmt, 409, str(e))
            except ConflictError as e:
                return error_body(fmt, 409, client_message(e))
            except (UsageError, BudgetExceededError) as e:
                return error_body(fmt, 400, client_message(e))
            except RuntimeFailure as e:
                log.error("session work failed: %s: %s", type(e).__name__, e)
                return error_body(fmt, 500, client_message(e), "api_error")
            p.log = call_log
            if p.replay is not None:
                return replay_response(fmt, p.replay, bool(body.get("stream")),
                                       bool((body.get("stream_options") or {}).get("include_usage")))
            if body.get("stream"):
                response = await self._stream(p, fmt, upstream, headers, lock)
                handed_over = True  # the relay releases the lock when the stream ends
                return response
            return await self._once(p, fmt, upstream, headers, request)
        except UpstreamError as e:
            return Response(e.body, status_code=e.status, headers=e.headers)
        except get_cancelled_exc_class():  # the client left (server/limits.py cancels its request)
            if p is not None and not handed_over:
                self._unrecorded(p, "the client left before the reply arrived: its upstream call was cancelled and "
                                    "the session freed; its retry resends the turn")
            raise
        finally:
            if not handed_over:
                lock.release()

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the OpenAI upstream's answer, passed through."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            reply = await self.state.upstream(OPENAI).list_models(headers)
        except UpstreamError as e:
            return Response(e.body, status_code=e.status, headers=e.headers)
        return Response(reply.body, status_code=reply.status, headers=reply.headers)

    async def _send(self, p: Prepared, fmt: str, upstream: Any, headers: Mapping[str, str]) -> Any:
        with self.state.telemetry.upstream_span(fmt, p.request, p.pack) as span:
            t0 = time.perf_counter()
            try:
                reply = await upstream.send(p.request, headers)
            except UpstreamError as e:
                p.log.upstream_s += time.perf_counter() - t0
                span.set_attribute("error.type", str(e.status))
                span.set_attribute("http.response.status_code", e.status)
                raise
            p.log.upstream_s += time.perf_counter() - t0
            Telemetry.reply_attributes(span, fmt, reply.body)
        return reply

    async def _once(self, p: Prepared, fmt: str, upstream: Any, headers: Mapping[str, str],
                    request: Request) -> Response:
        try:
            reply = await self._send(p, fmt, upstream, headers)
        except UpstreamError as exc:
            if not is_context_overflow(exc.original):
                raise
            await self._retry_smaller(p, fmt, exc)
            reply = await self._send(p, fmt, upstream, headers)
        try:
            data = json.loads(reply.body)
        except ValueError:
            data = None
        await self._try_record(p, data, request)
        return Response(reply.body, status_code=reply.status, headers=reply.headers)

    async def _stream(self, p: Prepared, fmt: str, upstream: Any, headers: Mapping[str, str],
                      lock: SessionLock) -> Response:
        drop_usage = False
        if fmt == OPENAI:
            opts = dict(p.request.get("stream_options") or {})
            if "include_usage" not in opts:  # ask for usage to record it; its chunk is not passed on
                opts["include_usage"] = True
                drop_usage = True
                p.request["stream_options"] = opts
        span = self.state.telemetry.start_upstream_span(fmt, p.request, p.pack)
        t0 = time.perf_counter()
        try:
            try:
                reply, chunks = await upstream.open_stream(p.request, headers)
            except UpstreamError as exc:
                if not is_context_overflow(exc.original):
                    raise
                span.add_event("windowsmith.overflow", {"http.response.status_code": exc.status})
                p.log.upstream_s += time.perf_counter() - t0
                await self._retry_smaller(p, fmt, exc)
                t0 = time.perf_counter()
                reply, chunks = await upstream.open_stream(p.request, headers)
            p.log.upstream_s += time.perf_counter() - t0
            p.log.opened()
        except UpstreamError as exc:
            span.set_attribute("error.type", str(exc.status))
            span.set_attribute("http.response.status_code", exc.status)
            span.end()
            raise
        acc = GeminiStream() if fmt == GEMINI else stream_accumulator(fmt, drop_usage)

        async def record() -> None:
            await self._try_record(p, acc.response(), None)

        async def relay() -> AsyncIterator[bytes]:
            # The response is recorded before its last event goes out, so a client that saw the stream
            # end finds it in the session (and its next request waits on the lock anyway).
            recorded = False
            try:
                async for chunk in chunks:
                    events = acc.feed(chunk)
                    if acc.done and not recorded and events:
                        for event in events[:-1]:
                            yield event
                        recorded = True
                        await record()
                        yield events[-1]
                    else:
                        for event in events:
                            yield event
                    if acc.failed:
                        await chunks.aclose()  # (closes the upstream response)
                        break
                for event in acc.end():  # (an error event if the stream broke off)
                    yield event
                if acc.done and not recorded:
                    recorded = True
                    await record()
                elif not recorded:
                    self._unrecorded(p, "the upstream stream ended before its last event")
                Telemetry.reply_attributes(span, fmt, acc.response())
            except BaseException:
                if not recorded:
                    self._unrecorded(p, "the client left during the stream; its retry resends the turn")
                raise
            finally:
                span.end()
                lock.release()
                p.log.emit()

        return StreamingResponse(relay(), status_code=reply.status, headers=reply.headers)


__all__ = ["ANTHROPIC", "OPENAI", "RESPONSES", "Proxy"]
