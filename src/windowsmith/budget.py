"""The token budget: how much of the window each layer may use.

    available = window - reserved output - slack

Required layers (system, tools, task) take what they need, up to the total; each has a floor it is
guaranteed. What remains is shared across the optional layers by weight, as fractions of the
window, so the same config works on an 8K and a 1M window. A layer that needs less than its share
gives the rest back, and the leftover goes to the layers that want more, by weight (water-filling).

Thresholds are fractions of ``available``: above ``warn_at`` the pack warns, above ``compact_at``
the engine compacts, and ``block_at`` is a ceiling: optional layers are fitted under ``block_at`` *
``available``, and a build whose required layers alone are over it is refused (``BudgetBlockedError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import ConfigError

#: The components usage is reported on.
COMPONENTS: tuple[str, ...] = ("system", "tools", "skills", "memory", "knowledge", "task", "history", "tail")

DEFAULT_WEIGHTS: Mapping[str, float] = {
    "history": 0.70,
    "memory": 0.06,
    "knowledge": 0.10,
    "evidence": 0.06,
    "skills": 0.04,
    "instructions": 0.04,
}

DEFAULT_FLOORS: Mapping[str, int] = {"system": 0, "tools": 0, "task": 0, "history": 0}

#: The most tokens an optional layer takes, whatever the window: weights are fractions of the window, so on a 200K
#: window a single large memory note (9,006 tokens) took all of it. The history is never capped (it is fitted,
#: compacted and cut instead); a layer not named here is capped by its weight only.
DEFAULT_CAPS: Mapping[str, int] = {
    "memory": 4_000,
    "knowledge": 8_000,
    "evidence": 4_000,
    "skills": 6_000,
    "instructions": 10_000,
}


@dataclass(frozen=True)
class BudgetConfig:
    """Budget settings. All optional; the defaults suit any window size.

    ``reserved_output``: tokens kept free for the model's answer (default: the model's max output,
    capped at 16K and at a quarter of the window). ``slack``: safety margin as a fraction of the
    window (covers tokenizer estimation error before calibration kicks in).
    """

    reserved_output: int | None = None
    slack: float = 0.02
    floors: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_FLOORS))
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    warn_at: float = 0.70
    compact_at: float = 0.85
    block_at: float = 0.98
    history_low_water: float = 0.7  # when history must shrink, drop down to this share of its cap
    #: hard caps in tokens per optional layer, whatever the window (``DEFAULT_CAPS``; ``{}`` for none)
    caps: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_CAPS))

    def __post_init__(self) -> None:
        if self.reserved_output is not None and self.reserved_output < 0:
            raise ConfigError(f"reserved_output must be >= 0, got {self.reserved_output}")
        if not 0 <= self.slack < 0.5:
            raise ConfigError(f"slack is a fraction of the window in [0, 0.5), got {self.slack}")
        if not 0 < self.warn_at <= self.compact_at <= self.block_at <= 1:
            raise ConfigError(
                "thresholds must satisfy 0 < warn_at <= compact_at <= block_at <= 1, "
                f"got warn_at={self.warn_at}, compact_at={self.compact_at}, block_at={self.block_at}"
            )
        if not 0.1 <= self.history_low_water <= 1:
            raise ConfigError(f"history_low_water must be in [0.1, 1], got {self.history_low_water}")
        for k, w in self.weights.items():
            if w < 0:
                raise ConfigError(f"weight of layer {k!r} must be >= 0, got {w}")
        for k, f in self.floors.items():
            if f < 0:
                raise ConfigError(f"floor of layer {k!r} must be >= 0, got {f}")
        for k, c in self.caps.items():
            if c < 0:
                raise ConfigError(f"cap of layer {k!r} must be >= 0 tokens, got {c}")
            if k == "history":
                raise ConfigError("the history layer cannot be capped (it is fitted and compacted instead); "
                                  "remove 'history' from BudgetConfig(caps=...)")

    def block_tokens(self, available: int) -> int:
        """The most tokens a request may use: ``block_at`` of ``available`` (rounded down)."""
        return int(available * self.block_at)

    def reserved_for(self, window: int, max_output: int) -> int:
        if self.reserved_output is not None:
            return self.reserved_output
        return min(max_output, 16_384, window // 4)


MIN_OUTPUT_TOKENS = 512  # the reserved output is never lowered under this (or a quarter of it, if larger)


@dataclass(frozen=True)
class Budget:
    window: int
    reserved_output: int
    slack: int

    @property
    def available(self) -> int:
        return self.window - self.reserved_output - self.slack

    def output_floor(self) -> int:
        """The least the reserved output is lowered to when the required layers (system prompt, tools, task)
        leave the history no room beside it: :data:`MIN_OUTPUT_TOKENS`, or a quarter of the reservation if larger."""
        return min(self.reserved_output, max(MIN_OUTPUT_TOKENS, self.reserved_output // 4))

    @classmethod
    def for_window(cls, window: int, max_output: int, config: BudgetConfig) -> Budget:
        if window <= 0:
            raise ConfigError(f"window must be positive, got {window}")
        reserved = config.reserved_for(window, max_output)
        slack = int(window * config.slack)
        if reserved + slack >= window:
            raise ConfigError(
                f"reserved output ({reserved}) plus slack ({slack}) leave nothing of the {window}-token window; "
                "lower BudgetConfig(reserved_output=...) or slack"
            )
        return cls(window=window, reserved_output=reserved, slack=slack)


def share(total: int, wants: Mapping[str, int], weights: Mapping[str, float]) -> dict[str, int]:
    """Split ``total`` tokens across layers that want ``wants[k]``, by ``weights`` (water-filling).

    No layer gets more than it wants; leftover from satisfied layers is redistributed by weight among
    the others. Deterministic: ties are broken by layer name. Layers with weight 0 get what remains
    after everyone else, in name order.
    """
    alloc = {k: 0 for k in wants}
    remaining = max(0, total)
    active = sorted(k for k in wants if wants[k] > 0 and weights.get(k, 0) > 0)
    while remaining > 0 and active:
        wsum = sum(weights[k] for k in active)
        grant = {k: int(remaining * weights[k] / wsum) for k in active}
        if not any(grant.values()):  # rounding dust: give it to the first active layer
            grant[active[0]] = remaining
        satisfied = []
        for k in active:
            g = min(grant[k], wants[k] - alloc[k])
            alloc[k] += g
            remaining -= g
            if alloc[k] >= wants[k]:
                satisfied.append(k)
        if not satisfied:
            # nobody is full: everyone got their proportional grant; hand out rounding dust and stop
            for k in active:
                if remaining <= 0:
                    break
                extra = min(remaining, wants[k] - alloc[k])
                alloc[k] += extra
                remaining -= extra
            break
        active = [k for k in active if k not in satisfied]
    for k in sorted(k for k in wants if weights.get(k, 0) <= 0):
        g = min(remaining, wants[k])
        alloc[k] = g
        remaining -= g
    return alloc


#: Below this share of the available budget, the room the fixed part (tools, system) leaves the history is *tiny*:
#: what every request after a cut carries besides the kept messages (the pinned request's view, the work log and
#: index) shrinks in proportion (:func:`room_factor`).
TINY_ROOM = 0.5


def room_factor(room: float, available: float, tiny: float = TINY_ROOM) -> float:
    """How much of its usual share a carried part (the pinned request, the work log and index) keeps when the history
    has ``room`` of the ``available`` budget: 1 from ``tiny`` of it up, else ``room / (tiny * available)``.

    Those parts are read by every call, and in a tiny room what they take is also what the history's free cut has
    left to wait on: the newest unit and the high-water margin do not shrink with the room, so at a fixed share of
    it they left a band of a few hundred tokens and a cut (a cache rewrite) every two or three calls."""
    if available <= 0 or tiny <= 0:
        return 1.0
    return max(0.0, min(1.0, room / (tiny * available)))


__all__ = ["COMPONENTS", "DEFAULT_CAPS", "DROP_ORDER", "TINY_ROOM", "Budget", "BudgetConfig", "allocate", "room_factor", "share"]


#: Which optional layers give up tokens first when everything wanted does not fit.
DROP_ORDER: tuple[str, ...] = ("memory", "knowledge", "evidence", "skills", "instructions", "history")
DEFAULT_WEIGHT = 0.05


def allocate(total: int, wants: Mapping[str, int], weights: Mapping[str, float],
             drop_order: tuple[str, ...] = DROP_ORDER, caps: Mapping[str, int] | None = None) -> dict[str, int]:
    """Allocate ``total`` tokens to optional layers that want ``wants[k]``, none more than its cap in ``caps``.

    Every layer is guaranteed its weighted share of ``total`` (weights are relative, so the split is
    proportional to the window). If everything fits, every layer gets what it wants. Otherwise layers
    are cut in ``drop_order`` (unknown layers before history, by name): first down to their guaranteed
    share, then, if still over, below it. Deterministic.
    """
    alloc = {k: max(0, min(v, caps[k]) if caps and k in caps else v) for k, v in wants.items()}
    over = sum(alloc.values()) - max(0, total)
    if over <= 0:
        return alloc
    present = [k for k in alloc if alloc[k] > 0]
    wsum = sum(weights.get(k, DEFAULT_WEIGHT) for k in present) or 1.0
    guaranteed = {k: int(total * weights.get(k, DEFAULT_WEIGHT) / wsum) for k in present}
    known = [k for k in drop_order if k in alloc]
    unknown = sorted(k for k in alloc if k not in drop_order)
    order = [k for k in known if k != "history"] + unknown + [k for k in known if k == "history"]
    for k in order:
        cut = min(over, max(0, alloc[k] - guaranteed.get(k, 0)))
        alloc[k] -= cut
        over -= cut
    for k in order:
        cut = min(over, alloc[k])
        alloc[k] -= cut
        over -= cut
    return alloc
