"""Full conversations in, new events out: how the proxy keeps a session's log in step with a client.

An agent sends its whole conversation on every call. :func:`parse_conversation` turns the request
body (OpenAI chat or Anthropic messages) into neutral form with the format's history reader
(``windowsmith.formats``), so a request, a loaded history and a log file are read by the same code.
:class:`Sync` remembers, per session, how many of the client's neutral messages are already in the log
and a digest of each prefix; :func:`new_messages` returns only what is new, and raises
:class:`ConversationDivergedError` if the client changed what it sent before (an edited or truncated
history): the log is append-only, so such a client needs a new session id.

The assistant message the proxy recorded from the upstream response comes back in the client's next
request; it is recognised (``Sync.pending``) and skipped, never appended twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError, UsageError
from ..formats import anthropic, openai_chat
from ..formats.reader import Builder, Ctx
from ..hashing import canonical_json
from ..model import Message, ToolSpec

#: The request formats the proxy speaks, by endpoint.
OPENAI = "openai-chat"
ANTHROPIC = "anthropic"

SYNC_SCOPE = "proxy-sync"


class ConversationError(UsageError):
    """The request's conversation cannot be read (the client gets a 400 naming what was wrong)."""


class ConversationDivergedError(UsageError):
    """The client's conversation no longer starts with what the session already logged."""


@dataclass(frozen=True)
class Conversation:
    system: str | None
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    repairs: tuple[str, ...] = ()


def parse_conversation(fmt: str, body: Mapping[str, Any]) -> Conversation:
    """The system prompt, tools and neutral messages of an OpenAI chat or Anthropic messages body."""
    if not isinstance(body, Mapping):
        raise ConversationError("the request body must be a JSON object")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise ConversationError("the request needs a non-empty 'messages' array")
    value = {k: body[k] for k in ("messages", "tools", "system", "functions") if k in body}
    ctx = Ctx(Path("request"), "", "request")
    b = Builder()
    try:
        if fmt == OPENAI:
            history = openai_chat.read_history(value, ctx, b)
        elif fmt == ANTHROPIC:
            history = anthropic.read_history(value, ctx, b)
        else:
            raise ConversationError(f"unknown request format {fmt!r}")
        messages, _, repairs = b.finish()
    except TraceFormatError as e:
        raise ConversationError(f"the request body is not a valid {fmt} conversation: {e}") from None
    if not messages:
        raise ConversationError("the request has no user, assistant or tool message")
    return Conversation(history.system or None, history.tools, messages, (*history.repairs, *repairs))


def message_digest(m: Message) -> str:
    return hashlib.sha256(canonical_json(m.to_dict()).encode()).hexdigest()[:32]


def stable_session_id(fmt: str, conv: Conversation, tenant: str | None = None) -> str:
    """A session id from the conversation's start (format, system prompt, first message) and the
    tenant: the same agent run keeps it on every call, a new run gets a new one, and two tenants
    running the same task never collide on an id."""
    head = {"format": fmt, "system": conv.system or "", "first": conv.messages[0].to_dict(), "tenant": tenant}
    return "px-" + hashlib.sha256(canonical_json(head).encode()).hexdigest()[:24]


@dataclass
class Sync:
    """What of a client's conversation a session already holds (stored in the store's key-value)."""

    digests: list[str] = field(default_factory=list)  # digest of each client message accounted for
    pending: str | None = None  # digest of the assistant message recorded from the last response

    def to_dict(self) -> dict[str, Any]:
        return {"digests": self.digests, "pending": self.pending}

    @classmethod
    def from_dict(cls, d: Any) -> Sync:
        if not isinstance(d, Mapping):
            return cls()
        return cls(list(d.get("digests") or []), d.get("pending"))


def new_messages(sync: Sync, messages: Sequence[Message]) -> tuple[list[Message], int]:
    """The messages the log does not hold yet, and how many leading ones it does.

    Raises :class:`ConversationDivergedError` when an already-logged message changed or the client sent
    fewer messages than were logged."""
    digests = [message_digest(m) for m in messages]
    known = len(sync.digests)
    if len(digests) < known or digests[:known] != sync.digests:
        at = next((i for i, (a, b) in enumerate(zip(digests, sync.digests, strict=False)) if a != b),
                  min(len(digests), known))
        raise ConversationDivergedError(
            f"the conversation differs from what this session logged at message {at} (the session holds "
            f"{known} messages, the request sends {len(digests)}); the log is append-only: send a new "
            "X-Windowsmith-Session id to start a new session for an edited history"
        )
    rest = list(messages[known:])
    skipped = 0
    if sync.pending is not None and rest and rest[0].role == "assistant":
        # The client echoes the response we recorded; its form may differ (ids, whitespace), so
        # the role and position identify it, not the bytes.
        skipped = 1
    return rest[skipped:], known + skipped
