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

Turns are idempotent (:func:`plan_turn`, one rule for SDK retries, resends and restarts): a request whose
conversation is exactly what the session already holds is a retry. If the last reply was recorded, it is
replayed (the client never sees a second answer to one question); if it was not (the client left before it
arrived, the upstream failed), the request built for that turn is forwarded again, byte for byte, so the
provider's cache hits. Tool-call ids an upstream reuses (``call_0`` on every turn) are made unique the same
way in the client's conversation and in the recorded reply (:func:`unique_call_ids`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError, UsageError
from ..formats import anthropic, gemini, openai_chat, openai_responses
from ..formats.reader import Builder, Ctx, tools_from
from ..hashing import canonical_json
from ..model import Message, ToolCall, ToolResult, ToolSpec

#: The request formats the proxy speaks, by endpoint.
OPENAI = "openai-chat"
ANTHROPIC = "anthropic"
RESPONSES = "openai-responses"
GEMINI = "gemini"

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


def _responses_value(body: Mapping[str, Any]) -> dict[str, Any]:
    """The history of a Responses body: ``input`` (a string is one user message), ``instructions``, ``tools``."""
    if body.get("previous_response_id") is not None:
        raise ConversationError(
            "previous_response_id is not supported through windowsmith: the window it builds must hold the whole "
            "conversation, so send the full input with \"store\": false (as Codex CLI does)")
    items = body.get("input")
    if isinstance(items, str) and items:
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise ConversationError("the request needs a non-empty 'input' (a string or an array of items)")
    return {"input": items, **{k: body[k] for k in ("instructions", "tools") if k in body}}


def gemini_value(body: Mapping[str, Any]) -> tuple[list[Any], str | None, list[dict[str, Any]]]:
    """The contents, the system text and the function declarations of a Gemini generateContent body."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise ConversationError("the request needs a non-empty 'contents' array")
    sys_value = body.get("systemInstruction", body.get("system_instruction"))
    system = None
    if isinstance(sys_value, Mapping):
        system = "\n\n".join(str(p.get("text", "")) for p in sys_value.get("parts") or [] if isinstance(p, Mapping))
    elif isinstance(sys_value, str):
        system = sys_value
    decls: list[dict[str, Any]] = []
    for t in body.get("tools") or []:
        for d in (t.get("functionDeclarations", t.get("function_declarations")) if isinstance(t, Mapping) else None) or []:
            if isinstance(d, Mapping):
                schema = d.get("parametersJsonSchema", d.get("parameters_json_schema", d.get("parameters")))
                decls.append({"name": d.get("name"), "description": d.get("description", ""), "parameters":
                              schema if isinstance(schema, Mapping) else {"type": "object", "properties": {}}})
    return contents, system or None, decls


def parse_conversation(fmt: str, body: Mapping[str, Any]) -> Conversation:
    """The system prompt, tools and neutral messages of an OpenAI chat, Responses or Anthropic messages body."""
    if not isinstance(body, Mapping):
        raise ConversationError("the request body must be a JSON object")
    value: Any
    if fmt == RESPONSES:
        value = _responses_value(body)
    elif fmt == GEMINI:
        value = gemini_value(body)
    else:
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            raise ConversationError("the request needs a non-empty 'messages' array")
        value = {k: body[k] for k in ("messages", "tools", "system", "functions") if k in body}
    ctx = Ctx(Path("request"), "", "request")
    b = Builder(close_open=False)  # (calls the conversation ends with stay open: never a result the client did not send)
    try:
        if fmt == OPENAI:
            history = openai_chat.read_history(value, ctx, b)
        elif fmt == ANTHROPIC:
            history = anthropic.read_history(value, ctx, b)
        elif fmt == RESPONSES:
            history = openai_responses.read_history(value, ctx, b)
        elif fmt == GEMINI:
            contents, system, decls = value
            found = gemini.read_history(contents, ctx, b)
            history = replace(found, system=system or found.system, tools=tools_from(decls, ctx.sub("tools"), []))
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


def pack_json(value: Any) -> str:
    """``value`` as compressed JSON text (a request or reply kept in the sync state)."""
    return base64.b64encode(zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 6)).decode()


def unpack_json(text: str) -> Any:
    return json.loads(zlib.decompress(base64.b64decode(text)))


@dataclass
class Sync:
    """What of a client's conversation a session already holds (stored in the store's key-value).

    ``seq``: the log seq this state describes (a log that moved past it had an append whose sync write was lost:
    :func:`reconcile` catches up). ``turn``: the last turn: ``at`` (client messages it answered), ``seq`` (the log
    seq its pack was built at), ``pack`` (its id), ``request`` (the window forwarded, :func:`pack_json`) and
    ``reply`` (the recorded reply's JSON body, once recorded)."""

    digests: list[str] = field(default_factory=list)  # digest of each client message accounted for
    pending: str | None = None  # digest of the assistant message recorded from the last response
    seq: int | None = None
    turn: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"digests": self.digests, "pending": self.pending, "seq": self.seq, "turn": self.turn}

    @classmethod
    def from_dict(cls, d: Any) -> Sync:
        if not isinstance(d, Mapping):
            return cls()
        turn = d.get("turn")
        return cls(list(d.get("digests") or []), d.get("pending"), d.get("seq"),
                   dict(turn) if isinstance(turn, Mapping) else None)


