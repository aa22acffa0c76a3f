"""Most-compact JSON for tool results on the shared traces: how many results are JSON text with insignificant
whitespace, and the o200k tokens ``IngestConfig(compact_json=True)`` saves on them, per family.

Run:  .venv/bin/python benchmarks/bench_compact_json.py     (writes benchmarks/results/compact_json.md)
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from windowsmith.guidance.variation import compact_json
from windowsmith.tokens import count_text
from windowsmith.traces import iter_trace_files, load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results"


def main() -> None:
    fam: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for path in iter_trace_files(DATA):
        family = path.relative_to(DATA).parts[0]
        for trace in load_traces(path):
            for m in trace.messages:
                for r in m.tool_results:
                    f = fam[family]
                    f["results"] += 1
                    text = r.text
                    small = compact_json(text)
                    if small is None:
                        continue
                    f["json"] += 1
                    f["before"] += count_text(text)
                    f["after"] += count_text(small)
    lines = ["| family | tool results | JSON with whitespace | tokens before | after | saved |", "|---|---:|---:|---:|---:|---:|"]
    for name, f in sorted(fam.items()):
        saved = 1 - f["after"] / f["before"] if f["before"] else 0.0
        lines.append(f"| {name} | {f['results']:,} | {f['json']:,} | {f['before']:,} | {f['after']:,} | {saved:.0%} |")
    OUT.mkdir(exist_ok=True)
    (OUT / "compact_json.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
