"""Stress variants of the shared real traces: the families we do not have, approximated one change at a time.

Run:  .venv/bin/python benchmarks/bench_stress.py [--split dev] [--variants think,shots] [--windows 8000,16000] [--model gpt-4.1]
                                                 [--out benchmarks/results/stress]
      (writes <out>.json and <out>.md; 11 to 21 minutes on 2 workers for everything, by the machine's load)

Each variant takes every run of a family and changes it one way, keeping the rest of the run as recorded:

* ``think``     every assistant message opens with a signed Anthropic thinking block of 3,000 characters
                (an agent with extended thinking; under claude-sonnet-4-5 the provider strips earlier turns');
* ``shots``     every tool result (or, where observations are user messages, every user message) gets a
                screenshot (an image by URL, 1,600 tokens: a browser or computer-use agent);
* ``bigfirst``  the first message gets 80,000 more characters (a pasted document, log or specification);
* ``bigargs``   every third assistant message's tool calls get a 12,000-character ``file_text`` argument (an
                agent writing whole files through its editor);
* ``inflate``   every observation gets 6,000 more characters (verbose tools: full test logs, big listings).

Not in the default set (``--variants merged``, ``chained``, ``parallel`` or ``bigsys``): ``merged`` sends the user messages before the agent's
first reply as one message of one text block (SWE-agent 1.x sends its demonstration and issue so; SWE-agent 0.x as
two), and replays only the runs it changes. ``chained`` makes one session of two runs of a family, the second run's
messages after the first's (its opening request a user message in the middle: a user asking again, as in a coding
assistant's session with several requests), runs paired in their order (the last of an odd count left out).
``parallel`` makes an agent that batches its tool calls (Claude Code, Codex and most function-calling agents call several
tools in one reply): every run of up to ``PARALLEL_CALLS`` consecutive exchanges (a reply with tool calls, answered by
one tool message) becomes one reply holding all their calls and text, answered by one tool message holding all their
results, in order; replays only the runs it changes (text-protocol agents have no tool messages).
``bigsys`` adds 12,000 characters (about 3,000 tokens) to the system prompt (an agent CLI's long instructions: the
floor every request pays is high and the history's room narrow, a few turns between two cuts at 8K), taken at an
offset that depends on the length of the run's id.

The added text is real agent output: slices of the shared OpenHands trace file, taken at offsets that depend on
the message's position, so every run is the same on every machine. Every strategy replays every changed run
(``bench.run.run_strategy``, the yardstick's code, prices and budget); a run that fails under any strategy at a
window is left out of that window's comparison, as in the yardstick, and counted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import family_of, prepare, split_of
from windowsmith.bench.run import STRATEGIES, run_strategy
from windowsmith.bench.strategies import make_strategy
from windowsmith.errors import UnknownModelError
from windowsmith.model import Image, Message, Text, Thinking, ToolCall, ToolResult
from windowsmith.registry import load_registry
from windowsmith.tokens import TokenCounter
from windowsmith.traces import iter_trace_files, load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "results"
VARIANTS = ("think", "shots", "bigfirst", "bigargs", "inflate")
EXTRA_VARIANTS = ("merged", "chained", "bigsys", "parallel")  # run only when asked for
MODEL = "claude-sonnet-4-5"
BIGSYS_CHARS = 12_000  # what ``bigsys`` adds to the system prompt (about 3,000 tokens)
PARALLEL_CALLS = 3  # exchanges ``parallel`` merges into one reply


def filler() -> str:
    """400,000 characters of real agent output (the shared OpenHands trace file)."""
    path = sorted((DATA / "openhands").iterdir())[0]
    return path.read_text(encoding="utf-8", errors="replace")[:400_000]


def transform(messages: tuple[Message, ...], variant: str, fill: str) -> tuple[Message, ...]:
    text_observations = not any(m.role == "tool" for m in messages)  # mini-swe-agent, SWE-agent 0.x
    if variant == "merged":
        j = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
        opening = [m for m in messages[:j] if m.role == "user"]
        if len(opening) < 2 and sum(isinstance(b, Text) for m in opening for b in m.content) < 2:
            return messages
        one = Message("user", (Text("\n\n".join(m.text for m in opening)),))
        return (*(m for m in messages[:j] if m.role != "user"), one, *messages[j:])
    if variant == "parallel":
        return batched(messages)
    out = []
    for i, m in enumerate(messages):
        if variant == "think" and m.role == "assistant":
            t = fill[(i * 31) % 300_000:][:3_000]
            m = Message("assistant", (Thinking("anthropic", {"type": "thinking", "thinking": t,
                                                             "signature": f"sig{i}" * 20}, t), *m.content))
        elif variant == "shots" and m.role == "tool":
            m = Message("tool", tuple(ToolResult(r.call_id, (*r.content, Image(url=f"https://shots.invalid/{i}.png")),
                                                 r.is_error, r.name) for r in m.tool_results))
        elif variant == "shots" and m.role == "user" and i > 0 and text_observations:
            m = Message("user", (*m.content, Image(url=f"https://shots.invalid/{i}.png")))
        elif variant == "bigfirst" and i == 0:
            m = Message(m.role, (*m.content, Text(fill[:80_000])))
        elif variant == "bigargs" and m.role == "assistant" and m.tool_calls and i % 3 == 0:
            body = fill[(i * 104_729) % 300_000:][:12_000]
            m = Message("assistant", tuple(ToolCall(b.id, b.name, {**b.arguments, "file_text": body})
                                           if isinstance(b, ToolCall) else b for b in m.content))
        elif variant == "inflate" and i > 0 and (m.role == "tool" or (m.role == "user" and text_observations)):
            more = Text(fill[(i * 7_919) % 300_000:][:6_000])
            m = Message("tool", tuple(ToolResult(r.call_id, (*r.content, more), r.is_error, r.name)
                                      for r in m.tool_results)) if m.role == "tool" else Message("user", (*m.content, more))
        out.append(m)
    return tuple(out)


def batched(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """The messages with each run of up to :data:`PARALLEL_CALLS` consecutive exchanges (an assistant message with
    tool calls, then one tool message answering them) merged into one exchange: one reply, one tool message."""
    out: list[Message] = []
    i, n = 0, len(messages)
    while i < n:
        group: list[tuple[Message, Message]] = []
        j = i
        while (j + 1 < n and len(group) < PARALLEL_CALLS and messages[j].role == "assistant"
               and messages[j].tool_calls and messages[j + 1].role == "tool"):
            group.append((messages[j], messages[j + 1]))
            j += 2
        if len(group) > 1:
            out.append(Message("assistant", tuple(b for a, _ in group for b in a.content)))
            out.append(Message("tool", tuple(b for _, t in group for b in t.content)))
            i = j
        else:
            out.append(messages[i])
            i += 1
    return tuple(out)


def renamed(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """The messages with every tool call id prefixed (``b-``): a chained run's ids may repeat the first run's."""
    def block(b: Any) -> Any:
        if isinstance(b, ToolCall):
            return replace(b, id=f"b-{b.id}")
        if isinstance(b, ToolResult):
            return replace(b, call_id=f"b-{b.call_id}")
        return b
    return tuple(Message(m.role, tuple(block(b) for b in m.content)) for m in messages)


def task(args: tuple[str, str, int, str, list[tuple[str, int]], str]) -> list[dict[str, Any]]:
    """Every strategy on every run of one (variant, family, window), priced for ``model``."""
    variant, family, window, tmp, runs, model = args
    spec = load_registry().get(model)
    counter = TokenCounter(spec.tokenizer, spec.default_format, spec.token_factor, thinking=spec.thinking_kept)
    cfg = BenchConfig.make(spec, window, counter=counter)
    fill = filler()
    files: dict[str, list[Any]] = {}
    out = []
    pairs = list(zip(runs[0::2], runs[1::2], strict=False)) if variant == "chained" else [(r, None) for r in runs]
    for (path, k), second in pairs:
        trace = files.setdefault(path, load_traces(path))[k]
        if second is not None:  # chained: the next run's messages after this one's, one session
            after = files.setdefault(second[0], load_traces(second[0]))[second[1]]
            changed = (*trace.messages, *renamed(after.messages))
            trace = replace(trace, id=f"{trace.id}+{after.id}")
        elif variant == "bigsys":  # the system prompt, not a message: an agent CLI's long instructions
            changed = trace.messages
            trace = replace(trace, system=f"{trace.system or ''}\n\n{fill[(len(trace.id) * 7_919) % 300_000:][:BIGSYS_CHARS]}")
        else:
            changed = transform(trace.messages, variant, fill)
            if variant in EXTRA_VARIANTS and changed == trace.messages:
                continue  # a run the variant leaves as recorded: the yardstick has it
        run = prepare(replace(trace, messages=changed))
        for name in STRATEGIES:
            strategy = make_strategy(name, cfg, tmp_dir=tmp)
            try:
                rm = run_strategy(run, strategy)
            finally:
                strategy.close()
            out.append({"variant": variant, "family": family, "window": window, "strategy": name, "run": run.id,
                        "cost": rm.cost_usd, "strict": rm.strict, "recall_calls": rm.recall_calls,
                        "blind": rm.blind_calls, "error": rm.error})
    return out


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cells: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["variant"], r["family"], r["window"]), []).append(r)
    table = []
    for (variant, family, window), rs in sorted(cells.items()):
        failed = {r["run"] for r in rs if r["error"]}
        ok = [r for r in rs if r["run"] not in failed]
        by: dict[str, dict[str, float]] = {}
        for r in ok:
            b = by.setdefault(r["strategy"], {"cost": 0.0, "strict": 0.0, "calls": 0, "blind": 0})
            b["cost"] += r["cost"]
            b["strict"] += r["strict"]
            b["calls"] += r["recall_calls"]
            b["blind"] += r["blind"]
        if "windowsmith" not in by:
            continue
        ws = by.pop("windowsmith")
        cheap = min(by, key=lambda s: by[s]["cost"])
        best = max(by, key=lambda s: by[s]["strict"] / max(1, by[s]["calls"]))
        table.append({
            "variant": variant, "family": family, "window": window, "runs": len({r["run"] for r in ok}),
            "failed_runs": sorted(failed), "ws_failed": sorted({r["run"] for r in rs if r["error"] and r["strategy"] == "windowsmith"}),
            "ws_cost": round(ws["cost"], 4), "cheapest": cheap, "cheapest_cost": round(by[cheap]["cost"], 4),
            "delta": round((ws["cost"] / by[cheap]["cost"] - 1) * 100, 1) if by[cheap]["cost"] else 0.0,
            "ws_strict": round(ws["strict"] / max(1, ws["calls"]), 4), "best": best,
            "best_strict": round(by[best]["strict"] / max(1, by[best]["calls"]), 4), "ws_blind": int(ws["blind"]),
        })
    return table


def markdown(table: list[dict[str, Any]], command: str, split: str, model: str = MODEL) -> str:
    lines = [f"Command: `{command}`", "",
             f"Model {model}; split {split}; every strategy of the yardstick on every changed run "
             "(benchmarks/bench_stress.py says how each variant changes a run).", ""]
    for variant in dict.fromkeys(t["variant"] for t in table):
        lines += [f"### {variant}", "",
                  "| family | window | runs | windowsmith $ | cheapest peer $ | Δ | strict | best peer strict | blind | failed runs |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for t in (t for t in table if t["variant"] == variant):
            failed = f"{len(t['failed_runs'])} ({len(t['ws_failed'])} windowsmith)" if t["failed_runs"] else "0"
            lines.append(f"| {t['family']} | {t['window'] // 1000}K | {t['runs']} | {t['ws_cost']:.3f} | "
                         f"{t['cheapest_cost']:.3f} `{t['cheapest']}` | {t['delta']:+.1f}% | {t['ws_strict'] * 100:.1f}% | "
                         f"{t['best_strict'] * 100:.1f}% `{t['best']}` | {t['ws_blind']} | {failed} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="dev", choices=("dev", "validation", "all"))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--windows", default="8000,16000,32000")
    ap.add_argument("--model", default=MODEL, help="whose tokenizer, prices and cache rules (a registry name)")
    ap.add_argument("--out", default=str(OUT / "stress"), help="where the results go: <out>.json and <out>.md")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS + EXTRA_VARIANTS:
            sys.exit(f"unknown variant {v!r}; use some of {', '.join(VARIANTS + EXTRA_VARIANTS)}")
    windows = [int(w) for w in args.windows.split(",") if w]
    try:
        load_registry().get(args.model)
    except UnknownModelError as e:  # (it names the known models)
        sys.exit(f"--model: {e}")
    runs: dict[str, list[tuple[str, int]]] = {}
    for path in iter_trace_files(DATA):
        for k, trace in enumerate(load_traces(path)):
            if args.split == "all" or split_of(trace.id) == args.split:
                runs.setdefault(family_of(trace), []).append((str(path), k))
    with tempfile.TemporaryDirectory(prefix="ws-stress-") as tmp:
        tasks = [(v, fam, w, tmp, rs, args.model) for v in variants for fam, rs in sorted(runs.items()) for w in windows]
        rows: list[dict[str, Any]] = []
        with mp.get_context("spawn").Pool(2) as pool:
            for done, res in enumerate(pool.imap_unordered(task, tasks), 1):
                rows.extend(res)
                print(f"\r{done}/{len(tasks)}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    table = summarize(rows)
    command = "python benchmarks/bench_stress.py " + " ".join(sys.argv[1:])
    out = Path(args.out)
    if out.suffix in (".json", ".md"):  # (a name like stress-gpt-4.1 keeps its dot)
        out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)
    md = markdown(table, command.strip(), args.split, args.model)
    out.parent.joinpath(f"{out.name}.json").write_text(json.dumps({"split": args.split, "model": args.model, "command": command,
                                                                   "table": table}, indent=1) + "\n", encoding="utf-8")
    out.parent.joinpath(f"{out.name}.md").write_text(md, encoding="utf-8")
    print(md)


if __name__ == "__main__":
    main()