def unique_call_ids(msg: Message, used: set[str], current: MutableMapping[str, str]) -> Message:
    """``msg`` with each tool-call id that ``used`` holds already renamed ``<id>~2``, ``<id>~3``, ...; ``used``
    gains the ids, ``current`` maps each client id to its latest name, and tool results follow ``current``.
    Walking a conversation in order, or a reply against the session's call ids, gives the same names."""
    blocks: list[Any] = []
    changed = False
    for b in msg.content:
        if isinstance(b, ToolCall):
            new = b.id
            k = 2
            while new in used:
                new, k = f"{b.id}~{k}", k + 1
            used.add(new)
            current[b.id] = new
            if new != b.id:
                b, changed = replace(b, id=new), True
        elif isinstance(b, ToolResult) and current.get(b.call_id, b.call_id) != b.call_id:
            b, changed = replace(b, call_id=current[b.call_id]), True
        blocks.append(b)
    return Message(msg.role, tuple(blocks)) if changed else msg


def with_unique_call_ids(messages: Sequence[Message]) -> tuple[Message, ...]:
    used: set[str] = set()
    current: dict[str, str] = {}
    return tuple(unique_call_ids(m, used, current) for m in messages)


@dataclass(frozen=True)
class Plan:
    """What a request asks of its session (:func:`plan_turn`): ``append`` the ``new`` messages and build,
    ``resend`` the last turn's request, or ``replay`` the last turn's recorded reply."""

    kind: str
    new: tuple[Message, ...] = ()
    known: int = 0


def plan_turn(sync: Sync, messages: Sequence[Message]) -> Plan:
    """The rule for every request: new messages are appended; the conversation the session already holds
    (a retry) replays the recorded reply, or resends the last turn's request when no reply was recorded.
    Raises :class:`ConversationDivergedError` for a conversation that does not continue the session."""
    new, known = new_messages(sync, messages)
    if new or known != len(sync.digests):  # (an echo of the recorded reply was skipped: the client continues)
        return Plan("append", tuple(new), known)
    turn = sync.turn or {}
    if sync.pending is not None:
        return Plan("replay", (), known)
    if turn.get("at") == known and turn.get("request"):
        return Plan("resend", (), known)
    return Plan("append", (), known)


def reconcile(sync: Sync, log_messages: Sequence[Message], log_seqs: Sequence[int], log_seq: int,
              messages: Sequence[Message]) -> Sync:
    """``sync`` caught up with messages the log holds past ``sync.seq`` (a process stopped between an append and
    the sync write that follows it): an assistant message after the last turn's pack is the recorded reply, any
    other the client message at the next position. ``log_seq``: the log's current seq."""
    if sync.seq is None or log_seq <= sync.seq:
        return sync
    turn_seq = (sync.turn or {}).get("seq", -1)
    late = [(m, seq) for m, seq in zip(log_messages[-8:], log_seqs[-8:], strict=False) if seq > sync.seq]
    for m, seq in late:
        i = len(sync.digests)
        if m.role == "assistant" and seq > turn_seq and sync.pending is None and sync.turn is not None:
            sync.pending = message_digest(m)
        elif i < len(messages) and messages[i].role == m.role:
            sync.digests.append(message_digest(messages[i]))
            sync.pending = None
    sync.seq = log_seq
    return sync


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
            "X-Windowsmith-Session header value to start a new session for an edited history"
        )
    rest = list(messages[known:])
    skipped = 0
    if sync.pending is not None and rest and rest[0].role == "assistant":
        # The client echoes the response we recorded; its form may differ (ids, whitespace), so
        # the role and position identify it, not the bytes.
        skipped = 1
    return rest[skipped:], known + skipped
