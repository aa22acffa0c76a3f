"""Context strategies side by side on every run of every shared real trace.

Runs ``windowsmith.bench.run_bench`` over ../shared/data/traces (tau-bench, tau2-bench, mini-swe-agent,
SWE-agent, OpenHands: 362 runs, ~6,000 model calls) for claude-sonnet-4-5 at 8K, 16K and 32K windows, on the validation half of the runs (by a hash of the run id),
and the model's own 200K window, on 2 worker processes, and writes:

    benchmarks/results/bench.json   every figure (rows per strategy x window, token-count error, showcase run)
    benchmarks/results/bench.md     the table the README quotes
    benchmarks/results/bench.html   the self-contained report with charts

Run:  .venv/bin/python benchmarks/bench_strategies.py
Same as:  .venv/bin/windowsmith bench ../shared/data/traces --json ... --html ... --markdown ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from windowsmith.bench import bench_html, run_bench
from windowsmith.bench.report import markdown

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results"
COMMAND = "windowsmith bench ../shared/data/traces --split validation --json benchmarks/results/bench.json " \
          "--html benchmarks/results/bench.html --markdown benchmarks/results/bench.md"


def main() -> None:
    def progress(done: int, total: int) -> None:
        if done % 25 == 0 or done == total:
            print(f"\r{done}/{total} runs", end="", file=sys.stderr, flush=True)

    result = run_bench([str(DATA)], on_run=progress, split="validation")
    print(file=sys.stderr)
    # paths relative to the repository's parent, so the files do not depend on where it is checked out
    result["files"] = [str(Path(f).relative_to(ROOT.parent)) if Path(f).is_relative_to(ROOT.parent) else f
                       for f in result["files"]]
    def rel(f: str) -> str:
        return str(Path(f).relative_to(ROOT.parent)) if Path(f).is_relative_to(ROOT.parent) else f

    for tc in result.get("token_count") or []:
        tc["files"] = [rel(f) for f in tc["files"]]
        tc["file"] = rel(tc["file"])
    result["command"] = COMMAND
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (OUT / "bench.md").write_text(markdown(result, COMMAND), encoding="utf-8")
    (OUT / "bench.html").write_text(bench_html(result), encoding="utf-8")
    print(markdown(result, COMMAND))


if __name__ == "__main__":
    main()
