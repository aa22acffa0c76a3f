"""Per-turn build() cost on real sessions against langchain-core's trim_messages, side by side in one process, and
the cost of ``Session.add`` at 1,000 vs 50,000 messages.

Real traces from ../shared/data/traces are concatenated (tool-call ids made unique per run) into one session of
3,000 messages (~650K o200k tokens, model gpt-4.1: nothing truncated). Every message is appended and, after each
turn, ``build()`` is timed. At 220, 1,000 and 3,000 messages we report the median build time of the turns just
before (the 20 messages up to that point) and, at the same point, the time langchain-core's ``trim_messages``
takes on the same messages with a tiktoken counter (the same o200k encoding), two ways:

* ``uncached``: the counter re-tokenizes every message on every call, as the usual LangChain snippet does (this is
  most of its cost: the comparison with it measures tokenization, not trimming);
* ``cached``: the counter keeps each message's count, keyed by the message object (what a careful user would
  write, and what windowsmith does by content hash): trimming alone. trim_messages then does less work than
  build(), which also renders the provider request and its manifest.

The targets (issue 52) are ratios, so the noise of a shared machine cancels: build() at most 2x the cached
trim_messages at 1,000 messages, and at most 1x from 3,000 up. ``Session.add``: the median time of an add at
50,000 messages within 1.2x of its time at 1,000 (synthetic agent turns; CPU time, one process).

Run:  .venv/bin/python benchmarks/bench_build.py    (writes benchmarks/results/build.json and build.md)
      .venv/bin/python benchmarks/bench_build.py --quick   (220 and 1,000 messages, openai-chat, no add row;
      prints only)
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
POINTS = (220, 1000, 3000)  # session sizes (messages) where build() and trim_messages are compared
N_MESSAGES = POINTS[-1]
#: build() over trim_messages (cached counter) allowed at each point: 2x at 1,000 messages, 1x from 3,000 up
TARGETS = {1000: 2.0, 3000: 1.0}
ADD_SIZES = (1000, 50_000)
ADD_TARGET = 1.2
MODEL = "gpt-4.1"  # 1M window: the whole 650K session fits, so build() never truncates
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


def long_session(n_messages: int = N_MESSAGES) -> list[Message]:
    files = sorted((DATA / "openhands").glob("*.jsonl")) + sorted((DATA / "swe-agent").glob("*.traj")) \
        + sorted((DATA / "tau-bench").glob("*.json"))
    msgs: list[Message] = []
    run = 0
    for f in files:
        for t in load_traces(f):
            run += 1
            for m in t.messages:
                msgs.append(_rename(m, run))
            if len(msgs) >= n_messages:
                break
        if len(msgs) >= n_messages:
            break
    msgs = msgs[:n_messages]
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


def _counters():
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

    return lc_counter, lc_cached_counter


def _trim_ms(lcm: list, counter, reps: int) -> float:
    from langchain_core.messages import trim_messages

    counter(lcm)  # warm: the cached counter has seen every message once, as on a real turn
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        trim_messages(lcm, max_tokens=900_000, token_counter=counter, strategy="last", include_system=True,
                      allow_partial=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def run_format(fmt: str, msgs: list[Message], points: tuple[int, ...], uncached: bool) -> dict[str, object]:
    """build() per turn on the growing session; at each point, trim_messages on the same messages."""
    lc_counter, lc_cached_counter = _counters()
    lc_all = _lc_messages(msgs)
    # the LangChain messages of the first n of ours (a tool message of several results is several of theirs)
    lc_upto = []
    k = 0
    for m in msgs:
        k += len(m.tool_results) if m.role == "tool" else 1
        lc_upto.append(k)
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp, ws.Engine(model=MODEL, store=Path(tmp) / "b.db") as engine:
        s = engine.session("bench", goal="Resolve the issue")
        s.system("You are a careful software engineering agent.")
        times: list[float] = []
        todo = list(points)
        gc.disable()
        for n, m in enumerate(msgs, 1):
            s.add(m)
            if s.state.open_calls:
                continue
            t0 = time.perf_counter()
            pack = s.build(fmt, model=REQUEST_MODEL[fmt])
            times.append(time.perf_counter() - t0)
            times = times[-12:]  # the turns of the last ~20 messages
            if todo and n >= todo[0]:
                point = todo.pop(0)
                build_ms = statistics.median(times) * 1000
                lcm = lc_all[:lc_upto[n - 1]]
                trim_cached = _trim_ms(lcm, lc_cached_counter, 7)
                row = {"messages": n, "tokens": pack.tokens, "build_ms": round(build_ms, 3),
                       "trim_cached_ms": round(trim_cached, 3), "build_over_trim_cached": round(build_ms / trim_cached, 2)}
                if uncached:
                    row["trim_uncached_ms"] = round(_trim_ms(lcm, lc_counter, 3), 3)
                target = TARGETS.get(point)
                if target is not None:
                    row["target"] = target
                    row["met"] = build_ms / trim_cached <= target
                out[str(point)] = row
                assert not pack.manifest.actions, "the session must fit without truncation for this benchmark"
        gc.enable()
    return out


def _turn(i: int) -> list[Message]:
    from windowsmith.model import Text

    return [Message("user", (Text(f"step {i}: check item {i}"),)),
            Message("assistant", (ToolCall(f"c{i}", "read", {"path": f"src/m{i}.py"}),)),
            Message("tool", (ToolResult(f"c{i}", f"ok {i}"),)),
            Message("assistant", (Text(f"done {i}"),))]


def run_add(sizes: tuple[int, ...] = ADD_SIZES, timed_turns: int = 100) -> dict[str, object]:
    """The median CPU time of one ``Session.add`` (100 agent turns: user, tool call, result, answer) once the session
    holds each of ``sizes`` messages."""
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp, ws.Engine(model=MODEL, store=Path(tmp) / "a.db") as engine:
        s = engine.session("adds", goal="Work through the items")
        i = 0
        for size in sizes:
            while len(s.state.messages) < size:
                for m in _turn(i):
                    s.add(m)
                i += 1
            times = []
            for _ in range(timed_turns):
                for m in _turn(i):
                    t0 = time.process_time()
                    s.add(m)
                    times.append(time.process_time() - t0)
                i += 1
            out[str(size)] = round(statistics.median(times) * 1000, 4)
    first, last = (out[str(n)] for n in (sizes[0], sizes[-1]))
    out["ratio"] = round(last / first, 2)  # type: ignore[operator]
    out["target"] = ADD_TARGET
    out["met"] = out["ratio"] <= ADD_TARGET  # type: ignore[operator]
    return out


def markdown(results: dict) -> str:
    lines = [f"# build() against trim_messages (cached counter), {results['model']}, one process", "",
             "| format | messages | tokens | build() | trim_messages, cached | ratio | target |",
             "|---|---|---|---|---|---|---|"]
    for fmt, rows in results["formats"].items():
        for r in rows.values():
            target = f"≤ {r['target']:g}x: {'met' if r['met'] else 'NOT met'}" if "target" in r else ""
            lines.append(f"| {fmt} | {r['messages']:,} | {r['tokens']:,} | {r['build_ms']:.2f} ms | "
                         f"{r['trim_cached_ms']:.2f} ms | {r['build_over_trim_cached']:.2f}x | {target} |")
    a = results.get("add")
    if a:
        lines += ["", "| `Session.add` (median, CPU) | " + " | ".join(f"{int(k):,} messages" for k in a if k.isdigit())
                  + " | ratio | target |", "|---|---|---|---|---|",
                  "| one add | " + " | ".join(f"{v:.3f} ms" for k, v in a.items() if k.isdigit())
                  + f" | {a['ratio']:.2f}x | ≤ {a['target']}x: {'met' if a['met'] else 'NOT met'} |"]
    return "\n".join(lines) + "\n"


def main() -> int:
    quick = "--quick" in sys.argv
    points = POINTS[:2] if quick else POINTS
    msgs = long_session(points[-1])
    results: dict[str, object] = {"messages": len(msgs), "model": MODEL, "formats": {}}
    formats = FORMATS[:1] if quick else FORMATS
    for fmt in formats:
        results["formats"][fmt] = run_format(fmt, msgs, points, uncached=not quick)  # type: ignore[index]
    if not quick:
        results["add"] = run_add()
    print(json.dumps(results, indent=2))
    print(markdown(results))
    if not quick:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(results, indent=2) + "\n")
        OUT.with_suffix(".md").write_text(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
