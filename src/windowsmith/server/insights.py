"""What the dashboard reads beyond the raw log: a session's headline figures, its index row, the request it last
sent, a redacted artifact, and the what-if replay of its own log under the bench's strategies.

* :func:`headline` — cost, cache hit rate, and the tokens and dollars saved against sending the full history
  (the counterfactual: for every model call, the whole transcript before it with the session's system text and
  tools, counted with the model's tokenizer, calibrated as the pack's total was, and priced as the bench prices a
  call: :func:`~windowsmith.costs.call_cost` against the previous full request, its prefix read from cache).
* :func:`whatif` — the session's transcript as a bench run (:func:`windowsmith.bench.prepare`), replayed at the
  session's window under each strategy of :data:`WHATIF_STRATEGIES` with the bench's cost and identifier recall.
* :func:`request_view` — the request of the session's last pack, as the provider got it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..costs import call_cost
from ..errors import UnknownModelError
from ..ingest.redact import redact
from ..manifest import Manifest
from ..model import Message, ToolSpec
from ..registry import ModelSpec, Registry
from ..request import NeutralRequest, Segment
from ..tokens import TokenCounter

#: the strategies the what-if panel replays (windowsmith itself included, for a like-for-like row)
WHATIF_STRATEGIES: tuple[str, ...] = ("full", "sliding", "sticky", "masking", "clear", "summarize-langchain",
                                      "summarize-openhands", "windowsmith")
#: fewer model calls than this and a replay says nothing
MIN_WHATIF_CALLS = 2

PROVIDER_OF_FORMAT = {"anthropic": "Anthropic", "openai-chat": "OpenAI", "openai": "OpenAI",
                      "openai-responses": "OpenAI", "gemini": "Google Gemini"}


def provider_of(fmt: str) -> str:
    return PROVIDER_OF_FORMAT.get(fmt, next((v for k, v in PROVIDER_OF_FORMAT.items() if fmt.startswith(k)), fmt))


def cache_wording(m: Manifest) -> str:
    """How the pack is cached, in the provider's own terms."""
    c = m.cache or {}
    if m.format.startswith("anthropic"):
        return (f"{c.get('breakpoints', 0)} cache_control breakpoints; cacheable prefix "
                f"{int(c.get('prefix_tokens', 0)):,} tokens")
    if m.format.startswith("gemini"):
        return "implicit prefix caching (cachedContents for explicit caches): the cache reads per call show what it hit"
    return "automatic prefix caching, routed by prompt_cache_key: the cache reads per call show what it hit"


def calibrated_layers(m: Manifest) -> dict[str, int]:
    """Each layer's tokens scaled so the layers add up to the pack's calibrated total (the layers are counted with
    the tokenizer alone; the total is calibrated against billed usage)."""
    used = {k: int(v.get("used", 0)) for k, v in m.layers.items() if int(v.get("used", 0))}
    raw = sum(used.values())
    if not raw:
        return used
    scale = m.tokens / raw
    return {k: round(v * scale) for k, v in used.items()}


def _spec(registry: Registry, model: str) -> ModelSpec | None:
    try:
        return registry.get(model)
    except UnknownModelError:
        return None


def _system_text(state: Any) -> str:
    return "\n\n".join(t for t in state.system.values() if t)


def _calibrate(m: Manifest | None, counted: int) -> int:
    cal = (m.calibration if m else None) or {}
    return round(float(cal.get("offset", 0) or 0) + float(cal.get("slope", 1.0) or 1.0) * counted)


@dataclass
class _Full:
    """The full-history counterfactual of one session."""

    tokens: int = 0
    cost: float = 0.0
    per_call: list[int] = field(default_factory=list)


def full_history(state: Any, manifests: Sequence[Manifest], spec: ModelSpec, fmt: str) -> _Full:
    """The counterfactual of sending the whole history on every call (see the module docstring)."""
    by_id = {m.pack_id: m for m in manifests}
    counter = TokenCounter(spec.tokenizer, fmt, spec.token_factor, thinking=spec.thinking_kept)
    system = (Segment(_system_text(state), "system"),) if _system_text(state) else ()
    out = _Full()
    prev: NeutralRequest | None = None
    cands: list[tuple[int, int]] | None = None
    seqs = state.message_seqs
    for seq, u, pack_id in state.usages:
        m = by_id.get(pack_id or "")
        if m is not None:  # the pack was built from the log as it stood at its seq
            k = sum(1 for s in seqs if s <= m.seq)
        else:  # the reply is logged before its usage: the request is what came before the reply
            k = sum(1 for s in seqs if s < seq)
            k -= 1 if k and state.messages[k - 1].role == "assistant" else 0
        msgs = tuple(state.messages[:k])
        req = NeutralRequest(model=spec.name, system=system, session=(), tools=tuple(state.tools), messages=msgs,
                             tail=None, max_output_tokens=spec.max_output, cache_key="")
        tokens = _calibrate(m, counter.request(req))
        cost, cands = call_cost(spec, fmt, prev, req, counter, prompt_tokens=tokens,
                                output_tokens=u.output_tokens, prev_candidates=cands)
        prev = req
        out.tokens += tokens
        out.cost += cost.usd
        out.per_call.append(tokens)
    return out


