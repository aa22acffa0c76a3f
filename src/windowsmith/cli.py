"""The ``windowsmith`` command line: thin click commands over the public API."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .codemap import CodeMap
from .errors import WindowsmithError

STORE_HELP = "Session store: a SQLite file path or a postgresql:// URL (default ./.windowsmith/windowsmith.db)."


def _console() -> Console:
    return Console(highlight=False)


def _fail(e: Exception) -> None:
    click.echo(f"error: {e}", err=True)
    sys.exit(2)


def _engine(model: str, store: str | None, window: int | None = None, fmt: str | None = None) -> Any:
    from .engine import Engine

    return Engine(model=model, store=store, window=window, format=fmt)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="windowsmith")
def main() -> None:
    """windowsmith: budgeted, cache-ordered context windows for LLM agents."""


def _turn_table(title: str, turns: list[Any], layer_names: list[str]) -> Table:
    """Per-turn report: tokens by layer, total, prefix shared with the previous call, cache read/write, cost."""
    short = {"instructions": "instr", "history": "history", "evidence": "evid", "knowledge": "know"}
    t = Table(title=title, show_lines=False, pad_edge=False)
    t.add_column("turn", justify="right")
    t.add_column("msgs", justify="right")
    for name in layer_names:
        t.add_column(short.get(name, name), justify="right", no_wrap=True)
    for col in ("total", "shared", "read", "write", "$"):
        t.add_column(col, justify="right", no_wrap=True)
    with_actions = any(r.actions for r in turns)
    if with_actions:
        t.add_column("actions")
    for r in turns:
        row = [str(r.turn), str(r.messages), *[f"{r.layers.get(n, 0):,}" for n in layer_names],
               f"{r.tokens:,}", f"{r.shared_prefix_tokens:,}", f"{r.cache_read_tokens:,}", f"{r.cache_write_tokens:,}",
               f"{r.cost_usd:.4f}"]
        if with_actions:
            row.append(", ".join(r.actions))
        t.add_row(*row)
    return t


def _layer_names(turns: list[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for r in turns:
        for k, v in r.layers.items():
            if v:
                seen.setdefault(k, None)
    order = ["tools", "system", "instructions", "history", "task", "evidence", "memory", "knowledge"]
    return [k for k in order if k in seen] + [k for k in seen if k not in order]


def _run_replay(trace: Any, model: str, store: str | None, window: int | None, fmt: str | None,
                as_json: bool, session_id: str | None = None) -> Any:
    from .replay import replay_trace

    with _engine(model, store, window, fmt) as engine:
        n_calls = sum(1 for m in trace.messages if m.role == "assistant")
        if as_json:
            return replay_trace(trace, engine, session_id=session_id)
        with Progress(TextColumn("[bold]replaying[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task(trace.id, total=n_calls)
            return replay_trace(trace, engine, session_id=session_id, on_turn=lambda r: progress.advance(task))


def _print_replay(result: Any, console: Console) -> None:
    names = _layer_names(result.turns)
    console.print(_turn_table(
        f"{result.trace_id} → {result.model} ({result.format}), window {result.window:,}", result.turns, names))
    d = result.to_dict()["totals"]
    console.print(
        f"{d['turns']} model calls, {d['input_tokens']:,} input tokens, peak {d['peak_tokens']:,}, "
        f"{d['cache_read_share']:.0%} read from cache, cost ${d['cost_usd']:.4f}; session {result.session_id}"
    )
    if result.repairs:
        console.print(f"[yellow]{len(result.repairs)} repair(s) on import:[/] " + "; ".join(result.repairs[:5]))


@main.command()
@click.option("--model", default="claude-sonnet-4-5", show_default=True, help="Model whose window and prices to use.")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the per-turn report as JSON.")
def demo(model: str, store: str | None, as_json: bool) -> None:
    """Replay the bundled real tau-bench trace through the engine and print a per-turn report."""
    from .traces import demo_trace_path, load_traces

    try:
        trace = load_traces(demo_trace_path())[0]
        result = _run_replay(trace, model, store, None, None, as_json, session_id="demo")
    except WindowsmithError as e:
        _fail(e)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    console = _console()
    _print_replay(result, console)
    console.print("inspect it with: windowsmith inspect demo")


@main.command()
@click.argument("trace_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "trace_format", default=None, help="Trace format (detected when omitted).")
@click.option("--index", default=0, show_default=True, help="Which run of a multi-run trace file.")
@click.option("--model", default="claude-sonnet-4-5", show_default=True)
@click.option("--window", type=int, default=None, help="Override the model's context window (tokens).")
@click.option("--provider", "fmt", default=None, help="Request format: anthropic, openai-chat, openai-responses, gemini.")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a self-contained HTML report with charts to this file.")
def replay(trace_path: Path, trace_format: str | None, index: int, model: str, window: int | None, fmt: str | None,
           store: str | None, as_json: bool, html_out: Path | None = None) -> None:
    """Feed a recorded trace turn by turn through the engine and report each model call."""
    from .traces import load_traces

    try:
        traces = load_traces(trace_path, format=trace_format)
        if not 0 <= index < len(traces):
            raise click.BadParameter(f"{trace_path} holds {len(traces)} run(s); --index must be in 0..{len(traces) - 1}")
        result = _run_replay(traces[index], model, store, window, fmt, as_json)
    except WindowsmithError as e:
        _fail(e)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        _print_replay(result, _console())
    if html_out is not None:
        from .bench.html import replay_html

        html_out.write_text(replay_html(result), encoding="utf-8")
        click.echo(f"wrote {html_out}", err=True)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--windows", default="8000,16000,32000", show_default=True,
              help="Comma-separated windows (tokens); the model's own window is always added.")
@click.option("--model", default="claude-sonnet-4-5", show_default=True, help="Model whose tokenizer, window and prices to use.")
@click.option("--strategies", default=None, help="Comma-separated subset of: full, sliding, masking, clear, summarize, windowsmith.")
@click.option("--limit-runs", type=click.IntRange(min=1), default=None, help="At most N runs per trace file.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes (default: min(2, CPUs)).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the result JSON here.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the HTML report here.")
@click.option("--markdown", "md_out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write a markdown table here.")
def bench(paths: tuple[Path, ...], windows: str, model: str, strategies: str | None, limit_runs: int | None,
          workers: int | None, json_out: Path | None, html_out: Path | None, md_out: Path | None) -> None:
    """Compare context strategies on every run of the trace files under PATHS."""
    from .bench import cli as bench_cli

    bench_cli.run(paths, windows, model, strategies, limit_runs, workers, json_out, html_out, md_out)


@main.command()
@click.argument("session_id")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the manifests as JSON.")
def inspect(session_id: str, store: str | None, as_json: bool) -> None:
    """Per-turn composition of every pack built for SESSION_ID."""
    from .manifest import Manifest
    from .store import open_store

    with open_store(store) as st:
        if st.get_session(session_id) is None:
            _fail(WindowsmithError(f"no session {session_id!r} in the store; list them with `windowsmith sessions`"))
        packs = [Manifest.from_dict(m) for m in st.list_packs(session_id)]
    if as_json:
        click.echo(json.dumps([p.to_dict() for p in packs], indent=2))
        return
    names: dict[str, None] = {}
    for p in packs:
        for k, v in p.layers.items():
            if v["used"]:
                names.setdefault(k, None)
    t = Table(title=f"session {session_id}: {len(packs)} pack(s)")
    t.add_column("#", justify="right")
    t.add_column("pack", no_wrap=True, min_width=15)
    for col in ("seq", *names, "total", "fill", "prefix", "actions"):
        t.add_column(col, justify="left" if col == "actions" else "right")
    for i, p in enumerate(packs, 1):
        t.add_row(str(i), p.pack_id[:15], str(p.seq), *[f"{p.layers.get(n, {}).get('used', 0):,}" for n in names],
                  f"{p.tokens:,}", f"{p.fill:.0%}", f"{p.cache.get('prefix_tokens', 0):,}",
                  ", ".join(f"{a['kind']} {a['layer']}" for a in p.actions))
    _console().print(t)


@main.command()
@click.argument("pack_a")
@click.argument("pack_b")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
def diff(pack_a: str, pack_b: str, store: str | None, as_json: bool) -> None:
    """What changed between two packs (ids or unique prefixes) and where the cache prefix broke."""
    from .manifest import Manifest
    from .manifest import diff as diff_manifests
    from .store import open_store

    with open_store(store) as st:
        try:
            ma, mb = st.get_pack(pack_a), st.get_pack(pack_b)
        except WindowsmithError as e:
            _fail(e)
        for pid, m in ((pack_a, ma), (pack_b, mb)):
            if m is None:
                _fail(WindowsmithError(f"no pack {pid!r}; list packs with `windowsmith inspect SESSION`"))
    assert ma is not None and mb is not None
    d = diff_manifests(Manifest.from_dict(ma), Manifest.from_dict(mb))
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    c = _console()
    c.print(f"[bold]{d['a']}[/] → [bold]{d['b']}[/]: tokens {d['tokens']['a']:,} → {d['tokens']['b']:,} "
            f"({d['tokens']['delta']:+,})" + ("  [green]identical[/]" if d["identical"] else ""))
    for name, v in d["layers"].items():
        c.print(f"  {name}: {v['a']:,} → {v['b']:,} ({v['delta']:+,})")
    cp = d["cache_prefix"]
    if cp["kept"]:
        c.print(f"  cache prefix kept: all {cp['a_prefix_parts']} cached parts of A are unchanged in B")
    else:
        c.print(f"  [red]cache prefix broke[/] at part {cp['broke_at_part']} ({cp['broke_in']})")
    for a in d["actions_b"]:
        c.print(f"  B: {a['kind']} {a['layer']}: {a['reason']}")


@main.command()
@click.option("--store", default=None, help=STORE_HELP)
def sessions(store: str | None) -> None:
    """List the sessions in the store."""
    from .store import open_store

    with open_store(store) as st:
        t = Table(title="sessions")
        for col in ("session", "events", "created"):
            t.add_column(col)
        for r in st.list_sessions():
            t.add_row(r.id, str(r.event_count), str(r.created_at))
        _console().print(t)


@main.command()
@click.argument("session_id")
@click.option("--store", default=None, help=STORE_HELP)
def verify(session_id: str, store: str | None) -> None:
    """Recompute every hash of SESSION_ID's log and check the parent links."""
    from .store import open_store

    with open_store(store) as st:
        try:
            st.verify(session_id)
        except WindowsmithError as e:
            _fail(e)
    click.echo(f"session {session_id}: log verified")


