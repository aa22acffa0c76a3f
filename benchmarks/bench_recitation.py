"""Recitation and drift on the shared traces: how often ``RecitationLayer`` recites, and why.

Run:  .venv/bin/python benchmarks/bench_recitation.py [--runs N]   (writes benchmarks/results/recitation.md)

The traces declare no task, so the goal is taken from what the agent was given: the tau-bench user
instruction (``meta["instruction"]``, the closest thing to the task statement the traces record) and, for
mini-swe-agent, the first user message (the PR description, first 2,000 characters). Each run is replayed
with ``guided_layers`` and the manifest's ``guidance["recitation"]`` is read at every turn.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections import Counter
from pathlib import Path

import windowsmith as ws
from windowsmith.guidance import guided_layers
from windowsmith.traces import load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results"


def replay(trace, goal: str, db: Path) -> list[dict]:
    out = []
    with ws.Engine(model="gpt-4.1", store=db, layers=guided_layers) as engine:
        s = engine.session("r", goal=goal)
        if trace.system:
            s.system(trace.system)
        for m in trace.messages:
            if m.role == "assistant" and s.state.units:
                pack = s.build("openai-chat")
                out.append(pack.manifest.guidance["recitation"])
                s.record(message=m, pack=pack)
            else:
                s.add(m)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    fams = {
        "tau-bench airline": [(t, str(t.meta.get("instruction", ""))) for t in load_traces(DATA / "tau-bench/gpt-4o-airline.json")],
        "mini-swe-agent": [(t, t.messages[0].text[:2000]) for p in sorted((DATA / "mini-swe-agent").glob("*.json"))
                           for t in load_traces(p)],
    }
    lines = ["| family | runs | turns | recited | on schedule | on drift | turns with drift measured | overlap: mean, 10th percentile, min |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for fam, runs in fams.items():
            reasons: Counter[str] = Counter()
            overlaps = []
            turns = measured = n = 0
            for i, (trace, goal) in enumerate(runs[: args.runs]):
                reps = replay(trace, goal, Path(tmp) / f"{fam[:4]}{i}.db")
                n += 1
                turns += len(reps)
                for r in reps:
                    if r["recited"]:
                        reasons[r["reason"]] += 1
                    if r["overlap"] is not None:
                        measured += 1
                        overlaps.append(r["overlap"])
            recited = sum(reasons.values())
            lines.append(f"| {fam} | {n} | {turns:,} | {recited} ({recited / turns:.0%}) | {reasons['period']} | "
                         f"{reasons['drift']} | {measured:,} | {statistics.mean(overlaps):.2f}, "
                         f"{statistics.quantiles(overlaps, n=10)[0]:.2f}, {min(overlaps):.2f} |")
            print(lines[-1], flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "recitation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
