"""windowsmith: context engineering for LLM agents.

Builds the exact provider request for every model call from an append-only session log: within a
token budget, ordered so the provider's prompt cache hits, with a manifest of what went in and why.

This module is the public API: what a user types. The other stable modules are listed in
docs/architecture.md ("Public surface"): ``windowsmith.errors``, ``windowsmith.formats``, ``windowsmith.testing``,
the adapters in ``windowsmith.integrations``, ``windowsmith.server``, ``windowsmith.store`` and a few more.
Every other module (the assembler's ``Action``/``Assembly``, the neutral request's ``Segment``/``CachePlan``,
token counting, records, ...) is internal: importable, but it may change in any release.
"""

from .artifacts import ArtifactStore, EmbeddedArtifacts, FileArtifacts, ObjectArtifacts
from .budget import BudgetConfig
from .build import Pack
from .cache import CacheConfig
from .compaction import (
    COMPACT_CONTEXT_TOOL,
    AnthropicSummarizer,
    CompactionConfig,
    CompactionResult,
    FakeSummarizer,
    OfflineSummarizer,
    OpenAISummarizer,
    Summarizer,
    Summary,
)
from .compaction.context_editing import ContextEditing
from .engine import Engine
from .errors import (
    BudgetBlockedError,
    BudgetExceededError,
    ConfigError,
    ConflictError,
    InvalidMessageError,
    InvalidToolSchemaError,
    ModelRetiredWarning,
    ProviderResponseError,
    RuntimeFailure,
    StoreError,
    TaskRequiredError,
    TokenizerError,
    TraceFormatError,
    UnknownModelError,
    UnmatchedToolResultError,
    UsageError,
    WindowsmithError,
)
from .formats.gemini_cache import GeminiContextCache
from .formats.responses_chain import ResponsesChain
from .ingest.pipeline import IngestConfig
from .instructions import InstructionFile
from .knowledge import Knowledge
from .layers.base import BuildContext, Item, Layer
from .manifest import Manifest, diff
from .memory import Memory, MemoryConfig, MemoryItem
from .model import Image, Message, Text, Thinking, ToolCall, ToolResult, ToolSpec, Usage
from .registry import ModelSpec, Registry, load_registry
from .result_tools import RESULT_TOOLS, ResultTools
from .retrieval import OpenAIEmbedder, WordLlamaEmbedder
from .retrieval.memory_tool import MEMORY_TOOL
from .retrieval.recall import SEARCH_HISTORY_TOOL
from .session import LoadResult, Session
from .store import SQLiteStore, Store, open_store
from .tokens import count_text

__all__ = [
    "AnthropicSummarizer",
    "ArtifactStore",
    "BudgetBlockedError",
    "BudgetConfig",
    "BudgetExceededError",
    "BuildContext",
    "COMPACT_CONTEXT_TOOL",
    "CacheConfig",
    "CompactionConfig",
    "CompactionResult",
    "ConfigError",
    "ConflictError",
    "ContextEditing",
    "EmbeddedArtifacts",
    "Engine",
    "FakeSummarizer",
    "FileArtifacts",
    "GeminiContextCache",
    "Image",
    "IngestConfig",
    "InstructionFile",
    "InvalidMessageError",
    "InvalidToolSchemaError",
    "Item",
    "Knowledge",
    "Layer",
    "LoadResult",
    "MEMORY_TOOL",
    "Manifest",
    "Memory",
    "MemoryConfig",
    "MemoryItem",
    "Message",
    "ModelRetiredWarning",
    "ModelSpec",
    "ObjectArtifacts",
    "OfflineSummarizer",
    "OpenAIEmbedder",
    "OpenAISummarizer",
    "Pack",
    "ProviderResponseError",
    "RESULT_TOOLS",
    "Registry",
    "ResponsesChain",
    "ResultTools",
    "RuntimeFailure",
    "SEARCH_HISTORY_TOOL",
    "SQLiteStore",
    "Session",
    "Store",
    "StoreError",
    "Summarizer",
    "Summary",
    "TaskRequiredError",
    "Text",
    "Thinking",
    "TokenizerError",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "TraceFormatError",
    "UnknownModelError",
    "UnmatchedToolResultError",
    "Usage",
    "UsageError",
    "WindowsmithError",
    "WordLlamaEmbedder",
    "count_text",
    "diff",
    "load_registry",
    "open_store",
]
