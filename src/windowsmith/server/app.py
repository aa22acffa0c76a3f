"""The ASGI application: proxy endpoints, JSON API and dashboard over one store.

``create_app(ServerConfig(...))`` returns a Starlette app; ``windowsmith serve`` runs it on uvicorn (``--workers N``:
N processes over one store, each built by :func:`app_from_env` from the configuration the command puts in
:data:`SERVE_ENV`, sharing a lock directory so a session's turns never interleave: ``server/locks.py``).
Security: the CLI binds 127.0.0.1 unless told otherwise; with ``tokens`` set, every route needs one
(``Authorization: Bearer`` or ``?token=`` for the API and dashboard, ``X-Windowsmith-Token`` on the
proxy endpoints, whose ``Authorization`` header carries the upstream key), and each token names the
tenant whose sessions it sees. Upstream credentials are passed to the SDK per request and never
stored or logged; session ids are validated before they reach the store. Without tokens every route is open to
whoever reaches the port, which is meant for loopback (``serve`` warns when it binds beyond it). What a request may
be (body size, read time, JSON depth) and how every refusal is shaped: ``server/limits.py``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator

from anyio import to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..errors import UsageError
from ..store import Store
from .api import Api
from .blobs import check_reachable, open_artifacts
from .conversation import ANTHROPIC, GEMINI, OPENAI, RESPONSES
from .dashboard import render_page
from .limits import Guard, http_error
from .proxy import BODY_FROM_PATH, Proxy
from .state import ServerConfig, ServerState

log = logging.getLogger("windowsmith.server")


def create_app(config: ServerConfig | None = None) -> Starlette:
    """The server as an ASGI app (run it with uvicorn, or ``windowsmith serve``)."""
    state = ServerState(config or ServerConfig())
    proxy = Proxy(state)
    api = Api(state)

    async def chat_completions(request: Request) -> Response:
        return await proxy.handle(request, OPENAI)

    async def messages(request: Request) -> Response:
        return await proxy.handle(request, ANTHROPIC)

    async def responses(request: Request) -> Response:
        return await proxy.handle(request, RESPONSES)

    async def dashboard(request: Request) -> Response:
        tenant = state.tenant_for_api(request)
        if isinstance(tenant, Response):
            return HTMLResponse("<h1>401</h1><p>Open the dashboard with ?token=&lt;your API token&gt;.</p>", status_code=401)
        sessions = await to_thread.run_sync(api.sessions_list, tenant)
        return HTMLResponse(render_page(sessions, request.query_params.get("session"), state.config.poll_seconds,
                                        request.query_params.get("token")))

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/", dashboard, methods=["GET"]),
        *gateway_routes(state, proxy),
        *api.routes(),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await state.close()

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error},
                    middleware=[Middleware(Guard, max_body=state.config.max_body, body_timeout=state.config.body_timeout)])
    app.state.windowsmith = state
    return app


def gateway_routes(state: ServerState, proxy: Proxy) -> list[Route]:
    """``GET /healthz`` (the process answers), ``GET /readyz`` (the store answers a query: 503 otherwise) and
    ``GET /v1/models`` (the OpenAI upstream's list, passed through with the caller's key)."""

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        checks: dict[str, str] = {}

        def artifacts() -> None:
            if state.config.artifacts is not None:
                check_reachable(open_artifacts(state.config.artifacts, None))

        for name, probe in (("store", lambda: state.store.get_kv("health", "ready")), ("artifacts", artifacts)):
            try:
                await to_thread.run_sync(probe)
                checks[name] = "ok"
            except Exception as e:  # any failure to answer is "not ready", said without its details
                log.warning("readiness check failed: the %s did not answer (%s)", name, type(e).__name__)
                checks[name] = "unreachable"
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"status": "ready" if ready else "unavailable", **checks}, status_code=200 if ready else 503)

    async def models(request: Request) -> Response:
        tenant = proxy.tenant(request)
        if isinstance(tenant, Response):
            return tenant
        return await proxy.models(request)

    async def gemini(request: Request) -> Response:
        model, _, method = request.path_params["target"].rpartition(":")
        if method not in ("generateContent", "streamGenerateContent") or not model:
            return JSONResponse({"error": {"code": 404, "message": f"unknown Gemini method {method!r}: windowsmith "
                                 "serves generateContent and streamGenerateContent", "status": "NOT_FOUND"}},
                                status_code=404)
        request.scope[BODY_FROM_PATH] = {"model": model, "stream": method == "streamGenerateContent"}
        return await proxy.handle(request, GEMINI)

    return [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1beta/models/{target:path}", gemini, methods=["POST"])]


#: the environment variable through which ``windowsmith serve --workers N`` hands its configuration to each worker
SERVE_ENV = "WINDOWSMITH_SERVE_CONFIG"


#: the fields a worker's configuration carries (the rest, a tracer and the dashboard's poll, keep their defaults)
_ENV_FIELDS = ("store", "openai_base_url", "anthropic_base_url", "gemini_base_url", "artifacts", "model_window", "tokens",
               "lock_dir", "registry", "default_window", "max_body", "body_timeout", "upstream_timeout")


def config_to_env(config: ServerConfig) -> str:
    """``config`` as the JSON :func:`app_from_env` reads (a store given by path or URL, not an open :class:`Store`)."""
    if isinstance(config.store, Store):
        raise UsageError("worker processes open the store themselves: give it as a SQLite path or a postgresql:// URL")
    d = {f: getattr(config, f) for f in _ENV_FIELDS}
    return json.dumps({**d, "tokens": dict(config.tokens)}, default=str)  # (paths as text)


def app_from_env() -> Starlette:
    """The app of one worker process of ``windowsmith serve --workers N`` (a uvicorn factory): its configuration
    is the JSON in :data:`SERVE_ENV`."""
    raw = os.environ.get(SERVE_ENV)
    if not raw:
        raise UsageError(f"{SERVE_ENV} is not set: run `windowsmith serve --workers N`, which sets it for its workers")
    from .logs import configure

    configure(os.environ.get("WINDOWSMITH_LOG_LEVEL", "info"), os.environ.get("WINDOWSMITH_LOG_FORMAT", "text"))
    return create_app(ServerConfig(**json.loads(raw)))


__all__ = ["SERVE_ENV", "app_from_env", "config_to_env", "create_app"]