@main.command()
@click.argument("session_id")
@click.option("--model", default="claude-sonnet-4-5", show_default=True, help="Model whose window and prices to use.")
@click.option("--window", type=int, default=None, help="Override the model's context window (tokens).")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--reason", default=None, help="Why (recorded in the compaction record).")
def compact(session_id: str, model: str, window: int | None, store: str | None, reason: str | None) -> None:
    """Compact SESSION_ID now: fold old tool results, summarize the oldest span (offline summarizer).

    Appends compaction records to the log; nothing is deleted."""
    try:
        with _engine(model, store, window) as eng:
            if eng.store.get_session(session_id) is None:
                raise click.ClickException(f"no session {session_id!r} in the store; list them with `windowsmith sessions`")
            result = eng.session(session_id).compact(reason=reason or "windowsmith compact")
    except WindowsmithError as e:
        _fail(e)
    click.echo(result.describe())


@main.command("map")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--budget", type=click.IntRange(min=16), default=1024, show_default=True, help="Token budget of the map.")
@click.option("--focus", multiple=True, help="A file being worked on (repeatable): ranked first, its imports followed.")
@click.option("--name", "names", multiple=True, help="An identifier of interest (repeatable).")
@click.option("--cache", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Keep parsed files here; the next run re-parses only changed files (mtime + hash).")
@click.option("--json", "as_json", is_flag=True, help="Print the map and the update counts as JSON.")
def map_cmd(path: Path, budget: int, focus: tuple[str, ...], names: tuple[str, ...], cache: Path | None,
            as_json: bool) -> None:
    """Print a budgeted map of the code under PATH (needs windowsmith[codemap]): files with their key
    definitions (line: signature), ranked by PageRank over references and imports, personalized to --focus."""
    try:
        cm = CodeMap(path, cache=cache)
        text = cm.render(budget, focus, names)
    except WindowsmithError as e:
        _fail(e)
    if as_json:
        click.echo(json.dumps({"map": text, "update": cm.last_update.to_dict()}, indent=1))
    else:
        click.echo(text)


if __name__ == "__main__":  # pragma: no cover
    main()
