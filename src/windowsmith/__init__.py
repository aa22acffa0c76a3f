"""windowsmith: context engineering for LLM agents.

Builds the exact provider request for every model call from an append-only session log: within a
token budget, ordered so the provider's prompt cache hits, with a manifest of what went in and why.
"""

from .artifacts import ArtifactStore, EmbeddedArtifacts, FileArtifacts, ObjectArtifacts
from .assemble import Action, Assembly, LayerUsage
from .budget import Budget, BudgetConfig
from .engine import Engine, Pack, Session
from .errors import (
    BudgetBlockedError,
    BudgetExceededError,
    ConfigError,
    ConflictError,
    InvalidMessageError,
    InvalidToolSchemaError,
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
from .ingest.pipeline import IngestConfig
from .layers.base import BuildContext, Item, Layer
from .manifest import Manifest, diff
from .model import Image, Message, Text, Thinking, ToolCall, ToolResult, ToolSpec, Usage
from .registry import ModelSpec, Registry, load_registry
from .request import CachePlan, NeutralRequest, Segment
from .result_tools import RESULT_TOOLS, ResultTools
from .store import SQLiteStore, Store, open_store
from .tokens import Calibration, TokenCounter, count_text

__all__ = [
    "Action",
    "ArtifactStore",
    "Assembly",
    "Budget",
    "BudgetBlockedError",
    "BudgetConfig",
    "BudgetExceededError",
    "BuildContext",
    "CachePlan",
    "Calibration",
    "ConfigError",
    "ConflictError",
    "EmbeddedArtifacts",
    "Engine",
    "FileArtifacts",
    "Image",
    "IngestConfig",
    "InvalidMessageError",
    "InvalidToolSchemaError",
    "Item",
    "Layer",
    "LayerUsage",
    "Manifest",
    "Message",
    "ModelSpec",
    "NeutralRequest",
    "ObjectArtifacts",
    "Pack",
    "ProviderResponseError",
    "RESULT_TOOLS",
    "Registry",
    "ResultTools",
    "RuntimeFailure",
    "SQLiteStore",
    "Segment",
    "Session",
    "Store",
    "StoreError",
    "TaskRequiredError",
    "Text",
    "Thinking",
    "TokenCounter",
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
    "count_text",
    "diff",
    "load_registry",
    "open_store",
]
