"""Run every strategy over every run of a set of trace files, at several windows.

    result = run_bench(paths, model="claude-sonnet-4-5", windows=[8000, 16000, 32000, None])
    result["rows"]        one row per (strategy, window): totals and recall
    result["token_count"] windowsmith's token count against billed usage (tau2-bench gpt-4.1)

Each run is replayed message by message; before each assistant message (a model call) each strategy
builds its request (timed with ``time.perf_counter`` around ``Strategy.build()`` only: adding the
new messages is not part of it), which is then priced with :func:`windowsmith.costs.call_cost`
against the same strategy's previous request (cache reads and writes as the provider bills them),
with the trace's assistant message as the output. Runs are spread over a pool of worker processes;
each worker loads the trace files itself and keeps its strategies (one engine store per window). The
rows are summed from the per-run results in :mod:`windowsmith.bench.results`.

Cache-prefix reuse between compactions (strategy-neutral; :func:`extends_previous`):

* A call *extends* the same strategy's previous request when tools, system text and session text
  are equal and the previous request's ``messages`` are a prefix of this request's ``messages``,
  message by message, compared by :attr:`~windowsmith.model.Message.digest`. The dynamic tail is
  not part of the comparison: a :class:`~windowsmith.request.NeutralRequest` keeps it apart, in
  ``req.tail`` (it is only rendered into the last message by the renderer), so a tail that changes
  every turn does not make a call a rewrite.
* A *rewrite* call (a compaction, from the cache's point of view) is a call after the first of its
  run that does not extend the previous request: something already sent was dropped, replaced or
  reordered (masking, clearing, summarizing, a sliding window moving, a cut to fit).
* The first call of each run is a cold start: neither steady nor rewrite.
* A *steady* call is a call after the first of its run that is not a rewrite call.

Over all runs of a row (strategy, window):

* ``rewrite_calls`` — the number of rewrite calls; ``steady_calls`` the number of steady calls;
* ``rewrite_share`` = rewrite_calls / (calls - runs), i.e. rewrite_calls / (rewrite_calls +
  steady_calls): over every call after the first of its run (a run without calls subtracts nothing;
  ``None`` when there is no such call);
* ``prefix_reuse`` = Σ cache-read tokens / Σ input tokens (the whole request, ``Built.tokens``),
  both over steady calls: how much of a steady request is read from cache;
* ``prefix_reuse_prev`` = Σ cache-read tokens / Σ tokens of the previous request, over steady calls:
  how much of what was already sent is read back from cache (both ``None`` without steady calls).

Cache-read tokens are those :func:`~windowsmith.costs.call_cost` bills (breakpoints, minimum
cacheable prefix, 128-token blocks; a previous last message the tail was prepended to is not a
cached prefix), so even a steady call reuses less than all of its request: its new messages, and
whatever the provider does not cache, are not read. A rewrite call's cache reads (the part before
the first changed message) count in ``cache_read_share`` but not in ``prefix_reuse``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from ..costs import call_cost
from ..model import Message, Text, ToolCall, ToolResult
from ..registry import ModelSpec, load_registry
from ..request import NeutralRequest
from ..tokens import TokenCounter
from .base import BenchConfig, Built, Strategy
from .metrics import PreparedRun, is_blind, prepare, recall_reads, split_of
from .results import miss_records, summarize_results
from .strategies import STRATEGIES, VARIANTS, make_strategy

DEFAULT_WINDOWS: tuple[int, ...] = (8_000, 16_000, 32_000)
DEFAULT_MODEL = "claude-sonnet-4-5"


@dataclass
class RunMetrics:
    """One strategy on one run at one window."""

    strategy: str
    window: int
    run: str
    calls: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    peak: int = 0
    build_ms: list[float] = field(default_factory=list)
    recall_calls: int = 0
    strict: float = 0.0  # sum over calls with targets of the strict share
    recoverable: float = 0.0
    targets: int = 0
    strict_hits: int = 0
    events: dict[str, int] = field(default_factory=dict)  # calls on which each event happened
    over_window: int = 0  # calls whose request is larger than the available budget (must be 0)
    family: str = ""
    blind_calls: int = 0  # calls whose request lacks the newest user/tool message (metrics.is_blind)
    reads_needed: int = 0  # read_result calls that recoverable recall assumes
    reads_cost_usd: float = 0.0  # what those calls would cost (reads_cost); not in cost_usd
    summary_calls: int = 0  # summaries made (each one a model call)
    summary_input_tokens: int = 0
    summary_output_tokens: int = 0
    summary_cost_usd: float = 0.0  # included in cost_usd
    rewrite_calls: int = 0  # calls after the first that do not extend the previous request
    steady_calls: int = 0  # calls after the first that do
    steady_input_tokens: int = 0  # over steady calls: tokens of the request
    steady_cache_read_tokens: int = 0  # over steady calls: tokens read from cache
    steady_prev_tokens: int = 0  # over steady calls: tokens of the previous request
    turns: list[dict[str, Any]] | None = None
    #: with ``run_strategy(misses=True)``: each call that lost a target (strict recall), in call order:
    #: ``{"call", "targets", "missed", "unrecoverable"}`` (the call numbered from 1, as in ``turns``)
    misses: list[dict[str, Any]] | None = None
    error: str | None = None


def _composition(built: Built, counter: TokenCounter) -> dict[str, int]:
    req = built.request
    comp = {"tools+system": counter.tools(req.tools) + counter.segment(req.system_text) + counter.segment(req.session_text),
            "observations": 0, "assistant": 0, "summary/placeholders": 0, "tail": 0}
    for m in req.messages:
        n = counter.message(m)
        if m.digest in built.synthetic:
            comp["summary/placeholders"] += n
        elif m.role == "assistant":
            comp["assistant"] += n
        else:
            comp["observations"] += n
    if req.tail:
        comp["tail"] = counter.text(req.tail)
    return comp


def extends_previous(prev: NeutralRequest, cur: NeutralRequest) -> bool:
    """Whether ``cur`` extends ``prev``: same tools, system and session text, and ``prev.messages`` a
    prefix of ``cur.messages`` by digest (equal messages count). The tail (``req.tail``) is ignored."""
    if prev.tools != cur.tools or prev.system_text != cur.system_text or prev.session_text != cur.session_text:
        return False
    pm, cm = prev.messages, cur.messages
    if len(pm) > len(cm):
        return False
    return all(a is b or a.digest == b.digest for a, b in zip(pm, cm, strict=False))


def reads_cost(cfg: BenchConfig, req: NeutralRequest, refs: Sequence[str], strategy: Strategy) -> float:
    """The price of the ``read_result`` calls recoverable recall assumes before the call that sent ``req``:
    for each reference, in order, the model answers with the call (its output tokens), and the next request
    is the previous one with that call and the tool's answer (the strategy's own tool, its first page)
    appended, priced against it as every call is (its prefix read from the cache, the new part written)."""
    counter = cfg.counter
    usd = 0.0
    prev = req
    cands: list[tuple[int, int]] | None = None
    for k, ref in enumerate(refs):
        cid = f"bench_read_{k}"
        call = Message("assistant", (ToolCall(cid, "read_result", {"ref": ref}),))
        result = Message("tool", (ToolResult(cid, (Text(strategy.read(ref) or ""),), name="read_result"),))
        cur = replace(prev, messages=(*prev.messages, call, result))
        cost, cands = call_cost(cfg.spec, cfg.fmt, prev, cur, counter, prompt_tokens=counter.request(cur),
                                output_tokens=counter.message(call), prev_candidates=cands)
        usd += cost.usd
        prev = cur
    return usd


@dataclass
class _Previous:
    """The previous call of a run: its request, its tokens and the cache candidates it was priced with."""

    request: NeutralRequest | None = None
    tokens: int = 0
    candidates: list[tuple[int, int]] | None = None


def run_strategy(run: PreparedRun, strategy: Strategy, *, detail: bool = False, misses: bool = False) -> RunMetrics:
    """Replay ``run`` through ``strategy`` and measure every call (``detail``: per-call figures in
    ``turns``; ``misses``: the targets each call lost, in ``misses``)."""
    cfg = strategy.cfg
    counter = cfg.counter
    rm = RunMetrics(strategy.name, cfg.window, run.id, turns=[] if detail else None, family=run.family,
                    misses=[] if misses else None)
    strategy.start(run.id, run.system, run.tools, native_tools=run.native_tools)
    cfg = strategy.cfg  # this run's budget (base.run_budget)
    prev = _Previous()
    calls = set(run.calls)
    newest: Any = None  # the newest user or tool message before the call
    before: Any = None  # the message before it
    try:
        for i, m in enumerate(run.messages):
            if i in calls:
                _measure_call(rm, run, i, m, strategy, cfg, counter, prev, newest, before)
            strategy.observe(m)
            if m.role in ("user", "tool"):
                newest, before = m, (run.messages[i - 1] if i else None)
    except Exception as e:
        rm.error = f"{type(e).__name__}: {e}"
    finally:
        strategy.finish()
    return rm


def _measure_call(rm: RunMetrics, run: PreparedRun, i: int, m: Message, strategy: Strategy, cfg: BenchConfig,
                  counter: TokenCounter, prev: _Previous, newest: Any, before: Any) -> None:
    """Build the request of the call answered by ``m`` (message ``i`` of ``run``) and add its figures to ``rm``."""
    t0 = time.perf_counter()
    built = strategy.build()
    ms = (time.perf_counter() - t0) * 1000
    out = counter.message(m)
    cost, prev.candidates = call_cost(cfg.spec, cfg.fmt, prev.request, built.request, counter,
                                      prompt_tokens=built.tokens, output_tokens=out, prev_candidates=prev.candidates)
    rewrite = _count_cost(rm, cfg, prev, built, cost, out)
    strategy.after_call(built, out)
    if is_blind(built.request, newest, i > 0, before):
        rm.blind_calls += 1
    rm.peak = max(rm.peak, built.tokens)
    rm.build_ms.append(ms)
    if built.tokens > cfg.available:
        rm.over_window += 1
    for k, v in built.events.items():
        if v:
            rm.events[k] = rm.events.get(k, 0) + 1
    tg = run.targets.get(i, frozenset())
    if tg:
        _count_recall(rm, cfg, strategy, built, tg)
    if rm.turns is not None:
        rm.turns.append({"call": rm.calls, "tokens": built.tokens, "cost_usd": cost.usd,
                         "cache_read": cost.cache_read_tokens, "cache_write": cost.cache_write_tokens,
                         "composition": _composition(built, counter), "rewrite": rewrite,
                         "events": sorted(k for k, v in built.events.items() if v)})


def _count_cost(rm: RunMetrics, cfg: BenchConfig, prev: _Previous, built: Built, cost: Any, out: int) -> bool | None:
    """Add the call's tokens and price (and its summary's, a model call of its own) to ``rm``; whether its request
    rewrote the previous one (None on the first call, a cold start). ``prev`` becomes this call."""
    rewrite: bool | None = None
    if prev.request is not None:
        rewrite = not extends_previous(prev.request, built.request)
        if rewrite:
            rm.rewrite_calls += 1
        else:
            rm.steady_calls += 1
            rm.steady_input_tokens += built.tokens
            rm.steady_cache_read_tokens += cost.cache_read_tokens
            rm.steady_prev_tokens += prev.tokens
    prev.request, prev.tokens = built.request, built.tokens
    rm.calls += 1
    rm.input_tokens += built.tokens
    rm.cache_read_tokens += cost.cache_read_tokens
    rm.cache_write_tokens += cost.cache_write_tokens
    rm.output_tokens += out
    rm.cost_usd += cost.usd
    if built.summary_input or built.summary_output:
        s_usd = cfg.spec.cost(input_tokens=built.summary_input, output_tokens=built.summary_output)
        rm.summary_calls += 1
        rm.summary_input_tokens += built.summary_input
        rm.summary_output_tokens += built.summary_output
        rm.summary_cost_usd += s_usd
        rm.cost_usd += s_usd
    return rewrite


def _count_recall(rm: RunMetrics, cfg: BenchConfig, strategy: Strategy, built: Built, tg: frozenset[str]) -> None:
    """Add the call's recall of its targets ``tg`` (strict and recoverable, and the reads that assumes) to ``rm``."""
    refs: list[str] = []
    missed, lost = (set[str](), set[str]()) if rm.misses is not None else (None, None)
    s, r, reads = recall_reads(built.request, tg, recoverable=built.recoverable,
                               resolve=strategy.resolve, read=refs, missed=missed, lost=lost)
    if rm.misses is not None and missed:
        rm.misses.append({"call": rm.calls, "targets": sorted(tg), "missed": sorted(missed),
                          "unrecoverable": sorted(lost or ())})
    rm.reads_needed += reads
    if refs:
        rm.reads_cost_usd += reads_cost(cfg, built.request, refs, strategy)
    rm.recall_calls += 1
    rm.targets += len(tg)
    rm.strict_hits += s
    rm.strict += s / len(tg)
    rm.recoverable += r / len(tg)


