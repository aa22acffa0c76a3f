"""The build pipeline for one session: from the log as it stands to the request for the next model call.

    assemble ─► block check ─► compact (stages due, records appended) ─► assemble again
             ─► history still dropped units or shrank a message? append a ``truncate`` / ``shrink``
                 record, assemble again
             ─► plan_cache ─► render ─► manifest ─► save_pack ─► Pack

:class:`Builder` holds what a session keeps between builds (token counters and calibrations per format,
the compactor's incremental planning, the reference tracker, the manifest's part digests). It owns the
circuit breaker: a :class:`~windowsmith.compaction.Breaker` passed to :meth:`Builder.build` and
:meth:`Builder.compact` makes sure no compaction stage runs twice across a build and its retry.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from . import telemetry
from .assemble import Assembly, assemble
from .body_snapshot import BodySnapshots
from .budget import Budget
from .cache import plan_cache, prefix_tokens
from .cache_lint import lint_request, move_to_tail, note_volatile
from .compaction.base import Summarizer
from .compaction.config import Breaker, CompactionResult
from .compaction.emergency import lost_identifiers
from .compaction.pipeline import Compactor
from .compaction.port import carry_caps_of
from .compaction.transcript import store_transcript
from .errors import BudgetBlockedError, ConfigError, UsageError
from .formats import FORMATS
from .formats.base import Rendered
from .hashing import sha256_hex
from .layers.base import Layer
from .layers.builtin import history_blocked
from .log import SessionLog
from .manifest import PART_LEN, Manifest
from .records import MaskRecord, ShrinkRecord, TruncateRecord
from .refs import RefTracker
from .request import NeutralRequest
from .state import SessionState
from .store.packs import Hinted
from .tokens import Calibration, TokenCounter
from .unit_counts import PersistedCounts

if TYPE_CHECKING:
    from .ports import BuildEngine

PROVIDER_ALIASES = {"openai": "openai-chat", "claude": "anthropic", "google": "gemini", "responses": "openai-responses"}


def check_format(fmt: str) -> str:
    """The request format named by ``fmt`` (a format or a provider alias), or a ConfigError."""
    fmt = PROVIDER_ALIASES.get(fmt, fmt)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown provider format {fmt!r}; use one of {', '.join(FORMATS)}")
    return fmt


#: raw tokens kept free beside the index a history-layer cut writes: the separator and label around its line
INDEX_MARGIN = 8

#: the provider that serves each request format (registry ``provider`` values)
FORMAT_PROVIDER = {"anthropic": "anthropic", "openai-chat": "openai", "openai-responses": "openai", "gemini": "gemini"}


def request_model(engine: BuildEngine, fmt: str, model: str | None) -> str:
    """The model name a request in ``fmt`` carries: ``model`` if given, else the engine's.

    A request names a model of the provider it is rendered for: rendering a Claude engine's session as
    ``openai-chat`` needs ``model=`` (budget, tokenizer and prices stay the engine model's)."""
    serves = FORMAT_PROVIDER[fmt]
    if model is None:
        if engine.spec.provider != serves:
            raise ConfigError(
                f"the engine's model {engine.model!r} is served by {engine.spec.provider}, but the request is "
                f"rendered for {serves} ({fmt}); name the model it goes to, e.g. build({fmt!r}, model='...')"
            )
        return engine.model
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"model must be a non-empty model name, got {model!r}")
    known = engine.registry.find(model)
    if known is not None and known.provider != serves:
        raise ConfigError(
            f"model {model!r} is served by {known.provider}, not {serves}: render the request as "
            f"{known.default_format!r}, or name a {serves} model"
        )
    return model


@dataclass(frozen=True)
class Pack:
    """A built request: ``request`` goes to the provider SDK as ``**kwargs``."""

    request: dict[str, Any]
    manifest: Manifest
    rendered: Rendered
    neutral: NeutralRequest
    format: str

    @property
    def id(self) -> str:
        return self.manifest.pack_id

    @property
    def tokens(self) -> int:
        return self.manifest.tokens


