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

import asyncio
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .artifacts import GC_GRACE_SECONDS, ArtifactStore, EmbeddedArtifacts, collect_garbage
from .budget import BudgetConfig
from .build import Builder, ModelCall, Pack, check_format
from .compaction.base import Reference, Summarizer
from .compaction.config import Breaker, CompactionConfig, CompactionResult
from .compaction.pipeline import Compactor
from .compaction.reconstruct import reconstruct
from .errors import ConfigError, InvalidMessageError, ModelRetiredWarning, UnmatchedToolResultError, UsageError
from .formats import get_renderer, is_context_overflow
from .formats.base import Renderer
from .formats.stream import resolve
from .guidance.repair import repair_message
from .ingest.messages import redact_message
from .ingest.pipeline import IngestConfig, Ingested, ingest_result
from .ingest.redact import has_candidate, redact
from .jsonvalues import check_json_value
from .knowledge import Knowledge
from .layers.base import Layer
from .layers.builtin import default_layers
from .layers.evidence import StepTracker
from .log import SessionLog
from .manifest import Manifest
from .memory import Memory, MemoryConfig
from .model import (
    Block,
    Message,
    Text,
    ToolCall,
    ToolResult,
    Usage,
    block_from_dict,
    blocks_from_content,
)
from .registry import ModelSpec, Registry, load_registry
from .resume import FREEZE_EVENTS, paused_gc
from .retrieval.search import Embedder
from .session_async import AsyncSessionMixin, check_sync, is_async_callable, overflow_reason
from .session_layers import LayersMixin
from .session_load import LoadMixin, LoadResult
from .session_tools import ToolHandlersMixin
from .state import SessionState
from .store import Store, open_store
from .tokens import TokenCounter


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
    ``tenant``: work as this tenant of a shared store (:meth:`Store.for_tenant`): other tenants'
    sessions, packs, artifacts and key-value rows are invisible. Needs the embedded artifact store.
    ``memory``: which project and user memory the sessions share (:class:`MemoryConfig`).
    ``embedder``: vectors for hybrid retrieval (memory, knowledge, recall), e.g.
    ``windowsmith.retrieval.WordLlamaEmbedder()`` (offline, ``windowsmith[vectors]``); None: lexical only.
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
        summarizer: Summarizer | type[Summarizer] | None = None,
        tenant: str | None = None,
        memory: MemoryConfig | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.memory = memory or MemoryConfig()
        self.embedder = embedder
        self.compaction = compaction or CompactionConfig()
        self.summarizer = summarizer  # None: the offline extractive summarizer
        self.registry = registry if isinstance(registry, Registry) else load_registry(registry)
        self.spec: ModelSpec = self.registry.get(model)
        self.model = model
        if self.spec.retired():
            successor = f"; switch to {self.spec.successor!r}" if self.spec.successor else ""
            warnings.warn(ModelRetiredWarning(
                f"model {model!r} was retired by its provider on {self.spec.retires}: requests for it will be "
                f"refused{successor} (Engine(model=...))"), stacklevel=2)
        self.budget = budget or BudgetConfig()
        if window is not None and (not isinstance(window, int) or window <= 0):
            raise ConfigError(f"window must be a positive number of tokens, got {window!r}")
        self.window = window
        self.format = format
        if format is not None:
            check_format(format)
        self._owns_store = not isinstance(store, Store)
        self.store: Store = store if isinstance(store, Store) else open_store(None if store is None else str(store))
        self._base_store: Store | None = None
        if tenant is not None:
            if artifacts is not None:
                raise ConfigError("Engine(tenant=...) keeps artifacts in the tenant's store rows; do not pass artifacts=")
            self._base_store = self.store
            self.store = self.store.for_tenant(tenant)
        self.tenant = self.store.tenant
        self.artifacts: ArtifactStore = artifacts if artifacts is not None else EmbeddedArtifacts(self.store)
        self.ingest = ingest or IngestConfig()
        self._knowledge: Knowledge | None = None
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

    def load(self, session_id: str, messages: Sequence[Any], format: str, *, tools: Sequence[Any] | None = None,
             system: str | None = None) -> Session:
        """Open (or create) a session and load a provider-native history into it: ``format`` is one of
        ``openai-chat``, ``openai-responses``, ``anthropic``, ``gemini`` (see :meth:`Session.load`)."""
        s = self.session(session_id)
        s.load(messages, format, tools=tools, system=system)
        return s

    @property
    def knowledge(self) -> Knowledge:
        """The project's knowledge (``engine.knowledge.add(path_or_text)``; see :mod:`windowsmith.knowledge`);
        its scope is ``project:<MemoryConfig.project or 'default'>``."""
        if self._knowledge is None:
            self._knowledge = Knowledge(self.store, self.memory.project, redact_text=self.ingest.redact,
                                        embedder=self.embedder)
        return self._knowledge

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
            r = get_renderer(fmt)
            self._renderers[fmt] = r
        return r

    def close(self) -> None:
        if self._base_store is not None:
            self.store.close()  # the tenant view (its own connection on PostgreSQL)
        if self._owns_store:
            (self._base_store or self.store).close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _without_blank_text(msg: Message) -> Message:
    """``msg`` without empty or whitespace-only text blocks (providers reject them), or an
    InvalidMessageError when nothing else is left."""
    blocks = tuple(b for b in msg.content if not (isinstance(b, Text) and not b.text.strip()))
    if not blocks:
        raise InvalidMessageError(
            f"the {msg.role} message is empty or whitespace only, which providers reject; "
            "send non-blank text (or leave the message out)")
    return msg if len(blocks) == len(msg.content) else Message(msg.role, blocks)


