"""Cache-adjusted cost of a sequence of requests, priced as each provider bills them.

The cached prefix of a request is computed exactly from consecutive requests, in neutral terms
(tools → system → session → messages, compared by content digest), which is renderer-independent:

* Anthropic (explicit breakpoints): a request reads from cache the longest of the previous
  request's breakpoint prefixes that is still a prefix of this one (and at least the model's minimum
  cacheable prefix) and that one of this request's breakpoints finds: at the same block or at most
  ``cache.LOOKBACK_BLOCKS`` (20) blocks after it, as far as the provider looks back; it writes the rest of its
  own prefix up to its last breakpoint.
* OpenAI and Gemini (implicit prefix caching): cached tokens are the shared prefix with the previous
  request, rounded down to 128-token blocks, when at least the minimum prefix; no write surcharge.

Uncached input is everything else. Output tokens are priced as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from .cache import LOOKBACK_BLOCKS, message_blocks
from .registry import ModelSpec
from .request import NeutralRequest
from .tokens import TokenCounter


@dataclass(frozen=True)
class CallCost:
    prompt_tokens: int
    input_tokens: int  # uncached
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    shared_prefix_tokens: int
    usd: float
    cache_write_1h_tokens: int = 0  # of ``cache_write_tokens``, written with a 1-hour lifetime (``CacheConfig``)

    def to_dict(self) -> dict[str, float | int]:
        extra: dict[str, float | int] = {"cache_write_1h_tokens": self.cache_write_1h_tokens} \
            if self.cache_write_1h_tokens else {}
        return extra | {
            "prompt_tokens": self.prompt_tokens,
            "input_tokens": self.input_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "shared_prefix_tokens": self.shared_prefix_tokens,
            "usd": self.usd,
        }


def _boundaries(req: NeutralRequest, counter: TokenCounter) -> tuple[int, int, int]:
    base = counter.overheads.per_request + counter.raw_tools(req.tools)
    sys_end = base + counter.raw_segment(req.system_text)
    ses_end = sys_end + counter.raw_segment(req.session_text)
    return base, sys_end, ses_end


def _stable_messages(req: NeutralRequest) -> int:
    """How many leading messages render the same next turn (the tail-prepended one does not)."""
    n = len(req.messages)
    return n - 1 if req.tail_mode() == "prepend" and n else n


def shared_prefix_tokens(prev: NeutralRequest | None, cur: NeutralRequest, counter: TokenCounter) -> int:
    """Raw tokens of the longest common prefix of ``prev`` and ``cur`` in cache order."""
    if prev is None:
        return 0
    if prev.tools != cur.tools:
        return 0
    base, sys_end, ses_end = _boundaries(cur, counter)
    if prev.system_text != cur.system_text:
        return base
    if prev.session_text != cur.session_text:
        return sys_end
    raw = ses_end
    limit = min(_stable_messages(prev), len(cur.messages))
    pm, cm = prev.messages, cur.messages
    # the thinking the provider strips (before the last user message that is not a tool result) is not part of
    # the prompt it caches: an assistant message whose thinking was sent last time and is stripped now (a user
    # message came after it) differs from what the cache holds
    sp, sc = counter.stripped_before(pm), counter.stripped_before(cm)
    for i in range(limit):
        a, b = pm[i], cm[i]
        if a is not b and a.digest != b.digest:
            break
        size = counter.raw_message(b)
        if i < sc or i < sp:
            thought = counter.raw_thinking(b)
            if thought and (i < sp) != (i < sc):
                break
            size -= thought
        raw += size
    return raw


def _prefix_candidates(req: NeutralRequest, counter: TokenCounter) -> list[tuple[int, int]]:
    """``(raw token position, block position)`` of each cache breakpoint of ``req`` (Anthropic): the blocks are the
    tool definitions, system and session segments and the messages' content blocks before it."""
    plan = req.cache
    base, sys_end, ses_end = _boundaries(req, counter)
    b_tools = len(req.tools)
    b_sys = b_tools + len(req.system)
    b_ses = b_sys + len(req.session)
    out = []
    if plan.tools:
        out.append((base, b_tools))
    if plan.system:
        out.append((sys_end, b_sys))
    if plan.session:
        out.append((ses_end, b_ses))
    ends = [i + 1 for i in (plan.head_index, plan.carry_index, plan.fold_index, plan.turn_index, plan.anchor_index,
                            plan.message_index) if i is not None]
    if ends:
        # billed: the thinking the provider strips is not part of the prompt it caches (one pass to the last end)
        stripped = counter.stripped_before(req.messages)
        head = req.messages[: max(ends)]
        at = [0, *accumulate(counter.raw_message(m) - (counter.raw_thinking(m) if k < stripped else 0)
                             for k, m in enumerate(head))]
        blocks = [0, *accumulate(message_blocks(m) for m in head)]
        out += [(ses_end + at[e], b_ses + blocks[e]) for e in ends]
    return out


