"""Tool deferral on a large tool set: tokens per request and cost with the prompt cache, per trace family.

Run:  .venv/bin/python benchmarks/bench_tools.py [--runs N]     (writes benchmarks/results/tools.json and .md)

The tool set: every tool the shared traces use (OpenHands' four recorded definitions; the tau-bench and
tau2-bench files record no definitions, so theirs are inferred from the recorded calls: each argument's name
and JSON type) plus the MCP-style catalog in ``benchmarks/data/mcp_catalog.json`` (76 tools). Each run is
replayed with all of them declared, its own family's tools as the core set, under:

* ``all``: every definition sent every turn (the default tools layer);
* ``native``: ``DeferredToolsLayer`` with the provider's mechanism (Anthropic ``defer_loading`` + BM25 tool
  search): the tool list never changes; deferred definitions are priced as not sent;
* ``search``: the core tools + a ``tool_search`` function; ``search+1``: the same with one search at the
  third assistant turn that loads five catalog tools (appended after the stable block: one cache break).

Cost: ``costs.call_cost`` over consecutive requests (cache reads, writes, uncached input) at the registry's
prices; the agents' own messages are replayed as recorded, so only the tool definitions differ.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import windowsmith as ws
from windowsmith.costs import call_cost
from windowsmith.guidance.tools import ToolPolicy, deferred_layers
from windowsmith.traces import load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results"
CATALOG = ROOT / "benchmarks" / "data" / "mcp_catalog.json"
FAMILIES = {
    "tau-bench airline": "tau-bench/gpt-4o-airline.json",
    "tau2 retail": "tau2-bench/gpt-4.1_retail_default_1trial.json",
    "tau2 telecom": "tau2-bench/gpt-4o_telecom_dual-control.json",
    "openhands": "openhands/msb_example_output.jsonl",
}
JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def inferred_tools(traces: list[Any]) -> list[ws.ToolSpec]:
    """Tool definitions from the recorded calls (name, argument names and JSON types), for traces without any."""
    props: dict[str, dict[str, str]] = {}
    for t in traces:
        for m in t.messages:
            for c in m.tool_calls:
                p = props.setdefault(c.name, {})
                for k, v in c.arguments.items():
                    p.setdefault(k, JSON_TYPES.get(type(v), "string"))
    return [ws.ToolSpec(name, f"{name.replace('_', ' ')} (definition inferred from the recorded calls)",
                        {"type": "object", "properties": {k: {"type": v} for k, v in sorted(p.items())}})
            for name, p in sorted(props.items())]


def replay(trace: Any, tools: list[ws.ToolSpec], core: list[str], strategy: str, fmt: str, model: str,
           tmp: Path) -> dict[str, float]:
    layers = None
    if strategy != "all":
        policy = ToolPolicy(core=tuple(core), native=strategy == "native")
        layers = lambda: deferred_layers(policy)  # noqa: E731
    db = tmp / f"{strategy}-{fmt}.db"
    db.unlink(missing_ok=True)
    with ws.Engine(model=model, store=db, layers=layers) as engine:
        s = engine.session("b")
        if trace.system:
            s.system(trace.system)
        s.tools(tools)
        spec = engine.spec
        prev = None
        cands = None
        tot: dict[str, float] = defaultdict(float)
        turn = 0
        for m in trace.messages:
            if m.role == "assistant" and s.state.units:
                turn += 1
                if strategy == "search+1" and turn == 3:
                    s.tool_search("create github issue comment", 5)
                pack = s.build(fmt)
                req = pack.neutral
                if req.deferred:  # deferred definitions are not in the model's context
                    req = replace(req, tools=tuple(t for t in req.tools if t.name not in req.deferred))
                counter = s.counter(fmt)
                cost, cands = call_cost(spec, fmt, prev, req, counter, prompt_tokens=pack.tokens,
                                        output_tokens=counter.message(m), prev_candidates=cands)
                prev = req
                tot["requests"] += 1
                tot["tokens"] += pack.tokens
                tot["tool_tokens"] += pack.manifest.layers.get("tools", {}).get("used", 0)
                tot["usd"] += cost.usd
                tot["cache_read"] += cost.cache_read_tokens
                tot["cache_write"] += cost.cache_write_tokens
                tot["uncached"] += cost.input_tokens
                s.record(message=m, pack=pack)
            else:
                s.add(m)
        return dict(tot)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10, help="runs per family (default 10)")
    args = ap.parse_args()
    catalog = [ws.ToolSpec.from_dict(t) for t in json.loads(CATALOG.read_text())["tools"]]
    fam_traces = {f: load_traces(DATA / p) for f, p in FAMILIES.items()}
    fam_tools = {f: (list(tr[0].tools) if tr[0].tools else inferred_tools(tr)) for f, tr in fam_traces.items()}
    every = [t for ts in fam_tools.values() for t in ts]
    names = [t.name for t in every]
    every = [t for i, t in enumerate(every) if t.name not in names[:i]] + catalog  # one per name
    tmp = OUT / "_tools_tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    setups = [("anthropic", "claude-sonnet-4-5", ("all", "native", "search", "search+1")),
              ("openai-chat", "gpt-4.1", ("all", "search", "search+1"))]
    results: dict[str, Any] = {"tools_declared": len(every), "catalog": len(catalog), "families": {}}
    for fam, traces in fam_traces.items():
        core = [t.name for t in fam_tools[fam]]
        runs = [t for t in traces if len(t.messages) >= 6][: args.runs]
        per: dict[str, Any] = {}
        for fmt, model, strategies in setups:
            for strat in strategies:
                rows = [replay(t, every, core, strat, fmt, model, tmp) for t in runs]
                n = sum(r["requests"] for r in rows)
                per[f"{fmt} {strat}"] = {
                    "runs": len(rows), "requests": n,
                    "tokens_per_request": round(sum(r["tokens"] for r in rows) / n),
                    "tool_tokens_per_request": round(sum(r["tool_tokens"] for r in rows) / n),
                    "usd_per_run": round(statistics.mean(r["usd"] for r in rows), 4),
                    "cache_read_share": round(sum(r["cache_read"] for r in rows) / max(1, sum(r["tokens"] for r in rows)), 3),
                    "cache_write_tokens_per_run": round(statistics.mean(r["cache_write"] for r in rows)),
                }
                print(fam, fmt, strat, per[f"{fmt} {strat}"], flush=True)
        results["families"][fam] = {"core_tools": len(core), **per}
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    (OUT / "tools.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = [f"{results['tools_declared']} tools declared ({results['catalog']} from the MCP catalog); core = the "
             "family's own tools.", "",
             "| family | format | strategy | tokens/request | of which tools | $/run | cache-read share | cache writes/run |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for fam, per in results["families"].items():
        for key, r in per.items():
            if key == "core_tools":
                continue
            fmt, strat = key.split(" ")
            lines.append(f"| {fam} ({per['core_tools']} core) | {fmt} | {strat} | {r['tokens_per_request']:,} | "
                         f"{r['tool_tokens_per_request']:,} | {r['usd_per_run']:.4f} | {r['cache_read_share']:.0%} | "
                         f"{r['cache_write_tokens_per_run']:,} |")
    (OUT / "tools.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
