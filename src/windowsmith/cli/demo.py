"""``windowsmith demo``: a real agent run replayed on a small window, to show what the engine does and what it
saves.

The bundled trace (``data/demo/openhands_ponyc_4593.jsonl``, see its PROVENANCE.md) is an OpenHands run whose
tool results are whole source files; on the default 16,000-token window its large results are offloaded (a
short view stays, the whole result is kept behind an ``artifact://`` reference) and its history is compacted.
The per-turn table comes from that replay, into a session of the store that stays there. The closing summary
is measured by the benchmark itself (:mod:`windowsmith.bench`: its ``windowsmith``, ``full`` and ``sliding``
strategies and its identifier-recall metric), so its figures are those ``windowsmith bench`` reports; the
benchmark's scratch stores live in a temporary folder it removes.
"""

from __future__ import annotations

import html
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ..errors import WindowsmithError
from .helpers import (
    DEFAULT_MODEL,
    STORE_HELP,
    action_name,
    clean_errors,
    console,
    open_engine,
    progress,
    table,
    window_hint,
)

#: the window the demo replays on: small enough that offloading and compaction happen on the bundled trace
DEMO_WINDOW = 16_000
#: the bundled trace: one real OpenHands run with large tool results (data/demo/PROVENANCE.md)
DEMO_TRACE = Path(__file__).resolve().parent.parent / "data" / "demo" / "openhands_ponyc_4593.jsonl"

#: What each column of the demo's table means (printed under it).
DEMO_LEGEND = (
    "turn: model call; sent: tokens sent; fill: share of the window; offloaded: tool results stored whole as "
    "an artifact before this call, their tokens → the view sent; compacted: compaction this call (cut: the "
    "model-free cut of the oldest history, which keeps a work log and an index of identifiers); read: tokens "
    "billed as cache reads; $: the call's cost at the model's prices (USD)"
)


@dataclass
class Peer:
    """One strategy of the benchmark on the demo's run: what it sent and cost, and what the next step lost."""

    strategy: str
    label: str
    window: int
    calls: int
    tokens: int
    cost_usd: float
    cache_read_tokens: int
    targets: int  # identifiers the agent's next actions used that it had first seen in an observation
    strict_hits: int  # of them, those in the request sent
    recall: float  # the bench's strict recall: mean share per call
    recoverable: float  # the bench's recoverable recall (through artifact:// references)

    @property
    def lost(self) -> int:
        return self.targets - self.strict_hits

    @property
    def cache_share(self) -> float:
        return self.cache_read_tokens / self.tokens if self.tokens else 0.0


def compare(trace: Any, model: str, window: int) -> list[Peer]:
    """The demo's run under the benchmark's ``windowsmith`` (at ``window``), ``full`` (the full history, on the
    model's own window) and ``sliding`` (strands-agents' sliding window, at ``window``) strategies, measured by
    :func:`windowsmith.bench.run.run_strategy` exactly as ``windowsmith bench`` measures them."""
    from ..bench.base import BenchConfig
    from ..bench.metrics import prepare
    from ..bench.run import run_strategy
    from ..bench.strategies import make_strategy
    from ..registry import load_registry

    spec = load_registry().get(model)
    run = prepare(trace)
    peers: list[Peer] = []
    with tempfile.TemporaryDirectory(prefix="windowsmith-demo-bench-") as scratch:
        for name, w, label in (("windowsmith", window, "windowsmith"), ("full", spec.context_window, "full history"),
                               ("sliding", window, "sliding window")):
            strategy = make_strategy(name, BenchConfig.make(spec, w), tmp_dir=scratch)
            try:
                rm = run_strategy(run, strategy)
            finally:
                strategy.close()
            if rm.error:
                raise WindowsmithError(f"the comparison's {name} strategy failed on {trace.id}: {rm.error}")
            n = rm.recall_calls or 1
            peers.append(Peer(name, label, w, rm.calls, rm.input_tokens, rm.cost_usd, rm.cache_read_tokens,
                              rm.targets, rm.strict_hits, rm.strict / n, rm.recoverable / n))
    return peers


def offloads_per_turn(events: list[Any], packs: list[dict[str, Any]]) -> list[list[tuple[int, int]]]:
    """For each pack (a model call), the tool results offloaded since the previous one: ``(tokens, view tokens)``
    each, from the ingest record of the log's message events (in order, up to the pack's log position)."""
    out: list[list[tuple[int, int]]] = [[] for _ in packs]
    k = 0
    for ev in events:
        while k < len(packs) and ev.seq > packs[k]["seq"]:
            k += 1
        if k == len(packs):
            break
        for entry in (ev.data.get("ingest") or ()) if ev.kind == "message" else ():
            if entry.get("artifact"):
                out[k].append((int(entry.get("original_tokens") or 0), int(entry.get("tokens") or 0)))
    return out


