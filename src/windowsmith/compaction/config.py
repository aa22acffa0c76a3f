"""Compaction settings, the per-pass result, and the circuit breaker that runs each stage at most once."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..assemble import Action
from ..errors import ConfigError, UsageError
from .context_editing import ContextEditing

#: The stages in the order they run, cheapest first.
STAGES: tuple[str, ...] = ("mask", "summary", "emergency")

#: The mask batch's default hysteresis floor is 8% of the available budget up to a room of this many tokens. The
#: floor sets how many turns of growth pass between two cache-breaking batches, and a turn grows a request by
#: the same tokens in a 200K window as in a 32K one: 8% of a 200K room (16K tokens) held every batch back on the
#: OpenHands runs at the model's own window while the same batches paid back (validation, gpt-4o 128K: -13%).
MASK_FLOOR_ROOM = 32_000
MIN_EXPECTED_TURNS = 3  # the youngest age a run's remaining life is estimated from (remaining_turns)


@dataclass(frozen=True)
class CompactionConfig:
    """When and how hard to compact. Fractions are of the available budget (window - output - slack).

    Defaults tuned with ``windowsmith bench`` on the shared traces (README).
    ``keep_turns``: the newest exchanges never masked; ``mask_batch``: fewest exchanges folded at once. ``mask_at``: with ``cost_aware=False``,
    above this fill masking runs whenever its batch is big enough; with the cost model (the default) a batch runs
    when it pays back over ``expected_turns``, at any fill, or when a summary is near (``summarize_at``).
    ``mask_min_tokens``: the hysteresis — a batch must save at least this many tokens (default: 8%
    of the available budget up to a 32K room (``MASK_FLOOR_ROOM``; 2,560 tokens from there on), at least 512).
    ``summarize_at``: fill that triggers a summary (default:
    ``BudgetConfig.compact_at``). ``keep_ratio``: after a summary or emergency truncation the verbatim
    history aims at this share (masking keeps at least two exchanges). ``summary_target``: a summary
    brings the whole request down to this share. ``summary_tokens``: output budget reserved for a
    summary (at most 12% of the available budget). ``mask_low_water``: a mask batch due because the
    request reached ``summarize_at`` folds deeper (keeps ``keep_ratio * mask_low_water`` verbatim), and is
    skipped for the summary when even that would leave the request above ``mask_at``: at the ceiling,
    one real compaction beats a small cache-breaking batch every turn.
    ``summary_pays``: a summary is a model call, so when one is due (not asked for) it runs only where it
    pays for itself: its price (the span and the prompt read, the summary written) below what it saves over
    ``expected_turns`` against the free emergency truncation (work log + index + transcript reference) that
    otherwise takes the span once the request reaches ``cut_at`` (``summary.summary_pays``); else that cut does. ``False``: summarize whenever due. ``cut_at``: the high-water mark
    of that free cut (a fraction of the available budget, at least ``summarize_at``): it waits until the
    request reaches it, then cuts down to ``summary_target`` in one batch, so between two cuts every request
    only appends to the previous one (one cache rewrite per batch, not one per turn near the threshold).
    ``emergency_keep``: messages kept verbatim by emergency truncation (fewer when they would leave the
    request above ``summary_target``, the newest unit always; so a rebuild never truncates again). ``expected_turns``: the
    horizon, in turns, the cost model prices a compaction over; a mask batch pays back over the turns of it the run
    is expected to live, by its age (:meth:`remaining_turns`). ``image_keep_turns``: an image (in a user message or a tool result)
    is replaced by a text stub naming it and its artifact once this many assistant turns followed it,
    in a mask batch (``None``: never). ``index_ratio``: the share of the available budget the emergency stage's
    index of the identifiers its cut lost may take (``compaction/keys.py``; 0: no index). ``carry_share``: the work
    log and the index, carried by every request after a cut, together take at most this share of the room tools
    and system leave (``port.carry_caps``; ``None``: their shares of the budget only); ``index_floor``: the raw
    tokens the index keeps at least, however tiny the room (within ``index_ratio`` and a quarter of the room). ``working_set``
    (opt-in): a mask batch leaves out the old reads of the files the kept exchanges still name (an edit's path),
    newest first, in the room the kept exchanges leave of ``keep_ratio`` (``compaction/working_set.py``); it
    keeps what an edit quotes (exact text, line numbers) and costs the cache reads of those tokens every turn.
    ``fold_observations``: a text-protocol agent (mini-swe-agent, SWE-agent 0.x, any agent that writes its command
    in the reply's text) gets each command's output back as the next user message; a mask batch folds those
    observations like exchanges, into ``[turn N] output → preview [keys: …] (artifact://sha)`` (a user message),
    the agent's reply before it staying as it was. ``None`` (the default): only in a session that declares no tools
    and has called none (with tools, a user message after a text reply is the user speaking), and only the answer to
    a reply that acts in its text (``text.acts``: a fenced command block, an ``Action:`` line, an action tag; a
    question's answer is the user speaking); ``True``: every user message answering a text reply; ``False``: never.
    ``enabled=False`` turns proactive compaction off (the assembler still truncates to fit).
    """

    enabled: bool = True
    #: Anthropic's server-side context editing on top of this compaction (``compaction/context_editing.py``), or None
    server_editing: ContextEditing | None = None
    keep_turns: int = 12
    mask_batch: int = 8  # a fold batch rewrites the cache from its first fold on: 8 (was 4) halves those rewrites
    mask_at: float = 0.6
    mask_min_tokens: int | None = None
    summarize_at: float | None = None
    keep_ratio: float = 0.5
    mask_low_water: float = 0.6  # near the summary threshold, mask keeps this share of keep_ratio verbatim
    summary_target: float = 0.5
    summary_tokens: int = 2048
    emergency_keep: int = 6
    cut_at: float = 0.95  # the free cut's high-water mark when no summary is placed (summary_pays said no)
    expected_turns: int = 10
    cost_aware: bool = True
    summary_pays: bool = True  # a due summary runs only if its model call pays for itself (summary.summary_pays)
    fold_chars: int = 160
    fold_keys: int = 16  # identifiers (ids, paths, error names, symbols) a fold keeps from its result (12 lost a
    # profile's last reservations behind its payment ids: dev tau-bench with thinking at 16K, 99.0% -> 99.7%)
    extract_lessons: bool = True
    work_log_ratio: float = 0.03  # the work log of emergency truncations keeps its newest lines within this share (0.08 before the index)
    index_ratio: float = 0.05  # the emergency index of identifiers the dropped history lost takes at most this share
    carry_share: float | None = 0.15  # work log + index together take at most this share of the room tools and system leave
    #: raw tokens the index keeps at least (its head and about a dozen names; within index_ratio and a quarter of the
    #: room): where the room is tiny, carry_share and room_factor left it two names (dev tau-bench with a 3,000-token
    #: longer system prompt at 8K, bench_stress.py bigsys: strict recall 81.2% -> 88.1%, cost +1.4%; 120 touched the
    #: validation OpenHands runs at 8K, +0.2%; a tenth of the room instead, +2.2% there)
    index_floor: int = 96
    carry_refresh: int = 2  # the emergency stage rewrites its summary message at most every this many cuts (1: every cut)
    image_keep_turns: int | None = 3  # images stay this many assistant turns, then become text stubs; None: always
    working_set: bool = False  # opt-in: old reads of files the kept exchanges name stay unfolded (working_set.py)
    fold_observations: bool | None = None  # None: a session without tools folds the answers to replies that act

    def folds_observations(self, tools: bool) -> bool:
        """Whether a session folds a text-protocol agent's observations (``tools``: it declares tools or has called
        one: its user messages after a text reply are the user speaking, a customer in tau-bench traces that carry
        no tool definitions)."""
        return self.fold_observations if self.fold_observations is not None else not tools

    def __post_init__(self) -> None:
        if self.keep_turns < 1:
            raise ConfigError(f"keep_turns must be >= 1 (the newest exchange is never folded), got {self.keep_turns}")
        if not 0 < self.mask_at <= 1:
            raise ConfigError(f"mask_at is a fraction of the available budget in (0, 1], got {self.mask_at}")
        if self.summarize_at is not None and not 0 < self.summarize_at <= 1:
            raise ConfigError(f"summarize_at is a fraction in (0, 1], got {self.summarize_at}")
        if not 0.05 <= self.keep_ratio < 1:
            raise ConfigError(f"keep_ratio must be in [0.05, 1), got {self.keep_ratio}")
        if not 0 < self.cut_at <= 1:
            raise ConfigError(f"cut_at is a fraction of the available budget in (0, 1], got {self.cut_at}")
        if self.summary_tokens < 64 or self.emergency_keep < 1 or self.expected_turns < 0:
            raise ConfigError("summary_tokens must be >= 64, emergency_keep >= 1 and expected_turns >= 0")
        if not 0 <= self.index_ratio < 0.5:
            raise ConfigError(f"index_ratio is a fraction of the available budget in [0, 0.5) (0: no index), "
                              f"got {self.index_ratio}")
        if not 0 <= self.index_floor <= 4096:
            raise ConfigError(f"index_floor is the raw tokens the index keeps at least, in [0, 4096] (0: it scales with "
                              f"carry_share alone), got {self.index_floor}")
        if not 1 <= self.carry_refresh <= 16:
            raise ConfigError(f"carry_refresh is a number of cuts in [1, 16] (1: the work log is rewritten at every "
                              f"cut), got {self.carry_refresh}")
        if self.carry_share is not None and not 0 < self.carry_share <= 1:
            raise ConfigError(f"carry_share is a fraction of the room tools and system leave in (0, 1] (None: no "
                              f"bound), got {self.carry_share}")
        if self.image_keep_turns is not None and self.image_keep_turns < 1:
            raise ConfigError(f"image_keep_turns must be >= 1 (the model sees an image at least once) or None "
                              f"(images are never replaced), got {self.image_keep_turns}")

    def remaining_turns(self, elapsed: int) -> float:
        """How many of the next ``expected_turns`` turns a run that has had ``elapsed`` assistant turns is expected
        to live: with nothing else known, a run that has lasted ``a`` turns lasts ``t`` more with odds ``a / (a + t)``
        (its future about as long as its past: the median remaining life is ``a``), so the sum of those odds over
        the horizon (``a`` at least :data:`MIN_EXPECTED_TURNS`; two decimals). A mask batch rewrites the cache once
        and saves reads only on the calls still to come. The horizon's ten turns as such (the rule before, for a
        run ten turns old or more) counted turns an ending run never has: on the dev half, a run at turn 15 had
        4.5 (tau-bench), 2.9 (tau2-bench) and 9.5 (mini-swe-agent) of the next ten left, at turn 40 (mini-swe-agent)
        7.5; this sum says 7.5 and 8.8 (``benchmarks/bench_run_lengths.py``; a run at turn 3 had 7.6 to 10 left, more
        than either rule says). Batches of aged screenshots made two or three calls before the end paid
        back on paper only (dev, a screenshot in every tool result, windowsmith alone: tau-bench 32K $12.965 ->
        $12.673, +0.9% -> -1.4% against `sticky`; tau2-bench 32K -0.6%; no other stress cell and no dev trace moved
        beyond 0.1%; validation, the commit before this rule against it: tau-bench 32K $8.614 -> $8.446, +2.7% -> +0.7%). A run that outlives the odds loses a batch that would have paid: one validation OpenHands
        run of 49 calls at 200K, +9% ($0.379 -> $0.413; its fold batch at turn 21, priced over 8 turns, not 10)."""
        a = max(MIN_EXPECTED_TURNS, elapsed)
        return round(sum(a / (a + t) for t in range(1, self.expected_turns + 1)), 2)

    def min_saving(self, available: int) -> int:
        if self.mask_min_tokens is not None:
            return self.mask_min_tokens
        return max(512, int(min(available, MASK_FLOOR_ROOM) * 0.08))


@dataclass
class CompactionResult:
    """What one compaction pass did (also recorded in the log and the next manifest)."""

    actions: list[Action] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0
    #: why nothing was done, when compaction was asked for and would not have made the request smaller
    reason: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.stages)

    def describe(self) -> str:
        if not self.stages and self.reason:
            return f"nothing to compact (the request is {self.tokens_before:,} tokens): {self.reason}"
        if not self.actions:
            return f"nothing to compact (the request is {self.tokens_before:,} tokens)"
        lines = [f"compacted the context: {self.tokens_before:,} → {self.tokens_after:,} tokens"]
        # (an "emergency" record is the routine model-free cut: named so for the reader, the kind on disk unchanged)
        lines += [f"- {'cut' if a.kind == 'emergency' else a.kind}: {a.reason} ({a.tokens_before:,} → {a.tokens_after:,})"
                  for a in self.actions]
        return "\n".join(lines)


class Breaker:
    """The stages that already ran in one build (or one ``Session.call``, across its retry): a stage whose
    name is in the breaker does not run again, so nothing loops."""

    def __init__(self) -> None:
        self._ran: set[str] = set()

    def __contains__(self, stage: object) -> bool:
        return stage in self._ran

    def trip(self, stage: str) -> None:
        if stage not in STAGES:
            raise UsageError(f"unknown compaction stage {stage!r}; use one of the stages {STAGES}")
        self._ran.add(stage)


__all__ = ["MASK_FLOOR_ROOM", "STAGES", "Breaker", "CompactionConfig", "CompactionResult"]