def _readable(cand: tuple[int, int], mine: list[tuple[int, int]]) -> bool:
    """Whether a breakpoint of the previous request is found from one of this request's (``mine``): at the same
    block or at most :data:`~windowsmith.cache.LOOKBACK_BLOCKS` blocks before it."""
    blk = cand[1]
    return any(0 <= b - blk <= LOOKBACK_BLOCKS for _, b in mine)


def call_cost(
    spec: ModelSpec,
    fmt: str,
    prev: NeutralRequest | None,
    cur: NeutralRequest,
    counter: TokenCounter,
    *,
    prompt_tokens: int,
    output_tokens: int = 0,
    prev_candidates: list[tuple[int, int]] | None = None,
) -> tuple[CallCost, list[tuple[int, int]]]:
    """Price ``cur`` given the previous request. Returns the cost and ``cur``'s breakpoint positions
    (pass them back as ``prev_candidates`` next time to avoid recomputing)."""
    shared_raw = shared_prefix_tokens(prev, cur, counter)
    scale = counter.scale
    shared = int(shared_raw * scale)
    minimum = spec.min_cacheable_prefix
    if fmt == "anthropic" and spec.max_breakpoints > 0:
        cands = prev_candidates if prev_candidates is not None else (
            _prefix_candidates(prev, counter) if prev is not None else []
        )
        mine = _prefix_candidates(cur, counter)
        read_raw = max((c[0] for c in cands if c[0] <= shared_raw and c[0] * scale >= minimum and _readable(c, mine)),
                       default=0)
        top = max((t for t, _ in mine), default=0)
        read = int(read_raw * scale)
        write = max(0, int(top * scale) - read) if top * scale >= minimum else 0
        stable = _stable_top(cur, counter) if cur.cache.stable_ttl == "1h" else 0
        write_1h = min(write, max(0, int(stable * scale) - read)) if stable * scale >= minimum else 0
    else:
        mine = []
        read = (shared // 128) * 128 if shared >= max(minimum, 1024 if minimum == 0 else minimum) else 0
        write = write_1h = 0
    read = min(read, prompt_tokens)
    write = min(write, prompt_tokens - read)
    write_1h = min(write_1h, write)
    uncached = max(0, prompt_tokens - read - write)
    usd = spec.cost(uncached, output_tokens, read, write, cache_write_1h_tokens=write_1h)
    return CallCost(prompt_tokens, uncached, read, write, output_tokens, shared, usd, write_1h), mine


def _stable_top(req: NeutralRequest, counter: TokenCounter) -> int:
    """Raw tokens through the last breakpoint of ``req``'s stable prefix (tools, system, session): what a 1-hour
    breakpoint covers; 0 when none is placed."""
    plan = req.cache
    base, sys_end, ses_end = _boundaries(req, counter)
    return ses_end if plan.session else sys_end if plan.system else base if plan.tools else 0


__all__ = ["CallCost", "call_cost", "shared_prefix_tokens"]
