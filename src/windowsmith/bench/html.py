"""Self-contained HTML reports with inline SVG charts (no JavaScript, no external CSS or fonts).

    bench_html(result) -> str     cost per strategy, recall against cost, per-turn composition of one run
    replay_html(result) -> str    per-turn layer composition (stacked bars) and cumulative cost
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from .report import HEADERS, LEGEND, REUSE_NOTE, family_rows, row_cells

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.note{color:#555;font-size:13px}svg{background:#fff;border:1px solid #eee;margin:6px 0}
svg text{font-size:11px;fill:#333}
"""


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.1f}M"
    if a >= 1e3:
        return f"{v / 1e3:.1f}K"
    if a >= 10:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _ticks(hi: float, n: int = 5) -> list[float]:
    if hi <= 0:
        return [0.0]
    import math

    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(hi / step) + 2) if i * step <= hi * 1.0001 + step * 0.0001]


def _legend(names: Sequence[str], x: float, y: float) -> str:
    out = []
    for i, n in enumerate(names):
        out.append(f'<rect x="{x}" y="{y + i * 16}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>'
                   f'<text x="{x + 14}" y="{y + i * 16 + 9}">{esc(n)}</text>')
    return "".join(out)


def bar_chart(title: str, groups: Sequence[str], series: Sequence[str], values: dict[tuple[str, str], float],
              *, width: int = 900, height: int = 300, unit: str = "") -> str:
    """Grouped bars: one group per ``groups`` entry, one bar per ``series`` entry."""
    left, right, top, bottom = 60, 150, 30, 40
    pw, ph = width - left - right, height - top - bottom
    hi = max([v for v in values.values()] + [0.0]) * 1.08 or 1.0
    gw = pw / max(1, len(groups))
    bw = gw * 0.8 / max(1, len(series))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{esc(title)}">',
             f'<text x="{left}" y="18" style="font-weight:600;font-size:13px">{esc(title)}</text>']
    for t in _ticks(hi):
        y = top + ph - t / hi * ph
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{esc(_fmt(t))}{esc(unit)}</text>')
    for gi, g in enumerate(groups):
        gx = left + gi * gw + gw * 0.1
        for si, s in enumerate(series):
            v = values.get((g, s))
            if v is None:
                continue
            h = v / hi * ph
            parts.append(f'<rect x="{gx + si * bw:.1f}" y="{top + ph - h:.1f}" width="{bw * 0.92:.1f}" height="{h:.1f}" '
                         f'fill="{PALETTE[si % len(PALETTE)]}"><title>{esc(s)} @ {esc(g)}: {esc(_fmt(v))}{esc(unit)}</title></rect>')
        parts.append(f'<text x="{left + gi * gw + gw / 2:.1f}" y="{top + ph + 16}" text-anchor="middle">{esc(g)}</text>')
    parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" stroke="#999"/>')
    parts.append(_legend(series, left + pw + 14, top))
    parts.append("</svg>")
    return "".join(parts)


def scatter_chart(title: str, points: Sequence[tuple[float, float, str, str]], *, xlabel: str, ylabel: str,
                  width: int = 900, height: int = 340) -> str:
    """Points ``(x, y, series, label)``; colour by series."""
    left, right, top, bottom = 60, 150, 30, 46
    pw, ph = width - left - right, height - top - bottom
    series = list(dict.fromkeys(p[2] for p in points))
    xhi = max([p[0] for p in points] + [0.0]) * 1.08 or 1.0
    ylo = min([p[1] for p in points] + [1.0])
    ylo = max(0.0, min(ylo - 0.05, 0.9))
    yhi = 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{esc(title)}">',
             f'<text x="{left}" y="18" style="font-weight:600;font-size:13px">{esc(title)}</text>']
    for t in _ticks(xhi):
        x = left + t / xhi * pw
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" stroke="#f0f0f0"/>'
                     f'<text x="{x:.1f}" y="{top + ph + 14}" text-anchor="middle">{esc(_fmt(t))}</text>')
    for k in range(6):
        t = ylo + (yhi - ylo) * k / 5
        y = top + ph - (t - ylo) / (yhi - ylo) * ph
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#f0f0f0"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{t:.0%}</text>')
    for x, y, s, label in points:
        cx = left + x / xhi * pw
        cy = top + ph - (y - ylo) / (yhi - ylo) * ph
        c = PALETTE[series.index(s) % len(PALETTE)]
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{c}" fill-opacity="0.85">'
                     f'<title>{esc(s)} {esc(label)}: {esc(_fmt(x))}, {y:.1%}</title></circle>'
                     f'<text x="{cx + 7:.1f}" y="{cy + 4:.1f}" style="font-size:9px;fill:#777">{esc(label)}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">{esc(xlabel)}</text>')
    parts.append(f'<text x="14" y="{top + ph / 2}" transform="rotate(-90 14 {top + ph / 2})" text-anchor="middle">{esc(ylabel)}</text>')
    parts.append(_legend(series, left + pw + 14, top))
    parts.append("</svg>")
    return "".join(parts)


