"""Every error windowsmith raises, in one tree.

    WindowsmithError                  base of everything below
    ├── UsageError                    "you used it wrong": fix the call, the input or the config
    │   ├── InvalidMessageError       a message, block or event is malformed (unknown role, bad field)
    │   ├── InvalidToolSchemaError    a tool definition is not a valid JSON Schema function spec
    │   ├── UnmatchedToolResultError  a tool result names a call id that no assistant message made
    │   ├── UnknownModelError         the model is not in the registry (add it with a registry file)
    │   ├── ConfigError               a budget, threshold or engine option is out of range
    │   ├── TaskRequiredError         the task layer is required but no goal/acceptance was declared
    │   └── TraceFormatError          a trace file could not be recognised or parsed
    └── RuntimeFailure                "it failed at run time": the input was fine, something else was not
        ├── BudgetExceededError       a required layer cannot fit in window - reserved output
        │   └── BudgetBlockedError    the request stays over BudgetConfig.block_at after compaction and fitting
        ├── StoreError                the session store failed (corrupt log, hash mismatch, migration)
        │   └── ConflictError         another writer appended to the session first: refresh() and retry
        ├── TokenizerError            a shipped BPE file is missing or does not match its expected hash
        └── ProviderResponseError     a provider response could not be parsed

    ModelRetiredWarning (a UserWarning, not an error): the engine's model is past its provider's
    retirement date; the message names the successor.
    ArtifactStoreWarning (a UserWarning): the artifact store failed, a tool result was kept inline (clipped).

Every message says what was wrong and how to fix it.
"""

from __future__ import annotations


class WindowsmithError(Exception):
    """Base class for all windowsmith errors."""


class UsageError(WindowsmithError, ValueError):
    """The caller passed something invalid. The message says how to fix it."""


class InvalidMessageError(UsageError):
    """A message, content block or event is malformed."""


class InvalidToolSchemaError(UsageError):
    """A tool definition is not a valid JSON Schema function specification."""


class UnmatchedToolResultError(UsageError):
    """A tool result refers to a call id that no assistant message issued."""


class UnknownModelError(UsageError, KeyError):
    """The model name is not in the registry."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ConfigError(UsageError):
    """A configuration value is out of range or inconsistent."""


class TaskRequiredError(UsageError):
    """The task layer is declared required but the session has no goal or acceptance checklist."""


class TraceFormatError(UsageError):
    """A trace file could not be recognised or parsed."""


class RuntimeFailure(WindowsmithError, RuntimeError):
    """Something failed at run time although the input was valid."""


class BudgetExceededError(RuntimeFailure):
    """A required layer cannot fit in the window minus the reserved output."""

    def __init__(self, message: str, *, layer: str, needed: int, available: int) -> None:
        super().__init__(message)
        self.layer = layer
        self.needed = needed
        self.available = available


class BudgetBlockedError(BudgetExceededError):
    """The request would fill more than ``BudgetConfig.block_at`` of the available budget, and neither
    compaction nor dropping optional context brought it under (the required layers alone are over).

    ``needed``: the request's tokens; ``limit``: the threshold in tokens (``block_at`` * ``available``);
    ``layer``: the largest required layer. Nothing was sent, and no pack was stored.
    """

    def __init__(self, message: str, *, layer: str, needed: int, available: int, limit: int, block_at: float) -> None:
        super().__init__(message, layer=layer, needed=needed, available=available)
        self.limit = limit
        self.block_at = block_at


class StoreError(RuntimeFailure):
    """The session store failed: corrupt log, hash mismatch, failed migration."""


class ConflictError(StoreError):
    """Another writer appended to the session since this one last read it (its head moved on).

    Nothing was written. Catch up with ``Session.refresh()`` (or re-read ``store.head()``) and retry
    the call; a subclass of :class:`StoreError`, so code catching that keeps working.
    """

    def __init__(self, message: str, *, session_id: str = "", head: str | None = None,
                 expected: str | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.head = head
        self.expected = expected


class TokenizerError(RuntimeFailure):
    """A shipped tokenizer file is missing or corrupt."""


class ProviderResponseError(RuntimeFailure):
    """A provider response could not be parsed into a message and usage."""


class ModelRetiredWarning(UserWarning):
    """The model is past the retirement date its provider announced (``retires`` in the registry):
    requests for it will be refused. The message names the successor to switch to."""


class ArtifactStoreWarning(UserWarning):
    """The artifact store failed to store a tool result: the result was kept inline, clipped to the offload
    threshold, and a ``repair`` line says so in the manifest. Check the store's folder (space, permissions)."""


__all__ = [
    "ArtifactStoreWarning",
    "BudgetBlockedError",
    "BudgetExceededError",
    "ConfigError",
    "ConflictError",
    "InvalidMessageError",
    "InvalidToolSchemaError",
    "ModelRetiredWarning",
    "ProviderResponseError",
    "RuntimeFailure",
    "StoreError",
    "TaskRequiredError",
    "TokenizerError",
    "TraceFormatError",
    "UnknownModelError",
    "UnmatchedToolResultError",
    "UsageError",
    "WindowsmithError",
]

