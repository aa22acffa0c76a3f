"""The JSON API the dashboard reads (and operators script against).

``GET /api/sessions``, ``/api/sessions/{id}``, ``/api/sessions/{id}/packs``, ``/api/packs/{id}``,
``/api/diff?a=&b=``, ``POST /api/sessions/{id}/compact``. Every route is scoped to the caller's
tenant: an id of another tenant's session or pack is answered as not found.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from anyio import to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..artifacts import EmbeddedArtifacts
from ..errors import UnknownModelError, UsageError
from ..log import SessionLog
from ..manifest import Manifest, diff
from ..registry import load_registry
from ..store.base import check_session_id
from .insights import calibrated_layers, headline, redacted_artifact, request_view, whatif

if TYPE_CHECKING:
    from .state import ServerState


class NotFound(Exception):
    pass


def _layer_tokens(m: Manifest) -> dict[str, int]:
    return {name: int(v.get("used", 0)) for name, v in m.layers.items() if int(v.get("used", 0))}


def _compaction(c: dict[str, Any]) -> dict[str, Any]:
    """A compaction record as the dashboard lists it: what kind, what span, why (no folded text)."""
    out: dict[str, Any] = {k: c[k] for k in ("seq", "type", "reason", "stage", "first_seq", "last_seq", "keep_from_seq",
                             "dropped_units", "dropped_tokens", "summarizer") if k in c}
    if isinstance(c.get("folds"), list):
        out["folds"] = len(c["folds"])
    if isinstance(c.get("images"), list):
        out["images"] = len(c["images"])
    return out


class Api:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.registry = load_registry(None)

    # ------------------------------------------------------------------ reads (run in a thread)

    def _store(self, tenant: str | None) -> Any:
        return self.state.store_for(tenant)

    def _record(self, tenant: str | None, session_id: str) -> Any:
        try:
            check_session_id(session_id)
        except UsageError:
            raise NotFound(f"no session {session_id[:80]!r}") from None
        rec = self._store(tenant).get_session(session_id)
        if rec is None:
            raise NotFound(f"no session {session_id!r}")
        return rec

    def sessions_list(self, tenant: str | None) -> list[dict[str, Any]]:
        store = self._store(tenant)
        out = []
        for r in store.list_sessions():
            out.append({"id": r.id, "created_at": r.created_at.isoformat(), "events": r.event_count, "head": r.head})
        return out

    def _state(self, tenant: str | None, session_id: str) -> Any:
        cached = self.state.cached_session(tenant, session_id)
        if cached is not None:
            cached.refresh()
            return cached.state
        store = self._store(tenant)
        return SessionLog(store, EmbeddedArtifacts(store), session_id).state

    def _cost(self, model: str, u: Any) -> float | None:
        try:
            return self.registry.get(model).cost(u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)
        except UnknownModelError:
            return None

    def session_detail(self, tenant: str | None, session_id: str) -> dict[str, Any]:
        rec = self._record(tenant, session_id)
        st = self._state(tenant, session_id)
        manifests = [Manifest.from_dict(m) for m in self._store(tenant).list_packs(session_id)]
        by_id = {m.pack_id: m for m in manifests}
        calls = []
        for seq, u, pack_id in st.usages:
            m = by_id.get(pack_id) if pack_id else None
            calls.append({
                "seq": seq, "pack_id": pack_id, "model": m.model if m else None,
                "cache_read": u.cache_read_tokens, "cache_write": u.cache_write_tokens,
                "uncached": u.input_tokens, "output": u.output_tokens,
                "cost": self._cost(m.model, u) if m else None,
            })
        turns = [{"pack_id": m.pack_id, "seq": m.seq, "tokens": m.tokens, "available": m.available,
                  "status": m.status, "layers": _layer_tokens(m), "actions": len(m.actions)} for m in manifests]
        compactions = [_compaction(c) for c in st.compactions]
        return {
            "id": rec.id, "created_at": rec.created_at.isoformat(), "events": rec.event_count, "head": rec.head,
            "messages": len(st.messages), "turns": turns, "calls": calls, "compactions": compactions,
            "cost": sum(c["cost"] or 0.0 for c in calls),
        }

    def packs(self, tenant: str | None, session_id: str) -> list[dict[str, Any]]:
        self._record(tenant, session_id)
        return list(self._store(tenant).list_packs(session_id))

    def pack(self, tenant: str | None, pack_id: str) -> dict[str, Any]:
        try:
            m = self._store(tenant).get_pack(pack_id)
        except UsageError as e:
            raise NotFound(str(e)) from None
        if m is None:
            raise NotFound(f"no pack {pack_id[:80]!r}")
        return m

    def diff(self, tenant: str | None, a: str, b: str) -> dict[str, Any]:
        return diff(Manifest.from_dict(self.pack(tenant, a)), Manifest.from_dict(self.pack(tenant, b)))

    def compact(self, tenant: str | None, session_id: str) -> dict[str, Any]:
        self._record(tenant, session_id)
        packs = self._store(tenant).list_packs(session_id)
        if not packs:
            raise UsageError(f"session {session_id!r} has no pack yet, so no model to compact for; "
                             "send a request through the proxy first")
        last = Manifest.from_dict(packs[-1])
        s = self.state.session(tenant, last.model, session_id)
        s.refresh()
        r = s.compact(last.format, reason="compaction requested through the API")
        return {"session": session_id, "description": r.describe(), "stages": r.stages,
                "tokens_before": r.tokens_before, "tokens_after": r.tokens_after,
                "actions": [{"kind": a.kind, "reason": a.reason} for a in r.actions]}

    # ------------------------------------------------------------------ routes

    def _route(self, fn: Callable[..., Any], *params: str, query: tuple[str, ...] = ()) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            tenant = self.state.tenant_for_api(request)
            if isinstance(tenant, Response):
                return tenant
            args = [request.path_params[p] for p in params]
            for q in query:
                v = request.query_params.get(q)
                if not v:
                    return JSONResponse({"error": f"missing query parameter {q!r}"}, status_code=400)
                args.append(v)
            try:
                result = await to_thread.run_sync(fn, tenant, *args)
            except NotFound as e:
                return JSONResponse({"error": str(e)}, status_code=404)
            except UsageError as e:
                return JSONResponse({"error": str(e)}, status_code=400)
            return JSONResponse(result)

        return endpoint

    def routes(self) -> list[Route]:
        return [
            *dashboard_routes(self),
            Route("/api/sessions", self._route(self.sessions_list), methods=["GET"]),
            Route("/api/sessions/{sid:path}/packs", self._route(self.packs, "sid"), methods=["GET"]),
            Route("/api/sessions/{sid:path}/compact", self._route(self.compact, "sid"), methods=["POST"]),
            Route("/api/sessions/{sid:path}", self._route(self.session_detail, "sid"), methods=["GET"]),
            Route("/api/packs/{pid}", self._route(self.pack, "pid"), methods=["GET"]),
            Route("/api/diff", self._route(self.diff, query=("a", "b")), methods=["GET"]),
        ]


# ---------------------------------------------------------------------------------------------------- dashboard reads


class DashboardReads:
    """The dashboard's own reads over :class:`Api` (every one tenant-scoped through it): the session index with cost,
    calls and last activity, a session's headline figures, the request it last sent, a redacted artifact it
    references, and the what-if replay of its log (cached per session head: the log is append-only)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._whatif: dict[tuple[str | None, str], tuple[str | None, dict[str, Any]]] = {}
        self._headline: dict[tuple[str | None, str], tuple[str | None, dict[str, Any]]] = {}
        self._seen: dict[tuple[str | None, str], tuple[str | None, str]] = {}
        self._rows: dict[tuple[str | None, str], tuple[str | None, dict[str, Any]]] = {}

    def _manifests(self, tenant: str | None, session_id: str) -> list[Manifest]:
        return [Manifest.from_dict(m) for m in self.api._store(tenant).list_packs(session_id)]

    def _last_activity(self, tenant: str | None, rec: Any) -> str:
        """When this server saw the session's head move last (its creation time until it sees a move)."""
        key = (tenant, rec.id)
        seen = self._seen.get(key)
        if seen is None:
            seen = (rec.head, rec.created_at.isoformat())
        elif seen[0] != rec.head:
            seen = (rec.head, datetime.now(UTC).isoformat())
        self._seen[key] = seen
        return seen[1]

    def index(self, tenant: str | None) -> list[dict[str, Any]]:
        out = []
        for r in self.api._store(tenant).list_sessions():
            cached = self._rows.get((tenant, r.id))
            if cached is None or cached[0] != r.head:  # a session's figures change only when its log moves
                d = self.api.session_detail(tenant, r.id)
                model = next((c["model"] for c in reversed(d["calls"]) if c["model"]), None)
                cached = (r.head, {"calls": len(d["calls"]), "cost": d["cost"] if model else None, "model": model})
                _remember(self._rows, (tenant, r.id), cached)
            out.append({"id": r.id, "created_at": r.created_at.isoformat(), "events": r.event_count, "head": r.head,
                        **cached[1], "last_activity": self._last_activity(tenant, r)})
        return out

    def overview(self, tenant: str | None, session_id: str) -> dict[str, Any]:
        detail = self.api.session_detail(tenant, session_id)
        key = (tenant, session_id)
        cached = self._headline.get(key)
        manifests = self._manifests(tenant, session_id)
        if cached is None or cached[0] != detail["head"]:
            st = self.api._state(tenant, session_id)
            cached = (detail["head"], headline(st, manifests, detail["calls"], self.api.registry))
            _remember(self._headline, key, cached)
        layers = [{"pack_id": m.pack_id, "layers": calibrated_layers(m)} for m in manifests]
        return {**cached[1], "id": session_id, "head": detail["head"], "turn_layers": layers}

    def request(self, tenant: str | None, session_id: str) -> dict[str, Any]:
        self.api._record(tenant, session_id)
        cached = self.api.state.cached_session(tenant, session_id)
        pack = cached.last_pack if cached is not None else None
        return request_view(pack, pack.manifest if pack is not None else None)

    def artifact(self, tenant: str | None, session_id: str, sha: str) -> str:
        self.api._record(tenant, session_id)
        store = self.api._store(tenant)
        sha = sha.removeprefix("artifact://")
        ref = "artifact://" + sha
        named = any(ref in (m.get("artifacts") or ()) for m in store.list_packs(session_id))
        data = EmbeddedArtifacts(store).scoped(session_id).get(sha) if named else None
        if data is None:
            raise NotFound(f"no artifact {sha[:80]!r} in session {session_id!r}")
        return redacted_artifact(data)

    def whatif(self, tenant: str | None, session_id: str) -> dict[str, Any]:
        rec = self.api._record(tenant, session_id)
        key = (tenant, session_id)
        cached = self._whatif.get(key)
        if cached is None or cached[0] != rec.head:
            st = self.api._state(tenant, session_id)
            result = whatif(session_id, st, self._manifests(tenant, session_id), self.api.registry)
            cached = (rec.head, {**result, "head": rec.head})
            _remember(self._whatif, key, cached)
        return cached[1]


