"""Replay a recorded trace through the engine as if live.

Each assistant message in the trace is a model call: before it, the session builds the pack that
windowsmith would have sent; then the trace's assistant message (and its billed usage, when the trace
has it) is recorded, and the following tool results and user messages are added. Per turn we report
the tokens sent by layer, the cacheable prefix shared with the previous request, the cost at the
model's prices (cache reads and writes priced as the provider bills them) and any compaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .build import Pack
from .costs import call_cost
from .engine import Engine
from .request import NeutralRequest
from .store.base import MAX_SESSION_ID, check_session_id


@dataclass
class TurnReport:
    turn: int
    messages: int
    tokens: int
    layers: dict[str, int]
    prefix_tokens: int
    shared_prefix_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    actions: list[str]
    billed_prompt_tokens: int | None
    build_ms: float
    pack_id: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ReplayResult:
    trace_id: str
    session_id: str
    model: str
    format: str
    window: int
    turns: list[TurnReport] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)

    @property
    def total_cost(self) -> float:
        return sum(t.cost_usd for t in self.turns)

    @property
    def total_input(self) -> int:
        return sum(t.tokens for t in self.turns)

    @property
    def cache_hit_ratio(self) -> float:
        tot = self.total_input
        return sum(t.cache_read_tokens for t in self.turns) / tot if tot else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "session_id": self.session_id,
            "model": self.model,
            "format": self.format,
            "window": self.window,
            "totals": {
                "turns": len(self.turns),
                "input_tokens": self.total_input,
                "cost_usd": round(self.total_cost, 6),
                "cache_read_share": round(self.cache_hit_ratio, 4),
                "peak_tokens": max((t.tokens for t in self.turns), default=0),
            },
            "repairs": self.repairs,
            "turns": [t.to_dict() for t in self.turns],
        }


def replay_trace(
    trace: Any,
    engine: Engine,
    *,
    session_id: str | None = None,
    fmt: str | None = None,
    on_turn: Callable[[TurnReport], None] | None = None,
    replace: bool = False,
    calibrate: bool = False,
    billed_output: bool = True,
) -> ReplayResult:
    """Replay ``trace`` (a :class:`windowsmith.traces.Trace`) into a new session of ``engine``.

    ``session_id``: the session to create; when it is taken, the replay goes to the first free
    ``<id>-2``, ``<id>-3``, … (the result's ``session_id`` says which), unless ``replace=True``,
    which deletes the existing session first. Default id: ``replay-<trace id>``. A replay never
    appends to an existing session. ``billed_output``: price each call's output at the trace's billed
    output tokens when it has them; ``False`` counts the trace's assistant message instead, as
    ``windowsmith bench`` prices every strategy (so the figures compare with the bench's)."""
    if session_id is None:  # derived from the trace id: made a valid session id
        session_id = "".join(c if c.isprintable() else "_" for c in f"replay-{trace.id}")[:MAX_SESSION_ID].strip()
    sid = free_session_id(engine, session_id, replace=replace)
    s = engine.session(sid)
    if trace.system:
        s.system(trace.system)
    if trace.tools:
        s.tools(trace.tools)
    spec = engine.spec
    fmt = fmt or engine.format or spec.default_format
    result = ReplayResult(trace.id, sid, spec.name, fmt, engine.window or spec.context_window,
                          repairs=list(getattr(trace, "repairs", ())))
    prev: NeutralRequest | None = None
    prev_cands: list[tuple[int, int]] | None = None
    billed = getattr(trace, "billed", {}) or {}
    turn = 0
    for i, m in enumerate(trace.messages):
        if m.role != "assistant" or not s.state.units:
            s.add(m)
            continue
        t0 = time.perf_counter()
        pack: Pack = s.build(fmt)
        build_ms = (time.perf_counter() - t0) * 1000
        counter = s.counter(fmt)
        usage = billed.get(i)
        billed_out = usage.output_tokens if usage is not None and billed_output else None
        out_tokens = billed_out or counter.message(m)
        cost, prev_cands = call_cost(spec, fmt, prev, pack.neutral, counter, prompt_tokens=pack.tokens,
                                     output_tokens=out_tokens, prev_candidates=prev_cands)
        prev = pack.neutral
        turn += 1
        man = pack.manifest
        report = TurnReport(
            turn=turn,
            messages=man.messages,
            tokens=man.tokens,
            layers={k: v["used"] for k, v in man.layers.items()},
            prefix_tokens=man.cache.get("prefix_tokens", 0),
            shared_prefix_tokens=cost.shared_prefix_tokens,
            cache_read_tokens=cost.cache_read_tokens,
            cache_write_tokens=cost.cache_write_tokens,
            input_tokens=cost.input_tokens,
            output_tokens=out_tokens,
            cost_usd=cost.usd,
            actions=[f"{a['kind']} {a['layer']}" for a in man.actions],
            billed_prompt_tokens=usage.prompt_tokens if usage is not None else None,
            build_ms=build_ms,
            pack_id=man.pack_id,
        )
        result.turns.append(report)
        if on_turn is not None:
            on_turn(report)
        # billed usage of the trace's own model would miscalibrate another model: record it only on request
        s.record(message=m, usage=usage if calibrate else None, pack=pack)
    return result


def free_session_id(engine: Engine, base: str, *, replace: bool = False) -> str:
    """``base`` if no session has it (or ``replace``: after deleting that session), else the first free
    ``base-2``, ``base-3``, … (``base`` shortened to keep the id within ``MAX_SESSION_ID``)."""
    store = engine.store
    check_session_id(base)
    if store.get_session(base) is None:
        return base
    if replace:
        engine.delete_session(base)
        return base
    n = 2
    while True:
        suffix = f"-{n}"
        sid = base[: MAX_SESSION_ID - len(suffix)] + suffix
        if store.get_session(sid) is None:
            return sid
        n += 1


__all__ = ["ReplayResult", "TurnReport", "free_session_id", "replay_trace"]
