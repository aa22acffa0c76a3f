"""Which Google backend billed each mini-swe-agent call, and what knowing it would buy the token count.

The mini-swe-agent runs (gemini-3-pro-preview through OpenRouter) record each raw response under
``extra.response``; its ``provider`` names the backend that served the call (``Google`` or ``Google
AI Studio``). This script replays the bench's token-count section on those files (the same engine,
the same calibration carried across the runs of the model, the same split) and sets beside each
call the backend that billed it, then reports per file:

* ``engine``: the engine's calibrated count after the first call of each run (what the bench
  reports): relative error, median / p95, on every call, on the calls where the backend changed
  from the previous call (``switch``) and on the others;
* ``gap``: per run, the median signed error of the engine at the switches, sign flipped so that it
  reads as "Google AI Studio bills this many tokens more than Google" (tokens, and % of the request;
  the JSON lists every switch as ``[billed, signed error]``, to see how the gap moves along a run);
* ``oracle (online)``: an engine that knows, before the call, which backend will serve it and adds the
  gap it measured at the run's own earlier switches (median of the last three; nothing before the
  first switch) when the backend changes;
* ``oracle (hindsight)``: the same with the run's gap measured on all its switches, later ones
  included (not reachable online: an upper bound of what knowing the backend can buy);
* ``hedged``: what an engine can do without knowing the next backend: it knows the backends of the
  earlier calls (each response names it), so it adds ``--hedge`` (0.15, chosen on the dev half: 25 -> 27
  of 34 dev files) of the online gap toward the other backend on every call, trading the error of the
  calls that stay for that of the calls that switch.

It also checks what else could explain the difference: whether every call's prompt cost equals
``(prompt - cached) x $2/M + cached x $0.2/M`` (so ``prompt_tokens`` counts cached tokens once and the
cache does not change the count), and the correlation of the switch error with the reasoning
tokens of the earlier calls (reasoning is never sent back by mini-swe-agent).

Run:  .venv/bin/python benchmarks/bench_token_backends.py [--split validation|dev|all]
      (writes benchmarks/results/token_backends.md and .json)
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path
from typing import Any

from windowsmith.bench.billing import billed_model, count_samples
from windowsmith.bench.metrics import percentile, split_of
from windowsmith.registry import load_registry
from windowsmith.traces import load_traces

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "data" / "traces" / "mini-swe-agent"
OUT = ROOT / "benchmarks" / "results"
STUDIO = "Google AI Studio"


def raw_calls(path: Path) -> list[dict[str, Any]]:
    """Per assistant message of a raw trajectory: backend, billed usage, cost and reasoning tokens."""
    doc = json.loads(path.read_text())
    out = []
    for m in doc["messages"]:
        if m.get("role") != "assistant":
            continue
        r = (m.get("extra") or {}).get("response") or {}
        u = r.get("usage") or {}
        out.append({
            "provider": r.get("provider"),
            "prompt": u.get("prompt_tokens"),
            "cached": (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0,
            "reasoning": (u.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0,
            "prompt_cost": (u.get("cost_details") or {}).get("upstream_inference_prompt_cost"),
        })
    return out


def stats(errors: list[float]) -> list[float] | None:
    a = [abs(e) * 100 for e in errors]
    return [round(statistics.median(a), 2), round(percentile(a, 95), 2)] if a else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="validation", choices=["validation", "dev", "all"])
    ap.add_argument("--hedge", type=float, default=0.15)
    args = ap.parse_args()
    reg = load_registry(None)
    stored: dict[str, Any] = {}  # the calibrating engine's store, carried across the files as the bench does
    files: list[dict[str, Any]] = []
    cost_checked = cost_off = 0
    stay: dict[str, list[int]] = {}  # backend -> [calls after it, calls after it on the same backend]
    corr_x: list[float] = []
    corr_y: list[float] = []
    for path in sorted(TRACES.glob("*.traj.json")):
        traces = [t for t in load_traces(path) if t.billed and (args.split == "all" or split_of(t.id) == args.split)]
        if not traces:
            continue
        model, _ = billed_model(traces, reg, "claude-sonnet-4-5")
        samples = count_samples([path], model=model, fmt=reg.get(model).default_format, traces=traces, stored=stored)
        raw = raw_calls(path)
        for c in raw:
            if c["prompt_cost"] is not None:
                cost_checked += 1
                cost_off += abs((c["prompt"] - c["cached"]) * 2e-6 + c["cached"] * 0.2e-6 - c["prompt_cost"]) > 2e-6
        samples.sort(key=lambda s: s["call"])
        rows = []
        for s in samples:
            c = raw[s["call"] - 1]
            if c["prompt"] != s["billed"]:
                raise SystemExit(f"{path.name} call {s['call']}: billed {s['billed']} is not the raw {c['prompt']}")
            rows.append({**s, "provider": c["provider"], "reasoning_before": sum(x["reasoning"] for x in raw[: s["call"] - 1])})
        # sign: +1 when the call moved to AI Studio, -1 when it moved back, 0 when the backend stayed
        for a, b in itertools.pairwise(rows):
            b["move"] = 0 if a["provider"] == b["provider"] else (1 if b["provider"] == STUDIO else -1)
            st = stay.setdefault(str(a["provider"]), [0, 0])
            st[0] += 1
            st[1] += not b["move"]
        later = rows[1:]
        switch_gaps = [r["move"] * (r["billed"] - r["calibrated"]) for r in later if r["move"]]
        for r in later:
            if r["move"]:
                corr_x.append(r["reasoning_before"])
                corr_y.append(r["move"] * (r["billed"] - r["calibrated"]) / r["billed"])
        hind = statistics.median(switch_gaps) if switch_gaps else 0.0
        seen: list[float] = []
        online, hindsight, hedged = [], [], []
        for prev, r in itertools.pairwise(rows):
            g = statistics.median(seen[-3:]) if seen else 0.0
            online.append((r["calibrated"] + r["move"] * g - r["billed"]) / r["billed"])
            toward = 1 if prev["provider"] != STUDIO else -1  # the direction of a switch, were there one
            hedged.append((r["calibrated"] + args.hedge * toward * g - r["billed"]) / r["billed"])
            hindsight.append((r["calibrated"] + r["move"] * hind - r["billed"]) / r["billed"])
            if r["move"]:
                seen.append(r["move"] * (r["billed"] - r["calibrated"]))
        err = [(r["calibrated"] - r["billed"]) / r["billed"] for r in later]
        mean_billed = statistics.mean(r["billed"] for r in later) if later else 1
        files.append({
            "file": path.name, "split": split_of(traces[0].id), "calls": len(rows),
            "studio_calls": sum(r["provider"] == STUDIO for r in rows), "switches": len(switch_gaps),
            "engine": stats(err), "engine_switch": stats([e for e, r in zip(err, later, strict=True) if r["move"]]),
            "engine_same": stats([e for e, r in zip(err, later, strict=True) if not r["move"]]),
            "gap_tokens": round(hind, 1) if switch_gaps else None,
            "gap_pct": round(100 * hind / mean_billed, 2) if switch_gaps else None,
            "switch_errors": [[r["billed"], r["move"] * (r["billed"] - r["calibrated"])] for r in later if r["move"]],
            "oracle_online": stats(online), "oracle_hindsight": stats(hindsight), "hedged": stats(hedged),
        })

    def met(key: str) -> int:
        return sum(1 for f in files if f[key] and f[key][0] <= 0.5 and f[key][1] <= 2.0)

    mx, my = statistics.mean(corr_x), statistics.mean(corr_y)
    sxy = sum((x - mx) * (y - my) for x, y in zip(corr_x, corr_y, strict=True))
    sxx = sum((x - mx) ** 2 for x in corr_x)
    syy = sum((y - my) ** 2 for y in corr_y)
    gaps = [f["gap_pct"] for f in files if f["gap_pct"] is not None]
    summary = {
        "split": args.split, "files": len(files), "calls": sum(f["calls"] for f in files),
        "studio_share": round(sum(f["studio_calls"] for f in files) / sum(f["calls"] for f in files), 3),
        "switch_share": round(sum(f["switches"] for f in files) / sum(f["calls"] - 1 for f in files), 3),
        "p_stay": {k: round(v[1] / v[0], 3) for k, v in sorted(stay.items())},
        "met_engine": met("engine"), "met_oracle_online": met("oracle_online"), "met_oracle_hindsight": met("oracle_hindsight"), "met_hedged": met("hedged"), "hedge": args.hedge,
        "gap_pct_range": [min(gaps), statistics.median(gaps), max(gaps)] if gaps else None,
        "prompt_cost_checked": cost_checked, "prompt_cost_mismatches": cost_off,
        "corr_switch_error_vs_reasoning_before": round(sxy / (sxx * syy) ** 0.5, 3) if sxx and syy else None,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "token_backends.json").write_text(json.dumps({"summary": summary, "files": files}, indent=1) + "\n")

    def cell(v: list[float] | None) -> str:
        return f"{v[0]:.2f}% / {v[1]:.2f}%" if v else ""

    lines = [
        f"Command: `.venv/bin/python benchmarks/bench_token_backends.py --split {args.split}`",
        "",
        "mini-swe-agent (gemini-3-pro-preview through OpenRouter): the backend that billed each call, and the "
        "token count's relative error after each run's first call (|median| / p95; target 0.5% / 2%).",
        "",
        f"Summary: {summary['files']} files, {summary['calls']} calls; {summary['studio_share']:.0%} billed by Google AI "
        f"Studio, the rest by Google; the backend changed on {summary['switch_share']:.0%} of the calls after the first "
        f"(share of the calls after one on a backend that stayed on it: {summary['p_stay']}). "
        f"Target met: engine {summary['met_engine']}, oracle (online gap) {summary['met_oracle_online']}, oracle "
        f"(hindsight gap) {summary['met_oracle_hindsight']}, hedged ({args.hedge} of the online gap toward the other backend, "
        f"backend not known) {summary['met_hedged']} of {summary['files']} files. Gap per run (AI Studio minus "
        f"Google, % of the request; min / median / max): {summary['gap_pct_range']}. Prompt cost = (prompt - cached) x "
        f"$2/M + cached x $0.2/M on {summary['prompt_cost_checked'] - summary['prompt_cost_mismatches']} of "
        f"{summary['prompt_cost_checked']} calls. Correlation of the switch error with the reasoning tokens of the "
        f"earlier calls: {summary['corr_switch_error_vs_reasoning_before']}.",
        "",
        "| file | split | calls | AI Studio calls | switches | engine | engine, switch calls | engine, other calls | "
        "gap (tokens) | gap (% of request) | oracle (online gap) | oracle (hindsight gap) | hedged |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in files:
        lines.append(
            f"| {f['file']} | {f['split']} | {f['calls']} | {f['studio_calls']} | {f['switches']} | {cell(f['engine'])} | "
            f"{cell(f['engine_switch'])} | {cell(f['engine_same'])} | {'' if f['gap_tokens'] is None else f['gap_tokens']} | "
            f"{'' if f['gap_pct'] is None else f['gap_pct']} | {cell(f['oracle_online'])} | {cell(f['oracle_hindsight'])} | "
            f"{cell(f['hedged'])} |")
    (OUT / "token_backends.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:5]))


if __name__ == "__main__":
    main()