#: sessions whose computed figures each cache of :class:`DashboardReads` keeps (the oldest entry goes first)
CACHED_SESSIONS = 256


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > CACHED_SESSIONS:
        del cache[next(iter(cache))]


def dashboard_routes(api: Api) -> list[Route]:
    """``GET /api/index`` (sessions with cost, calls, last activity), ``/api/sessions/{id}/overview`` (headline
    figures, header, calibrated layers), ``/api/sessions/{id}/request`` (the last request sent),
    ``/api/sessions/{id}/whatif`` (the log replayed under the bench's strategies) and
    ``/api/sessions/{id}/artifacts/{sha}`` (a referenced artifact, redacted, as text)."""
    reads = DashboardReads(api)

    async def artifact(request: Request) -> Response:
        tenant = api.state.tenant_for_api(request)
        if isinstance(tenant, Response):
            return tenant
        sid, sha = request.path_params["sid"], request.path_params["sha"]
        try:
            text = await to_thread.run_sync(reads.artifact, tenant, sid, sha)
        except NotFound as e:
            return JSONResponse({"error": str(e)}, status_code=404)
        except UsageError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        return PlainTextResponse(text, headers={"X-Content-Type-Options": "nosniff"})

    return [
        Route("/api/index", api._route(reads.index), methods=["GET"]),
        Route("/api/sessions/{sid:path}/overview", api._route(reads.overview, "sid"), methods=["GET"]),
        Route("/api/sessions/{sid:path}/request", api._route(reads.request, "sid"), methods=["GET"]),
        Route("/api/sessions/{sid:path}/whatif", api._route(reads.whatif, "sid"), methods=["GET"]),
        Route("/api/sessions/{sid:path}/artifacts/{sha}", artifact, methods=["GET"]),
    ]