class Session(LayersMixin, LoadMixin, ToolHandlersMixin, AsyncSessionMixin):
    """One agent conversation: an append-only log plus the state folded from it."""

    def __init__(self, engine: Engine, session_id: str) -> None:
        self.engine = engine
        self.id = session_id
        self.store = engine.store
        self.log = SessionLog(engine.store, engine.artifacts, session_id)
        self.memory = Memory(engine.store, session_id, engine.memory, embedder=engine.embedder)
        layers = engine._layers_factory()
        for layer in layers:  # layers that read the store (memory, recall) bind to their session
            bind = getattr(layer, "bind", None)
            if callable(bind):
                bind(self)
        self._builder = Builder(engine, self.log, layers)
        self._steps = StepTracker()
        self._thread_lock = threading.RLock()  # one async operation of this session at a time
        self._alock: asyncio.Lock | None = None

    @property
    def state(self) -> SessionState:
        """The session's state, folded from its log."""
        return self.log.state

    def refresh(self) -> int:
        """Catch up with events other writers appended since this session last read the log (after a
        :class:`~windowsmith.errors.ConflictError`, for example); return how many were applied.

        Reads only the events after the session's current seq, so it costs what is new, not the log."""
        return self.log.refresh()

    # ------------------------------------------------------------------ writing events

    def _append(self, kind: str, data: Mapping[str, Any]) -> None:
        self.log.append_event(kind, data)

    def add(self, message: Message | Mapping[str, Any]) -> Message:
        """Append a neutral message (or its dict form) after validating it against the session.

        Text is redacted of secrets before it is stored; tool results go through the ingest pipeline
        (redact → offload to the artifact store when large → compressed view with a reference), and an
        offloaded result leaves an evidence note for the current step. One atomic append.
        """
        return self._add(message if isinstance(message, Message) else Message.from_dict(message))

    def _add(self, msg: Message, ingested: Mapping[str, Ingested] | None = None) -> Message:
        """``add``, with tool results already ingested (by ``tool_result``) passed in by call id."""
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
                ing = ingested[r.call_id] if ingested and r.call_id in ingested else \
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
            msg = _without_blank_text(msg)
            if msg.role == "assistant" and msg.tool_calls and self.engine.ingest.repair_arguments:
                msg, repairs = repair_message(msg, self.state.tools, self._redact_text)
                extra.extend(("meta", r) for r in repairs)
            if msg.role == "assistant":
                seen = set(self.state.call_names)
                for c in msg.tool_calls:
                    if c.id in seen:
                        raise InvalidMessageError(
                            f"tool call id {c.id!r} was already used in this session; ids must be unique")
                    seen.add(c.id)
            msg = redact_message(msg) if self.engine.ingest.redact else msg
        data: dict[str, Any] = {"message": msg.to_dict()}
        if ingest_meta:
            data["ingest"] = ingest_meta
        self.log.append_many([("message", data), *extra])
        return msg

    def _redact_text(self, text: str) -> str:
        return redact(text).text if self.engine.ingest.redact and has_candidate(text) else text

    def _ingest(self, content: Any, tool_name: str | None, call_id: str) -> Ingested:
        args = None
        for u in reversed(self.state.units[-4:]):
            for m in u.messages:
                for c in m.tool_calls:
                    if c.id == call_id:
                        args = c.arguments
        eng = self.engine
        counter = self.counter(self._builder.format())
        available = self._builder.budget().available
        used = self.last_pack.tokens if self.last_pack is not None else 0
        return ingest_result(
            # a replayed result with no blocks is an empty result (as None is), not the JSON text "[]"
            (list(content) or None) if isinstance(content, tuple) else content,
            artifacts=eng.artifacts, session_id=self.id, count_tokens=counter.text,
            remaining_tokens=max(0, available - used), available_tokens=available, tool_name=tool_name, arguments=args, config=eng.ingest,
        )

    def user(self, content: str | bytes | Sequence[Block | Mapping[str, Any]]) -> Message:
        """Append a user message (text, or a list of text/image blocks)."""
        return self.add(Message("user", blocks_from_content(content, "user content")))

    def assistant(self, content: str | Sequence[Block | Mapping[str, Any]] = "", *,
                  tool_calls: Sequence[ToolCall | Mapping[str, Any]] = ()) -> Message:
        """Append an assistant message recorded by the caller (``record()`` does this from a response)."""
        blocks = list(blocks_from_content(content, "assistant content")) if content else []
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
        check_json_value(output, "tool output")
        name = self.state.call_names.get(call_id)
        ing = self._ingest(output, name, call_id)
        return self._add(Message("tool", (ToolResult(call_id, ing.blocks, bool(is_error), name),)), {call_id: ing})

    # ------------------------------------------------------------------ building

    def counter(self, fmt: str) -> TokenCounter:
        """The token counter of this session for request format ``fmt`` (calibrated by billed usage)."""
        return self._builder.counter(fmt)

    @property
    def last_pack(self) -> Pack | None:
        """The pack the last ``build()`` returned (what ``record(response)`` parses against by default)."""
        return self._builder.last_pack

    def build(self, provider: str | None = None, *, model: str | None = None) -> Pack:
        """Build the request for the next model call, in the format of ``provider`` (default: the
        engine's, else its model's), naming ``model`` (default: the engine's model; required when the
        request goes to another provider than the engine model's, e.g. ``build("openai-chat",
        model="gpt-4.1")`` on a Claude engine — budget, tokenizer and prices stay the engine model's).

        Compaction that is due (see :class:`CompactionConfig`) runs first, cheapest stage first, and
        is appended to the log; the pack is then assembled from the log as it stands, so replaying the
        log to the manifest's ``seq`` rebuilds this exact request.

        Optional context is fitted under ``BudgetConfig.block_at`` of the available budget; if the
        required layers alone are over it, raises :class:`BudgetBlockedError` before anything is written
        (no compaction record, no pack).
        """
        if self._builder.last_pack is None and len(self.state.messages) >= FREEZE_EVENTS:
            with paused_gc(freeze=True):  # the first build of a long session renders all of it
                return self._builder.build(self._builder.format(provider), Breaker(), model)
        return self._builder.build(self._builder.format(provider), Breaker(), model)

    # ------------------------------------------------------------------ compaction

    @property
    def compactor(self) -> Compactor:
        """This session's compaction pipeline (config and summarizer from the engine)."""
        return self._builder.compactor

    def compact(self, provider: str | None = None, *, reason: str | None = None, harder: bool = False) -> CompactionResult:
        """Compact now, whatever the thresholds: fold old exchanges, then summarize the oldest span
        (emergency truncation if the summary fails). ``harder``: aim lower and, if a summary already
        ran in this breaker, truncate (the reactive path after a provider overflow error).
        Appends the records to the log; the next ``build()`` uses them."""
        return self._builder.compact(self._builder.format(provider), Breaker(), harder=harder,
                                     reason=reason or "compaction requested")

    def call(self, send: Callable[[dict[str, Any]], Any], provider: str | None = None, *, record: bool = True,
             model: str | None = None) -> Any:
        """Build, send with ``send(request_kwargs)``, record the response, and return it.

        If the provider rejects the request as too long (:func:`windowsmith.render.is_context_overflow`
        recognizes each SDK's error), compact harder and retry once; a per-call circuit breaker makes
        sure no compaction stage runs twice and nothing loops. A second overflow is raised as is.
        """
        if is_async_callable(send):
            raise UsageError(f"send {getattr(send, '__name__', send)!r} is async: use `await session.acall(send)`; "
                             "call() needs a synchronous send (e.g. a sync SDK client)")
        attempt = self.begin_call(provider, model=model)
        pack = attempt.build()
        try:
            response = check_sync(send(pack.request))
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            attempt.compact_harder(overflow_reason(pack, exc))
            pack = attempt.build()
            response = check_sync(send(pack.request))
        if record:
            self.record(response, pack=pack)
        return response

    def begin_call(self, provider: str | None = None, *, model: str | None = None) -> ModelCall:
        """The builds of one model call you send yourself (a proxy, a custom client loop): ``build()`` the
        request, and if the provider rejects it as too long, ``compact_harder(reason)`` and ``build()`` once
        more. One circuit breaker spans the call, as in :meth:`call`; record the response with :meth:`record`."""
        return ModelCall(self._builder, self._builder.format(provider), model)

    @property
    def lessons(self) -> list[dict[str, Any]]:
        """Memory candidates extracted by summaries (text, source, provenance), oldest first."""
        return list(self.state.lessons)

    def reconstruct(self, budget_tokens: int, *, kinds: Sequence[str] | None = None,
                    content_provider: Callable[[str], str | None] | None = None) -> str:
        """Rebuild detail for the latest summary's best references within ``budget_tokens``. Artifacts are
        read only if this session references them (a reference quoted in text is no permission)."""
        refs = [Reference.from_dict(r) for r in (self.state.summary or {}).get("refs", [])]
        if kinds is not None:
            refs = [r for r in refs if r.kind in kinds]
        return reconstruct(refs, budget_tokens, content_provider, self.engine.artifacts.scoped(self.id)).text

    # ------------------------------------------------------------------ recording responses

    def record(self, response: Any = None, *, message: Message | None = None, usage: Usage | Mapping[str, int] | None = None,
               pack: Pack | None = None) -> Message | None:
        """Record a provider response (parsed with the format of the pack it answers), or a neutral
        ``message`` and/or ``usage``. Billed usage calibrates later token counts.

        ``response``: the SDK's response object or dict, its stream (not yet iterated), the stream's final
        message, or the list of events/chunks collected while iterating (see ``windowsmith.render.stream``);
        a streamed response records the same message and usage as the non-streamed one."""
        pack = pack or self.last_pack
        if response is not None:
            if pack is None:
                raise UsageError("record(response) needs the pack it answers; call build() first or pass pack=")
            response = resolve(pack.format, response)  # streams, final messages, event lists
            parsed = self.engine.renderer(pack.format).parse_response(response)
            message, usage = parsed.message, parsed.usage
        msg = None
        if message is not None and message.content:
            msg = self.add(message)
        if usage is not None:
            u = usage if isinstance(usage, Usage) else Usage.from_dict(usage)
            self._append("usage", {"usage": u.to_dict(), "pack_id": pack.id if pack else None})
            if pack is not None and u.prompt_tokens > 0:
                cal = self._builder.calibration(pack.format)
                counted = pack.manifest.tokens_counted
                cal.observe(pack.tokens if counted is None else counted, u.prompt_tokens)
                self.store.set_kv("calibration", self._builder.calibration_key(pack.format), cal.to_dict())
        return msg

    # ------------------------------------------------------------------ reading

    @property
    def messages(self) -> list[Message]:
        """The full transcript (never trimmed by compaction)."""
        return list(self.state.messages)

    def packs(self) -> list[Manifest]:
        return [Manifest.from_dict(m) for m in self.store.list_packs(self.id)]


__all__ = ["Engine", "LoadResult", "Pack", "Session"]