def _offload_cell(items: list[tuple[int, int]]) -> str:
    if not items:
        return ""
    before, after = sum(b for b, _ in items), sum(a for _, a in items)
    return f"{len(items)}: {before:,}→{after:,}"


def _compacted_cell(actions: list[str]) -> str:
    words = []
    for a in actions:
        kind, _, layer = a.partition(" ")
        words.append(f"{action_name(kind)} {layer}".strip())
    return ", ".join(words)


def demo_table(result: Any, offloads: list[list[tuple[int, int]]], con: Console) -> Any:
    turns = result.turns
    cols: list[tuple[str, str, list[str]]] = [
        ("turn", "right", [str(t.turn) for t in turns]),
        ("sent", "right", [f"{t.tokens:,}" for t in turns]),
        ("fill", "right", [f"{t.tokens / result.window:.0%}" for t in turns]),
        ("offloaded", "left", [_offload_cell(o) for o in offloads]),
        ("compacted", "left", [_compacted_cell(t.actions) for t in turns]),
        ("read", "right", [f"{t.cache_read_tokens:,}" for t in turns]),
        ("$", "right", [f"{t.cost_usd:.4f}" for t in turns]),
    ]
    title = f"{result.trace_id} → {result.model} ({result.format}), window {result.window:,}"
    return table(title, cols, con, drop=["$"], fold="compacted")


def _change(a: float, b: float, noun: str, fewer: str = "fewer", more: str = "more") -> str:
    """``a`` against ``b`` in words: ``48% fewer tokens``."""
    if not b:
        return f"{noun} n/a"
    share = (a - b) / b
    return f"{abs(share):.0%} {fewer if share < 0 else more} {noun}" if round(share, 2) else f"the same {noun}"


def summary_rows(peers: list[Peer]) -> list[tuple[str, ...]]:
    """The side-by-side summary: one row a measure, one column a strategy (windowsmith first)."""
    return [
        ("", *(p.label for p in peers)),
        ("window", *(f"{p.window:,}" for p in peers)),
        ("tokens sent", *(f"{p.tokens:,}" for p in peers)),
        ("cost (USD)", *(f"${p.cost_usd:.4f}" for p in peers)),
        ("read from cache", *(f"{p.cache_read_tokens:,} ({p.cache_share:.0%})" for p in peers)),
        ("next step lost", *(f"{p.lost} of {p.targets}" for p in peers)),
        ("recall (strict)", *(f"{p.recall:.1%}" for p in peers)),
    ]


def verdict(peers: list[Peer]) -> list[str]:
    """The summary in two lines: against the full history (tokens, cost, cache reads) and against the sliding
    window (cost, and the identifiers the next step used that each request lacked)."""
    ws, full, sliding = peers
    cost = _change(ws.cost_usd, full.cost_usd, "cost", "lower", "higher")
    saved = f" (${full.cost_usd - ws.cost_usd:.4f} saved)" if full.cost_usd > ws.cost_usd else ""
    out = [f"vs the full history: {_change(ws.tokens, full.tokens, 'tokens')}, {cost}{saved}, "
           f"{_change(ws.cache_read_tokens, full.cache_read_tokens, 'cache reads')}"]
    cost = _change(ws.cost_usd, sliding.cost_usd, "cost", "lower", "higher")
    out.append(f"vs a sliding window: {cost}; the next step lost {sliding.lost} identifier(s) with the sliding "
               f"window, {ws.lost} with windowsmith")
    if ws.lost and ws.recoverable > ws.recall:
        out.append(f"windowsmith's requests reach {ws.recoverable:.1%} of those identifiers through their "
                   "artifact:// references (recoverable recall)")
    return out


def print_summary(peers: list[Peer], con: Console) -> None:
    header, *body = summary_rows(peers)
    cols = [(h, "left" if i == 0 else "right", [r[i] for r in body]) for i, h in enumerate(header)]
    con.print(table("against the full history and a sliding window (as windowsmith bench measures them)", cols, con))
    for line in verdict(peers):
        con.print(line, markup=False)


