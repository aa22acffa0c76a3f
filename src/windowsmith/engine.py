"""The engine and its sessions: the public entry points.

    engine = Engine(model="claude-sonnet-4-5")        # SQLite store in ./.windowsmith/ by default
    s = engine.session("ticket-42", goal="...", acceptance=["...", "..."])
    s.system("You are ...")
    s.tools([...])
    s.user("...")
    pack = s.build()                                   # pack.request → the provider SDK
    s.record(response)                                 # assistant message + billed usage
    s.tool_result(call_id, output)

Every call that changes the session validates its input first and then appends one event to the
log; the session's state is a fold of the log, so a session resumed in another process builds the
same packs byte for byte.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .artifacts import GC_GRACE_SECONDS, ArtifactStore, EmbeddedArtifacts, collect_garbage
from .assemble import Assembly, assemble
from .budget import Budget, BudgetConfig
from .cache import plan_cache, prefix_tokens
from .compaction.pipeline import CompactionConfig, CompactionResult, Compactor
from .errors import BudgetBlockedError, ConfigError, InvalidMessageError, UnmatchedToolResultError, UsageError
from .hashing import sha256_hex
from .ingest.pipeline import IngestConfig, Ingested, ingest_result
from .ingest.redact import has_candidate, redact, redact_obj, redact_schema
from .layers.base import Layer
from .layers.builtin import default_layers
from .layers.evidence import StepTracker
from .manifest import PART_LEN, Manifest
from .model import (
    Block,
    Message,
    Text,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    block_from_dict,
    check_json_value,
    clean_text,
)
from .registry import ModelSpec, Registry, load_registry
from .render.base import Rendered, Renderer
from .request import NeutralRequest
from .result_tools import ResultTools
from .state import SessionState
from .store import Store, open_store
from .tokens import Calibration, TokenCounter


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


class Engine:
    """Builds packs for sessions of one default model, over one store.

    ``store``: a :class:`Store`, a path to a SQLite file, a ``postgresql://`` URL, or None for
    ``./.windowsmith/windowsmith.db`` (``$WINDOWSMITH_HOME`` overrides the folder).
    ``registry``: a :class:`Registry` or a JSON/TOML file merged over the packaged models.
    ``window``: use a smaller window than the model's (e.g. to test compaction).
    ``format``: the request format when ``build()`` is not told one (default: the model's).
    ``layers``: a factory returning the layers to assemble (default: the built-in ones).
    ``artifacts``: where offloaded tool results go (default: inside the store; see ``windowsmith.artifacts``).
    ``ingest``: redaction and offload settings for tool results (:class:`IngestConfig`).
    ``compaction``: when and how hard to compact history (:class:`CompactionConfig`).
    ``summarizer``: what summarizes old history (default: the offline extractive summarizer; see
    ``windowsmith.compaction`` for the Anthropic and OpenAI adapters and the fake for tests).
    """

    def __init__(
        self,
        model: str,
        *,
        store: Store | str | Path | None = None,
        registry: Registry | str | Path | None = None,
        budget: BudgetConfig | None = None,
        window: int | None = None,
        format: str | None = None,
        layers: Callable[[], list[Layer]] | None = None,
        artifacts: ArtifactStore | None = None,
        ingest: IngestConfig | None = None,
        compaction: CompactionConfig | None = None,
        summarizer: Any = None,
    ) -> None:
        self.compaction = compaction or CompactionConfig()
        self.summarizer = summarizer  # None: the offline extractive summarizer
        self.registry = registry if isinstance(registry, Registry) else load_registry(registry)
        self.spec: ModelSpec = self.registry.get(model)
        self.model = model
        self.budget = budget or BudgetConfig()
        if window is not None and (not isinstance(window, int) or window <= 0):
            raise ConfigError(f"window must be a positive number of tokens, got {window!r}")
        self.window = window
        self.format = format
        if format is not None:
            _check_format(format)
        self._owns_store = not isinstance(store, Store)
        self.store: Store = store if isinstance(store, Store) else open_store(None if store is None else str(store))
        self.artifacts: ArtifactStore = artifacts if artifacts is not None else EmbeddedArtifacts(self.store)
        self.ingest = ingest or IngestConfig()
        self._layers_factory = layers or (lambda: default_layers(self.budget.history_low_water))
        self._renderers: dict[str, Renderer] = {}

    def session(
        self,
        session_id: str,
        *,
        goal: str | None = None,
        acceptance: Sequence[str] | None = None,
        step: str | None = None,
        task_required: bool | None = None,
    ) -> Session:
        """Open (or create) a session. A task given here is recorded only if it differs from the
        session's current task, so reopening with the same arguments changes nothing."""
        if not isinstance(session_id, str) or not session_id.strip():
            raise UsageError("session id must be a non-empty string, e.g. engine.session('ticket-42')")
        if self.store.get_session(session_id) is None:
            self.store.create_session(session_id, {})
        s = Session(self, session_id)
        if goal is not None or acceptance is not None or step is not None or task_required is not None:
            s.task(goal=goal, acceptance=acceptance, step=step, required=task_required)
        return s

    def sessions(self) -> list[str]:
        return [r.id for r in self.store.list_sessions()]

    def delete_session(self, session_id: str) -> bool:
        """Delete a session: its events, packs and blob references; return whether it existed. Its
        blobs (and the space in the store) are freed by :meth:`gc`."""
        return self.store.delete_session(session_id)

    def gc(self, *, grace_seconds: float = GC_GRACE_SECONDS, vacuum: bool = True) -> dict[str, int]:
        """Collect garbage: unreferenced and orphaned blobs (here and in ``artifacts``), then shrink the
        store (``vacuum``) so deleted content leaves the file. See :func:`windowsmith.artifacts.collect_garbage`."""
        return collect_garbage(self.store, self.artifacts, grace_seconds=grace_seconds, vacuum=vacuum)

    def renderer(self, fmt: str) -> Renderer:
        r = self._renderers.get(fmt)
        if r is None:
            from .render import get_renderer

            r = get_renderer(fmt)
            self._renderers[fmt] = r
        return r

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_FORMATS = ("anthropic", "openai-chat", "openai-responses", "gemini")
_PROVIDER_ALIASES = {"openai": "openai-chat", "claude": "anthropic", "google": "gemini", "responses": "openai-responses"}


def _check_format(fmt: str) -> str:
    fmt = _PROVIDER_ALIASES.get(fmt, fmt)
    if fmt not in _FORMATS:
        raise ConfigError(f"unknown provider format {fmt!r}; use one of {', '.join(_FORMATS)}")
    return fmt


class Session:
    """One agent conversation: an append-only log plus the state folded from it."""

    def __init__(self, engine: Engine, session_id: str) -> None:
        self.engine = engine
        self.id = session_id
        self.store = engine.store
        self.state = SessionState(session_id)
        for ev in self.store.events(session_id):
            self.state.apply(ev)
        self._layers = engine._layers_factory()
        self._counters: dict[str, TokenCounter] = {}
        self._calibrations: dict[str, Calibration] = {}
        self.last_pack: Pack | None = None
        self._refs = _RefTracker()
        self._steps = StepTracker()
        self._parts_cache: tuple[tuple[str, ...], str] = ((), "")

    def refresh(self) -> int:
        """Catch up with events other writers appended since this session last read the log (after a
        :class:`~windowsmith.errors.ConflictError`, for example); return how many were applied.

        Reads only the events after the session's current seq, so it costs what is new, not the log."""
        events = self.store.events(self.id, since_seq=self.state.seq + 1)
        for ev in events:
            self.state.apply(ev)
        return len(events)

    # ------------------------------------------------------------------ writing events

    def _append(self, kind: str, data: Mapping[str, Any]) -> None:
        ev = self.store.append(self.id, kind, dict(data), expected_parent=self.state.head)
        self.state.apply(ev)

    def system(self, text: str, *, name: str = "system") -> None:
        """Set a system instruction block (``name`` lets several coexist; same name replaces)."""
        text, _ = clean_text(text, "system text")
        text = self._redact_text(text)
        if self.state.system.get(name) != text:
            self._append("system", {"name": name, "text": text})

    def context(self, text: str, *, name: str = "instructions") -> None:
        """Set stable session context (instruction files, project notes), placed after the system prompt."""
        text, _ = clean_text(text, "context text")
        text = self._redact_text(text)
        if self.state.context.get(name) != text:
            self._append("system", {"name": name, "text": text, "slot": "session"})

    def tools(self, tools: Iterable[Mapping[str, Any] | ToolSpec]) -> None:
        """Declare the tool definitions (neutral, OpenAI, Anthropic or Gemini form). Validated as JSON Schema;
        secrets in descriptions and schema strings (descriptions, defaults, enums, examples) are redacted."""
        if isinstance(tools, Mapping | str):
            raise InvalidMessageError("tools(...) takes a list of tool definitions")
        specs = [t if isinstance(t, ToolSpec) else ToolSpec.from_dict(t, f"tools[{i}]") for i, t in enumerate(tools)]
        names = [t.name for t in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidMessageError(f"duplicate tool name(s) {dup}; each tool needs a unique name")
        if self.engine.ingest.redact:
            specs = [_redact_spec(t) for t in specs]
        if tuple(specs) != self.state.tools:
            self._append("tools", {"tools": [t.to_dict() for t in specs]})

    def task(
        self,
        goal: str | None = None,
        *,
        step: str | None = None,
        acceptance: Sequence[str] | None = None,
        required: bool | None = None,
    ) -> None:
        """Set the task: goal, current step, acceptance checklist. Omitted fields keep their value.
        Secrets in any of them are redacted before they are stored."""
        cur = self.state.task
        for field_name, value in (("goal", goal), ("step", step)):
            if value is not None and not isinstance(value, str):
                raise InvalidMessageError(f"the task {field_name} must be a string, got {type(value).__name__}")
        if acceptance is not None and (isinstance(acceptance, str) or not all(isinstance(a, str) for a in acceptance)):
            raise InvalidMessageError("acceptance must be a list of strings, e.g. ['refund issued', 'customer told']")
        goal = None if goal is None else self._redact_text(goal)
        step = None if step is None else self._redact_text(step)
        if acceptance is not None:
            acceptance = [self._redact_text(a) for a in acceptance]
        new_acc = cur.acceptance if acceptance is None else tuple(
            (a, dict(cur.acceptance).get(a, False)) for a in acceptance
        )
        data = {
            "goal": cur.goal if goal is None else goal,
            "step": cur.step if step is None else step,
            "acceptance": [{"item": a, "done": d} for a, d in new_acc],
            "required": cur.required if required is None else bool(required),
        }
        if data != cur.to_dict():
            self._append("task", data)

    def check(self, item: str | int, done: bool = True) -> None:
        """Mark an acceptance item (by text or index) done or not done."""
        acc = list(self.state.task.acceptance)
        if isinstance(item, str):
            item = self._redact_text(item)  # the checklist is stored redacted
        idx = item if isinstance(item, int) else next((i for i, (a, _) in enumerate(acc) if a == item), None)
        if idx is None or not 0 <= idx < len(acc):
            raise UsageError(f"no acceptance item {item!r}; the checklist is {[a for a, _ in acc]}")
        acc[idx] = (acc[idx][0], done)
        data = self.state.task.to_dict()
        data["acceptance"] = [{"item": a, "done": d} for a, d in acc]
        if data != self.state.task.to_dict():
            self._append("task", data)

    def note(self, layer: str, text: str, *, source: str | None = None, ref: str | None = None) -> None:
        """Add a note to a tail layer: ``memory``, ``evidence`` or ``knowledge``."""
        if layer not in ("memory", "evidence", "knowledge"):
            raise UsageError(f"unknown note layer {layer!r}; use 'memory', 'evidence' or 'knowledge'")
        text, _ = clean_text(text, "note text")
        text = self._redact_text(text)
        data: dict[str, Any] = {"type": "note", "layer": layer, "text": text}
        if source:
            data["source"] = source
        if ref:
            data["ref"] = ref
        self._append("meta", data)

    def remember(self, text: str, *, source: str | None = None) -> None:
        self.note("memory", text, source=source)

    def add(self, message: Message | Mapping[str, Any], *, _ingested: Mapping[str, Ingested] | None = None) -> Message:
        """Append a neutral message (or its dict form) after validating it against the session.

        Text is redacted of secrets before it is stored; tool results go through the ingest pipeline
        (redact → offload to the artifact store when large → compressed view with a reference), and an
        offloaded result leaves an evidence note for the current step. One atomic append.
        """
        msg = message if isinstance(message, Message) else Message.from_dict(message)
        if not msg.content:
            raise InvalidMessageError("a message needs at least one content block")
        extra: list[tuple[str, dict[str, Any]]] = []
        ingest_meta: list[dict[str, Any]] = []
        if msg.role == "tool":
            open_calls = self.state.open_calls
            for r in msg.tool_results:
                self._check_result(r.call_id, open_calls)
            results = []
            for r in msg.tool_results:
                name = r.name or self.state.call_names.get(r.call_id)
                ing = _ingested[r.call_id] if _ingested and r.call_id in _ingested else \
                    self._ingest(r.content, name, r.call_id)
                results.append(ToolResult(r.call_id, ing.blocks, r.is_error, name))
                ingest_meta.append({"call_id": r.call_id, **ing.meta()})
                if ing.artifact:
                    extra.append(("meta", {
                        "type": "note", "layer": "evidence", "text": f"{ing.summary} (artifact://{ing.artifact})",
                        "ref": f"artifact://{ing.artifact}", "source": f"tool:{name}:{r.call_id}",
                        "step": self._steps.key(self.state),
                    }))
            msg = Message("tool", tuple(results))
        else:
            if msg.role == "assistant":
                seen = set(self.state.call_names)
                for c in msg.tool_calls:
                    if c.id in seen:
                        raise InvalidMessageError(
                            f"tool call id {c.id!r} was already used in this session; ids must be unique")
                    seen.add(c.id)
            msg = _redact_message(msg) if self.engine.ingest.redact else msg
        data: dict[str, Any] = {"message": msg.to_dict()}
        if ingest_meta:
            data["ingest"] = ingest_meta
        self._append_many([("message", data), *extra])
        return msg

    def _redact_text(self, text: str) -> str:
        return redact(text).text if self.engine.ingest.redact and has_candidate(text) else text

    def _append_many(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        events = self.store.append_many(self.id, items, expected_parent=self.state.head)
        for ev in events:
            self.state.apply(ev)

    def _ingest(self, content: Any, tool_name: str | None, call_id: str) -> Ingested:
        args = None
        for u in reversed(self.state.units[-4:]):
            for m in u.messages:
                for c in m.tool_calls:
                    if c.id == call_id:
                        args = c.arguments
        eng = self.engine
        fmt = _check_format(eng.format or eng.spec.default_format)
        counter = self.counter(fmt)
        window = eng.window or eng.spec.context_window
        available = Budget.for_window(window, eng.spec.max_output, eng.budget).available
        used = self.last_pack.tokens if self.last_pack is not None else 0
        return ingest_result(
            list(content) if isinstance(content, tuple) else content,
            artifacts=eng.artifacts, session_id=self.id, count_tokens=counter.text,
            remaining_tokens=max(0, available - used), available_tokens=available, tool_name=tool_name, arguments=args, config=eng.ingest,
        )

    def user(self, content: str | bytes | Sequence[Block | Mapping[str, Any]]) -> Message:
        """Append a user message (text, or a list of text/image blocks)."""
        return self.add(Message("user", _blocks(content, "user content")))

    def assistant(self, content: str | Sequence[Block | Mapping[str, Any]] = "", *,
                  tool_calls: Sequence[ToolCall | Mapping[str, Any]] = ()) -> Message:
        """Append an assistant message recorded by the caller (``record()`` does this from a response)."""
        blocks = list(_blocks(content, "assistant content")) if content else []
        for i, c in enumerate(tool_calls):
            blocks.append(c if isinstance(c, ToolCall) else block_from_dict({"type": "tool_call", **c}, f"tool_calls[{i}]"))
        return self.add(Message("assistant", tuple(blocks)))

    def _check_result(self, call_id: str, open_calls: frozenset[str]) -> None:
        if call_id in open_calls:
            return
        if call_id in self.state.answered:
            raise UnmatchedToolResultError(f"tool call {call_id!r} already has a result; record each result once")
        hint = f"open calls: {sorted(open_calls)}" if open_calls else "no tool call is waiting for a result"
        raise UnmatchedToolResultError(
            f"no assistant tool call with id {call_id!r} is waiting for a result ({hint}); "
            "record the assistant message with its tool calls first (session.record(response))"
        )

    def tool_result(self, call_id: str, output: Any, *, is_error: bool = False) -> Message:
        """Record the result of a tool call. ``output``: text, bytes, a JSON-able value, or text/image
        blocks. It is redacted, and offloaded with a compressed view when large (see :meth:`add`)."""
        self._check_result(call_id, self.state.open_calls)
        from .ingest.pipeline import _normalize

        check_json_value(output, "tool output")
        blocks, raw = _normalize(output, "tool output")
        content: Any = raw if raw is not None else tuple(blocks)
        ing = self._ingest(content, self.state.call_names.get(call_id), call_id)
        return self.add(Message("tool", (ToolResult(call_id, ing.blocks, bool(is_error),
                                                    self.state.call_names.get(call_id)),)),
                        _ingested={call_id: ing})

    @property
    def result_tools(self) -> ResultTools:
        """Handler for the ``read_result``/``search_result`` tools (``windowsmith.RESULT_TOOLS``):
        ``session.result_tools(name, arguments) -> str``."""
        rt = self.__dict__.get("_result_tools")
        if rt is None:
            rt = ResultTools(self.engine.artifacts, self.id)
            self.__dict__["_result_tools"] = rt
        return rt

    # ------------------------------------------------------------------ building

    def counter(self, fmt: str) -> TokenCounter:
        c = self._counters.get(fmt)
        if c is None:
            spec = self.engine.spec
            c = TokenCounter(spec.tokenizer, fmt, spec.token_factor, self._calibration(fmt))
            self._counters[fmt] = c
        return c

    def _calibration_key(self, fmt: str) -> str:
        return f"{self.engine.spec.name}|{fmt}"

    def _calibration(self, fmt: str) -> Calibration:
        cal = self._calibrations.get(fmt)
        if cal is None:
            cal = Calibration.from_dict(self.store.get_kv("calibration", self._calibration_key(fmt)))
            self._calibrations[fmt] = cal
        return cal

    def build(self, provider: str | None = None, *, _breaker: set[str] | None = None) -> Pack:
        """Build the request for the next model call.

        Compaction that is due (see :class:`CompactionConfig`) runs first, cheapest stage first, and
        is appended to the log; the pack is then assembled from the log as it stands, so replaying the
        log to the manifest's ``seq`` rebuilds this exact request.

        Optional context is fitted under ``BudgetConfig.block_at`` of the available budget; if the
        required layers alone are over it, raises :class:`BudgetBlockedError` before anything is written
        (no compaction record, no pack).
        """
        eng = self.engine
        spec = eng.spec
        fmt = _check_format(provider or eng.format or spec.default_format)
        if self.state.open_calls:
            raise UsageError(
                f"tool call(s) {sorted(self.state.open_calls)} have no result yet; record them with "
                "session.tool_result(call_id, output) before build()"
            )
        if not self.state.units and not self.state.task.declared:
            raise UsageError("the session has no messages; add one with session.user('...') before build()")
        counter = self.counter(fmt)
        window = eng.window or spec.context_window
        budget = Budget.for_window(window, spec.max_output, eng.budget)
        cache_key = "ws-" + hashlib.sha256(self.id.encode()).hexdigest()[:24]

        def run_assembly() -> Assembly:
            return assemble(self.state, self._layers, counter, budget, eng.budget, model=spec.name, cache_key=cache_key)

        asm = run_assembly()
        limit = eng.budget.block_tokens(budget.available)
        self._check_block(asm, limit)  # compaction only shrinks history, which cannot help here
        actions = []
        if eng.compaction.enabled:
            result = self._run_compaction(asm, counter, budget, _breaker if _breaker is not None else set())
            if result.changed:
                actions.extend(result.actions)
                asm = run_assembly()
            else:
                actions.extend(result.actions)  # a failed summary is recorded even when nothing changed
        self._check_block(asm, limit)  # a custom layer's required items may depend on the compacted view
        if self._persist_truncation(asm):
            actions.extend(a for a in asm.actions if a.layer == "history")
            asm = run_assembly()  # the pack must be what the log (with the truncation record) builds
        asm.actions[:0] = actions
        req = asm.request
        from dataclasses import replace

        req = replace(req, model=eng.model, cache=plan_cache(req, spec.max_breakpoints))
        rendered = eng.renderer(fmt).render(req)
        manifest = self._manifest(asm, req, rendered, counter, fmt, window)
        existing = self.store.get_pack(manifest.pack_id)
        if existing is None:
            self.store.save_pack(manifest.pack_id, self.id, self.state.seq, manifest.to_dict())
        pack = Pack(rendered.request, manifest, rendered, req, fmt)
        self.last_pack = pack
        return pack

    def _check_block(self, asm: Assembly, limit: int) -> None:
        """Refuse a request over the block threshold. Optional layers are fitted under it, so only the
        required layers (system, tools, task, and any layer's required items) can put a request over."""
        if asm.tokens <= limit:
            return
        cfg = self.engine.budget
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

    def _persist_truncation(self, asm: Assembly) -> bool:
        h = asm.history
        if h is None:
            return False
        keep = h.meta.get("keep_from_seq")
        if keep is not None and keep > self.state.keep_from_seq:
            from .compaction.pipeline import store_transcript

            st = self.state
            lo = st.first_compactable_unit()
            first = st.units[lo].first_seq if lo < len(st.units) else keep
            transcript = (store_transcript(self, st.span_messages(first, keep - 1), first, keep - 1)
                          if first < keep else None)
            self._append("compaction", {
                "type": "truncate",
                "keep_from_seq": keep,
                "transcript": transcript,
                "dropped_units": h.meta.get("dropped_units", 0),
                "dropped_tokens": h.meta.get("dropped_tokens", 0),
                "reason": "history over its budget",
            })
            return True
        return False

    # ------------------------------------------------------------------ compaction

    @property
    def compactor(self) -> Compactor:
        """This session's compaction pipeline (config and summarizer from the engine)."""
        c = self.__dict__.get("_compactor")
        if c is None:
            summ = self.engine.summarizer
            c = Compactor(self.engine.compaction, summ() if isinstance(summ, type) else summ)
            self.__dict__["_compactor"] = c
        return c

    def _request_size(self, asm: Assembly) -> int:
        """Counted size of the request before fitting (tool definitions included), or the billed size
        of the last call if it is larger and no compaction happened since."""
        size = asm.tokens + sum(max(0, a.tokens_before - a.tokens_after) for a in asm.actions)
        last_comp = max((c["seq"] for c in self.state.compactions), default=-1)
        if self.state.usages:
            seq, usage, _ = self.state.usages[-1]
            if seq > last_comp:
                size = max(size, usage.prompt_tokens)
        return size

    def _run_compaction(self, asm: Assembly, counter: TokenCounter, budget: Budget, breaker: set[str], *,
                        force: bool = False, harder: bool = False, reason: str = "") -> CompactionResult:
        counts: list[int] = []
        if asm.history is not None and "counts" in asm.history.meta:
            counts = asm.history.meta["counts"]
        elif self.state.units:
            counts = [sum(counter.raw_message(m) for m in u.messages) for u in self.state.units]
        return self.compactor.run(
            self, size=self._request_size(asm), counts=counts, counter=counter, budget=budget,
            spec=self.engine.spec, compact_at=self.engine.budget.compact_at, breaker=breaker,
            force=force, harder=harder, reason=reason,
        )

    def compact(self, provider: str | None = None, *, reason: str | None = None, harder: bool = False,
                _breaker: set[str] | None = None) -> CompactionResult:
        """Compact now, whatever the thresholds: fold old exchanges, then summarize the oldest span
        (emergency truncation if the summary fails). ``harder``: aim lower and, if a summary already
        ran in this breaker, truncate (the reactive path after a provider overflow error).
        Appends the records to the log; the next ``build()`` uses them."""
        eng = self.engine
        fmt = _check_format(provider or eng.format or eng.spec.default_format)
        if not self.state.units:
            return CompactionResult()
        counter = self.counter(fmt)
        budget = Budget.for_window(eng.window or eng.spec.context_window, eng.spec.max_output, eng.budget)
        cache_key = "ws-" + hashlib.sha256(self.id.encode()).hexdigest()[:24]
        asm = assemble(self.state, self._layers, counter, budget, eng.budget, model=eng.spec.name, cache_key=cache_key)
        return self._run_compaction(asm, counter, budget, _breaker if _breaker is not None else set(),
                                    force=not harder, harder=harder, reason=reason or "compaction requested")

    def call(self, send: Callable[[dict[str, Any]], Any], provider: str | None = None, *, record: bool = True) -> Any:
        """Build, send with ``send(request_kwargs)``, record the response, and return it.

        If the provider rejects the request as too long (:func:`windowsmith.render.is_context_overflow`
        recognizes each SDK's error), compact harder and retry once; a per-call circuit breaker makes
        sure no compaction stage runs twice and nothing loops. A second overflow is raised as is.
        """
        from .render import is_context_overflow

        breaker: set[str] = set()
        pack = self.build(provider, _breaker=breaker)
        try:
            response = send(pack.request)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            self.compact(provider, reason=f"the provider rejected {pack.tokens:,} tokens as too long "
                         f"({type(exc).__name__})", harder=True, _breaker=breaker)
            pack = self.build(provider, _breaker=breaker)
            response = send(pack.request)
        if record:
            self.record(response, pack=pack)
        return response

    def compact_context(self, reason: str | None = None, **_: Any) -> str:
        """Handler of the ``compact_context`` tool (:data:`windowsmith.compaction.COMPACT_CONTEXT_TOOL`):
        compacts now and returns a short report for the tool result. Safe while the call is open."""
        return self.compact(reason=f"the agent called compact_context{': ' + reason if reason else ''}").describe()

    @property
    def lessons(self) -> list[dict[str, Any]]:
        """Memory candidates extracted by summaries (text, source, provenance), oldest first."""
        return list(self.state.lessons)

    def reconstruct(self, budget_tokens: int, *, kinds: Sequence[str] | None = None,
                    content_provider: Callable[[str], str | None] | None = None) -> str:
        """Rebuild detail for the latest summary's best references within ``budget_tokens``."""
        from .compaction.base import Reference
        from .compaction.references import reconstruct

        refs = [Reference.from_dict(r) for r in (self.state.summary or {}).get("refs", [])]
        if kinds is not None:
            refs = [r for r in refs if r.kind in kinds]
        return reconstruct(refs, budget_tokens, content_provider, self.engine.artifacts).text

    def _manifest(self, asm: Assembly, req: NeutralRequest, rendered: Rendered, counter: TokenCounter,
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
        hraw = asm.history.meta.get("raw_tokens") if asm.history is not None else None
        ptoks = prefix_tokens(req, counter, hraw if isinstance(hraw, int) else None)
        checksum = rendered.checksum
        pack_id = "pk_" + sha256_hex(f"{self.id}|{self.state.head}|{fmt}|{checksum}")[:20]
        return Manifest(
            pack_id=pack_id,
            session_id=self.id,
            seq=self.state.seq,
            head=self.state.head,
            model=self.engine.spec.name,
            format=fmt,
            window=window,
            reserved_output=asm.budget.reserved_output,
            available=asm.budget.available,
            tokens=asm.tokens,
            layers=layers,
            components=comp,
            actions=[a.to_dict() for a in asm.actions],
            repairs=[r.to_dict() for r in self.state.repairs],
            artifacts=sorted(set(asm.refs) | self._refs.refs(req)),
            redactions=self._refs.redactions(req),
            cache={
                "breakpoints": req.cache.count,
                "prefix_tokens": ptoks,
                "prefix_parts": rendered.cache_prefix_parts,
                "prefix_hash": rendered.prefix_hash,
                "layout": layout,
            },
            checksum=checksum,
            parts=self._short_parts(rendered.parts),
            status=status,
            warnings=warnings,
            calibration=counter.calibration.ratio,
            messages=len(req.messages),
        )

    def _short_parts(self, parts: tuple[str, ...]) -> str:
        """The manifest's part digests (12 hex chars each), extended incrementally turn to turn."""
        prev, short = self._parts_cache
        k = len(prev)
        if k and len(parts) >= k and parts[:k] == prev:
            short = short + "".join(p[:PART_LEN] for p in parts[k:])
        else:
            short = "".join(p[:PART_LEN] for p in parts)
        # keep only the stable prefix (the last parts — tail, final message — change every turn)
        keep = max(0, len(parts) - 3)
        self._parts_cache = (parts[:keep], short[: keep * PART_LEN])
        return short

    # ------------------------------------------------------------------ recording responses

    def record(self, response: Any = None, *, message: Message | None = None, usage: Usage | Mapping[str, int] | None = None,
               pack: Pack | None = None) -> Message | None:
        """Record a provider response (parsed with the format of the pack it answers), or a neutral
        ``message`` and/or ``usage``. Billed usage calibrates later token counts."""
        pack = pack or self.last_pack
        if response is not None:
            if pack is None:
                raise UsageError("record(response) needs the pack it answers; call build() first or pass pack=")
            parsed = self.engine.renderer(pack.format).parse_response(response)
            message, usage = parsed.message, parsed.usage
        msg = None
        if message is not None and message.content:
            msg = self.add(message)
        if usage is not None:
            u = usage if isinstance(usage, Usage) else Usage.from_dict(usage)
            self._append("usage", {"usage": u.to_dict(), "pack_id": pack.id if pack else None})
            if pack is not None and u.prompt_tokens > 0:
                cal = self._calibration(pack.format)
                cal.observe(pack.tokens, u.prompt_tokens)
                self.store.set_kv("calibration", self._calibration_key(pack.format), cal.to_dict())
        return msg

    # ------------------------------------------------------------------ reading

    @property
    def messages(self) -> list[Message]:
        """The full transcript (never trimmed by compaction)."""
        return list(self.state.messages)

    def packs(self) -> list[Manifest]:
        return [Manifest.from_dict(m) for m in self.store.list_packs(self.id)]


def _redact_spec(spec: ToolSpec) -> ToolSpec:
    """The tool definition with secrets in its description and schema strings replaced by typed markers."""
    desc = redact(spec.description).text if has_candidate(spec.description) else spec.description
    params, counts = redact_schema(dict(spec.parameters))
    if desc == spec.description and not counts:
        return spec
    return ToolSpec(spec.name, desc, params)


def _redact_message(msg: Message) -> Message:
    """The message with secrets in its text and tool-call arguments replaced by typed markers."""
    changed = False
    blocks: list[Block] = []
    for b in msg.content:
        if isinstance(b, Text) and has_candidate(b.text):
            r = redact(b.text)
            if r.total:
                b = Text(r.text)
                changed = True
        elif isinstance(b, ToolCall):
            args, counts = redact_obj(dict(b.arguments))
            if counts:
                b = ToolCall(b.id, b.name, args)
                changed = True
        blocks.append(b)
    return Message(msg.role, tuple(blocks)) if changed else msg


def _blocks(content: Any, where: str) -> tuple[Block, ...]:
    if isinstance(content, str | bytes):
        text, _ = clean_text(content, where)
        return (Text(text),)
    if isinstance(content, Block.__args__):  # type: ignore[attr-defined]
        return (content,)
    if not isinstance(content, Sequence):
        raise InvalidMessageError(f"{where} must be text or a list of blocks, got {type(content).__name__}")
    return tuple(b if isinstance(b, Block.__args__) else block_from_dict(b, f"{where}[{i}]")  # type: ignore[attr-defined]
                 for i, b in enumerate(content))


_ARTIFACT_RE = re.compile(r"artifact://[0-9a-f]{64}")
_REDACTED_RE = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")
_refs_cache: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _message_refs(m: Message) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(artifact references, redaction marker types) in a message, cached by digest."""
    key = m.digest
    hit = _refs_cache.get(key)
    if hit is None:
        refs: set[str] = set()
        marks: list[str] = []
        for b in m.content:
            texts: list[str] = []
            if isinstance(b, ToolResult | Text):
                texts.append(b.text)
            elif isinstance(b, ToolCall):
                texts.append(b.arguments_json)
            for t in texts:
                if "artifact://" in t:
                    refs.update(_ARTIFACT_RE.findall(t))
                if "[REDACTED:" in t:
                    marks.extend(_REDACTED_RE.findall(t))
        hit = (tuple(sorted(refs)), tuple(marks))
        if len(_refs_cache) > 200_000:
            _refs_cache.clear()
        _refs_cache[key] = hit
    return hit


class _RefTracker:
    """Every artifact reference in a request, found incrementally.

    When this request's messages start with the previous request's (the usual append-only turn;
    checked with a C-level tuple comparison that short-circuits on identical objects), only the new
    messages are scanned; otherwise everything is rescanned (per-message results are cached by digest).
    """

    def __init__(self) -> None:
        self._messages: tuple[Message, ...] = ()
        self._counts: dict[str, int] = {}
        self._redactions: dict[str, int] = {}

    def _scan(self, req: NeutralRequest) -> None:
        msgs = req.messages
        k = len(self._messages)
        if k and len(msgs) >= k and msgs[:k] == self._messages:
            new = msgs[k:]
        else:
            self._counts = {}
            self._redactions = {}
            new = msgs
        for m in new:
            refs, marks = _message_refs(m)
            for r in refs:
                self._counts[r] = self._counts.get(r, 0) + 1
            for t in marks:
                self._redactions[t] = self._redactions.get(t, 0) + 1
        self._messages = msgs

    def refs(self, req: NeutralRequest) -> set[str]:
        self._scan(req)
        return set(self._counts) | set(_ARTIFACT_RE.findall(req.tail or ""))

    def redactions(self, req: NeutralRequest) -> dict[str, int]:
        """Secret markers per type in the whole request: tool definitions, system and session text,
        messages and the dynamic tail (task, notes). Call after :meth:`refs` for the same request."""
        out = dict(self._redactions)
        texts = [req.tail or ""]
        texts.extend(seg.text for seg in (*req.system, *req.session))
        texts.extend(t.canonical for t in req.tools)
        for text in texts:
            if "[REDACTED:" in text:
                for t in _REDACTED_RE.findall(text):
                    out[t] = out.get(t, 0) + 1
        return dict(sorted(out.items()))


__all__ = ["Engine", "Pack", "Session"]
