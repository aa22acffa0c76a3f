"""Logs users keep: OpenAI chat messages, OpenAI Responses input items, Anthropic messages.

Accepted shapes (each may also be one conversation per JSONL line, or one message per JSONL line):

- ``openai-chat``: ``[messages]`` or ``{"messages": [...], "tools": [...]}``; ``system``/``developer``
  messages become the system prompt; ``tool_calls`` with JSON-string arguments; ``role: tool``
  results; an optional ``usage`` on an assistant message is taken as billed usage.
- ``openai-responses``: ``[items]`` or ``{"input": [...], "instructions": ..., "tools": [...]}``
  with items ``message``, ``function_call``, ``function_call_output``, ``reasoning``.
- ``anthropic-messages``: ``{"system", "tools", "messages"}`` or ``[messages]`` with content blocks
  ``text``, ``image``, ``tool_use``, ``tool_result``, ``thinking``, ``redacted_thinking``.

The messages are read by each format's ``read_history`` (``windowsmith.formats``), as a live request is.
"""

from __future__ import annotations

from typing import Any

from ..formats import anthropic, openai_chat, openai_responses
from ..formats.reader import Builder, Ctx, History
from .base import Trace, make_trace


def _trace(fmt: str, history: History, b: Builder, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    return [
        make_trace(
            id=trace_id,
            format=fmt,
            source=ctx.source,
            system=history.system,
            tools=history.tools,
            builder=b,
            meta=history.meta,
            notes=notes,
            extra_repairs=history.repairs,
        )
    ]


def import_openai_chat(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    b = Builder()
    return _trace("openai-chat", openai_chat.read_history(value, ctx, b), b, ctx, notes, trace_id)


def import_openai_responses(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    b = Builder()
    return _trace("openai-responses", openai_responses.read_history(value, ctx, b), b, ctx, notes, trace_id)


def import_anthropic_messages(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    b = Builder()
    return _trace("anthropic-messages", anthropic.read_history(value, ctx, b), b, ctx, notes, trace_id)
