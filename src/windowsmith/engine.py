"""The engine: store, registry and configuration, and the sessions it opens (:mod:`windowsmith.session`).

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

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .artifacts import GC_GRACE_SECONDS, ArtifactStore, EmbeddedArtifacts, collect_garbage
from .budget import BudgetConfig
from .build import check_format
from .cache import CacheConfig
from .compaction.base import Summarizer
from .compaction.config import CompactionConfig
from .errors import ConfigError, ModelRetiredWarning, UsageError
from .formats import get_renderer
from .formats.base import Renderer
from .ingest.pipeline import IngestConfig
from .knowledge import Knowledge
from .layers.base import Layer
from .layers.builtin import default_layers
from .memory import MemoryConfig
from .registry import ModelSpec, Registry, load_registry
from .retrieval.search import Embedder
from .session import Session
from .store import Store, open_store


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
    ``cache``: how requests use the provider's prompt cache (:class:`~windowsmith.cache.CacheConfig`: volatile spans
    moved out of the cached prefix, the stable prefix's cache lifetime).
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
        cache: CacheConfig | None = None,
    ) -> None:
        self.cache = cache or CacheConfig()
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
            try:
                self.store = self.store.for_tenant(tenant)
            except BaseException:  # a refused tenant (a role that skips row-level security) leaves nothing open
                if self._owns_store:
                    self.store.close()
                raise
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

    def new_layers(self) -> list[Layer]:
        """A fresh set of this engine's layers for one session (each session binds its own): the ``layers``
        factory's, else the built-in ones."""
        return self._layers_factory()

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


__all__ = ["Engine"]
