"""Tool-result ingest on every tool result of the shared real traces: compression ratio per content
type, and recoverability (every offloaded result read back through ``read_result`` equals the
original after redaction).

Run:  .venv/bin/python benchmarks/bench_ingest.py     (writes benchmarks/results/ingest.json and .md)

Each result is ingested with a fixed offload threshold (1,000 and 4,000 o200k tokens: a tight and a
roomy window) into an in-memory artifact store, exactly as ``Session.tool_result`` does.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from windowsmith.artifacts import FileArtifacts
from windowsmith.ingest.pipeline import IngestConfig, ingest_result
from windowsmith.ingest.redact import redact
from windowsmith.result_tools import CONT, ResultTools
from windowsmith.tokens import TokenCounter
from windowsmith.traces import iter_trace_files, load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results"


def read_back(tools: ResultTools, ref: str) -> str:
    lines: list[str] = []
    offset = 0
    while True:
        out = tools.read_result(ref, offset, 2000)
        body, footer = out.rsplit("\n", 1)
        lines += [ln.split(": ", 1)[1] for ln in body.split("\n")]
        if "end of result" in footer:
            text = ""
            for i, ln in enumerate(lines):  # continuation lines (↪) join the previous line
                text += ln[1:] if ln.startswith(CONT) else ("\n" if i else "") + ln
            return text
        offset = int(footer.split("offset=")[1].rstrip("]"))


def main() -> int:
    import tempfile

    counter = TokenCounter("o200k_base", "openai-chat")
    results = []
    for f in iter_trace_files(DATA):
        for t in load_traces(f):
            names = {}
            for m in t.messages:
                for c in m.tool_calls:
                    names[c.id] = (c.name, dict(c.arguments))
                for r in m.tool_results:
                    name, args = names.get(r.call_id, (None, None))
                    results.append((f.parent.name, name, args, r.text))
                if m.role == "user" and t.format == "mini-swe-agent" and m.text.startswith("<returncode>"):
                    results.append((f.parent.name, "bash", None, m.text))  # mini-swe observations
    report: dict = {"results": len(results), "thresholds": {}}
    for threshold in (1000, 4000):
        with tempfile.TemporaryDirectory() as tmp:
            arts = FileArtifacts(tmp)
            tools = ResultTools(arts, "bench")
            per_kind: dict[str, dict] = defaultdict(lambda: {"n": 0, "orig": 0, "kept": 0, "ratios": []})
            offloaded = recovered = 0
            t0 = time.perf_counter()
            for _, name, args, text in results:
                ing = ingest_result(text, artifacts=arts, session_id="bench", count_tokens=counter.text,
                                    remaining_tokens=10**6, tool_name=name, arguments=args,
                                    config=IngestConfig(offload_tokens=threshold))
                if not ing.artifact:
                    continue
                offloaded += 1
                k = per_kind[ing.kind]
                k["n"] += 1
                k["orig"] += ing.original_tokens
                k["kept"] += ing.tokens
                k["ratios"].append(ing.original_tokens / max(1, ing.tokens))
                if read_back(tools, f"artifact://{ing.artifact}") == redact(text).text:
                    recovered += 1
            elapsed = time.perf_counter() - t0
        report["thresholds"][threshold] = {
            "offloaded": offloaded,
            "recovered_identical": recovered,
            "seconds": round(elapsed, 2),
            "by_kind": {k: {"results": v["n"], "tokens_before": v["orig"], "tokens_after": v["kept"],
                            "ratio": round(v["orig"] / max(1, v["kept"]), 1),
                            "median_ratio": round(statistics.median(v["ratios"]), 1)}
                        for k, v in sorted(per_kind.items())},
        }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ingest.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"{report['results']:,} tool results from the shared traces.", ""]
    for th, r in report["thresholds"].items():
        lines += [f"Offload threshold {th:,} tokens: {r['offloaded']} offloaded, {r['recovered_identical']} read back "
                  f"identical through read_result ({r['seconds']} s).", "",
                  "| kind | results | tokens before | tokens after | ratio | median ratio |", "|---|---|---|---|---|---|"]
        for k, v in r["by_kind"].items():
            lines.append(f"| {k} | {v['results']} | {v['tokens_before']:,} | {v['tokens_after']:,} | {v['ratio']}x | "
                         f"{v['median_ratio']}x |")
        lines.append("")
    (OUT / "ingest.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
