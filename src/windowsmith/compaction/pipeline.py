"""The compaction pipeline: mask → summarize → emergency truncation, cheapest first, each at most once.

The build calls :meth:`Compactor.run` before the final assembly (and on demand). Each stage appends
typed records (:mod:`windowsmith.records`) through a :class:`~windowsmith.compaction.port.CompactionPort`,
carrying everything replay needs (fold lines, summary text, work log), so the view is a pure function
of the log and a resumed session never re-runs a summarizer. The stages, one module each:

1. **mask** (:mod:`.mask`) — fold old exchanges into one line each and stub aged images, in one batch,
   when it is big enough and (below ``mask_at``) when the cost model says it pays.
2. **summary** (:mod:`.summary`) — past ``summarize_at``, the oldest span becomes a structured summary;
   a bad summary leaves a ``failed`` record and the next stage runs.
3. **emergency** (:mod:`.emergency`) — no model: a work log line per dropped exchange, the last
   ``emergency_keep`` messages kept.

When to compact is decided on the counted size of the whole request (tools included) and the
billed size of the last call. A :class:`~windowsmith.compaction.config.Breaker` makes sure no stage runs
twice in one build or one ``Session.call`` (with its retry).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .base import Summarizer
from .config import Breaker, CompactionConfig, CompactionResult
from .emergency import run_emergency
from .mask import MaskPlanner, run_mask
from .port import CompactionPort, Pass
from .summarizer import OfflineSummarizer
from .summary import run_summary

if TYPE_CHECKING:
    from ..budget import Budget
    from ..registry import ModelSpec
    from ..tokens import TokenCounter


class Compactor:
    """Runs the stages for one session. Keeps an incremental scan so a build costs O(new units)."""

    def __init__(self, config: CompactionConfig | None = None, summarizer: Summarizer | None = None) -> None:
        self.config = config or CompactionConfig()
        self.summarizer: Summarizer = summarizer if summarizer is not None else OfflineSummarizer()
        self.planner = MaskPlanner(self.config)
        #: Optional ``hook(stage) -> context manager`` wrapped around each stage (the server's tracing).
        self.stage_hook: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None

    def _stage(self, name: str) -> contextlib.AbstractContextManager[Any]:
        return self.stage_hook(name) if self.stage_hook is not None else contextlib.nullcontext()

    def run(
        self,
        port: CompactionPort,
        *,
        size: int,
        counts: Sequence[int],
        counter: TokenCounter,
        prefix: Sequence[int] | None = None,
        budget: Budget,
        spec: ModelSpec,
        compact_at: float,
        breaker: Breaker,
        force: bool = False,
        harder: bool = False,
        reason: str = "",
    ) -> CompactionResult:
        """Run the stages that are due (all of them when ``force``), each at most once per ``breaker``; a
        mask that did not run before a successful summary is checked once more after it.

        ``size``: the request's counted (or billed, if larger) tokens before compaction; ``counts``:
        raw tokens of each unit, as the history layer counted them; ``prefix``: their prefix sums, if kept.
        """
        cfg = self.config
        avail = budget.available
        p = Pass(
            port=port, config=cfg, counter=counter, counts=counts, spec=spec, available=avail,
            summarize_at=cfg.summarize_at if cfg.summarize_at is not None else compact_at,
            keep_ratio=cfg.keep_ratio * (0.7 if harder else 1.0), force=force, harder=harder,
            why=reason or f"the request is {size:,} tokens, {size / avail:.0%} of the {avail:,} available",
            breaker=breaker, result=CompactionResult(tokens_before=size, tokens_after=size), prefix=prefix,
        )
        summarized_before = "summary" in breaker
        with self._stage("mask"):
            size = run_mask(p, self.planner, size)
        with self._stage("summary"):
            size, failed = run_summary(p, self.summarizer, size)
        if "summary" in p.result.stages:
            # the view changed: what a mask would do now (typically: aged images in the kept span) is due now,
            # not at the next build, so a rebuild with no new events compacts nothing (the mask runs once)
            with self._stage("mask"):
                size = run_mask(p, self.planner, size)
        turns = self.planner.turn_numbers(port.state)
        with self._stage("emergency"):
            size = run_emergency(p, turns, size, failed=failed, summarized_before=summarized_before)
        if "emergency" in p.result.stages and "mask" not in p.result.stages:
            # the same for the view an emergency truncation left: a resumed process that builds again with
            # no new events must find nothing due, or it would append a mask the live build did not
            with self._stage("mask"):
                size = run_mask(p, self.planner, size)
        p.result.tokens_after = size
        if force and not p.result.stages and not p.result.reason:
            p.result.reason = "no span is old enough to compact (the newest exchanges stay verbatim)"
        return p.result


__all__ = ["Compactor"]