def comparison_html(peers: list[Peer]) -> str:
    """The summary as an HTML section for the report."""
    header, *body = summary_rows(peers)
    h = "".join(f"<th>{html.escape(x)}</th>" for x in header)
    b = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body)
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in verdict(peers))
    return ("<h2>Against the full history and a sliding window</h2><p class=\"note\">Measured by windowsmith.bench "
            "(its windowsmith, full and sliding strategies and its identifier-recall metric), as "
            f"<code>windowsmith bench</code> reports them.</p><table><tr>{h}</tr>{b}</table><ul>{lines}</ul>")


def _replay(trace: Any, model: str, store: str | None, window: int, replace: bool, quiet: bool
            ) -> tuple[Any, list[list[tuple[int, int]]], str]:
    """Replay ``trace`` into a new session ('demo', else 'demo-N'): the result, the offloads per call, where."""
    from ..replay import replay_trace

    with open_engine(model, store, window) as engine, window_hint(window):
        n_calls = sum(1 for m in trace.messages if m.role == "assistant")
        with progress(f"replaying {trace.id}", n_calls, unit="calls", every=10, quiet=quiet) as advance:
            result = replay_trace(trace, engine, session_id="demo", replace=replace, billed_output=False,
                                  on_turn=lambda _r: advance(1))
        offloads = offloads_per_turn(list(engine.store.events(result.session_id)),
                                     engine.store.list_packs(result.session_id))
        where = str(getattr(engine.store, "path", None) or "the PostgreSQL store")
    return result, offloads, where


@click.command()
@click.option("--trace", "trace_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Replay this trace file instead of the bundled OpenHands run (first run of a multi-run file).")
@click.option("--window", type=click.IntRange(min=1), default=DEMO_WINDOW, show_default=True,
              help="Context window (tokens) to replay on.")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Model whose tokenizer and prices to use.")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the per-turn report and the comparison as JSON.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a self-contained HTML report to this file.")
@click.option("--open", "open_report", is_flag=True,
              help="Open the HTML report in a browser (written to a temporary folder unless --html is given).")
@click.option("--replace", is_flag=True, help="Replace an existing 'demo' session instead of writing to demo-2, demo-3, ...")
@clean_errors
def demo(trace_path: Path | None, window: int, model: str, store: str | None, as_json: bool, html_out: Path | None,
         open_report: bool, replace: bool) -> None:
    """Replay a real agent run with large tool results on a small window and show what windowsmith saves.

    Prints each model call (window fill, results offloaded, history compacted, cache reads), then one summary
    against sending the full history and against a plain sliding window, as windowsmith bench measures them.
    The replay goes to a new session ('demo', or the first free 'demo-N'; --replace overwrites 'demo'); nothing
    else in the store is touched."""
    from ..traces import load_traces

    trace = load_traces(trace_path or DEMO_TRACE)[0]
    result, offloads, where = _replay(trace, model, store, window, replace, as_json)
    peers = compare(trace, model, window)
    if as_json:
        out = result.to_dict()
        for turn, items in zip(out["turns"], offloads, strict=True):
            turn["offloaded"] = [{"tokens": a, "view_tokens": b} for a, b in items]
        out["comparison"] = [{**asdict(p), "lost": p.lost} for p in peers]
        click.echo(json.dumps(out, indent=2))
    else:
        con = console()
        con.print(f"Replaying {result.trace_id} ({len(result.turns)} model calls) on a {window:,}-token window with "
                  f"{result.model}: large tool results are offloaded and the oldest history is cut so that every "
                  "request fits; then the same run with the full history and with a sliding window.", markup=False)
        con.print(demo_table(result, offloads, con))
        con.print(DEMO_LEGEND, style="dim", markup=False)
        print_summary(peers, con)
        con.print(f"stored as session {result.session_id} in {where} (nothing else in it was changed)", markup=False)
        con.print(f"inspect it with: windowsmith inspect {result.session_id}", markup=False)
    if html_out is not None or open_report:
        _write_report(result, peers, html_out, open_report)


def _write_report(result: Any, peers: list[Peer], html_out: Path | None, open_report: bool) -> None:
    from ..bench.html import replay_html

    if html_out is None:
        html_out = Path(tempfile.mkdtemp(prefix="windowsmith-demo-")) / "report.html"
    html_out.write_text(replay_html(result, extra=comparison_html(peers)), encoding="utf-8")
    click.echo(f"wrote {html_out}", err=True)
    if open_report:
        click.launch(str(html_out))


COMMANDS: tuple[click.Command, ...] = (demo,)

__all__ = ["COMMANDS", "DEMO_LEGEND", "DEMO_TRACE", "DEMO_WINDOW", "Peer", "compare", "comparison_html", "demo",
           "demo_table", "offloads_per_turn", "print_summary", "summary_rows", "verdict"]
