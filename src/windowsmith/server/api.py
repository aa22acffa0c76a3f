"""The JSON API the dashboard reads (and operators script against).

``GET /api/sessions``, ``/api/sessions/{id}``, ``/api/sessions/{id}/packs``, ``/api/packs/{id}``,
``/api/diff?a=&b=``, ``POST /api/sessions/{id}/compact``. Every route is scoped to the caller's
tenant: an id of another tenant's session or pack is answered as not found.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from anyio import to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..artifacts import EmbeddedArtifacts
from ..errors import UnknownModelError, UsageError
from ..log import SessionLog
from ..manifest import Manifest, diff
from ..registry import load_registry
from ..store.base import check_session_id

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
            Route("/api/sessions", self._route(self.sessions_list), methods=["GET"]),
            Route("/api/sessions/{sid:path}/packs", self._route(self.packs, "sid"), methods=["GET"]),
            Route("/api/sessions/{sid:path}/compact", self._route(self.compact, "sid"), methods=["POST"]),
            Route("/api/sessions/{sid:path}", self._route(self.session_detail, "sid"), methods=["GET"]),
            Route("/api/packs/{pid}", self._route(self.pack, "pid"), methods=["GET"]),
            Route("/api/diff", self._route(self.diff, query=("a", "b")), methods=["GET"]),
        ]
