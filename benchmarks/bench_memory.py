"""Memory speed at 10,000 items on SQLite, with bm25s on the same corpus in the same process.

The corpus is the turns of the shipped retrieval sets (``benchmarks/data/retrieval_sets.json``), repeated
with a counter until there are ``--items`` of them. ``memory.add`` adds them one by one (redaction, the
near-duplicate check and the insert, each its own transaction); then the cases' queries are asked with
``memory.search`` (lexical) and of a bm25s index (stemmed, English stopwords) of the same texts.

Run:  .venv/bin/python benchmarks/bench_memory.py [--items 10000]
      (writes benchmarks/results/memory.json and .md)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from windowsmith.memory import Memory, MemoryConfig
from windowsmith.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]
SETS = ROOT / "benchmarks" / "data" / "retrieval_sets.json"
OUT = ROOT / "benchmarks" / "results" / "memory.json"


def p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    import bm25s
    import Stemmer

    data = json.loads(SETS.read_text())
    base = [t["text"] for r in data["runs"].values() for t in r["turns"] if t["text"].strip()]
    texts = [f"{base[i % len(base)]} (#{i})" for i in range(args.items)]
    queries = [c["query"] for c in data["cases"]][: args.queries]
    res: dict[str, Any] = {"command": "python benchmarks/bench_memory.py " + " ".join(sys.argv[1:]),
                           "items": len(texts), "queries": len(queries)}
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "m.db")
        mem = Memory(store, None, MemoryConfig(project="bench"))
        t0 = time.perf_counter()
        for t in texts:
            mem.add(t, scope="project", source="user")
        add_s = time.perf_counter() - t0
        lat = []
        for q in queries:
            t = time.perf_counter()
            mem.search(q, limit=8)
            lat.append((time.perf_counter() - t) * 1000)
        store.close()
    stem = Stemmer.Stemmer("english")
    t0 = time.perf_counter()
    bm = bm25s.BM25()
    bm.index(bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False), show_progress=False)
    bm_index_s = time.perf_counter() - t0
    bm_lat = []
    for q in queries:
        t = time.perf_counter()
        tok = bm25s.tokenize([q], stopwords="en", stemmer=stem, show_progress=False)
        if tok.vocab:
            bm.retrieve(tok, k=8, show_progress=False)
        bm_lat.append((time.perf_counter() - t) * 1000)
    res["ours"] = {"add_ms_per_item": round(add_s * 1000 / len(texts), 3), "query_p50_ms": p50(lat),
                   "query_p95_ms": round(sorted(lat)[int(0.95 * len(lat)) - 1], 3)}
    res["bm25s"] = {"index_ms_per_item": round(bm_index_s * 1000 / len(texts), 4), "query_p50_ms": p50(bm_lat),
                    "query_p95_ms": round(sorted(bm_lat)[int(0.95 * len(bm_lat)) - 1], 3)}
    res["ratios"] = {"add_vs_bm25s_index": round(res["ours"]["add_ms_per_item"] / max(res["bm25s"]["index_ms_per_item"], 1e-6), 1),
                     "query_p50_vs_bm25s": round(res["ours"]["query_p50_ms"] / max(res["bm25s"]["query_p50_ms"], 1e-6), 1)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(res, indent=2) + "\n")
    o, b, r = res["ours"], res["bm25s"], res["ratios"]
    md = (f"# Memory speed, {res['items']:,} items on SQLite, {res['queries']} queries\n\n`{res['command']}`\n\n"
          "| | per item (add / index) | query p50 | query p95 |\n|---|---:|---:|---:|\n"
          f"| windowsmith memory (lexical) | {o['add_ms_per_item']} ms | {o['query_p50_ms']} ms | {o['query_p95_ms']} ms |\n"
          f"| bm25s (stemmed, stopwords) | {b['index_ms_per_item']} ms | {b['query_p50_ms']} ms | {b['query_p95_ms']} ms |\n"
          f"| ratio | {r['add_vs_bm25s_index']}x | {r['query_p50_vs_bm25s']}x | |\n")
    OUT.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
