"""Flat at scale: build() cost, store size, summary time, resume and memory, small vs long sessions.

Each figure is measured in its own subprocess (so peak RSS is that run's alone), side by side in one run.
Times are CPU time of the process (``time.process_time``), so other work on a shared machine does not
inflate them; each is one process's own work (no I/O waits in these runs beyond SQLite's).

* **build p50**: a session of N messages (agent turns: user, assistant tool call, short tool result,
  assistant answer; ~12 tokens each) on gpt-4.1 (1M window, nothing truncated or compacted), then
  30 more turns, each built once; the median build() time at 1,000 vs 50,000 messages;
* **build p50, chat only**: the same with user and assistant text only (no tool calls);
* **resume + first build**: a fresh process opens that store, resumes the session and builds once
  (``import windowsmith`` is timed apart: it is the same for every session);
* **peak RSS** of the build run at 1,000 vs 50,000 messages;
* **store bytes**: 1,000 agent turns (user, tool call, a 1 KB result, build per turn) in a fresh SQLite
  file: the file's size (after a WAL checkpoint) against the bytes of the events' JSON;
* **summary at a 1M window**: a session of ~800K tokens of realistic tool output (paths, ids, errors,
  hex digests; each output is seven lines six times over, or with ``--unique-lines`` six copies with other
  numbers) on a 1M window; the time of ``Session.compact()`` that writes the summary.

Run:  .venv/bin/python benchmarks/bench_scale.py            (writes benchmarks/results/scale.json)
      .venv/bin/python benchmarks/bench_scale.py --small    (1,000 vs 5,000 messages; a quick check)
      .venv/bin/python benchmarks/bench_scale.py --only build   (the two build() rows only; prints, writes nothing)
      .venv/bin/python benchmarks/bench_scale.py --only store|summary [--before OTHER/src] [--rounds N]
          (that row alone; with --before, each round runs another checkout's code first, then this one's;
          summary with --unique-lines: tool output whose lines do not repeat)
      .venv/bin/python benchmarks/bench_scale.py --only resume [--before ../main] [--rounds N]
          (the resume row only, optionally side by side with another checkout's code; prints, writes nothing)
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "scale.json"
MODEL = "gpt-4.1"
FMT = "openai-chat"
TIMED_TURNS = 30


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _turn(i: int):
    from windowsmith.model import Message, Text, ToolCall, ToolResult

    return [Message("user", (Text(f"step {i}: check item {i}"),)),
            Message("assistant", (ToolCall(f"c{i}", "read", {"path": f"src/m{i}.py"}),)),
            Message("tool", (ToolResult(f"c{i}", f"ok {i}"),)),
            Message("assistant", (Text(f"done {i}"),))]


def worker_build(n: int, db: str) -> dict:
    import windowsmith as ws

    with ws.Engine(model=MODEL, store=db) as e:
        s = e.session("scale", goal="Work through the items")
        i = 0
        while len(s.state.messages) < n:
            for m in _turn(i):
                s.add(m)
            i += 1
        s.build(FMT)
        times = []
        for j in range(TIMED_TURNS):
            for m in _turn(i + j):
                s.add(m)
            t0 = time.process_time()
            pack = s.build(FMT)
            times.append(time.process_time() - t0)
        truncated = [a for a in pack.manifest.actions]
        return {"messages": len(s.state.messages), "tokens": pack.tokens, "p50_ms": statistics.median(times) * 1000,
                "actions": len(truncated), "rss_mb": _rss_mb()}


def worker_chat(n: int, db: str) -> dict:
    """A chat without tool calls (user and assistant text): the mask planner has no exchange to stop at."""
    import windowsmith as ws

    with ws.Engine(model=MODEL, store=db) as e:
        s = e.session("chat", goal="Answer the questions")
        for i in range(n // 2):
            s.user(f"question {i}: what about item {i}?")
            s.assistant(f"answer {i}: item {i} is fine")
        s.build(FMT)
        times = []
        for j in range(TIMED_TURNS):
            s.user(f"one more question {j}")
            s.assistant(f"one more answer {j}")
            t0 = time.process_time()
            pack = s.build(FMT)
            times.append(time.process_time() - t0)
        return {"messages": len(s.state.messages), "tokens": pack.tokens, "p50_ms": statistics.median(times) * 1000,
                "actions": len(pack.manifest.actions)}


def worker_resume(db: str) -> dict:
    t_import = time.process_time()
    import windowsmith as ws

    t0 = time.process_time()  # the import is the same for every session size: timed apart
    with ws.Engine(model=MODEL, store=db) as e:
        s = e.session("scale")
        s.user("one more step")
        pack = s.build(FMT)
        dt = time.process_time() - t0
        return {"messages": len(s.state.messages), "resume_build_s": dt, "import_s": t0 - t_import, "tokens": pack.tokens,
                "rss_mb": _rss_mb()}


TRACES = ROOT.parent / "shared" / "data" / "traces" / "mini-swe-agent"


def _trace_outputs() -> list[str]:
    """Real command outputs: the observations (user messages after the task) of the mini-swe-agent traces,
    each cut to its first 1 KB, in file order."""
    from windowsmith.traces import load_traces

    out = []
    for path in sorted(TRACES.glob("*.json")):
        for t in load_traces(path):
            out.extend(m.text[:1024] for m in t.messages[2:] if m.role == "user" and len(m.text) >= 256)
    if not out:
        raise SystemExit(f"no trace outputs under {TRACES}")
    return out


def worker_storage(db: str, turns: int = 1000, results: str = "synthetic") -> dict:
    """``results``: ``synthetic`` (one 1 KB block of 30 ``line NNN: value=NNNNN status=ok`` lines, very
    regular) or ``traces`` (1 KB of real command output per turn, cycling through the traces')."""
    import windowsmith as ws

    result = ("".join(f"line {k:03d}: value={k * 7919 % 10007:05d} status=ok\n" for k in range(30)))[:1024]
    outputs = _trace_outputs() if results == "traces" else None
    with ws.Engine(model=MODEL, store=db) as e:
        s = e.session("agent", goal="Inspect the files")
        for i in range(turns):
            s.user(f"turn {i}: read the next file")
            s.assistant(tool_calls=[ws.ToolCall(f"t{i}", "read_file", {"path": f"src/file_{i}.py"})])
            s.tool_result(f"t{i}", outputs[i % len(outputs)] if outputs else f"file_{i}.py\n" + result)
            s.build(FMT)
        # the events' JSON as the log holds it (the store may keep it compressed): the compact JSON of each
        # event's data, in UTF-8 bytes
        events = sum(len(json.dumps(ev.data, separators=(",", ":"), ensure_ascii=False).encode())
                     for ev in e.store.events("agent"))
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    packs = con.execute("SELECT count(*), sum(length(manifest)) FROM packs").fetchone()
    blobs = con.execute("SELECT count(*), sum(length(data)) FROM blobs").fetchone()
    pages = dict(con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
    con.close()
    size = sum(p.stat().st_size for p in Path(db).parent.glob(Path(db).name + "*"))
    events_stored = sum(v for k, v in pages.items() if k == "events" or k.startswith("sqlite_autoindex_events"))
    blob_pages = sum(v for k, v in pages.items() if k.startswith(("blob", "sqlite_autoindex_blob")))
    return {"results": results, "turns": turns, "event_bytes": events, "events_stored_bytes": events_stored, "store_bytes": size,
            "pack_rows": packs[0], "pack_bytes": packs[1], "pack_pages": pages.get("packs", 0),
            "blob_count": blobs[0], "blob_bytes": blobs[1] or 0, "blob_pages": blob_pages}


def _tool_output(i: int) -> str:
    lines = [f"$ pytest tests/test_mod_{i}.py -x", f"FAILED tests/test_mod_{i}.py::test_case_{i} - AssertionError",
             f"  File \"src/pkg/module_{i}.py\", line {i % 500 + 1}, in handle_request_{i}",
             f"commit {i * 2654435761 % 2**64:016x}{i:048x}", f"https://example.com/issues/{i}?ref=main",
             f"request_id=req-{i:08d} user_id={i * 31} error: connection reset by peer",
             "0123456789abcdef" * 40]
    return "\n".join(lines * 6)


def _tool_output_unique(i: int) -> str:
    """``_tool_output``'s 42 lines without its repetition: each of the six copies of its seven lines takes the
    numbers of another output (only the constant hex line repeats), so reading a repeated line once saves little."""
    return "\n".join(_tool_output(i * 7 + k).split("\n")[j] for k in range(6) for j in range(7))


def worker_summary(db: str, lines: str = "repeated") -> dict:
    """``lines``: ``repeated`` (``_tool_output``: its seven lines six times, as command output often repeats
    lines) or ``unique`` (``_tool_output_unique``)."""
    import windowsmith as ws
    from windowsmith.compaction import CompactionConfig

    output = _tool_output_unique if lines == "unique" else _tool_output

    with ws.Engine(model=MODEL, store=db, compaction=CompactionConfig(enabled=False)) as e:
        s = e.session("summary", goal="Fix the failing tests")
        i = 0
        tokens = 0
        while tokens < 800_000:
            for _ in range(50):
                s.user(f"run test batch {i}")
                s.assistant(tool_calls=[ws.ToolCall(f"q{i}", "run", {"cmd": f"pytest tests/test_mod_{i}.py"})])
                s.tool_result(f"q{i}", output(i))
                s.assistant(f"Batch {i} fails in src/pkg/module_{i}.py; next batch.")
                i += 1
            tokens = s.build(FMT).tokens
    with ws.Engine(model=MODEL, store=db) as e:
        s = e.session("summary")
        t0 = time.process_time()
        res = s.compact(FMT)
        dt = time.process_time() - t0
        return {"tokens": tokens, "summary_s": dt, "stages": list(res.stages), "lines": lines}


def _run(*args: str, src: str | None = None) -> dict:
    """One worker in a fresh process; ``src``: the ``src`` folder of another checkout to import instead."""
    env = dict(os.environ, PYTHONPATH=src) if src else None
    out = subprocess.run([sys.executable, __file__, "--worker", *args], check=True, capture_output=True, text=True,
                         env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _store_line(st: dict) -> str:
    ratio = st["store_bytes"] / st["event_bytes"]
    ratio_stored = st["store_bytes"] / st["events_stored_bytes"]
    return (f"store after {st['turns']:,} agent turns ({st.get('results', 'synthetic')} 1 KB results): {st['store_bytes']:,} bytes = {ratio:.2f}x the events' JSON "
            f"({st['event_bytes']:,} bytes; target ≤ 2x: {'yes' if ratio <= 2 else 'NO'}), {ratio_stored:.2f}x the events "
            f"table as stored ({st['events_stored_bytes']:,} bytes with chain hashes and indexes)\n"
            f"  of which packs {st['pack_pages']:,} bytes ({st['pack_bytes']:,} stored bytes of manifests in "
            f"{st['pack_rows']:,} rows), blobs {st['blob_pages']:,} bytes with their refs and indexes ({st['blob_count']:,} "
            f"artifacts, {st['blob_bytes']:,} bytes as stored)")


def _summary_line(su: dict) -> str:
    return (f"summary at a 1M window ({su['tokens']:,} tokens, {su.get('lines', 'repeated')} lines): "
            f"{su['summary_s']:.2f} s (target < 0.5 s)  "
            f"{'yes' if su['summary_s'] < 0.5 else 'NO'}; stages {su['stages']}")


def only_side(part: str, before: str | None, rounds: int) -> int:
    """``store`` or ``summary`` alone; with ``--before SRC`` each round runs that checkout's code, then this one.
    ``store`` runs both kinds of results (synthetic, then real trace outputs)."""
    kind = {"store": "storage", "summary": "summary"}[part]
    line = _store_line if part == "store" else _summary_line
    variants = ([("synthetic",), ("traces",)] if part == "store" else [("unique",)] if "--unique-lines" in sys.argv
                else [()])
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for extra in variants:
                for label, src in (("before", before), ("after", None)):
                    if label == "before" and not before:
                        continue
                    db = os.path.join(tmp, f"{label}{r}{''.join(extra)}.db")
                    runs[label].append(_run(kind, db, *extra, src=src))
    for label, rs in runs.items():
        for res in rs:
            print(f"[{label}] {line(res)}")
    if part == "summary" and runs["before"]:
        b = statistics.median(x["summary_s"] for x in runs["before"])
        a = statistics.median(x["summary_s"] for x in runs["after"])
        print(f"summary median of {rounds}: before {b:.2f} s -> after {a:.2f} s ({b / a:.1f}x faster)")
    print(json.dumps(runs))
    return 0


def only(part: str, small: int, large: int) -> int:
    """One part of the run (``build``: the build() rows), side by side; prints only (no results file)."""
    if part in ("store", "summary"):
        before = sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 1
        return only_side(part, before, rounds)
    if part == "resume":
        before_co = Path(sys.argv[sys.argv.index("--before") + 1]) if "--before" in sys.argv else None
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
        return only_resume(small, large, before_co, rounds)
    if part != "build":
        raise SystemExit(f"--only takes 'build', 'store', 'summary' or 'resume', got {part!r}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = {}
        for kind in ("build", "chat"):
            a, b = (_run(kind, str(n), os.path.join(tmp, f"{kind}{n}.db")) for n in (small, large))
            rows[kind] = (a, b)
    print(f"{'measure (CPU time)':<24}{small:>12,} msgs{large:>12,} msgs{'ratio':>9}{'target':>9}  ok")
    for kind, name in (("build", "build() p50"), ("chat", "build() p50, chat only")):
        a, b = rows[kind]
        r = b["p50_ms"] / a["p50_ms"]
        print(f"{name:<24}{a['p50_ms']:>14.2f} ms{b['p50_ms']:>14.2f} ms{r:>9.2f}{'≤ 2.0':>9}  {'yes' if r <= 2 else 'NO'}"
              f"   (actions {a['actions']} / {b['actions']})")
    print(json.dumps(rows))
    return 0


def _run_code(root: Path, *args: str) -> dict:
    """A worker of the checkout at ``root`` (its ``src`` first on the path, its own ``bench_scale.py``)."""
    env = dict(os.environ, PYTHONPATH=str(root / "src"))
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_scale.py"), "--worker", *args], env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def only_resume(small: int, large: int, before: Path | None, rounds: int = 3) -> int:
    """The resume row alone: each session is built (by the code measured: its builds persist what a resume
    reads), then fresh processes resume it and build once, ``rounds`` times per size, interleaved; the median
    is reported. ``before``: another checkout (say the main branch) measured side by side in the same run."""
    codes = {"after": ROOT, **({"before": before.resolve()} if before is not None else {})}
    times: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dbs = {(c, n): os.path.join(tmp, f"{c}{n}.db") for c in codes for n in (small, large)}
        for (c, n), db in dbs.items():
            _run_code(codes[c], "build", str(n), db)
        for _ in range(rounds):
            for (c, n), db in dbs.items():
                copy = db + ".run"
                shutil.copy(db, copy)  # each run resumes the same log (the worker appends a message)
                times.setdefault((c, n), []).append(_run_code(codes[c], "resume", copy)["resume_build_s"])
                os.remove(copy)
    print(f"{'resume + first build':<24}{small:>12,} msgs{large:>12,} msgs{'ratio':>9}{'target':>9}  (median of "
          f"{rounds}, CPU time)")
    for c in reversed(codes):
        a, b = (statistics.median(times[(c, n)]) for n in (small, large))
        r = b / a
        print(f"{c:<24}{a:>15.2f} s{b:>15.2f} s{r:>9.2f}{'≤ 3.0':>9}  {'yes' if r <= 3 else 'NO'}")
    print(json.dumps({f"{c}_{n}": v for (c, n), v in times.items()}))
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, *rest = sys.argv[2:]
        if kind == "build":
            r = worker_build(int(rest[0]), rest[1])
        elif kind == "chat":
            r = worker_chat(int(rest[0]), rest[1])
        elif kind == "resume":
            r = worker_resume(rest[0])
        elif kind == "storage":
            r = worker_storage(rest[0], results=rest[1] if len(rest) > 1 else "synthetic")
        else:
            r = worker_summary(*rest)
        print(json.dumps(r))
        return 0
    small, large = (1000, 5000) if "--small" in sys.argv else (1000, 50_000)
    if "--only" in sys.argv:
        return only(sys.argv[sys.argv.index("--only") + 1], small, large)
    res: dict = {"model": MODEL, "format": FMT, "small": small, "large": large}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (small, large):
            db = os.path.join(tmp, f"b{n}.db")
            res[f"build_{n}"] = _run("build", str(n), db)
            res[f"resume_{n}"] = _run("resume", db)
            res[f"chat_{n}"] = _run("chat", str(n), os.path.join(tmp, f"c{n}.db"))
        res["storage"] = _run("storage", os.path.join(tmp, "st.db"))
        res["storage_traces"] = _run("storage", os.path.join(tmp, "st_traces.db"), "traces")
        res["summary"] = _run("summary", os.path.join(tmp, "su.db"))
    b1, b2 = res[f"build_{small}"], res[f"build_{large}"]
    r1, r2 = res[f"resume_{small}"], res[f"resume_{large}"]
    st, su = res["storage"], res["summary"]
    c1, c2 = res[f"chat_{small}"], res[f"chat_{large}"]
    rows = [
        ("build() p50", f"{b1['p50_ms']:.2f} ms", f"{b2['p50_ms']:.2f} ms", b2["p50_ms"] / b1["p50_ms"], 2.0),
        ("build() p50, chat only", f"{c1['p50_ms']:.2f} ms", f"{c2['p50_ms']:.2f} ms", c2["p50_ms"] / c1["p50_ms"], 2.0),
        ("resume + first build", f"{r1['resume_build_s']:.2f} s", f"{r2['resume_build_s']:.2f} s",
         r2["resume_build_s"] / r1["resume_build_s"], 3.0),
        ("peak RSS (build run)", f"{b1['rss_mb']:.0f} MB", f"{b2['rss_mb']:.0f} MB", b2["rss_mb"] / b1["rss_mb"], 2.0),
    ]
    res["ratios"] = {name: round(r, 2) for name, _, _, r, _ in rows}
    print(f"{'measure (CPU time)':<24}{small:>12,} msgs{large:>12,} msgs{'ratio':>9}{'target':>9}  ok")
    for name, a, b, r, target in rows:
        print(f"{name:<24}{a:>17}{b:>17}{r:>9.2f}{'≤ ' + str(target):>9}  {'yes' if r <= target else 'NO'}")
    print(f"(nothing truncated: {b1['actions']} / {b2['actions']} actions; {b1['tokens']:,} / {b2['tokens']:,} tokens; "
          f"import windowsmith {r1['import_s']:.2f} s, not in the resume figure)")
    print(_store_line(st))
    print(_store_line(res["storage_traces"]))
    print(_summary_line(su))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