def stacked_chart(title: str, stacks: Sequence[dict[str, float]], keys: Sequence[str], *,
                  line: Sequence[float] | None = None, line_label: str = "", width: int = 900,
                  height: int = 300) -> str:
    """One stacked bar per entry of ``stacks`` (x = turn), optional line on a right-hand axis."""
    left, right, top, bottom = 60, 170, 30, 36
    pw, ph = width - left - right, height - top - bottom
    n = max(1, len(stacks))
    hi = max([sum(s.get(k, 0) for k in keys) for s in stacks] + [0.0]) * 1.08 or 1.0
    bw = pw / n
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{esc(title)}">',
             f'<text x="{left}" y="18" style="font-weight:600;font-size:13px">{esc(title)}</text>']
    for t in _ticks(hi):
        y = top + ph - t / hi * ph
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{esc(_fmt(t))}</text>')
    for i, s in enumerate(stacks):
        y = top + ph
        for ki, k in enumerate(keys):
            v = s.get(k, 0)
            if v <= 0:
                continue
            h = v / hi * ph
            y -= h
            parts.append(f'<rect x="{left + i * bw:.1f}" y="{y:.1f}" width="{max(0.5, bw * 0.85):.1f}" height="{h:.1f}" '
                         f'fill="{PALETTE[ki % len(PALETTE)]}"><title>turn {i + 1} {esc(k)}: {esc(_fmt(v))}</title></rect>')
    step = max(1, n // 10)
    for i in range(0, n, step):
        parts.append(f'<text x="{left + i * bw + bw / 2:.1f}" y="{top + ph + 14}" text-anchor="middle">{i + 1}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 4}" text-anchor="middle">model call</text>')
    if line:
        lhi = max(line) * 1.08 or 1.0
        pts = " ".join(f"{left + i * bw + bw / 2:.1f},{top + ph - v / lhi * ph:.1f}" for i, v in enumerate(line))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="#222" stroke-width="2"/>')
        for t in _ticks(lhi, 4):
            y = top + ph - t / lhi * ph
            parts.append(f'<text x="{left + pw + 4}" y="{y + 4:.1f}">{esc(_fmt(t))}</text>')
        parts.append(f'<line x1="{left + pw + 30}" x2="{left + pw + 44}" y1="{top + len(keys) * 16 + 6}" '
                     f'y2="{top + len(keys) * 16 + 6}" stroke="#222" stroke-width="2"/>'
                     f'<text x="{left + pw + 48}" y="{top + len(keys) * 16 + 10}">{esc(line_label)}</text>')
    parts.append(_legend(keys, left + pw + 30, top))
    parts.append("</svg>")
    return "".join(parts)


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1>{body}</body></html>\n")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    h = "".join(f"<th>{esc(x)}</th>" for x in headers)
    b = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{b}</table>"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def bench_html(result: dict[str, Any]) -> str:
    """The ``windowsmith bench`` report."""
    rows = result["rows"]
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    windows = list(dict.fromkeys(r["window_label"] for r in rows))
    wname = {r["window_label"]: f"{r['window']:,}" + (" (model)" if r["window_label"] == "model" else "") for r in rows}
    body = [f"<p class=\"note\">Model {esc(result.get('model'))} ({esc(result.get('format'))}); "
            f"{result.get('runs', 0)} runs, {result.get('calls', 0):,} model calls from {len(result.get('files', []))} "
            f"trace files; {result.get('elapsed_s', 0)} s on {result.get('workers', 1)} worker(s).</p>"]
    body.append("<h2>Results per trace family</h2>")
    for fam, frows in family_rows(result).items():
        name = "pooled (all families)" if fam == "all" else fam
        body.append(f"<h3>{esc(name)}</h3>")
        body.append(_table(list(HEADERS), [row_cells(r) for r in frows]))
    body.append(f"<p class=\"note\">{esc(LEGEND)}</p><p class=\"note\">{esc(REUSE_NOTE)}</p>")
    rows = [r for r in rows if r.get("family", "all") == "all"]
    body.append("<h2>Cost per strategy</h2>")
    body.append(bar_chart("Cache-adjusted cost (USD) by window", [wname[w] for w in windows], strategies,
                          {(wname[r["window_label"]], r["strategy"]): r["cost_usd"] for r in rows}, unit="$"))
    body.append("<h2>Recall against cost</h2>")
    pts = [(r["cost_usd"], r["recall_strict"], r["strategy"], wname[r["window_label"]]) for r in rows
           if r["recall_strict"] is not None]
    body.append(scatter_chart("Future-reference recall (strict) against cost", pts, xlabel="cost (USD)",
                              ylabel="recall (strict)"))
    sc = result.get("showcase") or {}
    series = sc.get("series") or []
    if series:
        body.append(f"<h2>Per-turn composition of one run: {esc(sc.get('run'))}</h2>")
        keys = ["tools+system", "observations", "assistant", "summary/placeholders", "tail"]
        wanted = next((w for w in windows if w != "model"), windows[0] if windows else "model")
        for s in series:
            label = str(s["window"]) if str(s["window"]) in windows else "model"
            if label != wanted:
                continue
            stacks = [t["composition"] for t in s["turns"]]
            cum, acc = [], 0.0
            for t in s["turns"]:
                acc += t["cost_usd"]
                cum.append(acc)
            body.append(stacked_chart(f"{s['strategy']} @ {s['window']:,} tokens", stacks, keys, line=cum,
                                      line_label="cumulative $", height=240))
    tc = result.get("token_count")
    if tc:
        body.append("<h2>Token counts against billed usage</h2>")
        trs = []
        for r in (tc if isinstance(tc, list) else [tc]):
            for kind in ("absolute", "first_call_offset", "increments"):
                st = r["windowsmith"][kind]
                trs.append([r.get("file", ""), r["model"], kind, st["n"], _pct(st["median_abs"]), _pct(st["p95_abs"]),
                            _pct(st["median_signed"])])
        body.append("<p class=\"note\">The traces have no tool definitions, so the absolute figures miss the "
                    "billed tool block; the offset and increments rows cancel it.</p>")
        body.append(_table(["file", "model", "measure", "n", "median |error|", "p95 |error|", "median signed"], trs))
    if result.get("errors"):
        body.append("<h2>Errors</h2><ul>" + "".join(f"<li>{esc(e)}</li>" for e in result["errors"]) + "</ul>")
    body.append("<h2>Raw</h2><details><summary>result JSON (without per-turn series)</summary><pre>"
                + esc(json.dumps({k: v for k, v in result.items() if k != "showcase"}, indent=1)) + "</pre></details>")
    return _page("windowsmith bench", "".join(body))


def replay_html(result: Any, *, extra: str = "") -> str:
    """The ``windowsmith replay --html`` report for a :class:`~windowsmith.replay.ReplayResult`; ``extra``: HTML
    placed after the summary line (``windowsmith demo`` puts its comparison there)."""
    turns = result.turns
    keys = list(dict.fromkeys(k for t in turns for k, v in t.layers.items() if v))
    stacks = [{k: float(v) for k, v in t.layers.items()} for t in turns]
    cum, acc = [], 0.0
    for t in turns:
        acc += t.cost_usd
        cum.append(acc)
    d = result.to_dict()["totals"]
    body = [f"<p class=\"note\">{d['turns']} model calls, {d['input_tokens']:,} input tokens, peak {d['peak_tokens']:,}, "
            f"{d['cache_read_share']:.0%} read from cache, cost ${d['cost_usd']:.4f}; model {esc(result.model)} "
            f"({esc(result.format)}), window {result.window:,}.</p>",
            extra,
            stacked_chart("Tokens sent per turn, by layer (bars) and cumulative cost (line)", stacks, keys, line=cum,
                          line_label="cumulative $"),
            stacked_chart("Cache per turn: read, written, uncached", [
                {"cache read": t.cache_read_tokens, "cache write": t.cache_write_tokens, "uncached": t.input_tokens}
                for t in turns], ["cache read", "cache write", "uncached"])]
    rows = [[t.turn, t.messages, f"{t.tokens:,}", f"{t.shared_prefix_tokens:,}", f"{t.cache_read_tokens:,}",
             f"{t.cache_write_tokens:,}", f"{t.cost_usd:.4f}", ", ".join(t.actions)] for t in turns]
    body.append(_table(["turn", "msgs", "tokens", "cached prefix", "read", "write", "cost $", "actions"], rows))
    if result.repairs:
        body.append("<h2>Repairs on import</h2><ul>" + "".join(f"<li>{esc(r)}</li>" for r in result.repairs) + "</ul>")
    return _page(f"windowsmith replay: {result.trace_id}", "".join(body))


__all__ = ["bar_chart", "bench_html", "replay_html", "scatter_chart", "stacked_chart"]
