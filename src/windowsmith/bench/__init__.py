"""Benchmark context strategies on real agent traces: windowsmith side by side with what peers do.

    from windowsmith.bench import run_bench, bench_html, extract_identifiers
    result = run_bench(["../shared/data/traces"], model="claude-sonnet-4-5", windows=[8000, 16000, 32000, None])

Modules: :mod:`.identifiers` (how identifiers are extracted), :mod:`.base` (what every strategy shares: the
budget, the base class, the cut to fit), :mod:`.strategies` (full, sticky, windowsmith), :mod:`.peers` (the
other projects' strategies: sliding, masking, clear, summarize), :mod:`.metrics` (trace preparation,
future-reference recall), :mod:`.run` (the runner), :mod:`.billing` (token counts against billed usage),
:mod:`.html` (self-contained reports), :mod:`.report` (terminal and markdown tables).
"""

from .base import BenchConfig
from .billing import token_count_error
from .html import bench_html, replay_html
from .identifiers import extract_identifiers
from .metrics import prepare, recall
from .run import DEFAULT_MODEL, DEFAULT_WINDOWS, run_bench, run_strategy
from .strategies import STRATEGIES, make_strategy

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_WINDOWS",
    "STRATEGIES",
    "BenchConfig",
    "bench_html",
    "extract_identifiers",
    "make_strategy",
    "prepare",
    "recall",
    "replay_html",
    "run_bench",
    "run_strategy",
    "token_count_error",
]