# ---------------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchSpec:
    model: str
    windows: tuple[int | None, ...]
    strategies: tuple[str, ...]
    registry: str | None = None
    tmp_dir: str | None = None  # where the windowsmith strategy's stores go (removed by run_bench)
    misses: bool = False  # record the targets each call lost (RunMetrics.misses)


_W: dict[str, Any] = {}


def _worker_state(spec: BenchSpec) -> dict[str, Any]:
    st = _W.get("state")
    if st is not None and st["spec"] == spec:
        return st
    if st is not None:
        for s in st["strategies"].values():
            s.close()
    mspec = load_registry(spec.registry).get(spec.model)
    counter = TokenCounter(mspec.tokenizer, mspec.default_format, mspec.token_factor, thinking=mspec.thinking_kept)
    strategies: dict[tuple[str, int | None], Strategy] = {}
    for w in spec.windows:
        cfg = BenchConfig.make(mspec, w, counter=counter)
        for name in spec.strategies:
            strategies[(name, w)] = make_strategy(name, cfg, tmp_dir=spec.tmp_dir)
    st = {"spec": spec, "model": mspec, "strategies": strategies, "files": {}}
    _W["state"] = st
    return st


def _load(st: dict[str, Any], path: str) -> list[Any]:
    from ..traces import load_traces

    files = st["files"]
    if path not in files:
        files.clear()  # tasks come file by file; keep one file in memory
        files[path] = load_traces(path)
    return files[path]


