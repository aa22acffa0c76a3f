"""Terminal (rich) and markdown tables of a bench result: one table per trace family (rows: window
x strategy), then the pooled table, then the token counts against billed usage per trace file.

The columns fit 80 terminal columns (short headers, a legend under the table)."""

from __future__ import annotations

from typing import Any

HEADERS = ("strategy", "win", "cost $", "summ $", "strict", "recov", "blind", "reads", "reads $", "cut", "over",
           "reuse", "rewr")

#: the terminal's columns (80 wide): the markdown and HTML tables have all of HEADERS
TERM_HEADERS = ("strategy", "win", "cost $", "summ $", "strict", "recov", "blind", "cut", "reuse")

LEGEND = ("win: window (K tokens); cost $: cache-adjusted cost of every call, summaries included; summ $: the "
          "summaries' share of it (each summary a model call: input read, summary written); strict / recov: "
          "future-reference recall, in the request / also through references; blind: calls whose request "
          "lacks the newest user or tool message; reads: read_result calls recoverable recall assumes; reads $: "
          "their price (each one an extra model call with the tool's answer; not in cost $); cut: "
          "calls cut to fit by the bench; over: calls the framework as shipped sends over the window (no "
          "reaction, or its reaction gave up); reuse: cache-read / input tokens over steady calls; rewr: share "
          "of calls after a run's first that rewrite the previous request.")

REUSE_NOTE = ("reuse (steady): cache-read tokens / input tokens over steady calls (prefix_reuse). A call after "
              "the first of its run is a rewrite (a compaction, from the cache's point of view) when its request "
              "does not extend the same strategy's previous one: tools, system and session text equal and the "
              "previous messages a prefix of this request's messages, compared by message digest (the dynamic "
              "tail, kept apart in the request, is not compared); otherwise it is steady. The first call of a run "
              "is a cold start, neither. rewrites: rewrite calls / (calls - runs) (rewrite_share). The JSON also "
              "has rewrite_calls, steady_calls and prefix_reuse_prev (cache-read tokens / the previous request's "
              "tokens, over steady calls).")


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def reuse_cell(r: dict[str, Any]) -> str:
    """``prefix_reuse`` as a percentage (n/a without steady calls)."""
    v = r.get("prefix_reuse")
    return "n/a" if v is None else f"{v:.0%}"


def rewrites_cell(r: dict[str, Any]) -> str:
    """``rewrite_share`` as a percentage (n/a without calls after the first of a run)."""
    v = r.get("rewrite_share")
    return "n/a" if v is None else f"{v:.0%}"


def window_cell(r: dict[str, Any]) -> str:
    w = r["window"]
    return (f"{w // 1000}K" if w % 1000 == 0 else f"{w:,}") + ("*" if r["window_label"] == "model" else "")


def row_cells(r: dict[str, Any]) -> list[str]:
    return [r["strategy"], window_cell(r), f"{r['cost_usd']:.2f}", f"{r.get('summary_cost_usd', 0.0):.2f}",
            _pct(r["recall_strict"]), _pct(r["recall_recoverable"]), f"{r.get('blind_calls', 0):,}",
            f"{r.get('reads_needed', 0):,}", f"{r.get('reads_cost_usd', 0.0):.2f}", f"{r['cut_calls']:,}", f"{r.get('overflow_calls', 0):,}",
            reuse_cell(r), rewrites_cell(r)]


