"""Load test of `windowsmith serve` on loopback: N concurrent simulated agents x T turns.

Three processes: the fake upstream (``python -m windowsmith.testing``, which records how
long it spent on each response), the proxy (``windowsmith serve`` on a fresh SQLite store, one uvicorn
worker, or ``--workers N`` processes for each N given: the routes are run one after the other in one
invocation, so their figures compare side by side), and this one, running the agents with the official async SDKs (half OpenAI, half Anthropic;
every third call streamed). Each agent works a real mini-swe-agent task: the (fake) model calls a tool,
the agent answers with the trace's next real observation and sends its whole conversation again.

Per call we take the client's latency (request sent to last byte, streams consumed) and subtract the
upstream's own time for that response: what is left is what the hop costs. The same agents are run
straight against the fake upstream as the baseline, so "added by the proxy" = proxied minus direct.
Two upstream speeds: 0 s (the proxy saturated: its capacity) and a model-like delay.

Run:  .venv/bin/python benchmarks/bench_proxy.py [--agents 50] [--turns 30] [--latency 0 0.5] [--workers 1 2] [--name proxy]
      writes benchmarks/results/proxy.json and proxy.md (NAME.json, NAME.md)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

from windowsmith.traces import load_traces

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
TRACES = ROOT.parent / "shared" / "data" / "traces" / "mini-swe-agent"
OPENAI_TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run one shell command in the repository and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
ANTHROPIC_TOOLS = [{"name": "bash", "description": "Run one shell command in the repository and return its output.",
                    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def tasks() -> list[tuple[str, str, list[str]]]:
    out = []
    for f in sorted(TRACES.glob("*.traj.json")):
        t = load_traces(f)[0]
        users = [m.text for m in t.messages if m.role == "user"]
        if len(users) > 5:
            out.append((t.system or "", users[0], users[1:]))
    return out


async def openai_agent(i: int, base: str, turns: int, task: tuple[str, str, list[str]], rec: list[dict[str, Any]]) -> None:
    system, first, obs = task
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": first}]
    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="sk-load-test", max_retries=0, timeout=600) as c:
        for t in range(turns):
            stream = t % 3 == 2
            kw: dict[str, Any] = {"model": "gpt-4o", "messages": msgs, "tools": OPENAI_TOOLS, "max_tokens": 1024,
                                  "extra_headers": {"X-Windowsmith-Session": f"load-openai-{i}"}}
            t0 = time.perf_counter()
            if stream:
                chunks = [ch async for ch in await c.chat.completions.create(stream=True, **kw)]
                rid = chunks[0].id
                text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
                calls: dict[int, dict[str, str]] = {}
                for ch in chunks:
                    for tc in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] = tc.id or slot["id"]
                        if tc.function:
                            slot["name"] += tc.function.name or ""
                            slot["arguments"] += tc.function.arguments or ""
                tool_calls = [{"id": v["id"], "type": "function", "function": {"name": v["name"], "arguments": v["arguments"]}}
                              for _, v in sorted(calls.items())]
            else:
                r = await c.chat.completions.create(**kw)
                rid = r.id
                text = r.choices[0].message.content or ""
                tool_calls = [tc.model_dump() for tc in r.choices[0].message.tool_calls or []]
            rec.append({"id": rid, "seconds": time.perf_counter() - t0, "stream": stream, "api": "openai"})
            msg: dict[str, Any] = {"role": "assistant", "content": text}
            if tool_calls:
                msg["tool_calls"] = tool_calls
            msgs.append(msg)
            for tc in tool_calls:
                msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": obs[t % len(obs)]})
            if not tool_calls:
                msgs.append({"role": "user", "content": obs[t % len(obs)]})


async def anthropic_agent(i: int, base: str, turns: int, task: tuple[str, str, list[str]], rec: list[dict[str, Any]]) -> None:
    system, first, obs = task
    msgs: list[dict[str, Any]] = [{"role": "user", "content": first}]
    async with anthropic.AsyncAnthropic(base_url=base, api_key="sk-ant-load-test", max_retries=0, timeout=600) as c:
        for t in range(turns):
            stream = t % 3 == 2
            kw: dict[str, Any] = {"model": "claude-sonnet-5-5", "system": system, "messages": msgs, "tools": ANTHROPIC_TOOLS,
                                  "max_tokens": 1024, "extra_headers": {"X-Windowsmith-Session": f"load-anthropic-{i}"}}
            t0 = time.perf_counter()
            if stream:
                async with c.messages.stream(**kw) as s:
                    r = await s.get_final_message()
            else:
                r = await c.messages.create(**kw)
            rec.append({"id": r.id, "seconds": time.perf_counter() - t0, "stream": stream, "api": "anthropic"})
            content = [{"type": "text", "text": b.text} if b.type == "text" else
                       {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input} for b in r.content]
            msgs.append({"role": "assistant", "content": content})
            results = [{"type": "tool_result", "tool_use_id": b["id"], "content": obs[t % len(obs)]}
                       for b in content if b["type"] == "tool_use"]
            msgs.append({"role": "user", "content": results or obs[t % len(obs)]})


async def run_agents(base: str, agents: int, turns: int) -> tuple[list[dict[str, Any]], float]:
    ts = tasks()
    rec: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    await asyncio.gather(*[
        (openai_agent if i % 2 == 0 else anthropic_agent)(i, base, turns, ts[i % len(ts)], rec) for i in range(agents)
    ])
    return rec, time.perf_counter() - t0


async def warm_up(base: str) -> None:
    ts = tasks()
    await asyncio.gather(openai_agent(10_000, base, 2, ts[0], []), anthropic_agent(10_001, base, 2, ts[0], []))


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def summarize(rec: list[dict[str, Any]], timings: dict[str, float], wall: float) -> dict[str, Any]:
    hop = [r["seconds"] - timings[r["id"]] for r in rec if r["id"] in timings]
    assert len(hop) == len(rec), "every response must match the upstream's timing by its id"
    lat = [r["seconds"] for r in rec]
    return {
        "calls": len(rec), "matched": len(hop), "wall_seconds": round(wall, 2),
        "throughput_rps": round(len(rec) / wall, 1),
        "latency_ms": {"p50": round(pct(lat, 50) * 1000, 1), "p95": round(pct(lat, 95) * 1000, 1)},
        "hop_ms": {"p50": round(pct(hop, 50) * 1000, 1), "p95": round(pct(hop, 95) * 1000, 1),
                   "mean": round(statistics.fmean(hop) * 1000, 1)},
    }


def route(workers: int) -> str:
    """The result key of the proxy with ``workers`` processes (``proxy`` for one, as before ``--workers``)."""
    return "proxy" if workers == 1 else f"proxy-{workers}w"


def fresh_store(url: str) -> str:
    """``url`` (a PostgreSQL server) with a schema of its own for one route (dropped by :func:`drop_store`)."""
    return f"{url}{'&' if '?' in url else '?'}schema=ws_bench_proxy_{os.getpid()}_{time.monotonic_ns()}"


def drop_store(store: str) -> None:
    if not store.startswith(("postgresql://", "postgres://")):
        return
    import psycopg
    from psycopg import sql

    base, _, query = store.partition("?")
    params = dict(kv.split("=", 1) for kv in query.split("&"))
    schema = params.pop("schema")
    rest = "&".join(f"{k}={v}" for k, v in params.items())
    with psycopg.connect(base + ("?" + rest if rest else ""), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def scenario(agents: int, turns: int, latency: float, window: int, workers: list[int] | None = None,
             store_url: str | None = None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out: dict[str, Any] = {"upstream_latency_s": latency}
    for n in (0, *(workers or [1])):  # 0: the agents straight against the upstream
        mode = route(n) if n else "direct"
        up_port = free_port()
        fake = subprocess.Popen([sys.executable, "-m", "windowsmith.testing", "--port", str(up_port),
                                 "--latency", str(latency)], env=env)
        procs = [fake]
        try:
            wait_up(f"http://127.0.0.1:{up_port}/_timings")
            base = f"http://127.0.0.1:{up_port}"
            if mode != "direct":
                px_port = free_port()
                store = fresh_store(store_url) if store_url else str(Path(tempfile.mkdtemp()) / "load.db")
                proxy = subprocess.Popen([sys.executable, "-m", "windowsmith.cli", "serve", "--port", str(px_port),
                                          "--store", str(store), "--openai-base-url", base + "/v1",
                                          "--anthropic-base-url", base, "--model-window", str(window),
                                          "--workers", str(n)], env=env)
                procs.append(proxy)
                wait_up(f"http://127.0.0.1:{px_port}/api/sessions")
                target = f"http://127.0.0.1:{px_port}"
            else:
                target = base
            # warm up (imports, tokenizer files, first connections): one short agent per API, not measured
            asyncio.run(warm_up(target))
            rec, wall = asyncio.run(run_agents(target, agents, turns))
            timings = httpx.get(base + "/_timings", timeout=30).json()
            out[mode] = summarize(rec, timings, wall)
            if mode != "direct":
                sessions = httpx.get(target + "/api/sessions", timeout=30).json()
                sessions = [s for s in sessions if not s["id"].endswith(("-10000", "-10001"))]
                out[mode]["sessions"] = len(sessions)
                detail = [httpx.get(f"{target}/api/sessions/{s['id']}", timeout=60).json() for s in sessions]
                out[mode]["recorded_calls"] = sum(len(d["calls"]) for d in detail)
                out[mode]["compaction_events"] = sum(len(d["compactions"]) for d in detail)
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait(timeout=30)
            if mode != "direct":
                drop_store(str(store))
        print(mode, json.dumps(out[mode]), flush=True)
    for w in workers or [1]:
        key = "added_by_proxy_ms" if w == 1 else f"added_by_{route(w)}_ms"
        out[key] = {k: round(out[route(w)]["hop_ms"][k] - out["direct"]["hop_ms"][k], 1) for k in ("p50", "p95")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=50)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.5])
    ap.add_argument("--window", type=int, default=32000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1],
                    help="proxy worker processes; each number is a route of its own, run in the same invocation")
    ap.add_argument("--store-url", default=None,
                    help="a postgresql:// server for the proxy's store (a fresh schema per route, dropped after); "
                         "default: a fresh SQLite file")
    ap.add_argument("--name", default="proxy", help="results file stem (benchmarks/results/NAME.json, .md)")
    args = ap.parse_args()
    result = {
        "agents": args.agents, "turns": args.turns, "window": args.window,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "workers": args.workers,
        "store": "postgresql" if args.store_url else "sqlite",
        "scenarios": [scenario(args.agents, args.turns, lat, args.window, args.workers, args.store_url)
                      for lat in args.latency],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# windowsmith serve under load: {args.agents} agents x {args.turns} turns, window {args.window:,}, "
             f"{result['store']} store", "",
             "| upstream delay | route | calls | throughput (calls/s) | latency p50 / p95 (ms) | hop p50 / p95 (ms) |",
             "|---|---|---|---|---|---|"]
    for sc in result["scenarios"]:
        for mode in ("direct", *(route(w) for w in args.workers)):
            r = sc[mode]
            lines.append(f"| {sc['upstream_latency_s']} s | {mode} | {r['calls']} | {r['throughput_rps']} | "
                         f"{r['latency_ms']['p50']} / {r['latency_ms']['p95']} | {r['hop_ms']['p50']} / {r['hop_ms']['p95']} |")
        for w in args.workers:
            added = sc["added_by_proxy_ms" if w == 1 else f"added_by_{route(w)}_ms"]
            lines.append(f"| {sc['upstream_latency_s']} s | **added by {route(w)}** | | | | "
                         f"**{added['p50']} / {added['p95']}** |")
    lines += ["", "hop = client latency minus the upstream's own time for that response.",
              f"Machine: {os.cpu_count()} CPUs, shared; the fake upstream, the proxy and the agents on the same host."]
    (OUT / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