def bench_task(task: tuple[BenchSpec, str, int, bool]) -> list[dict[str, Any]]:
    """Benchmark one run (``path``, ``index``) under every strategy and window."""
    spec, path, index, detail = task
    st = _worker_state(spec)
    trace = _load(st, path)[index]
    run = prepare(trace)
    out = []
    for (_name, w), strat in st["strategies"].items():
        rm = run_strategy(run, strat, detail=detail, misses=spec.misses)
        d = rm.__dict__.copy()
        d["window_label"] = "model" if w is None else str(w)
        d["split"] = split_of(run.id)
        d["source"] = path
        d["repairs"] = len(run.repairs)
        out.append(d)
    return out


def _close_worker() -> None:
    st = _W.pop("state", None)
    if st is not None:
        for s in st["strategies"].values():
            s.close()


# ---------------------------------------------------------------------------------------------------
# The whole benchmark
# ---------------------------------------------------------------------------------------------------


SPLITS: tuple[str, ...] = ("all", "dev", "validation")


def collect_runs(paths: Iterable[str | Path], limit_runs: int | None = None, split: str = "all"
                 ) -> tuple[list[tuple[str, int, str, int]], list[str]]:
    """``[(path, index, run id, calls)]`` for every run of every trace file under ``paths`` in
    ``split`` (:func:`~windowsmith.bench.metrics.split_of`; at most ``limit_runs`` per file), and the
    files that could not be read (with the reason)."""
    from ..errors import WindowsmithError
    from ..traces import iter_trace_files, load_traces

    runs: list[tuple[str, int, str, int]] = []
    errors: list[str] = []
    for p in paths:
        try:
            files = iter_trace_files(p)
        except WindowsmithError as e:
            errors.append(str(e))
            continue
        for f in files:
            try:
                traces = load_traces(f)
            except WindowsmithError as e:
                errors.append(str(e))
                continue
            picked = [(k, t) for k, t in enumerate(traces) if split == "all" or split_of(t.id) == split]
            for k, t in picked[: limit_runs if limit_runs else None]:
                runs.append((str(f), k, t.id, sum(1 for i, m in enumerate(t.messages) if m.role == "assistant" and i)))
    return runs, errors


