"""What the server's routes share: :class:`ServerConfig` (what ``windowsmith serve`` runs with) and
:class:`ServerState` (engines per model, sessions cached, per-session locks, API tokens and their tenants, the
upstream clients). The proxy and the JSON API read it; ``server/app.py`` composes them into the ASGI app.
"""

from __future__ import annotations

import hmac
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..engine import Engine
from ..errors import UsageError
from ..session import Session
from ..store import Store, open_store
from .blobs import open_artifacts
from .conversation import ANTHROPIC, OPENAI
from .limits import BODY_TIMEOUT, MAX_BODY
from .locks import AdvisoryLock, SessionLock, advisory_key, lock_path
from .models import Models
from .telemetry import Telemetry
from .upstream import Upstream

#: How many open sessions the server keeps folded in memory (least recently used are dropped).
SESSION_CACHE = 1024


@dataclass
class ServerConfig:
    """What ``windowsmith serve`` runs with.

    ``store``: a :class:`Store`, a SQLite path or a ``postgresql://`` URL (None: the default store).
    ``openai_base_url`` / ``anthropic_base_url``: where requests go upstream (None: the SDK default).
    ``model_window``: build windows of this many tokens instead of each model's full window.
    ``tokens``: API token → tenant (None for the default tenant); empty: no authentication.
    ``max_body``: the largest request body in bytes (a larger one is a 413); ``body_timeout``: seconds a client has
    to send its body (then a 408); ``upstream_timeout``: seconds an upstream call may take (per read when streaming).
    ``lock_dir``: a directory every worker process of one server shares, where a session's turn takes a file lock
    (``server/locks.py``); None: one process, whose own locks suffice.
    ``registry`` / ``default_window``: see :mod:`windowsmith.server.models`.
    """

    store: Store | str | Path | None = None
    openai_base_url: str | None = None
    anthropic_base_url: str | None = None
    model_window: int | None = None
    tokens: Mapping[str, str | None] = field(default_factory=dict)
    poll_seconds: float = 2.0
    tracer_provider: Any = None  # an OpenTelemetry TracerProvider (None: the global one)
    lock_dir: str | Path | None = None
    gemini_base_url: str | None = None  # where Gemini requests go (None: Google's API)
    artifacts: str | None = None  # s3://bucket/prefix or file:///folder for offloaded results (None: in the store)
    registry: str | Path | None = None  # a JSON/TOML model file merged over the packaged registry
    default_window: int | None = None  # the window of a model no registry knows (None: such a model is refused)
    max_body: int = MAX_BODY
    body_timeout: float = BODY_TIMEOUT
    upstream_timeout: float = 600.0

    def __post_init__(self) -> None:
        for name in ("max_body", "body_timeout", "upstream_timeout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise UsageError(f"{name} must be a positive number, got {v!r}")
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
        self.telemetry = Telemetry(config.tracer_provider, {OPENAI: config.openai_base_url,
                                                            ANTHROPIC: config.anthropic_base_url})
        self.models = Models(config.registry, config.default_window)

    # -- tenants and auth -------------------------------------------------------------------------

    def token_tenant(self, token: str | None) -> tuple[bool, str | None]:
        """Whether ``token`` is accepted, and the tenant it names (every token is accepted when none is configured)."""
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
        ok, tenant = self.token_tenant(token)
        if not ok:
            return JSONResponse({"error": "missing or unknown API token: send 'Authorization: Bearer <token>' "
                                          "(or ?token= in the dashboard URL)"}, status_code=401)
        return tenant

    # -- engines and sessions ---------------------------------------------------------------------

    def engine(self, tenant: str | None, model: str) -> Engine:
        key = (tenant, model)
        store = self.store_for(tenant)  # (before taking the guard, which store_for takes itself)
        with self._guard:
            eng = self._engines.get(key)
            if eng is None:
                art = None if self.config.artifacts is None else open_artifacts(self.config.artifacts, tenant)
                eng = self.models.engine(model, store, self.config.model_window, art)
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
            dsn = getattr(self.store, "dsn", None)  # a PostgreSQL store: one lock for every host on its database
            if isinstance(dsn, str):
                lock = self._locks[key] = SessionLock(advisory=AdvisoryLock(dsn, advisory_key(tenant, session_id)))
            else:
                path = None if self.lock_dir is None else lock_path(self.lock_dir, tenant, session_id)
                lock = self._locks[key] = SessionLock(path)
        return lock

    def upstream(self, fmt: str) -> Upstream:
        up = self._upstreams.get(fmt)
        if up is None and fmt == "gemini":
            from .gemini import GeminiUpstream

            up = self._upstreams[fmt] = GeminiUpstream(self.config.gemini_base_url,  # type: ignore[assignment]
                                                       timeout=self.config.upstream_timeout)
        if up is None:
            base = self.config.anthropic_base_url if fmt == ANTHROPIC else self.config.openai_base_url
            up = self._upstreams[fmt] = Upstream(fmt, base, timeout=self.config.upstream_timeout)
        return up

    async def close(self) -> None:
        for up in self._upstreams.values():
            await up.close()
        for view in self._views.values():
            view.close()
        if self._owns_store:
            self.store.close()


__all__ = ["SESSION_CACHE", "ServerConfig", "ServerState"]
