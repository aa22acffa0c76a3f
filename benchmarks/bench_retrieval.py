"""Retrieval quality and speed, on the shared traces.

**Quality** (a labelled set built from the traces): for every agent action in every run whose
identifiers (``bench.identifiers.action_identifiers``) include one that appeared in an observation at
least ``GAP`` messages earlier and not since (so an 8K window has likely evicted it), the *target* is
the chunk of that earlier observation holding the identifier. The earlier observations are chunked
and indexed exactly as recall indexes evicted history (``retrieval.history.chunk_lines``), one scope
per run; the query is what the recall layer sends: the identifiers and the content words of the newest
turn (the two messages before the action). We report recall@k (k = 1, 4, 8): the share of cases whose
target chunk is in the top k, for lexical search alone (FTS5 on SQLite / tsvector on PostgreSQL, fused
over the two queries with RRF) and for hybrid search (plus WordLlama vectors, fused with RRF).

**Speed**: 10,000 chunks of trace text indexed in one scope (time per chunk, with and without
vectors), then 200 queries (p50/p95 ms), on SQLite and on PostgreSQL.

Run:  .venv/bin/python benchmarks/bench_retrieval.py [--pg postgresql://...] [--runs N]
      (writes benchmarks/results/retrieval.json; --max-cases N samples the labelled set evenly)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from windowsmith.bench.identifiers import action_identifiers, message_text
from windowsmith.bench.metrics import split_of
from windowsmith.retrieval.history import chunk_lines
from windowsmith.retrieval.search import Retriever, with_vectors
from windowsmith.retrieval.terms import identifiers, words
from windowsmith.store import SQLiteStore, Store, open_store
from windowsmith.store.chunks import NewChunk
from windowsmith.traces import load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results" / "retrieval.json"
GAP = 6
KS = (1, 4, 8)


def _family(path: Path) -> str:
    return path.relative_to(DATA).parts[0]


def build_cases(max_runs: int, split: str) -> list[dict[str, Any]]:
    """One case per (run, action) with an identifier that came from an observation >= GAP messages back."""
    cases = []
    for path in sorted(p for p in DATA.rglob("*") if p.is_file()):
        try:
            traces = load_traces(path)
        except Exception:
            continue
        for tr in traces[:max_runs]:
            if split != "all" and split_of(tr.id) != split:
                continue
            msgs = list(tr.messages)
            obs: list[tuple[int, str]] = []  # (message index, text) of observations so far
            for i, m in enumerate(msgs):
                if m.role == "assistant" and i >= GAP and obs:
                    ids = action_identifiers(m)
                    recent = " ".join(message_text(x) for x in msgs[max(0, i - GAP):i])
                    for ident in sorted(ids):
                        if ident in recent or len(ident) < 5:
                            continue
                        src = next((j for j, t in reversed(obs) if j < i - GAP and ident in t), None)
                        if src is None:
                            continue
                        newest = "\n".join(message_text(x) for x in msgs[max(0, i - 2):i])[-8000:]
                        cases.append({"family": _family(path), "run": tr.id, "at": i, "ident": ident,
                                      "source": src, "newest": newest,
                                      "observations": [(j, t) for j, t in obs if j < i - GAP]})
                        break  # one case per action
                if m.role in ("tool", "user"):
                    obs.append((i, message_text(m)))
    return cases


def index_case(store: Store, scope: str, case: dict[str, Any], embedder: Any) -> set[str]:
    """Index the case's earlier observations; returns the keys of the target chunks."""
    chunks: list[NewChunk] = []
    targets: set[str] = set()
    for j, text in case["observations"]:
        for a, b, body in chunk_lines(text, blocks=False):
            key = f"{j}#{a}"
            chunks.append(NewChunk(key=key, text=body, doc=str(j), source=f"msg{j}", meta={"lines": [a, b]}))
            if j == case["source"] and case["ident"] in body:
                targets.add(key)
    store.add_chunks("history", scope, with_vectors(chunks, embedder))
    return targets


