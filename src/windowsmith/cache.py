"""Cache planning and cache statistics.

Breakpoints (Anthropic ``cache_control``; at most the model's ``max_breakpoints``, 4) go at the ends
of tools, system, stable session context, the history's stable head (``NeutralRequest.head``: the pinned
first request, which a compaction never rewrites, so a cut re-writes only what follows it), the carry (the
emergency stage's summary message, which a deferred cut leaves as it is), the folds (``NeutralRequest.fold``:
the history through its newest folded exchange, which the next mask batch leaves as it is, since it folds later
exchanges and a fold is never folded again: without it every batch re-wrote the folds too) and the newest
message whose rendering will not change on the next turn. Where the provider strips the thinking of the replies
before the newest user message (Anthropic, Claude before Opus 4.5: ``TokenCounter.stripped_before``), one more goes
at the end of the newest user message that is not a tool result, when a reply after it carries thinking (the
turn, ``NeutralRequest.turn``, which the history layer marks from the counts it keeps): the next user message strips that thinking, so the request differs from the cached one from the first of
those replies on and, without a breakpoint before them, read nothing past the previous one (the system prompt in a
session with no cut): every answer of the user re-wrote the whole history. On the request right after that answer the
turn stays on the user's previous message (the history layer keeps it there), where the cache's prefix now ends. When fewer are allowed, the newest
message, the anchor (below) and the turn win, then the head, the carry and the folds, then the earlier ones (a later breakpoint also
covers everything before it; earlier ones only help when later content changes: the head's prefix covers system and
tools).

Anthropic looks for a cached prefix at each breakpoint and at the block boundaries up to 20 blocks before it
(:data:`LOOKBACK_BLOCKS`), so the message breakpoint, which moves on every call, finds the previous request's only
when the newest turn is at most that many blocks (content blocks: texts, tool calls, tool results, images). A turn of
many parallel tool calls and their results is more, and read nothing of the history the previous request cached (a
re-write of all of it); there one more breakpoint, the anchor, goes at the end of the previous request (its last
message before the newest assistant message), ranked right after the message breakpoint.

The newest-message rule: if the dynamic tail is prepended to the final user message, that message
will look different next turn (it will have no tail), so the breakpoint goes on the message before
it; otherwise it goes on the final message (the tail, if any, is a separate trailing block).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError
from .model import Message
from .request import CachePlan, NeutralRequest
from .tokens import TokenCounter

#: the cache lifetimes Anthropic offers for a breakpoint (``cache_control.ttl``)
TTLS = ("5m", "1h")


@dataclass(frozen=True)
class CacheConfig:
    """How the engine uses the provider's prompt cache (``Engine(cache=CacheConfig(...))``).

    ``volatile_to_tail``: move the volatile spans that cache-break linting finds in the stable layers (timestamps,
    dates, UUIDs, request ids, counters; :mod:`windowsmith.cache_lint`) to the tail, so the cached prefix stays the
    same from call to call. Off by default: the spans are only reported (manifest warnings).
    ``stable_ttl``: the lifetime of the breakpoints on the stable prefix (tools, system, session context) where the
    provider offers tiers (Anthropic: ``"5m"``, the default, or ``"1h"``: a write costs 2x the base input price
    instead of 1.25x, and the prefix survives pauses of up to an hour); the history's breakpoints stay at 5 minutes.
    """

    volatile_to_tail: bool = False
    stable_ttl: str = "5m"

    def __post_init__(self) -> None:
        if self.stable_ttl not in TTLS:
            raise ConfigError(f"CacheConfig(stable_ttl={self.stable_ttl!r}) is not a cache lifetime; use one of {TTLS}")


#: content blocks before a breakpoint that Anthropic checks for a cached prefix ("about 20 blocks")
LOOKBACK_BLOCKS = 20
#: messages looked back over for the newest assistant message (the start of the newest turn)
ANCHOR_SCAN = 256


def message_blocks(m: Message) -> int:
    """Content blocks a message renders to (a text, a thinking block, each tool call, each tool result, each image);
    at least one."""
    return max(1, len(m.content))


def anchor_index(req: NeutralRequest, msg_idx: int | None) -> int | None:
    """The last message the previous request sent (the one before the newest assistant message), when the blocks
    from there to the message breakpoint at ``msg_idx`` are more than :data:`LOOKBACK_BLOCKS`: the provider's lookback
    from the breakpoint would not reach it. None otherwise (or when there is no earlier turn)."""
    if msg_idx is None:
        return None
    msgs = req.messages
    blocks = 0
    for i in range(msg_idx, max(-1, msg_idx - ANCHOR_SCAN), -1):
        m = msgs[i]
        blocks += message_blocks(m)
        if m.role == "assistant":
            return i - 1 if blocks > LOOKBACK_BLOCKS and i > 0 else None
    return None


def plan_cache(req: NeutralRequest, max_breakpoints: int = 4, *, anchor: bool = True,
               stable_ttl: str = "5m") -> CachePlan:
    """Where ``req``'s cache breakpoints go (see the module docstring). ``anchor=False``: no anchor after a wide
    turn (the bench's peers: LangChain's caching middleware marks system, tools and the newest message only).

    ``stable_ttl="1h"`` (:class:`CacheConfig`): the stable prefix's breakpoints (tools, system, session) get a 1-hour
    lifetime, and the last of them is ranked right after the message breakpoint, so that a 1-hour breakpoint is
    placed whenever the model allows two (the 1-hour ones come first in cache order, before the 5-minute ones of
    the history, as Anthropic requires)."""
    msg_idx: int | None
    n = len(req.messages)
    if n == 0:
        msg_idx = None
    elif req.tail_mode() == "prepend":
        msg_idx = n - 2 if n >= 2 else None
    else:
        msg_idx = n - 1
    prepend = req.tail_mode() == "prepend"

    def end_of(count: int, after: int) -> int | None:
        """The last of ``count`` leading messages, as a breakpoint: past the ``after`` leading messages an earlier
        one ends, before the message breakpoint, and never the message the tail is prepended to (it renders
        differently next turn)."""
        if not after < count <= n:
            return None
        i = count - 1
        if msg_idx is not None:
            return i if i < msg_idx else None
        return None if prepend and i >= n - 1 else i

    head_idx = end_of(req.head, 0)
    carry_idx = end_of(req.carry, req.head)
    fold_idx = end_of(req.fold, max(req.head, req.carry))
    turn_idx = end_of(req.turn, 0)
    if turn_idx in (head_idx, carry_idx, fold_idx):
        turn_idx = None  # (a breakpoint there already)
    at = anchor_index(req, msg_idx) if anchor else None
    anchor_idx = end_of(at + 1, 0) if at is not None else None
    if anchor_idx in (head_idx, carry_idx, fold_idx, turn_idx):
        anchor_idx = None  # (a breakpoint there already)
    wanted = [
        ("message", msg_idx is not None),
        ("anchor", anchor_idx is not None),
        ("turn", turn_idx is not None),
        ("head", head_idx is not None),
        ("carry", carry_idx is not None),
        ("fold", fold_idx is not None),
        ("session", bool(req.session)),
        ("system", bool(req.system)),
        ("tools", bool(req.tools)),
    ]
    if stable_ttl != "5m":
        stable = next((w for w in wanted[-3:] if w[1]), None)  # session, system, tools: the one that covers most
        if stable is not None:
            wanted.remove(stable)
            wanted.insert(1, stable)
    chosen = {name for name, ok in wanted if ok}
    if max_breakpoints <= 0:
        # implicit-cache providers (OpenAI, Gemini) cache by prefix; keep the plan for accounting
        pass
    else:
        keep = [name for name, ok in wanted if ok][:max_breakpoints]
        chosen = set(keep)
    return CachePlan(
        tools="tools" in chosen,
        system="system" in chosen,
        session="session" in chosen,
        message_index=msg_idx if "message" in chosen else None,
        head_index=head_idx if "head" in chosen else None,
        carry_index=carry_idx if "carry" in chosen else None,
        fold_index=fold_idx if "fold" in chosen else None,
        turn_index=turn_idx if "turn" in chosen else None,
        anchor_index=anchor_idx if "anchor" in chosen else None,
        stable_ttl=stable_ttl,
    )


def prefix_tokens(req: NeutralRequest, counter: TokenCounter, history_raw: int | None = None) -> int:
    """Tokens covered by the last breakpoint (the cacheable prefix).

    ``history_raw``: the raw token total of ``req.messages`` when the caller already knows it (the
    history layer keeps it incrementally); then only the messages after the breakpoint are counted.
    """
    plan = req.cache
    raw = counter.overheads.per_request + counter.raw_tools(req.tools)
    if not (plan.system or plan.session or plan.message_index is not None):
        return counter.scaled(raw) if plan.tools else 0
    raw += counter.raw_segment(req.system_text)
    if plan.session or plan.message_index is not None:
        raw += counter.raw_segment(req.session_text)
    if plan.message_index is not None:
        if history_raw is not None:
            raw += history_raw - sum(counter.raw_message(m) for m in req.messages[plan.message_index + 1:])
        else:
            raw += sum(counter.raw_message(m) for m in req.messages[: plan.message_index + 1])
    return counter.scaled(raw)


__all__ = ["LOOKBACK_BLOCKS", "TTLS", "CacheConfig", "anchor_index", "message_blocks", "plan_cache", "prefix_tokens"]
