"""The rows of ``windowsmith bench``'s tables, summed from the per-run results of :func:`~windowsmith.bench.run.run_bench`.

A run that failed under any strategy at a window is left out of every row at that window (:func:`failed_runs`),
so that the rows compare the same runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from ..registry import ModelSpec
from .metrics import percentile


def failed_runs(results: Iterable[dict[str, Any]]) -> dict[str, frozenset[str]]:
    """Window label -> the runs that failed under any strategy at that window: every row at that window leaves
    them out, so that the rows compare the same runs."""
    failed: dict[str, set[str]] = {}
    for r in results:
        if r.get("error"):
            failed.setdefault(r["window_label"], set()).add(r["run"])
    return {k: frozenset(v) for k, v in failed.items()}


def miss_records(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per call that lost a target, from ``bench_task`` results run with ``misses``: family,
    strategy, window (tokens) and its label, run, call (from 1), the call's targets, those the request
    lacked (``missed``: strict recall) and those no ``artifact://`` reference of it reaches either
    (``unrecoverable``). A run that failed under any strategy at a window is left out at that window, as in
    the tables (:func:`failed_runs`). Sorted by family, window, strategy, run and call. The records
    leave ``results``."""
    failed = failed_runs(results)
    out = []
    for r in results:
        got = r.pop("misses", None)
        if not got or r["run"] in failed.get(r["window_label"], ()):
            continue
        for m in got:
            out.append({"family": r["family"], "strategy": r["strategy"], "window": r["window"],
                        "window_label": r["window_label"], "run": r["run"], **m})
    out.sort(key=lambda m: (m["family"], m["window"], m["strategy"], m["run"], m["call"]))
    return out


def _row(rs: list[dict[str, Any]], strategy: str, wval: int, label: str, family: str,
         skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    ok = [r for r in rs if not r.get("error") and r["run"] not in skip]
    ms = [x for r in ok for x in r["build_ms"]]
    calls = sum(r["calls"] for r in ok)
    rc = sum(r["recall_calls"] for r in ok)
    prompt = sum(r["input_tokens"] for r in ok)
    rewrites = sum(r["rewrite_calls"] for r in ok)
    steady = sum(r["steady_calls"] for r in ok)
    steady_read = sum(r["steady_cache_read_tokens"] for r in ok)
    steady_in = sum(r["steady_input_tokens"] for r in ok)
    steady_prev = sum(r["steady_prev_tokens"] for r in ok)
    events: dict[str, int] = {}
    for r in ok:
        for k, v in r["events"].items():
            events[k] = events.get(k, 0) + v
    return {
        "family": family,
        "strategy": strategy,
        "window": wval,
        "window_label": label,
        "runs": len(ok),
        "failed_runs": sum(1 for r in rs if r.get("error")),
        "excluded_runs": sum(1 for r in rs if not r.get("error") and r["run"] in skip),
        "calls": calls,
        "input_tokens": prompt,
        "cache_read_tokens": sum(r["cache_read_tokens"] for r in ok),
        "cache_write_tokens": sum(r["cache_write_tokens"] for r in ok),
        "cache_read_share": round(sum(r["cache_read_tokens"] for r in ok) / prompt, 4) if prompt else 0.0,
        "output_tokens": sum(r["output_tokens"] for r in ok),
        "cost_usd": round(sum(r["cost_usd"] for r in ok), 4),
        "summary_calls": sum(r.get("summary_calls", 0) for r in ok),
        "summary_input_tokens": sum(r.get("summary_input_tokens", 0) for r in ok),
        "summary_output_tokens": sum(r.get("summary_output_tokens", 0) for r in ok),
        "summary_cost_usd": round(sum(r.get("summary_cost_usd", 0.0) for r in ok), 4),
        "peak": max((r["peak"] for r in ok), default=0),
        "mean_run_peak": round(statistics.fmean([r["peak"] for r in ok]), 1) if ok else 0.0,
        "recall_calls": rc,
        "recall_strict": round(sum(r["strict"] for r in ok) / rc, 4) if rc else None,
        "recall_recoverable": round(sum(r["recoverable"] for r in ok) / rc, 4) if rc else None,
        "recall_strict_micro": round(sum(r["strict_hits"] for r in ok) / max(1, sum(r["targets"] for r in ok)), 4),
        "blind_calls": sum(r.get("blind_calls", 0) for r in ok),
        "reads_needed": sum(r.get("reads_needed", 0) for r in ok),
        "reads_cost_usd": round(sum(r.get("reads_cost_usd", 0.0) for r in ok), 4),
        "build_ms_median": round(statistics.median(ms), 3) if ms else 0.0,
        "build_ms_p95": round(percentile(ms, 95), 3),
        "cut_calls": events.get("cut", 0),
        "overflow_calls": events.get("overflow", 0),
        "overflow_retry_calls": events.get("overflow_retry", 0),
        "over_window_calls": sum(r["over_window"] for r in ok),
        "rewrite_calls": rewrites,
        "steady_calls": steady,
        "rewrite_share": round(rewrites / (rewrites + steady), 4) if rewrites + steady else None,
        "prefix_reuse": round(steady_read / steady_in, 4) if steady_in else None,
        "prefix_reuse_prev": round(steady_read / steady_prev, 4) if steady_prev else None,
        "events": events,
    }


def summarize_results(results: list[dict[str, Any]], spec: ModelSpec, windows: Sequence[int | None],
                      strategies: Sequence[str]) -> dict[str, Any]:
    """Rows per (family, window, strategy), then the pooled rows (``family: "all"``).

    A run that failed under any strategy at a window is left out of every strategy's row at that
    window (``excluded_runs``), so that the rows compare the same runs; ``failed_runs`` counts the
    strategy's own failures."""
    families = sorted({r.get("family", "") or "unknown" for r in results})
    failed = failed_runs(results)
    rows = []
    for fam in [*families, "all"]:
        for w in windows:
            wval = w if w is not None else spec.context_window
            label = "model" if w is None else str(w)
            for s in strategies:
                rs = [r for r in results if r["strategy"] == s and r["window_label"] == label
                      and (fam == "all" or (r.get("family", "") or "unknown") == fam)]
                rows.append(_row(rs, s, wval, label, fam, failed.get(label, frozenset())))
    return {"rows": rows, "families": families}


__all__ = ["failed_runs", "miss_records", "summarize_results"]