def quality(store: Store, cases: list[dict[str, Any]], embedder: Any) -> dict[str, Any]:
    lex = Retriever(store)
    hyb = Retriever(store, embedder) if embedder is not None else None
    hits: dict[str, dict[int, int]] = {"lexical": dict.fromkeys(KS, 0), "hybrid": dict.fromkeys(KS, 0)}
    per_family: dict[str, dict[str, Any]] = {}
    n = 0
    for case in cases:
        scope = f"session:q-{uuid.uuid4().hex[:10]}"
        targets = index_case(store, scope, case, embedder)
        if not targets:
            continue
        n += 1
        fam = per_family.setdefault(case["family"], {"cases": 0, "lexical@4": 0, "hybrid@4": 0})
        fam["cases"] += 1
        text = case["newest"]
        queries = [q for q in (identifiers(text, limit=24), words(text, limit=12)) if q]
        for name, r in (("lexical", lex), ("hybrid", hyb)):
            if r is None or not queries:
                continue
            got = [h.chunk.key for h in r.search("history", [scope], queries, limit=max(KS), texts=[text[-2000:]],
                                                 diversify=False)]
            for k in KS:
                if targets & set(got[:k]):
                    hits[name][k] += 1
            if targets & set(got[:4]):
                fam[f"{name}@4"] += 1
    res: dict[str, Any] = {"cases": n, "gap_messages": GAP}
    for name in hits:
        if name == "hybrid" and hyb is None:
            continue
        res[name] = {f"recall@{k}": round(hits[name][k] / n, 4) if n else None for k in KS}
    res["per_family"] = {f: {"cases": v["cases"], "lexical@4": round(v["lexical@4"] / v["cases"], 4),
                             **({"hybrid@4": round(v["hybrid@4"] / v["cases"], 4)} if hyb else {})}
                         for f, v in sorted(per_family.items())}
    return res


def speed(store: Store, texts: list[str], embedder: Any, queries: list[list[str]]) -> dict[str, Any]:
    scope = f"project:speed-{uuid.uuid4().hex[:8]}"
    chunks = [NewChunk(key=str(i), text=t, doc=str(i // 50)) for i, t in enumerate(texts)]
    t0 = time.perf_counter()
    for i in range(0, len(chunks), 500):
        store.add_chunks("knowledge", scope, with_vectors(chunks[i:i + 500], embedder))
    index_s = time.perf_counter() - t0
    r = Retriever(store, embedder)
    lat = []
    for q in queries:
        t = time.perf_counter()
        r.search("knowledge", [scope], [q], limit=8, texts=[" ".join(q)] if embedder else ())
        lat.append((time.perf_counter() - t) * 1000)
    lat.sort()
    return {"chunks": len(chunks), "index_s": round(index_s, 2), "index_ms_per_chunk": round(index_s * 1000 / len(chunks), 3),
            "query_p50_ms": round(statistics.median(lat), 2), "query_p95_ms": round(lat[int(0.95 * len(lat)) - 1], 2),
            "queries": len(lat)}


def corpus(n: int) -> list[str]:
    out: list[str] = []
    for path in sorted(p for p in DATA.rglob("*") if p.is_file()):
        try:
            traces = load_traces(path)
        except Exception:
            continue
        for tr in traces:
            for m in tr.messages:
                for _a, _b, body in chunk_lines(message_text(m), blocks=False):
                    out.append(body)
                    if len(out) >= n:
                        return out
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--runs", type=int, default=20, help="at most N runs per trace file")
    ap.add_argument("--split", default="all", choices=["all", "dev", "validation"])
    ap.add_argument("--no-vectors", action="store_true")
    ap.add_argument("--max-cases", type=int, default=300, help="an evenly spaced sample of at most N cases")
    args = ap.parse_args()
    embedder = None
    if not args.no_vectors:
        from windowsmith.retrieval.embedders import WordLlamaEmbedder

        embedder = WordLlamaEmbedder()
    cases = build_cases(args.runs, args.split)
    total = len(cases)
    if len(cases) > args.max_cases:
        step = len(cases) / args.max_cases
        cases = [cases[int(i * step)] for i in range(args.max_cases)]
    print(f"{total} labelled cases, {len(cases)} used", file=sys.stderr)
    texts = corpus(10_000)
    qsrc = [c["newest"] for c in cases[:200]] or texts[:200]
    queries = [identifiers(t, limit=24) or words(t, limit=12) for t in qsrc]
    queries = [q for q in queries if q][:200]
    result: dict[str, Any] = {"command": "python benchmarks/bench_retrieval.py " + " ".join(sys.argv[1:]),
                              "embedder": getattr(embedder, "name", None), "labelled_cases": total}
    with tempfile.TemporaryDirectory() as tmp:
        backends: list[tuple[str, Store]] = [("sqlite", SQLiteStore(Path(tmp) / "r.db"))]
        if args.pg:
            schema = f"ws_bench_{uuid.uuid4().hex[:8]}"
            backends.append(("postgres", open_store(f"{args.pg}?schema={schema}")))
        for name, store in backends:
            t = time.perf_counter()
            result[name] = {"quality": quality(store, cases, embedder)}
            result[name]["quality"]["seconds"] = round(time.perf_counter() - t, 1)
            result[name]["speed_lexical"] = speed(store, texts, None, queries)
            if embedder is not None:
                result[name]["speed_hybrid"] = speed(store, texts, embedder, queries)
            print(name, json.dumps(result[name]), file=sys.stderr)
            if name == "postgres":
                store._db.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[attr-defined]
            store.close()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
