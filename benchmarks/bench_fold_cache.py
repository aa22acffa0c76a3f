"""What the fold breakpoint saves: the same requests priced with and without the cache breakpoint at the folds' end.

Run:  .venv/bin/python benchmarks/bench_fold_cache.py   (writes benchmarks/results/fold_cache.md and .json; seconds)

A session of ``turns`` tool calls, each returning ``chars`` characters of real agent output (slices of the shared
OpenHands trace file) to a ``read_log`` tool, is built through the engine at each window with claude-sonnet-4-5
(the construction of ``tests/test_fold_breakpoint.py``). Mask batches fold the oldest exchanges every few turns.
Every pack's request is then priced twice with the bench's cache model (``costs.call_cost``, consecutive requests):
as planned, and with the folds' breakpoint taken out (``fold=0``, planned again: that slot goes back to the system
prompt or the tools). The requests are the same both ways, so the difference is the breakpoint's alone (the mask
cost model, which prices a batch's rewrite from the folds on, also batches a little differently with it; that part
is not in these figures).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import windowsmith as ws
from windowsmith.cache import plan_cache
from windowsmith.costs import call_cost
from windowsmith.records import MaskRecord
from windowsmith.registry import load_registry

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results"
MODEL = "claude-sonnet-4-5"
CASES = [(16_000, 3_000, 60), (32_000, 5_000, 40), (32_000, 5_000, 120), (200_000, 20_000, 120)]  # window, chars, turns


def session_packs(e: ws.Engine, chars: int, turns: int) -> tuple[list[ws.Pack], ws.Session, int]:
    text = sorted((DATA / "openhands").iterdir())[0].read_text(encoding="utf-8", errors="replace")[:300_000]
    s = e.session("logs")
    s.system("You triage build logs.")
    s.user("Find why the nightly build fails; the logs are under /var/log/ci.")
    packs = []
    for i in range(turns):
        s.assistant(f"Reading log {i}.", tool_calls=[{"id": f"c{i}", "name": "read_log",
                                                      "arguments": {"path": f"/var/log/ci/build-{i}.log"}}])
        s.tool_result(f"c{i}", text[i * 7919 % 250_000:][:chars])
        packs.append(s.build())
    batches = sum(isinstance(r, MaskRecord) for r in s.state.records)
    return packs, s, batches


def price(packs: list[ws.Pack], s: ws.Session, *, fold: bool) -> tuple[float, int, int]:
    spec = load_registry().get(MODEL)
    counter = s.counter("anthropic")
    usd, read, write, prev, cands = 0.0, 0, 0, None, None
    for p in packs:
        req = p.neutral
        if not fold:
            bare = replace(req, fold=0)
            req = replace(bare, cache=plan_cache(bare, spec.max_breakpoints))
        c, cands = call_cost(spec, "anthropic", prev, req, counter, prompt_tokens=p.manifest.tokens,
                             prev_candidates=cands)
        usd += c.usd
        read += c.cache_read_tokens
        write += c.cache_write_tokens
        prev = req
    return usd, read, write


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (window, chars, turns) in enumerate(CASES):
            with ws.Engine(model=MODEL, store=Path(tmp) / f"f{k}.db", window=window) as e:
                packs, s, batches = session_packs(e, chars, turns)
                with_usd, with_read, with_write = price(packs, s, fold=True)
                bare_usd, bare_read, bare_write = price(packs, s, fold=False)
            rows.append({"window": window, "chars": chars, "turns": turns, "batches": batches,
                         "usd_without": round(bare_usd, 4), "usd_with": round(with_usd, 4),
                         "saving": round(1 - with_usd / bare_usd, 4) if bare_usd else 0.0,
                         "cache_write_without": bare_write, "cache_write_with": with_write,
                         "cache_read_without": bare_read, "cache_read_with": with_read})
    lines = ["Command: `.venv/bin/python benchmarks/bench_fold_cache.py`", "",
             f"Model {MODEL}; one session per row, the same requests priced without and with the folds' cache "
             "breakpoint (benchmarks/bench_fold_cache.py says how).", "",
             "| window | result chars | turns | fold batches | $ without | $ with | saving | cache writes without | with |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['window']:,} | {r['chars']:,} | {r['turns']} | {r['batches']} | {r['usd_without']:.4f} | "
                     f"{r['usd_with']:.4f} | {r['saving']:.1%} | {r['cache_write_without']:,} | {r['cache_write_with']:,} |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "fold_cache.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (OUT / "fold_cache.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
