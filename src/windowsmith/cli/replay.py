"""``windowsmith replay``: a recorded trace fed turn by turn through the engine, with a
per-turn report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .helpers import (
    DEFAULT_MODEL,
    SHORT,
    STORE_HELP,
    action_name,
    clean_errors,
    console,
    open_engine,
    progress,
    table,
    window_hint,
)

#: What each column of the per-turn report means (printed under the demo's and replay's table).
TURN_LEGEND = (
    "turn: model call; msgs: messages sent; {layers}: tokens per layer; total: tokens sent; "
    "shared: leading tokens identical to the previous call's request; read / write: tokens billed as "
    "cache reads / cache writes; $: the call's cost at the model's prices (USD); actions: compaction"
)


def _turn_table(title: str, turns: list[Any], layer_names: list[str], console: Console) -> Table:
    """Per-turn report: tokens by layer, total, prefix shared with the previous call, cache read/write, cost."""
    cols: list[tuple[str, str, list[str]]] = [
        ("turn", "right", [str(r.turn) for r in turns]),
        ("msgs", "right", [str(r.messages) for r in turns]),
        *[(SHORT.get(n, n), "right", [f"{r.layers.get(n, 0):,}" for r in turns]) for n in layer_names],
        ("total", "right", [f"{r.tokens:,}" for r in turns]),
        ("shared", "right", [f"{r.shared_prefix_tokens:,}" for r in turns]),
        ("read", "right", [f"{r.cache_read_tokens:,}" for r in turns]),
        ("write", "right", [f"{r.cache_write_tokens:,}" for r in turns]),
        ("$", "right", [f"{r.cost_usd:.4f}" for r in turns]),
    ]
    if any(r.actions for r in turns):
        cols.append(("actions", "left", [", ".join(_action(a) for a in r.actions) for r in turns]))
    optional = ["shared", "msgs", *[SHORT.get(n, n) for n in reversed(layer_names) if n != "history"], "write"]
    return table(title, cols, console, drop=optional, fold="actions")


def _action(label: str) -> str:
    """``kind layer`` with the kind as the CLI names it (``cut history``, not the record's ``emergency``)."""
    kind, _, layer = label.partition(" ")
    return f"{action_name(kind)} {layer}".strip()


def _layer_names(turns: list[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for r in turns:
        for k, v in r.layers.items():
            if v:
                seen.setdefault(k, None)
    order = ["tools", "system", "instructions", "history", "task", "evidence", "memory", "knowledge"]
    return [k for k in order if k in seen] + [k for k in seen if k not in order]


def _run_replay(trace: Any, model: str, store: str | None, window: int | None, fmt: str | None,
                as_json: bool, session_id: str | None = None, replace: bool = False) -> Any:
    from ..replay import replay_trace

    with open_engine(model, store, window, fmt) as engine, window_hint(window):
        n_calls = sum(1 for m in trace.messages if m.role == "assistant")
        with progress(f"replaying {trace.id}", n_calls, unit="calls", every=10, quiet=as_json) as advance:
            return replay_trace(trace, engine, session_id=session_id, replace=replace,
                                on_turn=lambda _r: advance(1))


def _print_replay(result: Any, console: Console) -> None:
    names = _layer_names(result.turns)
    console.print(_turn_table(
        f"{result.trace_id} → {result.model} ({result.format}), window {result.window:,}", result.turns, names,
        console))
    console.print(TURN_LEGEND.format(layers=", ".join(SHORT.get(n, n) for n in names) or "layers"), style="dim")
    d = result.to_dict()["totals"]
    console.print(
        f"{d['turns']} model calls, {d['input_tokens']:,} input tokens, peak {d['peak_tokens']:,}, "
        f"{d['cache_read_share']:.0%} read from cache, cost ${d['cost_usd']:.4f}; session {result.session_id}"
    )
    if result.repairs:
        console.print(f"[yellow]{len(result.repairs)} repair(s) on import:[/] " + escape("; ".join(result.repairs[:5])))



@click.command()
@click.argument("trace_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "trace_format", default=None, help="Trace format (detected when omitted).")
@click.option("--index", default=0, show_default=True, help="Which run of a multi-run trace file.")
@click.option("--model", default=DEFAULT_MODEL, show_default=True)
@click.option("--window", type=int, default=None, help="Override the model's context window (tokens).")
@click.option("--provider", "fmt", default=None, help="Request format: anthropic, openai-chat, openai-responses, gemini.")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a self-contained HTML report with charts to this file.")
@click.option("--session", "session_id", default=None,
              help="Session id to replay into (default replay-<trace id>; taken ids get a -2, -3, ... suffix).")
@click.option("--replace", is_flag=True, help="Replace an existing session with that id instead of using a new one.")
@clean_errors
def replay(trace_path: Path, trace_format: str | None, index: int, model: str, window: int | None, fmt: str | None,
           store: str | None, as_json: bool, html_out: Path | None = None, session_id: str | None = None,
           replace: bool = False) -> None:
    """Feed a recorded trace turn by turn through the engine and report each model call.

    Each replay goes to its own new session; an existing one is replaced only with --replace."""
    from ..traces import load_traces

    traces = load_traces(trace_path, format=trace_format)
    if not 0 <= index < len(traces):
        raise click.BadParameter(f"{trace_path} holds {len(traces)} run(s); --index must be in 0..{len(traces) - 1}")
    result = _run_replay(traces[index], model, store, window, fmt, as_json, session_id=session_id, replace=replace)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        _print_replay(result, console())
    if html_out is not None:
        from ..bench.html import replay_html

        html_out.write_text(replay_html(result), encoding="utf-8")
        click.echo(f"wrote {html_out}", err=True)


COMMANDS: tuple[click.Command, ...] = (replay,)

__all__ = ["COMMANDS", "TURN_LEGEND", "replay"]
