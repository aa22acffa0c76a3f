"""Adapters for agent frameworks, one module each, each behind its extra:

| module | extra | hook |
|---|---|---|
| ``windowsmith.integrations.langchain`` | ``windowsmith[langchain]`` | ``WindowsmithMiddleware`` (LangChain v1 ``AgentMiddleware``) |
| ``windowsmith.integrations.openai_agents`` | ``windowsmith[openai-agents]`` | ``WindowsmithSession`` + ``call_model_input_filter`` |
| ``windowsmith.integrations.pydantic_ai`` | ``windowsmith[pydantic-ai]`` | ``history_processor`` (sync and async) |
| ``windowsmith.integrations.adk`` | ``windowsmith[adk]`` | ``before_model_callback`` / ``after_model_callback`` |

Each one lets windowsmith own the window: the framework's history is appended to the session's log
(``Session.load``, only what is new), the model gets the pack (budgeted, cache-ordered, compacted), and
the framework's response is recorded with its billed usage.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ..errors import UsageError


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{what} needs {module.split('.')[0]}: pip install 'windowsmith[{extra}]'") from None


__all__ = ["require"]


def model_name(model: Any, fallback: str) -> str:
    """The name a framework's model (an object or a string) goes by, for the pack's ``model`` field (the
    framework sends the request with its own model; the name only has to be that provider's), else
    ``fallback``."""
    if isinstance(model, str) and model:
        return model
    for attr in ("model_name", "model", "name"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return fallback

