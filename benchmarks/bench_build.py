"""Per-turn build() cost on a long real session, and langchain-core's trim_messages side by side.

Real traces from ../shared/data/traces are concatenated (tool-call ids made unique per run) into one
session of 1,000 messages (~200K o200k tokens). Every message is appended, then ``build()`` is timed.
We report the median build time around turn 100 and around turn 1,000 (turns 90-110 and 980-1000),
and at the same two points the time langchain-core's ``trim_messages`` takes on the same messages
with a tiktoken token counter (the same o200k encoding), two ways:

* ``uncached``: the counter re-tokenizes every message on every call, as the usual LangChain
  snippet does (this is most of its cost: the comparison with it measures tokenization, not trimming);
* ``cached``: the counter keeps each message's count, keyed by the message object (what a careful
  user would write, and what windowsmith does by content hash): trimming alone. trim_messages then
  does less work than build(), which also renders the provider request and its manifest.

Run:  .venv/bin/python benchmarks/bench_build.py        (writes benchmarks/results/build.json)
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import windowsmith as ws
from windowsmith.model import Message, ToolCall, ToolResult
from windowsmith.tokens import get_encoding
from windowsmith.traces import load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results" / "build.json"
N_MESSAGES = 1000
MODEL = "gpt-4.1"  # 1M window: the whole 200K session fits, so build() never truncates
FORMATS = ("openai-chat", "anthropic")
#: the model each format's request names (the engine's gpt-4.1 budget and counter are used for both)
REQUEST_MODEL = {"openai-chat": "gpt-4.1", "anthropic": "claude-sonnet-5-5"}


def _rename(m: Message, run: int) -> Message:
    blocks = []
    for b in m.content:
        if isinstance(b, ToolCall):
            b = ToolCall(f"r{run}-{b.id}", b.name, b.arguments)
        elif isinstance(b, ToolResult):
            b = ToolResult(f"r{run}-{b.call_id}", b.content, b.is_error, b.name)
        blocks.append(b)
    return Message(m.role, tuple(blocks))


def long_session() -> list[Message]:
    files = sorted((DATA / "openhands").glob("*.jsonl")) + sorted((DATA / "swe-agent").glob("*.traj")) \
        + sorted((DATA / "tau-bench").glob("*.json"))
    msgs: list[Message] = []
    run = 0
    for f in files:
        for t in load_traces(f):
            run += 1
            for m in t.messages:
                msgs.append(_rename(m, run))
            if len(msgs) >= N_MESSAGES:
                break
        if len(msgs) >= N_MESSAGES:
            break
    msgs = msgs[:N_MESSAGES]
    # never end on an unanswered call
    while msgs and msgs[-1].role == "assistant" and msgs[-1].tool_calls:
        msgs.pop()
    return msgs


def _lc_messages(msgs: list[Message]):
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out = []
    for m in msgs:
        if m.role == "user":
            out.append(HumanMessage(m.text))
        elif m.role == "assistant":
            out.append(AIMessage(m.text, tool_calls=[{"id": c.id, "name": c.name, "args": dict(c.arguments)} for c in m.tool_calls]))
        else:
            for r in m.tool_results:
                out.append(ToolMessage(r.text, tool_call_id=r.call_id))
    return out


def main() -> int:
    from langchain_core.messages import trim_messages

    msgs = long_session()
    enc = get_encoding("o200k_base")

    def one(m) -> int:  # the usual tiktoken count: 3 per message + content + tool calls
        n = 3 + len(enc.encode(m.content if isinstance(m.content, str) else json.dumps(m.content)))
        for c in getattr(m, "tool_calls", None) or []:
            n += len(enc.encode(c["name"])) + len(enc.encode(json.dumps(c["args"])))
        return n

    def lc_counter(messages) -> int:
        return sum(one(m) for m in messages)

    cache: dict[int, int] = {}

    def lc_cached_counter(messages) -> int:  # one count per message object, kept across calls
        n = 0
        for m in messages:
            got = cache.get(id(m))
            if got is None:
                got = cache[id(m)] = one(m)
            n += got
        return n

    total_tokens = sum(3 + len(enc.encode_ordinary(json.dumps(m.to_dict(), ensure_ascii=False))) for m in msgs)
    results: dict[str, object] = {"messages": len(msgs), "approx_tokens": total_tokens, "model": MODEL, "formats": {}}
    for fmt in FORMATS:
        with tempfile.TemporaryDirectory() as tmp, ws.Engine(model=MODEL, store=Path(tmp) / "b.db") as engine:
            s = engine.session("bench", goal="Resolve the issue")
            s.system("You are a careful software engineering agent.")
            times: list[float] = []
            turn_msgs: list[int] = []
            gc.disable()
            for m in msgs:
                s.add(m)
                if s.state.open_calls:
                    continue
                t0 = time.perf_counter()
                pack = s.build(fmt, model=REQUEST_MODEL[fmt])
                times.append(time.perf_counter() - t0)
                turn_msgs.append(len(s.state.messages))
            gc.enable()
            assert not pack.manifest.actions, "the session must fit without truncation for this benchmark"
            at = {}
            for label, lo, hi in (("turn_100", 90, 110), ("turn_1000", len(msgs) - 20, len(msgs))):
                sample = [t for t, n in zip(times, turn_msgs, strict=True) if lo <= n <= hi]
                at[label] = statistics.median(sample) * 1000
            lc: dict[str, float] = {}
            lc_cached: dict[str, float] = {}
            for label, n in (("turn_100", 100), ("turn_1000", len(msgs))):
                lcm = _lc_messages(msgs[:n])
                for counter, out in ((lc_counter, lc), (lc_cached_counter, lc_cached)):
                    counter(lcm)  # warm: the cached counter has seen every message once, as on a real turn
                    reps = []
                    for _ in range(5):
                        t0 = time.perf_counter()
                        trim_messages(lcm, max_tokens=180_000, token_counter=counter, strategy="last",
                                      include_system=True, allow_partial=False)
                        reps.append(time.perf_counter() - t0)
                    out[label] = statistics.median(reps) * 1000
            results["formats"][fmt] = {
                "final_tokens": pack.tokens,
                "build_ms": {k: round(v, 3) for k, v in at.items()},
                "growth_1000_vs_100": round(at["turn_1000"] / at["turn_100"], 3),
                "trim_messages_ms": {k: round(v, 3) for k, v in lc.items()},
                "trim_messages_cached_ms": {k: round(v, 3) for k, v in lc_cached.items()},
                "speedup_at_1000": round(lc["turn_1000"] / at["turn_1000"], 1),
                "speedup_at_1000_vs_cached": round(lc_cached["turn_1000"] / at["turn_1000"], 2),
            }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
