"""The provider wire formats, one module each, both directions: the neutral request to each provider's SDK
call, the provider's messages, responses, streams and usage back to neutral ones.

    get_renderer("anthropic").render(neutral_request).request   →  client.messages.create(**req)
    get_renderer("openai-chat")                                   →  client.chat.completions.create(**req)
    get_renderer("openai-responses")                              →  client.responses.create(**req)
    get_renderer("gemini")                                        →  client.models.generate_content(**req)

Each of ``anthropic``, ``openai_chat``, ``openai_responses`` and ``gemini`` holds its renderer, its history
reader, its response parser, its stream accumulator and its usage reader; ``units`` is the unit rendering they
share, ``reader`` the toolkit of the history readers, ``stream`` turns an SDK stream into one response.
Rendering and parsing need no SDK (plain dicts in, plain dicts out); the SDKs are optional extras.
Treat ``Rendered.request`` as read-only: parts of it are shared with the renderer's memo cache.
"""

from __future__ import annotations

import importlib
import re
import sys
from types import ModuleType

from ..errors import ConfigError, UsageError
from .anthropic import AnthropicRenderer
from .base import ParsedResponse, Rendered, Renderer
from .gemini import GeminiRenderer
from .openai_chat import OpenAIChatRenderer
from .openai_responses import OpenAIResponsesRenderer

FORMATS: tuple[str, ...] = ("anthropic", "openai-chat", "openai-responses", "gemini")

_CLASSES: dict[str, type[Renderer]] = {
    "anthropic": AnthropicRenderer,
    "openai-chat": OpenAIChatRenderer,
    "openai-responses": OpenAIResponsesRenderer,
    "gemini": GeminiRenderer,
}

_SDKS: dict[str, tuple[str, str]] = {  # format → (module, extra)
    "anthropic": ("anthropic", "anthropic"),
    "openai-chat": ("openai", "openai"),
    "openai-responses": ("openai", "openai"),
    "gemini": ("google.genai", "gemini"),
}


def get_renderer(format: str) -> Renderer:
    """A new renderer for ``format`` (one of :data:`FORMATS`). Keep it for the session: it memoizes."""
    try:
        return _CLASSES[format]()
    except KeyError:
        raise ConfigError(f"unknown request format {format!r}; use one of {', '.join(FORMATS)}") from None


def require_sdk(format: str) -> ModuleType:
    """Import the provider SDK for ``format``, or say which extra to install."""
    if format not in _SDKS:
        raise ConfigError(f"unknown request format {format!r}; use one of {', '.join(FORMATS)}")
    module, extra = _SDKS[format]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"the {format} format needs the {module} SDK: pip install 'windowsmith[{extra}]'"
        ) from None


_GEMINI_OVERFLOW = re.compile(r"(input )?token count.*exceeds|exceeds the maximum number of tokens", re.I | re.S)


def is_context_overflow(exc: BaseException) -> bool:
    """Whether ``exc`` is a provider SDK's "prompt too long" error (the cue for a reactive compaction).

    Recognizes ``anthropic.BadRequestError`` ("prompt is too long"), ``openai.BadRequestError`` with
    code ``context_length_exceeded`` and google-genai ``errors.ClientError`` 400 whose message says the
    input token count exceeds the maximum. SDKs that were never imported cannot have raised ``exc``,
    so none is imported here.
    """
    anthropic = sys.modules.get("anthropic")
    if anthropic is not None and isinstance(exc, anthropic.BadRequestError):
        text = " ".join(str(x) for x in (getattr(exc, "api_message", None), getattr(exc, "message", None), exc) if x)
        if "prompt is too long" in text.lower():
            return True
    openai = sys.modules.get("openai")
    if openai is not None and isinstance(exc, openai.BadRequestError):
        if getattr(exc, "code", None) == "context_length_exceeded":
            return True
        body = getattr(exc, "body", None)
        if isinstance(body, dict) and body.get("code") == "context_length_exceeded":
            return True
    genai_errors = sys.modules.get("google.genai.errors")
    if genai_errors is not None and isinstance(exc, genai_errors.ClientError) and getattr(exc, "code", None) == 400:
        message = str(getattr(exc, "message", None) or exc)
        if _GEMINI_OVERFLOW.search(message):
            return True
    return False


__all__ = [
    "AnthropicRenderer",
    "FORMATS",
    "GeminiRenderer",
    "OpenAIChatRenderer",
    "OpenAIResponsesRenderer",
    "ParsedResponse",
    "Rendered",
    "Renderer",
    "get_renderer",
    "is_context_overflow",
    "require_sdk",
]