def headline(state: Any, manifests: Sequence[Manifest], calls: Sequence[dict[str, Any]],
             registry: Registry) -> dict[str, Any]:
    """The session's headline figures and header (model, window, provider)."""
    last = manifests[-1] if manifests else None
    read = sum(c["cache_read"] for c in calls)
    prompt = sum(c["cache_read"] + c["cache_write"] + c["uncached"] for c in calls)
    cost = sum(c["cost"] or 0.0 for c in calls)
    out: dict[str, Any] = {
        "model": last.model if last else None, "window": last.window if last else None,
        "available": last.available if last else None, "format": last.format if last else None,
        "provider": provider_of(last.format) if last else None, "cache": cache_wording(last) if last else None,
        "calls": len(calls), "cost": cost, "prompt_tokens": prompt, "cache_read_tokens": read,
        "cache_hit_rate": read / prompt if prompt else None,
        "full_history": None, "tokens_saved": None, "cost_saved": None,
        "full_history_note": ("For every model call: the whole transcript before it, with the system text and tools, "
                              "counted with the model's tokenizer and calibrated as the pack totals are, then priced "
                              "like the bench prices a call (the prefix it shares with the previous full request read "
                              "from cache). Saved = that sum minus the prompt tokens (cost) billed."),
    }
    spec = _spec(registry, last.model) if last else None
    if spec is not None and last is not None and calls:
        full = full_history(state, manifests, spec, last.format)
        out["full_history"] = {"tokens": full.tokens, "cost": full.cost, "per_call": full.per_call}
        out["tokens_saved"] = full.tokens - prompt
        out["cost_saved"] = full.cost - cost
    return out


# ---------------------------------------------------------------------------------------------------- what-if


@dataclass
class _Trace:
    """A session's transcript in the shape :func:`windowsmith.bench.prepare` reads."""

    id: str
    system: str | None
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    format: str = "windowsmith-session"
    source: str = "session log"
    repairs: tuple[str, ...] = ()


def _row(rm: Any) -> dict[str, Any]:
    lost = sorted({x for m in (rm.misses or []) for x in m["missed"]})
    return {
        "strategy": rm.strategy, "calls": rm.calls, "input_tokens": rm.input_tokens,
        "cache_read_tokens": rm.cache_read_tokens, "cost": rm.cost_usd, "peak": rm.peak,
        "recall_strict": rm.strict / rm.recall_calls if rm.recall_calls else None,
        "recall_recoverable": rm.recoverable / rm.recall_calls if rm.recall_calls else None,
        "calls_with_targets": rm.recall_calls, "calls_that_lost": len(rm.misses or []),
        "lost": lost[:40], "lost_count": len(lost), "cuts": rm.events.get("cut", 0), "error": rm.error,
    }


def whatif(session_id: str, state: Any, manifests: Sequence[Manifest], registry: Registry,
           strategies: Sequence[str] = WHATIF_STRATEGIES) -> dict[str, Any]:
    """The session's log replayed under each strategy at the session's window (see the module docstring)."""
    from ..bench import BenchConfig, make_strategy, prepare, run_strategy

    if not manifests:
        return {"ok": False, "message": "No pack yet: send a request through the proxy, then come back."}
    last = manifests[-1]
    spec = _spec(registry, last.model)
    if spec is None:
        return {"ok": False, "message": f"Model {last.model!r} is not in the registry, so no price to replay with."}
    system = _system_text(state) or None
    run = prepare(_Trace(session_id, system, tuple(state.tools), tuple(state.messages)))
    if len(run.calls) < MIN_WHATIF_CALLS:
        return {"ok": False, "message": f"The session is too short for a what-if: {len(run.calls)} model call(s) in its "
                                        f"log; at least {MIN_WHATIF_CALLS} are needed. Come back after a few turns."}
    cfg = BenchConfig.make(spec, last.window, last.format)
    rows = []
    for name in strategies:
        strat = make_strategy(name, cfg)
        try:
            rows.append(_row(run_strategy(run, strat, misses=True)))
        finally:
            close = getattr(strat, "close", None)
            if close is not None:
                close()
    targets = sum(len(t) for t in run.targets.values())
    return {"ok": True, "model": spec.name, "format": last.format, "window": last.window, "available": cfg.available,
            "calls": len(run.calls), "targets": targets, "rows": rows,
            "note": ("Each strategy rebuilds every request of this session's transcript at the session's window, "
                     "priced like windowsmith bench prices a call (cache reads and writes as the provider bills them, "
                     "summaries as model calls of their own). Recall: the share of the identifiers the agent's next "
                     "action used, first seen in an observation, that the request still held (strict); lost: "
                     "identifiers some request no longer held.")}


# ---------------------------------------------------------------------------------------------------- request


def request_view(pack: Any | None, manifest: Manifest | None) -> dict[str, Any]:
    """The last request the server sent for the session (its provider-format body), or why there is none."""
    if pack is None:
        return {"ok": False, "message": "This server has not sent a request for the session since it started; the "
                                        "next call through the proxy shows here."}
    fmt = getattr(pack, "format", "")
    body = pack.request
    return {"ok": True, "format": fmt, "provider": provider_of(fmt), "pack_id": pack.manifest.pack_id,
            "cache": cache_wording(pack.manifest), "body": _jsonable(body)}


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, str | int | float | bool) or v is None:
        return v
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    return str(v)


def redacted_artifact(data: bytes) -> str:
    """An artifact's text with secrets replaced (as the packs show them), binary shown by its size."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"[binary artifact: {len(data):,} bytes]"
    return redact(text).text


__all__ = ["MIN_WHATIF_CALLS", "WHATIF_STRATEGIES", "cache_wording", "calibrated_layers", "full_history",
           "headline", "provider_of", "redacted_artifact", "request_view", "whatif"]