class ModelCall:
    """The builds of one model call in one request format: the first, and after the provider refused it as too
    long, a harder compaction and a rebuild. One circuit breaker spans them, so no compaction stage runs twice
    and nothing loops (what ``Session.call`` does around its ``send``; ``Session.begin_call`` opens one)."""

    def __init__(self, builder: Builder, fmt: str, model: str | None = None) -> None:
        self.format = fmt
        self.model = model
        self._builder = builder
        self._breaker = Breaker()

    def build(self) -> Pack:
        """Build the request (compaction as due, within this call's breaker)."""
        with self._builder.traced(self.format, self.model) as done:
            return done(self._builder.build(self.format, self._breaker, self.model))

    def compact_harder(self, reason: str) -> CompactionResult:
        """Compact harder after the provider refused the last build as too long (then :meth:`build` again)."""
        return self._builder.compact(self.format, self._breaker, harder=True, reason=reason)


class Builder:
    """Builds packs (and runs compaction) for one session over its log."""

    def __init__(self, engine: BuildEngine, log: SessionLog, layers: list[Layer]) -> None:
        self.engine = engine
        self.log = log
        self.session_id = log.session_id
        self.layers = layers
        self.last_pack: Pack | None = None
        self._counters: dict[str, TokenCounter] = {}
        self._calibrations: dict[str, Calibration] = {}
        self._refs = RefTracker()
        self._parts_cache: tuple[Sequence[str], int, object, str] = ((), 0, None, "")
        self._parts_hint: tuple[str, int] = ("", 0)  # (the last manifest's parts, characters this one shares)
        self._compactor: Compactor | None = None
        # token counts kept for the next process (the digest rows the log's replay found valid are not read again)
        self.counts = PersistedCounts(engine.store, self.session_id, log.digest_rows)
        self.bodies = BodySnapshots(engine.store, self.session_id)  # rendered bodies kept for the next process
        self.cache_key = "ws-" + hashlib.sha256(self.session_id.encode()).hexdigest()[:24]

    @property
    def state(self) -> SessionState:
        return self.log.state

    # ------------------------------------------------------------------ settings

    def format(self, provider: str | None = None) -> str:
        """The request format for ``provider`` (default: the engine's, else the model's)."""
        eng = self.engine
        return check_format(provider or eng.format or eng.spec.default_format)

    def budget(self) -> Budget:
        eng = self.engine
        return Budget.for_window(eng.window or eng.spec.context_window, eng.spec.max_output, eng.budget)

    def counter(self, fmt: str) -> TokenCounter:
        c = self._counters.get(fmt)
        if c is None:
            spec = self.engine.spec
            c = TokenCounter(spec.tokenizer, fmt, spec.token_factor, self.calibration(fmt), spec.thinking_kept)
            self._counters[fmt] = c
            self.counts.seed(self.state, c, self._compactor.planner if self._compactor is not None else None)
        return c

    def calibration_key(self, fmt: str) -> str:
        return f"{self.engine.spec.name}|{fmt}"

    def calibration(self, fmt: str) -> Calibration:
        cal = self._calibrations.get(fmt)
        if cal is None:
            cal = Calibration.from_dict(self.engine.store.get_kv("calibration", self.calibration_key(fmt)))
            self._calibrations[fmt] = cal
        return cal

    @property
    def compactor(self) -> Compactor:
        """This session's compaction pipeline (config and summarizer from the engine)."""
        if self._compactor is None:
            summ = self.engine.summarizer
            self._compactor = Compactor(self.engine.compaction, _summarizer(summ))
            self.counts.seed_planner(self._compactor.planner)
        return self._compactor

    def _assemble(self, counter: TokenCounter, budget: Budget) -> Assembly:
        eng = self.engine
        asm = assemble(self.state, self.layers, counter, budget, eng.budget, model=eng.spec.name,
                       cache_key=self.cache_key)
        if asm.history is None and "history" in asm.layers and self.state.units \
                and asm.budget.reserved_output > budget.output_floor():
            # what the history must keep does not fit its room even shrunk (a newest exchange of signed thinking
            # no view shrinks): borrow from the output reservation, down to its floor, before refusing the build
            # (refused even so, the error names the larger room it was given)
            return assemble(self.state, self.layers, counter, budget, eng.budget, model=eng.spec.name,
                            cache_key=self.cache_key, lower_output=True)
        return asm

    # ------------------------------------------------------------------ the pipeline

    def traced(self, fmt: str, model: str | None) -> contextlib.AbstractContextManager[Callable[[Pack], Pack]]:
        """The telemetry of a build: a ``windowsmith.build`` span in this session's model call (see
        :mod:`windowsmith.telemetry`); ``done(pack)`` returns the pack."""
        return telemetry.build(self.log, self.compactor, lambda: len(self.state.compactions), fmt,
                               request_model(self.engine, fmt, model), self.session_id)

    def build(self, fmt: str, breaker: Breaker, model: str | None = None) -> Pack:
        """Build the request in format ``fmt`` (see ``Session.build``)."""
        eng = self.engine
        spec = eng.spec
        model_name = request_model(eng, fmt, model)
        state = self.state
        if state.open_calls:
            raise UsageError(
                f"tool call(s) {sorted(state.open_calls)} have no result yet; record them with "
                "session.tool_result(call_id, output) before build()"
            )
        if not state.units and not state.task.declared:
            raise UsageError("the session has no messages; add one with session.user('...') before build()")
        counter = self.counter(fmt)
        budget = self.budget()
        asm = self._assemble(counter, budget)
        self._check_block(asm)  # compaction only shrinks history, which cannot help here
        actions = []
        if eng.compaction.enabled:
            result = self._run_compaction(asm, counter, asm.budget, breaker)
            actions.extend(result.actions)  # a failed summary is recorded even when nothing changed
            if result.changed:
                asm = self._assemble(counter, budget)
        self._check_block(asm)  # a custom layer's required items may depend on the compacted view
        self._check_history(asm, counter)
        if self._persist_truncation(asm, counter) | self._persist_shrinks(asm):
            actions.extend(a for a in asm.actions if a.layer == "history")
            asm = self._assemble(counter, budget)  # the pack must be what the log (with the new records) builds
            self._check_history(asm, counter)
        asm.actions[:0] = actions
        req = asm.request
        volatile = lint_request(req)
        if volatile and eng.cache.volatile_to_tail:
            req = move_to_tail(req, volatile)
        editing = eng.compaction.server_editing
        req = replace(req, model=model_name, cache=plan_cache(req, spec.max_breakpoints, stable_ttl=eng.cache.stable_ttl),
                      context_management=editing.to_param() if editing is not None and fmt == "anthropic" else None)
        renderer = eng.renderer(fmt)
        restored = self.bodies.restore(renderer, req)  # the body an earlier process stored, if it renders req's
        if restored:
            self._refs.seed(req, restored, *self.bodies.refs)
        self.counts.hint_renderer(state, counter.scheme, renderer, restored)  # part digests persisted earlier
        rendered = renderer.render(req)
        window = eng.window or spec.context_window
        manifest = self.manifest(asm, req, rendered, counter, fmt, window)
        if volatile:
            note_volatile(manifest, volatile, moved=eng.cache.volatile_to_tail)
        if self.last_pack is None or self.last_pack.manifest.pack_id != manifest.pack_id:
            # the part digests extend the last manifest's: the delta encoder need not compare the shared prefix.
            # (A pack saved already, by this build's twin in another process, is left as it is: its id is
            # derived from the log head and the request, so it is this pack.)
            eng.store.save_pack(manifest.pack_id, self.session_id, state.seq,
                                Hinted(manifest.to_dict(), {"parts": self._parts_hint}), exist_ok=True)
        self.counts.save(state, counter, self._compactor.planner if self._compactor is not None else None, renderer)
        self.bodies.save(renderer, req, state.seq)
        pack = Pack(rendered.request, manifest, rendered, req, fmt)
        self.last_pack = pack
        return pack

    def compact(self, fmt: str, breaker: Breaker, *, harder: bool, reason: str) -> CompactionResult:
        """Compact now, whatever the thresholds (see ``Session.compact``)."""
        if not self.state.units:
            return CompactionResult()
        counter = self.counter(fmt)
        budget = self.budget()
        asm = self._assemble(counter, budget)
        return self._run_compaction(asm, counter, budget, breaker, force=not harder, harder=harder, reason=reason)

    def _check_block(self, asm: Assembly) -> None:
        """Refuse a request over the block threshold of its own assembly's budget (which may have lowered the
        reserved output; one assembly may, the next, after a compaction, not). Optional layers are fitted under
        it, so only the required layers (system, tools, task, and any layer's required items) can put a request over."""
        cfg = self.engine.budget
        limit = cfg.block_tokens(asm.budget.available)
        if asm.tokens <= limit:
            return
        available = asm.budget.available
        required = sorted(((n, u.used) for n, u in asm.layers.items() if u.required and u.used),
                          key=lambda e: (-e[1], e[0]))
        worst = required[0][0] if required else "request"
        parts = ", ".join(f"{n} {t:,}" for n, t in required) or "none"
        raise BudgetBlockedError(
            f"the request needs {asm.tokens:,} tokens, {asm.tokens / available:.1%} of the {available:,} available, "
            f"over the block threshold BudgetConfig(block_at={cfg.block_at}) = {limit:,} tokens; the required "
            f"layers alone take {sum(t for _, t in required):,} ({parts}), so dropping optional context and "
            "compacting the history (session.compact()) cannot bring it under. Fix it by shrinking the required "
            f"layers (system prompt, tool definitions, task; the largest is {worst!r}), by raising "
            "BudgetConfig(block_at=...) (at most 1.0), or by making room: a model with a larger window or a "
            "lower BudgetConfig(reserved_output=...). Nothing was sent and no pack was stored.",
            layer=worst, needed=asm.tokens, available=available, limit=limit, block_at=cfg.block_at,
        )

    def _check_history(self, asm: Assembly, counter: TokenCounter) -> None:
        """Never blind: refuse a request whose history went whole (even shrunk it cannot fit), naming the message."""
        if asm.history is None and "history" in asm.layers and self.state.units:
            usage = asm.layers.get("history")
            raise history_blocked(self.state, usage.allocated if usage is not None else 0, counter)

    def _persist_truncation(self, asm: Assembly, counter: TokenCounter) -> bool:
        """Make the history layer's drop durable: a ``truncate`` record, so the log rebuilds this pack. Like the
        emergency stage's cut, it indexes the identifiers the dropped units named and the kept request lost (within
        the index's carry cap and the room the fit left in the history's share, so the summary message that carries
        it still fits: the re-assembly drops nothing more)."""
        fit = asm.history.fit if asm.history is not None else None
        st = self.state
        if fit is None or fit.keep_from_seq is None or fit.keep_from_seq <= st.keep_from_seq:
            return False
        keep = fit.keep_from_seq
        lo = st.first_compactable_unit()
        first = st.units[lo].first_seq if lo < len(st.units) else keep
        transcript = (store_transcript(self.log, st.span_messages(first, keep - 1), first, keep - 1)
                      if first < keep else None)
        index: tuple[str, ...] = ()
        cut = st.unit_index(keep)
        usage = asm.layers.get("history")
        ask = st.carried_ask(cut, len(st.units)) if cut is not None else None
        if cut is not None and usage is not None and lo < cut:
            cfg = self.engine.compaction
            spare = (usage.allocated - usage.used) / counter.scale - INDEX_MARGIN
            if ask is not None and ask != st.carried_ask(st.first_visible_unit(), st.cut_units):
                spare -= counter.raw_message(st.ask_message(ask))  # the user's message the cut carries (the fit left it room)
            budget = int(min(carry_caps_of(cfg, counter, st, asm.budget.available)[1], spare))
            index = lost_identifiers(st, counter, lo, cut, st.work_log, budget)
        carried = f"; carried the user message at seq {st.units[ask].first_seq} (the newest it dropped)" \
            if ask is not None else ""
        self.log.append(TruncateRecord(keep, transcript, fit.dropped_units, fit.dropped_tokens,
                                       "history over its budget" + carried, index))
        if index or carried:
            said = (f"; an index of {len(index)} identifier(s) the dropped units named and the kept request lost"
                    if index else "") + carried
            more = ({"index": list(index)} if index else {}) | \
                ({"carried_seq": st.units[ask].first_seq} if ask is not None else {})
            asm.actions[:] = [replace(a, reason=f"{a.reason}{said}", detail={**a.detail, **more})
                              if a.layer == "history" and a.kind == "truncate" else a for a in asm.actions]
        return True

    def _persist_shrinks(self, asm: Assembly) -> bool:
        """Make the history layer's shrinks durable: the originals as artifacts and a ``shrink`` record, so
        later requests carry the same views (the cache prefix holds) and the log rebuilds this pack."""
        fit = asm.history.fit if asm.history is not None else None
        if fit is None or not (fit.shrinks or fit.image_stubs):
            return False
        if fit.shrinks:
            for s in fit.shrinks:
                sha = self.log.put_blob(s.original.encode("utf-8"))
                assert sha == s.entry.artifact, "a shrink's artifact is the sha256 of its original"
            self.log.append(ShrinkRecord(tuple(s.entry for s in fit.shrinks),
                                         "message(s) larger than their share of the history: shrunk, never dropped"))
        if fit.image_stubs:
            # images no view makes smaller: a mask record with their stubs and no fold (what aged images get)
            for st in fit.image_stubs:
                sha = self.log.put_blob(st.raw)
                assert sha == st.entry.artifact, "an image stub's artifact is the sha256 of its bytes"
            self.log.append(MaskRecord((), sum(st.saving for st in fit.image_stubs),
                                       f"{len(fit.image_stubs)} image(s) of the messages the history must keep, over "
                                       "its share: replaced by stubs naming their artifacts, never dropped",
                                       tuple(st.entry for st in fit.image_stubs)))
        return True

    def _request_size(self, asm: Assembly) -> int:
        """Counted size of the request before fitting (tool definitions included), or the billed size
        of the last call if it is larger and no compaction happened since."""
        # what fitting took out of the layers (history dropped or shrunk, notes cut); not the output reservation
        # lowered beside long required layers (an ``output`` action: it is no part of the request)
        size = asm.tokens + sum(max(0, a.tokens_before - a.tokens_after) for a in asm.actions if a.layer != "output")
        state = self.state
        last_comp = state.records[-1].seq if state.records else -1
        if state.usages:
            seq, usage, _ = state.usages[-1]
            if seq > last_comp:
                size = max(size, usage.prompt_tokens)
        return size

    def _run_compaction(self, asm: Assembly, counter: TokenCounter, budget: Budget, breaker: Breaker, *,
                        force: bool = False, harder: bool = False, reason: str = "") -> CompactionResult:
        fit = asm.history.fit if asm.history is not None else None
        counts: list[int] | Any = []
        prefix = None
        if fit is not None:
            counts, prefix = fit.billed()  # what folding or cutting a unit saves: its stripped thinking is not billed
        elif self.state.units:
            counts = [sum(counter.raw_message(m) for m in u.messages) for u in self.state.units]
        eng = self.engine
        return self.compactor.run(
            self.log, size=self._request_size(asm), counts=counts, prefix=prefix, counter=counter, budget=budget,
            spec=eng.spec, compact_at=eng.budget.compact_at, breaker=breaker,
            force=force, harder=harder, reason=reason,
        )

    # ------------------------------------------------------------------ the manifest

    def manifest(self, asm: Assembly, req: NeutralRequest, rendered: Rendered, counter: TokenCounter,
                  fmt: str, window: int) -> Manifest:
        cfg = self.engine.budget
        layers = {k: v.to_dict() for k, v in asm.layers.items()}
        comp = {c: 0 for c in ("system", "tools", "skills", "memory", "knowledge", "task", "history", "tail")}
        for name, u in asm.layers.items():
            key = name if name in comp else ("system" if name == "instructions" else None)
            if key:
                comp[key] += u.used
        comp["tail"] = sum(u.used for n, u in asm.layers.items() if n in ("task", "evidence", "memory", "knowledge"))
        fill = asm.tokens / asm.budget.available
        status = "ok"
        warnings: list[str] = []
        if fill >= cfg.compact_at:  # over block_at the build was refused (BudgetBlockedError)
            status = "compact"
        elif fill >= cfg.warn_at:
            status = "warn"
        if status != "ok":
            warnings.append(f"the request fills {fill:.0%} of the available budget ({status} threshold)")
        n_tools = len(req.tools)
        n_system = len(rendered.parts) - len(req.messages) - n_tools - (1 if req.tail_mode() == "new" else 0)
        layout = {"tools": n_tools, "system": max(0, n_system)}
        marks = req.cache.names
        ptoks = prefix_tokens(req, counter, asm.history.raw_tokens + (asm.history.fit.unbilled if asm.history.fit else 0)
                              if asm.history is not None and asm.history.raw_tokens is not None else None)
        checksum = rendered.checksum
        pack_id = "pk_" + sha256_hex(f"{self.session_id}|{self.state.head}|{fmt}|{checksum}")[:20]
        return Manifest(
            pack_id=pack_id,
            session_id=self.session_id,
            seq=self.state.seq,
            head=self.state.head,
            model=self.engine.spec.name,
            format=fmt,
            window=window,
            reserved_output=asm.budget.reserved_output,
            available=asm.budget.available,
            tokens=asm.tokens,
            tokens_counted=asm.counted,
            layers=layers,
            components=comp,
            actions=[a.to_dict() for a in asm.actions],
            repairs=[r.to_dict() for r in self.state.repairs],
            artifacts=sorted(set(asm.refs) | self._refs.refs(req)),
            redactions=self._refs.redactions(req),
            cache={
                "breakpoints": len(marks),
                "marks": list(marks),
                "prefix_tokens": ptoks,
                "prefix_parts": rendered.cache_prefix_parts,
                "prefix_hash": rendered.prefix_hash,
                "layout": layout,
            },
            checksum=checksum,
            parts=self._short_parts(rendered),
            status=status,
            warnings=warnings,
            calibration={"slope": counter.calibration.slope, "offset": counter.offset,
                         "observations": counter.calibration.observations},
            messages=len(req.messages),
            guidance=asm.guidance,
        )

    def _short_parts(self, rendered: Rendered) -> str:
        """The manifest's part digests (12 hex chars each), extended incrementally turn to turn: the stable
        prefix kept from the last build is reused when the parts' lineage (``Rendered.stable``) proves it, or
        a comparison does. Sets :attr:`_parts_hint` (the last build's digest string and how many of its
        characters this one starts with), which tells the store's delta encoder what not to compare."""
        parts = rendered.parts
        prev, k, token, last = self._parts_cache
        stable = rendered.stable
        if k and len(parts) >= k and ((stable is not None and stable[0] is token and stable[1] >= k)
                                      or parts[:k] == prev[:k]):
            shared = k * PART_LEN
            out = last[:shared] + "".join([p[:PART_LEN] for p in parts[k:]])
        else:
            shared = 0
            out = "".join([p[:PART_LEN] for p in parts])  # (a list, not a generator: cheaper to join)
        self._parts_hint = (last, shared)
        # keep only the stable prefix (the last parts — tail, final message — change every turn)
        keep = max(0, len(parts) - 3)
        token = stable[0] if stable is not None and stable[1] >= keep else None
        self._parts_cache = (parts, keep, token, out)  # the whole string: its first keep * PART_LEN are kept
        return out


def _summarizer(summ: Summarizer | type[Summarizer] | None) -> Summarizer | None:
    """The engine's summarizer: an instance, or a class instantiated once per session."""
    return summ() if isinstance(summ, type) else summ


__all__ = ["PROVIDER_ALIASES", "Builder", "ModelCall", "Pack", "check_format"]
