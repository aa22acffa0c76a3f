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
from ..loading import overlapping_new
from ..model import Message


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{what} needs {module.split('.')[0]}: pip install 'windowsmith[{extra}]'") from None


__all__ = ["load_history", "model_name", "provider_of", "require"]


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



#: the repair a load notes when a framework tool rewrote the history before the adapter saw it
REWRITTEN = ("history rewritten before windowsmith (a summarization or history processor ran first): the log "
             "keeps the full conversation; the rewritten head was ignored and only the turns past the log's "
             "newest were appended")


def rewritten_tail(logged: list[Message], incoming: list[Message]) -> list[Message] | None:
    """The messages of ``incoming`` past the log's newest ones when a framework rewrote its head (a summary in
    place of older turns): the first suffix of ``incoming`` that starts inside the log's tail, else None."""
    for k in range(len(incoming)):
        rest = incoming[k:]
        new = overlapping_new(logged, rest)
        if len(new) < len(rest):
            return new
    return None


def _fork_message(what: str) -> str:
    return (f"{what}: the history handed to windowsmith was rewritten before it (a summarization or history "
            "processor ran first) and shares no turn with the session's log. Put the windowsmith adapter "
            "first (it compacts the window itself) or remove the framework's context tool")


def _replacement(session: Any, msgs: list[Message], what: str, kw: dict[str, Any]) -> tuple[list[Message], list[Any]]:
    """The new tail of a history a framework tool rewrote, and the repairs its load records (``kw``'s own
    ``repairs`` taken out of it, then ``REWRITTEN``); a history that shares no turn with the log is refused."""
    tail = rewritten_tail(session.messages, msgs)
    if tail is None:
        raise UsageError(_fork_message(what)) from None
    return tail, [*kw.pop("repairs", ()), REWRITTEN]


def load_history(session: Any, msgs: list[Message], *, what: str, **kw: Any) -> None:
    """``session.load(msgs, "neutral", ...)``; a history a framework tool rewrote before the adapter (it does
    not continue the log) is treated as a replacement: its new tail is appended and a repair says so."""
    try:
        session.load(msgs, "neutral", **kw)
        return
    except UsageError as exc:
        if "does not continue" not in str(exc):
            raise
    tail, repairs = _replacement(session, msgs, what, kw)
    session.load(tail, "neutral", overlap=True, repairs=repairs, **kw)


async def aload_history(session: Any, msgs: list[Message], *, what: str, **kw: Any) -> None:
    """:func:`load_history` for the async paths."""
    try:
        await session.aload(msgs, "neutral", **kw)
        return
    except UsageError as exc:
        if "does not continue" not in str(exc):
            raise
    tail, repairs = _replacement(session, msgs, what, kw)
    await session.aload(tail, "neutral", overlap=True, repairs=repairs, **kw)


_NAME_PREFIXES = (("claude", "anthropic"), ("anthropic/", "anthropic"), ("gemini", "google"), ("gpt-", "openai"),
                  ("openai/", "openai"), ("o1", "openai"), ("o3", "openai"), ("o4", "openai"))


def provider_of(model: Any) -> str | None:
    """The provider a framework's chat model talks to (``anthropic``, ``openai``, ``google``): from a model
    name's prefix (``claude-``, ``gpt-``, ``gemini-``), else from its object's class module, else None."""
    if isinstance(model, str):
        name = model.lower().removeprefix("models/")
        return next((p for prefix, p in _NAME_PREFIXES if name.startswith(prefix)), None)
    if model is None:
        return None
    mod = type(model).__module__.lower()
    for key, name in (("anthropic", "anthropic"), ("openai", "openai"), ("google", "google"), ("gemini", "google")):
        if key in mod:
            return name
    return None


def check_engine_provider(session: Any, chat_provider: str | None, what: str) -> None:
    """Refuse an engine model of another provider than the framework's chat model: its budget and tokenizer
    would be the wrong ones."""
    if chat_provider is None:
        return
    engine_provider = getattr(getattr(session.engine, "spec", None), "provider", None)
    if isinstance(engine_provider, str) and engine_provider and _family(engine_provider) != chat_provider:
        raise UsageError(
            f"{what}: the engine's model is a {engine_provider} model but the agent's chat model is "
            f"{chat_provider}'s; the window budget and token counts would be wrong. Open the engine with the chat "
            "model's name (windowsmith.Engine(model=...))")


def _family(provider: str) -> str:
    p = provider.lower()
    return "google" if p in ("gemini", "google", "vertex", "google-genai") else p
