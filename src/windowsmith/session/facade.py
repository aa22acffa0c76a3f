"""The :class:`Session` facade: one agent conversation, an append-only log plus the state folded from it.

    s = engine.session("ticket-42", goal="...", acceptance=["...", "..."])
    s.system("You are ...")
    s.tools([...])
    s.user("...")
    pack = s.build()                                   # pack.request → the provider SDK
    s.record(response)                                 # assistant message + billed usage
    s.tool_result(call_id, output)

The session owns small collaborators and delegates to them: :class:`~windowsmith.session.writer.Writer`
(messages, tool results and responses into the log), :class:`~windowsmith.session.inputs.Inputs` (system prompt,
context, tools, task, notes, memories, instruction files), :class:`~windowsmith.session.load.Loader`
(provider-native histories), :class:`~windowsmith.build.Builder` (packs and compaction),
:class:`~windowsmith.session.calls.Calls` (builds and model calls, sync and async) and
:class:`~windowsmith.session.tools.ToolHandlers` (the built-in agent tools). What it reads of the engine that
opened it is :class:`~windowsmith.ports.SessionEngine`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..build import Builder, ModelCall, Pack
from ..compaction.base import Reference
from ..compaction.config import CompactionResult
from ..compaction.pipeline import Compactor
from ..compaction.reconstruct import reconstruct
from ..instructions import InstructionFile
from ..layers.skills import Skill
from ..log import SessionLog
from ..manifest import Manifest
from ..memory import Memory, MemoryItem
from ..model import Block, Message, ToolCall, ToolSpec, Usage
from ..ports import SessionEngine
from ..result_tools import ResultTools
from ..state import SessionState
from ..tokens import TokenCounter
from .calls import Calls
from .inputs import Inputs
from .load import Loader, LoadResult
from .tools import ToolHandlers
from .writer import Writer


class Session:
    """One agent conversation: an append-only log plus the state folded from it."""

    def __init__(self, engine: SessionEngine, session_id: str) -> None:
        self.engine = engine
        self.id = session_id
        self.store = engine.store
        self.log = SessionLog(engine.store, engine.artifacts, session_id)
        self.memory = Memory(engine.store, session_id, engine.memory, embedder=engine.embedder)
        layers = engine.new_layers()
        for layer in layers:  # layers that read the store (memory, recall) bind to their session
            bind = getattr(layer, "bind", None)
            if callable(bind):
                bind(self)
        self._builder = Builder(engine, self.log, layers)
        self._writer = Writer(engine, session_id, self.log, self._builder)
        self._inputs = Inputs(engine, self.log, self.memory, self._writer.redact_text)
        self._loader = Loader(engine, self.log, self._inputs, self._writer)
        self._calls = Calls(self._builder, self._writer)
        self._tools = ToolHandlers(engine, session_id, self.log, self._builder, self._calls)

    def _append(self, kind: str, data: Mapping[str, Any]) -> None:
        """Append one event to the log as it is (no validation: for tests that write records by hand)."""
        self.log.append_event(kind, data)

    # ------------------------------------------------------------------ reading the log

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

    def add(self, message: Message | Mapping[str, Any]) -> Message:
        """Append a neutral message (or its dict form) after validating it against the session.

        Text is redacted of secrets before it is stored; tool results go through the ingest pipeline
        (redact → offload to the artifact store when large → compressed view with a reference), and an
        offloaded result leaves an evidence note for the current step. One atomic append.
        """
        return self._writer.add(message if isinstance(message, Message) else Message.from_dict(message))

    def user(self, content: str | bytes | Sequence[Block | Mapping[str, Any]]) -> Message:
        """Append a user message (text, or a list of text/image blocks)."""
        return self._writer.user(content)

    def assistant(self, content: str | Sequence[Block | Mapping[str, Any]] = "", *,
                  tool_calls: Sequence[ToolCall | Mapping[str, Any]] = ()) -> Message:
        """Append an assistant message recorded by the caller (``record()`` does this from a response)."""
        return self._writer.assistant(content, tool_calls)

    def tool_result(self, call_id: str, output: Any, *, is_error: bool = False) -> Message:
        """Record the result of a tool call. ``output``: text, bytes, a JSON-able value, or text/image
        blocks. It is redacted, and offloaded with a compressed view when large (see :meth:`add`)."""
        return self._writer.tool_result(call_id, output, is_error)

    # ------------------------------------------------------------------ what the session is told

    def system(self, text: str, *, name: str = "system") -> None:
        """Set a system instruction block (``name`` lets several coexist; same name replaces)."""
        self._inputs.system(text, name=name)

    def context(self, text: str, *, name: str = "instructions") -> None:
        """Set stable session context (instruction files, project notes), placed after the system prompt."""
        self._inputs.context(text, name=name)

    def tools(self, tools: Iterable[Mapping[str, Any] | ToolSpec]) -> None:
        """Declare the tool definitions (neutral, OpenAI, Anthropic or Gemini form). Validated as JSON Schema;
        secrets in descriptions and schema strings (descriptions, defaults, enums, examples) are redacted."""
        self._inputs.tools(tools)

    def task(
        self,
        goal: str | None = None,
        *,
        step: str | None = None,
        acceptance: Sequence[str] | None = None,
        required: bool | None = None,
        evidence_needed: Sequence[str] | None = None,
    ) -> None:
        """Set the task: goal, current step, acceptance checklist. Omitted fields keep their value.
        Secrets in any of them are redacted before they are stored. ``evidence_needed``: the acceptance items
        that need evidence (``check(item, evidence=...)``); the manifest reports those without any yet."""
        self._inputs.task(goal, step=step, acceptance=acceptance, required=required)
        if evidence_needed is not None:
            self._inputs.evidence_needed(evidence_needed)

    def check(self, item: str | int, done: bool = True, *, evidence: str | None = None) -> None:
        """Mark an acceptance item (by text or index) done or not done; ``evidence``: what shows it (a result's
        ``artifact://`` reference, a test run), recorded for the item."""
        self._inputs.check(item, done, evidence)

    def note(self, layer: str, text: str, *, source: str | None = None, ref: str | None = None) -> None:
        """Add a note to a tail layer: ``memory``, ``evidence`` or ``knowledge``."""
        self._inputs.note(layer, text, source=source, ref=ref)

    def skills(self, root: str | Path | None = None, user_dir: str | Path | None = None) -> list[Skill]:
        """Discover the skills (``SKILL.md`` folders) of the project at ``root`` and of the user; their names and
        descriptions join the cached context, a body the tail when loaded (:mod:`windowsmith.layers.skills`)."""
        return self._inputs.skills(root, user_dir)

    def load_skill(self, name: str, **_: Any) -> str:
        """Handler of the ``load_skill`` tool (``windowsmith.layers.skills.LOAD_SKILL_TOOL``): the skill's body
        joins the tail from the next request on. An unknown name returns an ``error: …`` string."""
        return self._inputs.load_skill(name)

    def remember(self, text: str, *, scope: str = "session", source: str = "user", subject: str | None = None,
                 expires_days: float | None = None) -> MemoryItem | None:
        """Remember ``text`` as a memory item (``scope``: session, project or user; ``source``: user,
        assistant, tool (untrusted) or lesson). Redacted, deduplicated; the MEMORY section picks items
        by relevance to the task and the newest turn. A newer item on the same ``subject`` supersedes the
        older ones; ``expires_days`` ends an item. See :class:`windowsmith.memory.Memory`."""
        return self._inputs.remember(text, scope=scope, source=source, subject=subject, expires_days=expires_days)

    def instructions(self, root: str | Path | None = None, user_dir: str | Path | None = None, *,
                     cwd: str | Path | None = None) -> list[InstructionFile]:
        """Load the instruction files (``AGENTS.md``, ``CLAUDE.md``, ``.windowsmith/instructions/*.md``) of
        the project ``root`` and the user-global ``user_dir`` into the session: root and user files as
        cached session context, subfolder files once the session touches a path under them. Redacted,
        deduplicated, capped (see :mod:`windowsmith.instructions`); recorded in the log only when the set
        changed. Returns the files in load order (duplicates listed, not loaded). ``cwd``: the agent's working
        directory: the files from the repository root down to it apply to the whole session, ``@path`` imports
        expanded (as Claude Code loads them)."""
        return self._inputs.instructions(root, user_dir, cwd)

    def load(self, messages: Sequence[Any], format: str, *, tools: Sequence[Any] | None = None,
             system: str | None = None, overlap: bool = False, repairs: Sequence[str] = ()) -> LoadResult:
        """Load a provider-native history: ``format`` is ``openai-chat`` (chat messages), ``openai-responses``
        (Responses items), ``anthropic`` (Messages API messages) or ``gemini`` (contents); dicts or SDK objects.

        Appends only the messages past the log's end (matched by position, role and tool-call ids), so a
        framework can hand over its whole history before every call. System messages found in the list
        and ``system`` set the system prompt; ``tools`` (any provider's shape) declare the tools. Each
        message goes through :meth:`add` (redaction, offload of large tool results); each repair the
        conversion made is recorded once in the log (manifests list it). A history that does not continue
        the log raises :class:`UsageError` before anything is written.

        ``overlap=True``: ``messages`` is not the whole history but a window of it that may repeat the
        log's newest messages (a framework saving one turn's items): the longest run of the log's newest
        messages it starts with is skipped (user and assistant messages compared by their redacted text,
        tool results by call id) and the rest appended. ``repairs``: notes of a conversion the caller made
        before (a framework adapter mapping its own message types), recorded like the loader's own.
        """
        return self._loader.load(messages, format, tools=tools, system=system, overlap=overlap, repairs=repairs)

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
        return self._calls.build(provider, model)

    def begin_call(self, provider: str | None = None, *, model: str | None = None) -> ModelCall:
        """The builds of one model call you send yourself (a proxy, a custom client loop): ``build()`` the
        request, and if the provider rejects it as too long, ``compact_harder(reason)`` and ``build()`` once
        more. One circuit breaker spans the call, as in :meth:`call`; record the response with :meth:`record`."""
        return self._calls.begin(provider, model)

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
        return self._calls.compact(provider, reason, harder)

    def call(self, send: Callable[[dict[str, Any]], Any], provider: str | None = None, *, record: bool = True,
             model: str | None = None) -> Any:
        """Build, send with ``send(request_kwargs)``, record the response, and return it.

        If the provider rejects the request as too long (:func:`windowsmith.render.is_context_overflow`
        recognizes each SDK's error), compact harder and retry once; a per-call circuit breaker makes
        sure no compaction stage runs twice and nothing loops. A second overflow is raised as is.
        """
        return self._calls.call(send, provider, record, model)

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
               pack: Pack | None = None, estimated: bool = False) -> Message | None:
        """Record a provider response (parsed with the format of the pack it answers), or a neutral
        ``message`` and/or ``usage``. Billed usage calibrates later token counts; ``estimated=True`` marks
        usage no provider billed (a framework's test model, a local estimate): logged, never calibrating.

        ``response``: the SDK's response object or dict, its stream (not yet iterated), the stream's final
        message, or the list of events/chunks collected while iterating (see ``windowsmith.render.stream``);
        a streamed response records the same message and usage as the non-streamed one."""
        return self._writer.record(response, message, usage, pack, estimated)

    # ------------------------------------------------------------------ reading

    @property
    def messages(self) -> list[Message]:
        """The full transcript (never trimmed by compaction)."""
        return list(self.state.messages)

    def packs(self) -> list[Manifest]:
        return [Manifest.from_dict(m) for m in self.store.list_packs(self.id)]

    # ------------------------------------------------------------------ the built-in tools

    def search_history(self, query: str, *, limit: int = 5) -> str:
        """Handler of the ``search_history`` tool (:data:`windowsmith.SEARCH_HISTORY_TOOL`): the evicted
        history (compacted spans, offloaded and folded results) matching ``query``, as text with the
        ``artifact://`` source and line range of each snippet. A bad call returns an ``error: …`` string."""
        return self._tools.search_history(query, limit)

    def memory_tool(self, command: str, path: str, **args: Any) -> str:
        """Handler of the ``memory`` tool (:data:`windowsmith.MEMORY_TOOL`, Anthropic's memory tool shape):
        ``view``, ``create``, ``str_replace`` or ``delete`` on ``/memories/<scope>[/<id>]``. What the agent
        writes is redacted and untrusted; each change is a ``memory_edit`` event. A bad call returns an
        ``error: …`` string."""
        return self._tools.memory_tool(self.memory, {"command": command, "path": path, **args})

    def tool_search(self, query: str, limit: int = 5, **_: Any) -> str:
        """Handler of the ``tool_search`` tool (``windowsmith.guidance.tools``): finds deferred tools matching
        ``query``, logs a ``tools_loaded`` event (the next build sends them) and returns their descriptions."""
        return self._tools.tool_search(query, limit)

    def scope_tools(self, tools: Sequence[str] | None, *, step: str | None = None) -> None:
        """Restrict the tools of a step (default: the current one) to ``tools`` (names or ``"tag:x"``); None
        lifts it. The tool list stays (cache-safe): the request's tool choice says what is allowed."""
        self._tools.scope_tools(tools, step)

    @property
    def result_tools(self) -> ResultTools:
        """Handler for the ``read_result``/``search_result`` tools (``windowsmith.RESULT_TOOLS``):
        ``session.result_tools(name, arguments) -> str``. An answer is bounded by the window (``page_chars``)."""
        return self._tools.result_tools

    def compact_context(self, reason: str | None = None, **_: Any) -> str:
        """Handler of the ``compact_context`` tool (:data:`windowsmith.COMPACT_CONTEXT_TOOL`):
        compacts now and returns a short report for the tool result. Safe while the call is open."""
        return self._tools.compact_context(reason)

    # ------------------------------------------------------------------ async

    async def abuild(self, provider: str | None = None, *, model: str | None = None) -> Pack:
        """:meth:`build` without blocking the event loop (the work runs in a worker thread)."""
        return await self._calls.run(self.build, provider, model=model)

    async def acall(self, send: Callable[[dict[str, Any]], Awaitable[Any] | Any], provider: str | None = None, *,
                    record: bool = True, model: str | None = None) -> Any:
        """:meth:`call` for async clients: ``send(request_kwargs)`` may return an awaitable (e.g.
        ``lambda req: client.messages.create(**req)`` on ``AsyncAnthropic``). Calls on one session run one
        after the other (build → send → record), so each builds on the previous one's recorded response."""
        return await self._calls.acall(send, provider, record, model)

    async def arecord(self, response: Any = None, *, message: Message | None = None,
                      usage: Usage | Mapping[str, int] | None = None, pack: Pack | None = None,
                      estimated: bool = False) -> Message | None:
        """:meth:`record` for async SDKs: also takes an ``AsyncStream``, an async iterator of events, an
        async stream (its final message is awaited) or a coroutine returning a response."""
        return await self._calls.arecord(response, message, usage, pack, estimated)

    async def aload(self, messages: Sequence[Any], format: str, *, tools: Sequence[Any] | None = None,
                    system: str | None = None, overlap: bool = False, repairs: Sequence[str] = ()) -> LoadResult:
        """:meth:`load` without blocking the event loop."""
        return await self._calls.run(self.load, messages, format, tools=tools, system=system, overlap=overlap,
                                           repairs=repairs)

    async def aadd(self, message: Message | Mapping[str, Any]) -> Message:
        """:meth:`add` without blocking the event loop."""
        return await self._calls.run(self.add, message)

    async def atool_result(self, call_id: str, output: Any, *, is_error: bool = False) -> Message:
        """:meth:`tool_result` without blocking the event loop."""
        return await self._calls.run(self.tool_result, call_id, output, is_error=is_error)


__all__ = ["Session"]
