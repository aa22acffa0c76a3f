"""Failure evidence on the shared real traces: how many failing actions the agents repeated, by family.

Run:  .venv/bin/python benchmarks/bench_failures.py     (writes benchmarks/results/failures.json and .md)

Each run's transcript goes through ``FailureTracker`` (what ``FailuresLayer`` uses each turn). A *repeated
failing action* is one action (same tool, same arguments, whitespace-normalized) that failed two or more
times in the run: the FAILURES section flags it from its second failure on. A *cascade* is a run of three
or more consecutive failed actions that are not all the same action.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from windowsmith.guidance import FailureTracker
from windowsmith.traces import iter_trace_files, load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results"


def main() -> None:
    fam: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    cats: dict[str, int] = defaultdict(int)
    examples: list[dict[str, object]] = []
    for path in iter_trace_files(DATA):
        family = path.relative_to(DATA).parts[0]
        for trace in load_traces(path):
            tr = FailureTracker().feed(trace.messages)
            f = fam[family]
            f["runs"] += 1
            f["actions"] += tr.actions
            f["failures"] += len(tr.failures)
            reps = tr.repeats()
            f["repeated_actions"] += len(reps)
            f["repeat_failures"] += sum(len(v) - 1 for v in reps.values())  # failures after the first: flagged
            f["runs_with_repeats"] += bool(reps)
            f["cascades"] += tr.longest_cascade >= 3
            for x in tr.failures:
                cats[x.category] += 1
            for v in sorted(reps.values(), key=len, reverse=True)[:1]:
                examples.append({"family": family, "run": trace.id, "times": len(v), "action": v[-1].action.describe(70),
                                 "category": v[-1].category, "signature": v[-1].signature,
                                 "turns": [x.action.turn for x in v]})
    total = {k: sum(f[k] for f in fam.values()) for k in next(iter(fam.values()))}
    examples.sort(key=lambda e: -int(e["times"]))  # type: ignore[call-overload]
    picked: list[dict[str, object]] = []
    for e in examples:  # the most repeated example of each family first
        if e["family"] not in {p["family"] for p in picked}:
            picked.append(e)
    picked += [e for e in examples if e not in picked][: max(0, 8 - len(picked))]
    OUT.mkdir(exist_ok=True)
    (OUT / "failures.json").write_text(json.dumps({"families": fam, "total": total, "categories": cats,
                                                   "examples": picked}, indent=1, sort_keys=True) + "\n")
    lines = ["| family | runs | actions | failed | repeated failing actions | repeats flagged | runs with repeats | runs with a cascade |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, f in [*sorted(fam.items()), ("**all**", total)]:
        lines.append(f"| {name} | {f['runs']} | {f['actions']:,} | {f['failures']:,} | {f['repeated_actions']} | "
                     f"{f['repeat_failures']} | {f['runs_with_repeats']} | {f['cascades']} |")
    lines += ["", "Failures by category: " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items(), key=lambda kv: -kv[1])),
              "", "Examples (the most repeated failing action of a run):", ""]
    for e in picked:
        lines.append(f"- {e['family']} `{e['run']}`: {e['times']} times (turns {', '.join(map(str, e['turns']))}) "  # type: ignore[call-overload]
                     f"`{e['action']}` → {e['category']}: `{e['signature']}`")
    (OUT / "failures.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
