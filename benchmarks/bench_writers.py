"""Writers sharing one session: how the appends are shared out, catching up with ``Session.refresh()``
versus reopening the session (replaying its whole log) after each ``ConflictError``.

N worker processes open the same session of one store and append user messages as fast as they can
until the log holds TOTAL events. On a conflict a worker either calls ``refresh()`` (reads only the
events appended since) or reopens the session with ``engine.session(id)`` (replays the whole log,
what a caller without refresh() had to do). We count each worker's successful appends and conflicts;
the figure that matters is the smallest share (0 means a writer starved).

Run:  .venv/bin/python benchmarks/bench_writers.py [--writers 8] [--total 4000]
      (SQLite in a temp folder; PostgreSQL at 127.0.0.1:5432 when reachable, in a temp schema)
      writes benchmarks/results/writers.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import uuid
from pathlib import Path
from typing import Any

import windowsmith as ws

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "writers.json"
PG = "postgresql://postgres@127.0.0.1:5432/test"
MODEL = "claude-sonnet-4-5"


def worker(url: str, w: int, total: int, mode: str, barrier: Any, q: Any) -> None:
    with ws.Engine(MODEL, store=url) as eng:
        s = eng.session("shared")
        wins = conflicts = 0
        barrier.wait()
        while True:
            if s.state.seq + 1 >= total:
                s.refresh()
                if s.state.seq + 1 >= total:
                    break
            try:
                s.user(f"writer {w} message {wins}")
                wins += 1
            except ws.ConflictError:
                conflicts += 1
                if mode == "refresh":
                    s.refresh()
                else:
                    s = eng.session("shared")
        q.put({"writer": w, "appends": wins, "conflicts": conflicts})


def run(url: str, writers: int, total: int, mode: str) -> dict[str, Any]:
    with ws.Engine(MODEL, store=url) as eng:
        eng.session("shared")
    ctx = mp.get_context("spawn")
    q, barrier = ctx.Queue(), ctx.Barrier(writers)
    procs = [ctx.Process(target=worker, args=(url, w, total, mode, barrier, q)) for w in range(writers)]
    for p in procs:
        p.start()
    rows = sorted((q.get() for _ in procs), key=lambda r: r["writer"])
    for p in procs:
        p.join()
    appends = [r["appends"] for r in rows]
    return {"mode": mode, "writers": writers, "total": total, "appends": appends,
            "conflicts": [r["conflicts"] for r in rows], "min": min(appends), "max": max(appends),
            "min_share": round(min(appends) / (total / writers), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--total", type=int, default=4000)
    args = ap.parse_args()
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores = {"sqlite": lambda: str(Path(tmp) / f"{uuid.uuid4().hex}.db")}
        try:
            import psycopg

            psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3").close()
            stores["postgres"] = lambda: f"{PG}?schema=ws_bench_{uuid.uuid4().hex[:10]}"
        except Exception as e:  # report it and go on with SQLite
            print(f"PostgreSQL not reachable ({type(e).__name__}); SQLite only")
        for backend, make_url in stores.items():
            for mode in ("refresh", "reopen"):
                url = make_url()
                r = run(url, args.writers, args.total, mode)
                results.setdefault(backend, []).append(r)
                print(f"{backend:8} {mode:8} appends per writer {r['appends']} (min {r['min']}, max {r['max']}, "
                      f"smallest share {r['min_share']:.0%} of a fair {args.total // args.writers})")
                if backend == "postgres":
                    import psycopg

                    schema = url.rsplit("schema=", 1)[1]
                    with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=test", autocommit=True) as c:
                        c.execute(f'DROP SCHEMA "{schema}" CASCADE')
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
