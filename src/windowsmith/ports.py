"""What the parts under the engine read of it and of a session, stated as protocols.

:class:`~windowsmith.engine.Engine` and :class:`~windowsmith.session.Session` satisfy them structurally, so
the builder, the layers and retrieval depend on what they use and never import the engine or the session
(which import them):

* :class:`Stores` — where a session's data lives (store, artifacts, embedder);
* :class:`BoundSession` — what a layer's ``bind(session)`` reads (its id, memory and the project's knowledge);
* :class:`RecallSession` — what ``search_history`` reads (id, state, stores);
* :class:`BuildEngine` — the settings and renderers a :class:`~windowsmith.build.Builder` builds with;
* :class:`SessionEngine` — all a session reads of the engine that opened it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .artifacts import ArtifactStore
    from .budget import BudgetConfig
    from .cache import CacheConfig
    from .compaction.base import Summarizer
    from .compaction.config import CompactionConfig
    from .formats.base import Renderer
    from .ingest.pipeline import IngestConfig
    from .knowledge import Knowledge
    from .layers.base import Layer
    from .memory import Memory, MemoryConfig
    from .registry import ModelSpec, Registry
    from .retrieval.search import Embedder
    from .state import SessionState
    from .store import Store


class Stores(Protocol):
    """Where a session's data lives: the store, the artifact store, and the embedder of hybrid retrieval."""

    @property
    def store(self) -> Store: ...

    @property
    def artifacts(self) -> ArtifactStore: ...

    @property
    def embedder(self) -> Embedder | None: ...


class KnowledgeStores(Stores, Protocol):
    """:class:`Stores` and the project's knowledge."""

    @property
    def knowledge(self) -> Knowledge: ...


class BoundSession(Protocol):
    """The session a layer with a ``bind(session)`` method is bound to when the session opens."""

    @property
    def id(self) -> str: ...

    @property
    def memory(self) -> Memory: ...

    @property
    def engine(self) -> KnowledgeStores: ...


class RecallSession(Protocol):
    """What searching a session's evicted history reads of it."""

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> SessionState: ...

    @property
    def engine(self) -> Stores: ...


class BuildEngine(Protocol):
    """The engine's model, settings, store and renderers, as a session's builder uses them."""

    @property
    def model(self) -> str: ...

    @property
    def spec(self) -> ModelSpec: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def store(self) -> Store: ...

    @property
    def budget(self) -> BudgetConfig: ...

    @property
    def window(self) -> int | None: ...

    @property
    def format(self) -> str | None: ...

    @property
    def compaction(self) -> CompactionConfig: ...

    @property
    def cache(self) -> CacheConfig: ...

    @property
    def summarizer(self) -> Summarizer | type[Summarizer] | None: ...

    def renderer(self, fmt: str) -> Renderer: ...


class SessionEngine(BuildEngine, KnowledgeStores, Protocol):
    """All a session reads of the engine that opened it."""

    @property
    def ingest(self) -> IngestConfig: ...

    @property
    def memory(self) -> MemoryConfig: ...

    def new_layers(self) -> list[Layer]: ...


__all__ = ["BoundSession", "BuildEngine", "KnowledgeStores", "RecallSession", "SessionEngine", "Stores"]