def family_rows(result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by family, the pooled rows (``all``) last."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in result["rows"]:
        out.setdefault(r.get("family", "all"), []).append(r)
    if "all" in out:
        out["all"] = out.pop("all")
    return out


def _title(result: dict[str, Any], fam: str, rows: list[dict[str, Any]]) -> str:
    runs = max((r["runs"] + r["failed_runs"] for r in rows), default=0)
    calls = max((r["calls"] for r in rows), default=0)
    name = "pooled (all families)" if fam == "all" else fam
    failed: dict[str, int] = {}
    for r in rows:
        if r["failed_runs"]:
            failed[r["strategy"]] = max(failed.get(r["strategy"], 0), r["failed_runs"])
    note = ("; failed runs (left out of every row at that window): " + ", ".join(f"{k} {v}" for k, v in failed.items())) \
        if failed else ""
    return f"{name}: {runs} runs, {calls:,} calls{note}"


def rich_tables(result: dict[str, Any]) -> list[Any]:
    from rich.table import Table

    out = []
    for fam, rows in family_rows(result).items():

        t = Table(title=_title(result, fam, rows), box=None, padding=(0, 1), pad_edge=False,
                  show_edge=False)
        idx = [HEADERS.index(h) for h in TERM_HEADERS]
        for h in TERM_HEADERS:
            t.add_column(h, justify="left" if h == "strategy" else "right", no_wrap=True)
        last = None
        for r in rows:
            if last is not None and r["window_label"] != last:
                t.add_section()
            last = r["window_label"]
            cells = row_cells(r)
            t.add_row(*[cells[i] for i in idx])
        out.append(t)
    return out


def rich_table(result: dict[str, Any]) -> Any:
    """All tables of :func:`rich_tables` in one renderable."""
    from rich.console import Group

    return Group(*rich_tables(result))


def _short(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def target_cell(stats: dict[str, Any] | None) -> str:
    """Whether a token-count error meets issue 11's target (median <= 0.5%, p95 <= 2%), and which part misses."""
    if not stats or stats.get("median_abs") is None:
        return "-"
    med, p95 = stats["median_abs"] <= 0.005, stats["p95_abs"] <= 0.02
    return "yes" if med and p95 else "no (p95)" if med else "no (median)" if p95 else "no"


def token_count_lines(tc: list[dict[str, Any]] | dict[str, Any] | None) -> list[str]:
    if not tc:
        return []
    items = tc if isinstance(tc, list) else [tc]
    out = ["token counts against billed prompt_tokens (windowsmith's count; |error| median / p95):",
           "  file                          model              calls  offset        increments    calibrated    target"]
    for r in items:
        off = r["windowsmith"]["first_call_offset"]
        inc = r["windowsmith"]["increments"]
        model = r["model"] + ("" if r.get("model_from_trace", True) else "?")
        out.append(f"  {_short(r.get('file', ','.join(r['files'])))[:29]:29s} {model[:18]:18s} {r['calls']:5d}  "
                   f"{_pct(off['median_abs']):>5s} / {_pct(off['p95_abs']):>5s}  "
                   f"{_pct(inc['median_abs']):>5s} / {_pct(inc['p95_abs']):>5s}"
                   + (f"  {_pct(cal['median_abs']):>5s} / {_pct(cal['p95_abs']):>5s}  {target_cell(cal)}"
                      if (cal := (r.get("calibrated") or {}).get("after_first")) else ""))
    out.append("  offset: per run, the first call's difference is added to every later call (the tool block "
               "is missing from the tau2 traces); calibrated: the engine's online calibration (Session.record: billed "
               "~ offset + slope x count, the line through the newest billed call, the slope a median over the last "
               "12 and the prior), each call counted with what the earlier calls of its run and the earlier runs of its "
               "model taught it; target: median <= 0.5% and "
               "p95 <= 2%; model?: the billing model is not in the registry, a model of its family (or the bench "
               "model) was counted.")
    return out


def token_count_markdown(tc: list[dict[str, Any]] | dict[str, Any] | None) -> list[str]:
    """The token-count section of the markdown report: one row per trace file with billed usage."""
    if not tc:
        return []
    items = tc if isinstance(tc, list) else [tc]
    lines = ["", "Token counts against billed usage, per trace file (windowsmith's count; relative error, "
             "|median| / p95; offset: the first call's difference added to the later calls of its run; "
             "calibrated online: the engine's own count after Session.record() of the earlier billed calls of "
             "its run, an affine fit through the newest one, starting from what the earlier runs billed by the "
             "same model left in the engine's store (replay order; never the current or a later run); target: "
             "median <= 0.5% and p95 <= 2% after the first call):", "",
             "| file | model | calls | absolute | offset after first call | increments | calibrated online "
             "(after first call) | target met (calibrated) | calibrated online (every call) | len(json)/4 offset |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in items:
        ws, l4 = r["windowsmith"], r["len4"]
        cells = [f"{_pct(ws[k]['median_abs'])} / {_pct(ws[k]['p95_abs'])}"
                 for k in ("absolute", "first_call_offset", "increments")]
        cal = (r.get("calibrated") or {}).get("after_first")
        cells.append(f"{_pct(cal['median_abs'])} / {_pct(cal['p95_abs'])}" if cal else "-")
        cells.append(target_cell(cal))
        every = (r.get("calibrated") or {}).get("absolute")
        cells.append(f"{_pct(every['median_abs'])} / {_pct(every['p95_abs'])}" if every else "-")
        model = r["model"] if r.get("model_from_trace", True) else \
            f"{r['model']} for {', '.join(r.get('billed_by') or ['?'])} (not its tokenizer)"
        lines.append(f"| {_short(r.get('file', ','.join(r['files'])))} | {model} | {r['calls']} | "
                     + " | ".join(cells) + f" | {_pct(l4['first_call_offset']['median_abs'])} / "
                     f"{_pct(l4['first_call_offset']['p95_abs'])} |")
    return lines


def markdown(result: dict[str, Any], command: str | None = None) -> str:
    lines = []
    if command:
        lines += [f"Command: `{command}`", ""]
    lines.append(f"Model {result['model']} ({result['format']}); split {result.get('split', 'all')}; "
                 f"{result['runs']} runs, {result['calls']:,} model calls, {len(result['files'])} trace files; "
                 f"{result['elapsed_s']} s on {result['workers']} worker(s). Windows marked * are the model's own.")
    for fam, rows in family_rows(result).items():
        lines += ["", f"### {_title(result, fam, rows)}", ""]
        lines.append("| " + " | ".join(HEADERS) + " |")
        lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(HEADERS))) + "|")
        for r in rows:
            lines.append("| " + " | ".join(row_cells(r)) + " |")
    lines += ["", LEGEND, "", REUSE_NOTE]
    lines += token_count_markdown(result.get("token_count"))
    if result.get("errors"):
        lines += ["", "Errors:", *[f"- {e}" for e in result["errors"]]]
    return "\n".join(lines) + "\n"


__all__ = ["HEADERS", "LEGEND", "REUSE_NOTE", "family_rows", "markdown", "reuse_cell", "rewrites_cell", "rich_table",
           "rich_tables", "row_cells", "target_cell", "TERM_HEADERS", "token_count_lines", "token_count_markdown",
           "window_cell"]
