"""The ASGI application: proxy endpoints, JSON API and dashboard over one store.

``create_app(ServerConfig(...))`` returns a Starlette app; ``windowsmith serve`` runs it on uvicorn (``--workers N``:
N processes over one store, each built by :func:`app_from_env` from the configuration the command puts in
:data:`SERVE_ENV`, sharing a lock directory so a session's turns never interleave: ``server/locks.py``).
Security: the CLI binds 127.0.0.1 unless told otherwise; with ``tokens`` set, every route needs one
(``Authorization: Bearer`` or ``?token=`` for the API and dashboard, ``X-Windowsmith-Token`` on the
proxy endpoints, whose ``Authorization`` header carries the upstream key), and each token names the
tenant whose sessions it sees. Upstream credentials are passed to the SDK per request and never
stored or logged; session ids are validated before they reach the store.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anyio import to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..engine import Engine, Session
from ..errors import UsageError
from ..store import Store, open_store
from .api import Api
from .conversation import ANTHROPIC, OPENAI
from .dashboard import render_page
from .locks import SessionLock, lock_path
from .proxy import Proxy, error_body
from .telemetry import Telemetry
from .upstream import Upstream

log = logging.getLogger("windowsmith.server")

#: How many open sessions the server keeps folded in memory (least recently used are dropped).
SESSION_CACHE = 1024


@dataclass
class ServerConfig:
    """What ``windowsmith serve`` runs with.

    ``store``: a :class:`Store`, a SQLite path or a ``postgresql://`` URL (None: the default store).
    ``openai_base_url`` / ``anthropic_base_url``: where requests go upstream (None: the SDK default).
    ``model_window``: build windows of this many tokens instead of each model's full window.
    ``tokens``: API token → tenant (None for the default tenant); empty: no authentication.
    ``lock_dir``: a directory every worker process of one server shares, where a session's turn takes a file lock
    (``server/locks.py``); None: one process, whose own locks suffice.
    """

    store: Store | str | Path | None = None
    openai_base_url: str | None = None
    anthropic_base_url: str | None = None
    model_window: int | None = None
    tokens: Mapping[str, str | None] = field(default_factory=dict)
    poll_seconds: float = 2.0
    tracer_provider: Any = None  # an OpenTelemetry TracerProvider (None: the global one)
    lock_dir: str | Path | None = None

    def __post_init__(self) -> None:
        if self.model_window is not None and (not isinstance(self.model_window, int) or self.model_window <= 0):
            raise UsageError(f"model_window must be a positive number of tokens, got {self.model_window!r}")
        for t in self.tokens:
            if not isinstance(t, str) or len(t) < 16:
                raise UsageError("each API token must be a string of at least 16 characters (e.g. from `openssl rand -hex 24`)")


class ServerState:
    """Engines, sessions, locks and upstream clients shared by the routes."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._owns_store = not isinstance(config.store, Store)
        self.store: Store = config.store if isinstance(config.store, Store) else open_store(
            None if config.store is None else str(config.store))
        self._engines: dict[tuple[str | None, str], Engine] = {}
        self._sessions: OrderedDict[tuple[str | None, str, str], Session] = OrderedDict()
        self._guard = threading.Lock()
        self._locks: dict[tuple[str | None, str], SessionLock] = {}
        self.lock_dir = None if config.lock_dir is None else Path(config.lock_dir)
        if self.lock_dir is not None and not self.lock_dir.is_dir():
            raise UsageError(f"lock_dir {str(self.lock_dir)!r} is not a directory: create it, or leave lock_dir unset "
                             "for a server of one process")
        self._upstreams: dict[str, Upstream] = {}
        self._views: dict[str, Store] = {}
        self.telemetry = Telemetry(config.tracer_provider)

    # -- tenants and auth -------------------------------------------------------------------------

    def _token_tenant(self, token: str | None) -> tuple[bool, str | None]:
        if not self.config.tokens:
            return True, None
        if not token:
            return False, None
        for t, tenant in self.config.tokens.items():
            if hmac.compare_digest(t.encode(), token.encode()):
                return True, tenant
        return False, None

    def tenant_for_api(self, request: Request) -> str | Response | None:
        auth = request.headers.get("authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else request.query_params.get("token")
        ok, tenant = self._token_tenant(token)
        if not ok:
            return JSONResponse({"error": "missing or unknown API token: send 'Authorization: Bearer <token>' "
                                          "(or ?token= in the dashboard URL)"}, status_code=401)
        return tenant

    def tenant_for_proxy(self, request: Request) -> str | Response | None:
        ok, tenant = self._token_tenant(request.headers.get("x-windowsmith-token"))
        if not ok:
            fmt = ANTHROPIC if request.url.path.endswith("/messages") else OPENAI
            return error_body(fmt, 401, "missing or unknown windowsmith token: send it in the X-Windowsmith-Token "
                                        "header (the Authorization header carries your provider key)",
                              "authentication_error")
        return tenant

    # -- engines and sessions ---------------------------------------------------------------------

    def engine(self, tenant: str | None, model: str) -> Engine:
        key = (tenant, model)
        with self._guard:
            eng = self._engines.get(key)
            if eng is None:
                eng = Engine(model, store=self.store_for(tenant), window=self.config.model_window)
                self._engines[key] = eng
            return eng

    def store_for(self, tenant: str | None) -> Store:
        """The store as ``tenant`` sees it (one view per tenant, opened once)."""
        if tenant is None:
            return self.store
        with self._guard:
            view = self._views.get(tenant)
            if view is None:
                view = self._views[tenant] = self.store.for_tenant(tenant)
            return view

    def session(self, tenant: str | None, model: str, session_id: str) -> Session:
        key = (tenant, session_id, model)
        with self._guard:
            s = self._sessions.get(key)
            if s is not None:
                self._sessions.move_to_end(key)
                return s
        s = self.engine(tenant, model).session(session_id)
        with self._guard:
            self._sessions[key] = s
            while len(self._sessions) > SESSION_CACHE:
                self._sessions.popitem(last=False)
        return s

    def cached_session(self, tenant: str | None, session_id: str) -> Session | None:
        with self._guard:
            for (t, sid, _), s in reversed(self._sessions.items()):
                if t == tenant and sid == session_id:
                    return s
        return None

    def session_lock(self, tenant: str | None, session_id: str) -> SessionLock:
        """The lock a turn of this session holds from ingest to record (across worker processes with ``lock_dir``)."""
        key = (tenant, session_id)
        lock = self._locks.get(key)
        if lock is None:
            path = None if self.lock_dir is None else lock_path(self.lock_dir, tenant, session_id)
            lock = self._locks[key] = SessionLock(path)
        return lock

    def upstream(self, fmt: str) -> Upstream:
        up = self._upstreams.get(fmt)
        if up is None:
            base = self.config.openai_base_url if fmt == OPENAI else self.config.anthropic_base_url
            up = self._upstreams[fmt] = Upstream(fmt, base)
        return up

    async def close(self) -> None:
        for up in self._upstreams.values():
            await up.close()
        for view in self._views.values():
            view.close()
        if self._owns_store:
            self.store.close()


def create_app(config: ServerConfig | None = None) -> Starlette:
    """The server as an ASGI app (run it with uvicorn, or ``windowsmith serve``)."""
    state = ServerState(config or ServerConfig())
    proxy = Proxy(state)
    api = Api(state)

    async def chat_completions(request: Request) -> Response:
        return await proxy.handle(request, OPENAI)

    async def messages(request: Request) -> Response:
        return await proxy.handle(request, ANTHROPIC)

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
        Route("/", dashboard, methods=["GET"]),
        *api.routes(),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await state.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.windowsmith = state
    return app


#: the environment variable through which ``windowsmith serve --workers N`` hands its configuration to each worker
SERVE_ENV = "WINDOWSMITH_SERVE_CONFIG"


#: the fields a worker's configuration carries (the rest, a tracer and the dashboard's poll, keep their defaults)
_ENV_FIELDS = ("store", "openai_base_url", "anthropic_base_url", "model_window", "tokens", "lock_dir")


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
    return create_app(ServerConfig(**json.loads(raw)))


__all__ = ["SERVE_ENV", "ServerConfig", "ServerState", "app_from_env", "config_to_env", "create_app"]
