"""Retrieval quality on the shipped labelled sets, against bm25s on the same corpus in the same process.

The sets (``benchmarks/data/retrieval_sets.json``, built by ``build_retrieval_sets.py`` from MIT-licensed
traces) hold conversations as turns and cases: a query (the newest two turns) and the earlier turns it
needs. For each case the turns before its cut-off are added to memory, one item each, in a scope of their
own (``memory.add`` on a SQLite file, or PostgreSQL with ``--pg``), and ``memory.search(query)`` ranks
them. bm25s (stemmed, English stopwords) indexes the same turns and answers the same query.

Reported per set and split: recall@5 and recall@10 (a case counts when a needed turn is in the top k;
for ``multi-hop`` when every needed value has a turn in the top k), and for ``no-relevant`` the share
of queries for which nothing is returned (what the layers would inject).

Run:  .venv/bin/python benchmarks/bench_retrieval.py [--split validation] [--pg postgresql://...]
      [--vectors]   (writes benchmarks/results/retrieval.json and .md)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from windowsmith.memory import Memory, MemoryConfig
from windowsmith.store import SQLiteStore, Store, open_store

ROOT = Path(__file__).resolve().parents[1]
SETS = ROOT / "benchmarks" / "data" / "retrieval_sets.json"
OUT = ROOT / "benchmarks" / "results" / "retrieval.json"
KS = (5, 10)
SOURCE = {"user": "user", "assistant": "assistant", "tool": "tool", "system": "tool"}


def load_sets() -> dict[str, Any]:
    return dict(json.loads(SETS.read_text()))


def found(ranked: list[int], case: dict[str, Any], k: int) -> bool:
    top = set(ranked[:k])
    needs = case["needs"]
    return all(top & set(n["turns"]) for n in needs) if needs else False


class Bm25s:
    """bm25s over one case's turns: stemmed (PyStemmer english), English stopwords."""

    def __init__(self) -> None:
        import bm25s
        import Stemmer

        self.bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")

    def rank(self, texts: list[str], query: str, k: int) -> list[int]:
        bm = self.bm25s
        r = bm.BM25()
        r.index(bm.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=False), show_progress=False)
        q = bm.tokenize([query], stopwords="en", stemmer=self.stemmer, show_progress=False)
        if not q.vocab:
            return []
        docs, scores = r.retrieve(q, k=min(k, len(texts)), show_progress=False)
        return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


def ours(store: Store, turns: list[dict[str, Any]], query: str, k: int, embedder: Any) -> list[int]:
    scope = f"bench-{uuid.uuid4().hex[:10]}"
    mem = Memory(store, None, MemoryConfig(project=scope, merge_at=1.01), embedder=embedder)
    ids: dict[int, int] = {}
    for n, t in enumerate(turns):
        item = mem.add(t["text"], scope="project", source=SOURCE.get(t["role"], "tool"))
        if item is not None:
            ids.setdefault(item.id, n)
    return [ids[m.id] for m in mem.search(query, limit=k) if m.id in ids]


def run(store: Store, data: dict[str, Any], split: str, embedder: Any) -> dict[str, Any]:
    bm = Bm25s()
    per: dict[str, dict[str, Any]] = {}
    t_ours = t_bm = 0.0
    for case in data["cases"]:
        if split != "all" and case["split"] != split:
            continue
        turns = data["runs"][case["run"]]["turns"][: case["cut"]]
        texts = [t["text"] for t in turns]
        if not texts:
            continue
        t = time.perf_counter()
        got = ours(store, turns, case["query"], max(KS), embedder)
        t_ours += time.perf_counter() - t
        t = time.perf_counter()
        base = bm.rank(texts, case["query"], max(KS))
        t_bm += time.perf_counter() - t
        s = per.setdefault(case["set"], {"cases": 0, **{f"{w}@{k}": 0 for w in ("ours", "bm25s") for k in KS},
                                         "ours_empty": 0, "bm25s_empty": 0})
        s["cases"] += 1
        for k in KS:
            s[f"ours@{k}"] += found(got, case, k)
            s[f"bm25s@{k}"] += found(base, case, k)
        s["ours_empty"] += not got
        s["bm25s_empty"] += not base
    out: dict[str, Any] = {}
    for name, s in sorted(per.items()):
        n = s["cases"]
        row: dict[str, Any] = {"cases": n}
        if name == "no-relevant":
            row["ours_nothing_injected"] = round(s["ours_empty"] / n, 4)
            row["bm25s_nothing_returned"] = round(s["bm25s_empty"] / n, 4)
        else:
            for key in (f"{w}@{k}" for w in ("ours", "bm25s") for k in KS):
                row[key.replace("@", "_R@")] = round(s[key] / n, 4)
        out[name] = row
    out["seconds"] = {"ours": round(t_ours, 1), "bm25s": round(t_bm, 1)}
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# Retrieval quality: {result['backend']}, {result['embedder'] or 'lexical only'}", "",
             f"`{result['command']}`", ""]
    for split in ("dev", "validation"):
        if split not in result:
            continue
        res = result[split]
        lines += [f"## {split}", "", "| set | cases | ours R@5 | bm25s R@5 | ours R@10 | bm25s R@10 |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, r in res.items():
            if name in ("seconds", "no-relevant"):
                continue
            lines.append(f"| {name} | {r['cases']} | {r['ours_R@5']:.1%} | {r['bm25s_R@5']:.1%} | {r['ours_R@10']:.1%} | "
                         f"{r['bm25s_R@10']:.1%} |")
        nr = res.get("no-relevant")
        if nr:
            lines += ["", f"No-relevant queries ({nr['cases']}): nothing injected by ours in {nr['ours_nothing_injected']:.1%}, "
                          f"bm25s returns nothing in {nr['bm25s_nothing_returned']:.1%}."]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="both", choices=["both", "dev", "validation", "all"])
    ap.add_argument("--pg", default=None, help="a PostgreSQL URL (default: a SQLite file)")
    ap.add_argument("--vectors", action="store_true", help="hybrid search with the offline WordLlama embedder")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    embedder = None
    if args.vectors:
        from windowsmith.retrieval.embedders import WordLlamaEmbedder

        embedder = WordLlamaEmbedder()
    data = load_sets()
    result: dict[str, Any] = {"command": "python benchmarks/bench_retrieval.py " + " ".join(sys.argv[1:]),
                              "backend": "postgres" if args.pg else "sqlite", "embedder": getattr(embedder, "name", None)}
    with tempfile.TemporaryDirectory() as tmp:
        schema = f"ws_bench_{uuid.uuid4().hex[:8]}"
        store = open_store(f"{args.pg}?schema={schema}") if args.pg else SQLiteStore(Path(tmp) / "r.db")
        try:
            for split in (("dev", "validation") if args.split == "both" else (args.split,)):
                result[split] = run(store, data, split, embedder)
                print(split, json.dumps(result[split]), file=sys.stderr)
        finally:
            if args.pg:
                store._db.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[attr-defined]
            store.close()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