def run_bench(
    paths: Sequence[str | Path],
    *,
    model: str = DEFAULT_MODEL,
    windows: Sequence[int | None] = (*DEFAULT_WINDOWS, None),
    strategies: Sequence[str] = STRATEGIES,
    limit_runs: int | None = None,
    workers: int | None = None,
    registry: str | None = None,
    on_run: Callable[[int, int], None] | None = None,
    token_count: bool = True,
    split: str = "all",
    misses: bool = False,
) -> dict[str, Any]:
    """Benchmark ``strategies`` on every run under ``paths`` at each window (None: the model's).

    ``misses``: the result's ``misses`` lists every call that lost a target (strict recall), with the
    identifiers lost and those no reference in the request reaches either (:func:`miss_records`).

    Raises :class:`~windowsmith.errors.UsageError` when no run could be read (every file malformed,
    or no trace file under ``paths``), naming the problems."""
    import shutil
    import tempfile

    mspec = _checked_model(model, windows, strategies, split, registry)
    t_start = time.perf_counter()
    runs, errors = collect_runs(paths, limit_runs, split)
    if not runs:
        _no_runs(paths, split, errors)
    showcase = max(runs, key=lambda r: r[3])[:2] if runs else None
    tmp = tempfile.mkdtemp(prefix="ws-bench-")
    spec = BenchSpec(model, tuple(windows), tuple(strategies), registry, tmp, misses)
    tasks = [(spec, p, k, (p, k) == showcase) for p, k, _, _ in runs]
    n = workers if workers is not None else min(2, os.cpu_count() or 1)
    try:
        results = _run_tasks(tasks, n, on_run)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the workers' stores (a killed worker cannot clean up)
    elapsed = time.perf_counter() - t_start
    lost = miss_records(results) if misses else None
    out = summarize_results(results, mspec, windows, strategies)
    out.update({
        "model": mspec.name,
        "format": mspec.default_format,
        "split": split,
        "windows": [w if w is not None else mspec.context_window for w in windows],
        "strategies": list(strategies),
        "runs": len(runs),
        "calls": sum(r[3] for r in runs),
        "files": sorted({r[0] for r in runs}),
        "errors": errors + sorted({f"{r['run']}: {r['error']}" for r in results if r.get("error")}),
        "elapsed_s": round(elapsed, 2),
        "workers": n,
    })
    if showcase is not None:
        sc = [r for r in results if r["turns"] is not None]
        out["showcase"] = {
            "run": sc[0]["run"] if sc else None,
            "series": [{"strategy": r["strategy"], "window": r["window"], "turns": r["turns"]} for r in sc],
        }
    if lost is not None:
        out["misses"] = lost
    if token_count:
        from .billing import token_count_by_file

        out["token_count"] = token_count_by_file(out["files"], registry=registry, limit_runs=limit_runs,
                                                 split=split, fallback_model=model) or None
    return out


