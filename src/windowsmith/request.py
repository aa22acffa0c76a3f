"""The neutral request: what the assembler hands to a renderer.

Order is the cache order (invariant 3): tools → system → stable session context → history →
dynamic tail. ``CachePlan`` says where provider cache breakpoints go; renderers never decide that.

Tail placement (every renderer follows it):

* the last message is a ``user`` message holding only text/images → the tail is rendered *before*
  those blocks in the same message, so the user's request stays verbatim at the very end (after them, as for
  tool results, when ``tail_after_user``: the recitation is then the last thing the model reads);
* the last message is a ``tool`` message (or a user message with tool results) → the tail is
  rendered *after* the tool results (Anthropic: a text block after the ``tool_result`` blocks;
  OpenAI Chat: a ``user`` message after the ``tool`` messages; Responses: a ``message`` item after
  the ``function_call_output`` items; Gemini: a text part after the ``functionResponse`` parts);
* otherwise (no messages, or the last is an assistant message) → a new user message holding the tail.

The planner puts the message breakpoint on a message whose rendering does not change on the next
turn, so the previous request's cached prefix is always a byte prefix of the next request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import Image, Message, Text, ToolSpec


@dataclass(frozen=True)
class Segment:
    """A piece of system-side text with the layer it came from."""

    text: str
    layer: str


@dataclass(frozen=True)
class CachePlan:
    """Where cache breakpoints go (Anthropic ``cache_control``; at most ``max_breakpoints``).

    ``message_index`` is the index in ``NeutralRequest.messages`` of the message whose last block
    carries the breakpoint, or ``None``. ``head_index``: the last message of the history's stable head
    (the pinned first request, which compaction never rewrites), when it is before ``message_index``: a
    compaction rewrites what follows the head, and this breakpoint keeps the head itself read from cache.
    ``carry_index``: the last message of the carry after the head (the summary message of the emergency stage's
    work log and index), when a cut may leave it as it is (``NeutralRequest.carry``): such a cut re-writes only
    what follows it. ``fold_index``: the last message of the history's folded exchanges (``NeutralRequest.fold``),
    which the next mask batch leaves as they are: such a batch re-writes only what follows them. ``turn_index``: the
    newest user message that is not a tool result, when replies after it carry thinking the provider strips once
    the user speaks again (Anthropic's rule for Claude before Opus 4.5): the next user message re-writes only what
    follows it. ``anchor_index``: the last message the previous request sent, when the newest turn after it is more
    blocks than the provider looks back from a breakpoint (:data:`~windowsmith.cache.LOOKBACK_BLOCKS`: Anthropic checks
    the 20 blocks before each breakpoint for a cached prefix): without it a turn of many parallel tool calls and results
    read nothing of the history the previous request cached.
    """

    tools: bool = False
    system: bool = False
    session: bool = False
    message_index: int | None = None
    head_index: int | None = None
    carry_index: int | None = None
    fold_index: int | None = None
    turn_index: int | None = None
    anchor_index: int | None = None
    #: the cache lifetime of the stable prefix's breakpoints (tools, system, session): ``"5m"`` or ``"1h"``
    #: (Anthropic ``cache_control.ttl``; the history's breakpoints always get the default 5 minutes)
    stable_ttl: str = "5m"

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def names(self) -> tuple[str, ...]:
        """The breakpoints placed, in cache order: ``tools``, ``system``, ``session``, ``head``, ``carry``,
        ``fold``, ``turn``, ``anchor``, ``message`` (what a pack's manifest lists under ``cache.marks``)."""
        return tuple(name for name, on in (
            ("tools", self.tools), ("system", self.system), ("session", self.session),
            ("head", self.head_index is not None), ("carry", self.carry_index is not None),
            ("fold", self.fold_index is not None), ("turn", self.turn_index is not None),
            ("anchor", self.anchor_index is not None), ("message", self.message_index is not None)) if on)


class Lineage:
    """Proof that requests' histories share a prefix, so nothing has to compare them.

    :class:`~windowsmith.state.SessionState` issues one per epoch of its view (a new one whenever a
    compaction record rewrites the view, the first visible unit moves or the summary changes). Within an
    epoch the history only grows at its end, so of two message tuples issued under the same lineage the
    shorter is a prefix of the longer, element by element the same objects. ``messages`` is the tuple it was
    last issued for: a request proves its history with ``lineage.messages is request.messages``
    (:func:`extends`); a request built otherwise carries no lineage and is compared instead.
    """

    __slots__ = ("messages",)

    def __init__(self) -> None:
        self.messages: Sequence[Message] = ()


def extends(req: NeutralRequest, lineage: Lineage | None, n: int) -> bool:
    """Whether ``req.messages[:n]`` are the first ``n`` messages of an earlier request issued under
    ``lineage`` (proven in O(1); False means unknown, not different)."""
    lin = req.lineage
    return lin is not None and lin is lineage and lin.messages is req.messages and len(req.messages) >= n


@dataclass(frozen=True)
class NeutralRequest:
    model: str
    system: tuple[Segment, ...]
    session: tuple[Segment, ...]
    tools: tuple[ToolSpec, ...]
    messages: Sequence[Message]  # a tuple, or a Snapshot of the session's view (snapshot.py): a tuple's behaviour
    tail: str | None
    max_output_tokens: int
    cache_key: str
    cache: CachePlan = field(default_factory=CachePlan)
    deferred: tuple[str, ...] = ()  # tools sent with the provider's deferred loading (see guidance/tools.py)
    allowed_tools: tuple[str, ...] | None = None  # the step's tool scope (tool_choice/allowed tools), or None
    #: the history's lineage (set by the assembler from the history layer; see :class:`Lineage`)
    lineage: Lineage | None = field(default=None, compare=False, repr=False)
    head: int = 0  # leading messages that compaction never rewrites (the pinned request): a cache breakpoint may end them
    carry: int = 0  # leading messages through the carried summary message, which a cut may leave as it is (or 0)
    fold: int = 0  # leading messages through the newest folded unit, which the next mask batch leaves as they are (or 0)
    #: leading messages through the user's newest message, when the provider strips the thinking of the replies after it
    #: at the user's next message and one of them carries thinking (or 0): the next user message re-writes only what follows
    turn: int = 0
    #: server-side context editing (Anthropic ``context_management``, sent with its beta header), or None:
    #: the ``{"edits": [...]}`` of :class:`~windowsmith.compaction.context_editing.ContextEditing`
    context_management: Mapping[str, Any] | None = None
    #: the tail goes after the user's newest text when that is the last message, not before it (TaskLayer(after_user))
    tail_after_user: bool = False

    @property
    def system_text(self) -> str:
        return "\n\n".join(s.text for s in self.system)

    @property
    def session_text(self) -> str:
        return "\n\n".join(s.text for s in self.session)

    def tail_mode(self) -> str:
        """``"prepend"``, ``"append"`` or ``"new"``: where the tail goes (see module docstring)."""
        if not self.tail:
            return "none"
        if not self.messages:
            return "new"
        last = self.messages[-1]
        if last.role == "tool" or (last.role == "user" and (last.tool_results or self.tail_after_user)):
            return "append"
        if last.role == "user" and all(isinstance(b, Text | Image) for b in last.content):
            return "prepend"
        return "new"


__all__ = ["CachePlan", "Lineage", "NeutralRequest", "Segment", "extends"]
