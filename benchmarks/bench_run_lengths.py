"""How many more turns a run of a given age really had, against what the mask cost model assumes.

Run:  .venv/bin/python benchmarks/bench_run_lengths.py [--split dev] [--out benchmarks/results/run_lengths.md]

For every run of the shared traces (the split given) and each age ``a`` (assistant turns so far) a run reached, the
turns of the next ``CompactionConfig.expected_turns`` (10) it still had, averaged over the runs that reached that age:
what a mask batch made at that age saves reads on. Beside it, ``CompactionConfig.remaining_turns(a)`` (a run of age
``a`` lasts ``t`` more with odds ``a / (a + t)``) and the rule before it (``min(10, max(3, a))``).
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from windowsmith.bench.metrics import family_of, split_of
from windowsmith.compaction import CompactionConfig
from windowsmith.compaction.config import MIN_EXPECTED_TURNS
from windowsmith.traces import iter_trace_files, load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
AGES = (3, 6, 10, 15, 20, 30, 40, 60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="dev", choices=("dev", "validation", "all"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "run_lengths.md"))
    args = ap.parse_args()
    cfg = CompactionConfig()
    horizon = cfg.expected_turns
    lengths: dict[str, list[int]] = defaultdict(list)
    for path in iter_trace_files(DATA):
        for trace in load_traces(path):
            if args.split == "all" or split_of(trace.id) == args.split:
                lengths[family_of(trace)].append(sum(m.role == "assistant" for m in trace.messages))
    lines = [f"Command: `python benchmarks/bench_run_lengths.py --split {args.split}`", "",
             f"Split {args.split}; of the next {horizon} turns, how many a run that reached age `a` still had "
             "(mean over those runs), against `CompactionConfig.remaining_turns(a)` and the rule before it.", "",
             "| family | runs | median length | age | runs at that age | had | remaining_turns | before |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for family, ls in sorted(lengths.items()):
        for a in AGES:
            alive = [n for n in ls if n > a]
            if not alive:
                break
            had = sum(min(n - a, horizon) for n in alive) / len(alive)
            lines.append(f"| {family} | {len(ls)} | {statistics.median_high(ls)} | {a} | {len(alive)} | {had:.2f} | "
                         f"{cfg.remaining_turns(a):.2f} | {min(horizon, max(MIN_EXPECTED_TURNS, a))} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
