"""Terminal (rich) and markdown tables of a bench result."""

from __future__ import annotations

from typing import Any

HEADERS = ("strategy", "window", "input tokens", "cost $", "cache read", "reuse (steady)", "rewrites", "peak",
           "recall strict", "recall recov.", "build ms p50", "build ms p95", "cut")

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
    return _pct(r.get("rewrite_share"))


def row_cells(r: dict[str, Any]) -> list[str]:
    w = f"{r['window']:,}" + (" (model)" if r["window_label"] == "model" else "")
    return [r["strategy"], w, f"{r['input_tokens']:,}", f"{r['cost_usd']:.2f}", f"{r['cache_read_share']:.0%}",
            reuse_cell(r), rewrites_cell(r), f"{r['peak']:,}", _pct(r["recall_strict"]), _pct(r["recall_recoverable"]),
            f"{r['build_ms_median']:.2f}", f"{r['build_ms_p95']:.2f}", f"{r['cut_calls']:,}"]


def rich_table(result: dict[str, Any]) -> Any:
    from rich.table import Table

    t = Table(title=f"bench: {result['model']} ({result['format']}), {result['runs']} runs, {result['calls']:,} calls",
              caption="reuse (steady): cache read / input over calls that extend the previous request; "
                      "rewrites: share of calls after a run's first that do not (compactions)")
    for h in HEADERS:
        t.add_column(h, justify="left" if h in ("strategy",) else "right")
    last = None
    for r in result["rows"]:
        if last is not None and r["window_label"] != last:
            t.add_section()
        last = r["window_label"]
        t.add_row(*row_cells(r))
    return t


def token_count_lines(tc: dict[str, Any] | None) -> list[str]:
    if not tc:
        return []
    out = [f"token counts against billed prompt_tokens: {tc['calls']} calls of {tc['runs']} runs ({tc['model']}, "
           f"{tc['format']}; the trace has no tool definitions, so 'absolute' misses the billed tool block)"]
    for key, name in (("windowsmith", "windowsmith"), ("len4", "len(json)/4")):
        parts = []
        for kind in ("absolute", "first_call_offset", "increments"):
            st = tc[key][kind]
            parts.append(f"{kind} median {_pct(st['median_abs'])} p95 {_pct(st['p95_abs'])}")
        out.append(f"  {name:12s} " + "; ".join(parts))
    return out


def markdown(result: dict[str, Any], command: str | None = None) -> str:
    lines = []
    if command:
        lines += [f"Command: `{command}`", ""]
    lines.append(f"Model {result['model']} ({result['format']}); {result['runs']} runs, {result['calls']:,} model calls, "
                 f"{len(result['files'])} trace files; {result['elapsed_s']} s on {result['workers']} worker(s).")
    lines.append("")
    lines.append("| " + " | ".join(HEADERS) + " |")
    lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(HEADERS))) + "|")
    for r in result["rows"]:
        lines.append("| " + " | ".join(row_cells(r)) + " |")
    lines += ["", REUSE_NOTE]
    tc = result.get("token_count")
    if tc:
        lines += ["", "Token counts against billed usage (relative error, |median| / p95):", "",
                  "| estimator | absolute | offset after first call | increments |", "|---|---:|---:|---:|"]
        for key, name in (("windowsmith", "windowsmith"), ("len4", "len(json)/4")):
            cells = [f"{_pct(tc[key][k]['median_abs'])} / {_pct(tc[key][k]['p95_abs'])}"
                     for k in ("absolute", "first_call_offset", "increments")]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if result.get("errors"):
        lines += ["", "Errors:", *[f"- {e}" for e in result["errors"]]]
    return "\n".join(lines) + "\n"


__all__ = ["HEADERS", "REUSE_NOTE", "markdown", "reuse_cell", "rewrites_cell", "rich_table", "row_cells",
           "token_count_lines"]
