"""What a change of layers or cache plan would cost per call, before sending anything.

:func:`estimate_cache_savings` prices two neutral requests (the current one, e.g. ``pack.neutral``, and a proposed
one: the same session built with other layers, or ``dataclasses.replace(req, cache=...)`` for another cache plan)
with the cost model the manifest and the bench use (:func:`windowsmith.costs.call_cost`): the first call writes
(or, without a cache plan, pays for) the whole prefix, each following call re-sends the same request and reads the
prefix it shares with the one before. Over ``calls`` calls, that is the per-call cost of each, and the difference.
"""

from __future__ import annotations

from dataclasses import dataclass

from .costs import call_cost
from .errors import UsageError
from .registry import ModelSpec
from .request import NeutralRequest
from .tokens import TokenCounter


@dataclass(frozen=True)
class CacheEstimate:
    """Per-call cost (USD) of the current and the proposed request over ``calls`` calls, and what changes."""

    calls: int
    current_usd: float
    proposed_usd: float
    current_tokens: int
    proposed_tokens: int
    current_cached_tokens: int  # read from cache by each call after the first
    proposed_cached_tokens: int

    @property
    def savings_usd(self) -> float:
        """What the proposal saves per call (negative: it costs more)."""
        return self.current_usd - self.proposed_usd

    def describe(self) -> str:
        verb = "saves" if self.savings_usd >= 0 else "costs"
        return (f"over {self.calls} calls the proposal {verb} ${abs(self.savings_usd):.6f} a call: "
                f"${self.current_usd:.6f} -> ${self.proposed_usd:.6f} ({self.current_tokens:,} -> "
                f"{self.proposed_tokens:,} tokens, {self.current_cached_tokens:,} -> {self.proposed_cached_tokens:,} "
                "read from cache)")


def per_call(spec: ModelSpec, fmt: str, req: NeutralRequest, counter: TokenCounter, calls: int,
             output_tokens: int) -> tuple[float, int, int]:
    """(USD per call over ``calls`` calls, prompt tokens, tokens each repeat reads from cache) of ``req``."""
    tokens = counter.request(req)
    first, cands = call_cost(spec, fmt, None, req, counter, prompt_tokens=tokens, output_tokens=output_tokens)
    repeat, _ = call_cost(spec, fmt, req, req, counter, prompt_tokens=tokens, output_tokens=output_tokens,
                          prev_candidates=cands)
    return (first.usd + (calls - 1) * repeat.usd) / calls, tokens, repeat.cache_read_tokens


def estimate_cache_savings(spec: ModelSpec, fmt: str, counter: TokenCounter, current: NeutralRequest,
                           proposed: NeutralRequest, *, calls: int = 10, output_tokens: int = 0) -> CacheEstimate:
    """Price ``current`` and ``proposed`` per call over ``calls`` calls (see the module docstring)."""
    if calls < 1:
        raise UsageError(f"calls must be at least 1, got {calls}")
    cur_usd, cur_tok, cur_read = per_call(spec, fmt, current, counter, calls, output_tokens)
    new_usd, new_tok, new_read = per_call(spec, fmt, proposed, counter, calls, output_tokens)
    return CacheEstimate(calls, round(cur_usd, 8), round(new_usd, 8), cur_tok, new_tok, cur_read, new_read)


__all__ = ["CacheEstimate", "estimate_cache_savings", "per_call"]