def _checked_model(model: str, windows: Sequence[int | None], strategies: Sequence[str], split: str,
                   registry: str | None) -> ModelSpec:
    """The model's spec, once the strategies, the split and every window are known to be valid."""
    from ..errors import UsageError

    for s in strategies:
        if s not in STRATEGIES + VARIANTS:
            raise UsageError(f"unknown strategy {s!r}; use one of {', '.join(STRATEGIES + VARIANTS)}")
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    mspec = load_registry(registry).get(model)
    for w in windows:
        if w is not None:
            BenchConfig.make(mspec, w)  # raises ConfigError on a window too small for the budget
    return mspec


def _no_runs(paths: Sequence[str | Path], split: str, errors: Sequence[str]) -> NoReturn:
    from ..errors import UsageError
    from ..traces import FORMATS

    why = "; ".join(errors[:5]) if errors else "no trace file (.json, .jsonl, .ndjson, .traj) with runs was found"
    raise UsageError(f"bench found no run to replay under {', '.join(map(str, paths))} (split {split}): {why}. "
                     f"Point it at trace files in a supported format: {', '.join(FORMATS)}.")


def _run_tasks(tasks: list[tuple[BenchSpec, str, int, bool]], n: int,
               on_run: Callable[[int, int], None] | None) -> list[dict[str, Any]]:
    """Every task's rows: in this process (one worker or one task), else in ``n`` spawned worker processes."""
    results: list[dict[str, Any]] = []
    done = 0
    if n <= 1 or len(tasks) <= 1:
        for t in tasks:
            results.extend(bench_task(t))
            done += 1
            if on_run:
                on_run(done, len(tasks))
        _close_worker()
        return results
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # no fork under the progress bar thread
    with ctx.Pool(n) as pool:
        for res in pool.imap_unordered(bench_task, tasks, chunksize=4):
            results.extend(res)
            done += 1
            if on_run:
                on_run(done, len(tasks))
        pool.close()
        pool.join()
    return results


__all__ = ["DEFAULT_MODEL", "DEFAULT_WINDOWS", "SPLITS", "RunMetrics", "bench_task", "collect_runs", "extends_previous",
           "reads_cost", "run_bench", "run_strategy"]
