"""The ``windowsmith`` command line: thin click commands over the public API."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import click
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .codemap import CodeMap
from .errors import WindowsmithError

if TYPE_CHECKING:
    from .server import ServerConfig

#: the model the commands use when --model is not given: a current one (see the registry's `retires` dates)
DEFAULT_MODEL = "claude-sonnet-5-5"
STORE_HELP = "Session store: a SQLite file path or a postgresql:// URL (default ./.windowsmith/windowsmith.db)."
TENANT_HELP = ("Work as this tenant of a shared store, as Engine(tenant=...) does: other tenants' sessions, packs "
               "and memory are invisible (default: the default tenant '').")


def _console() -> Console:
    return Console(highlight=False)


def _fail(e: Exception) -> NoReturn:
    click.echo(f"error: {e}", err=True)
    sys.exit(2)


F = TypeVar("F", bound=Callable[..., Any])


def _clean_errors(fn: F) -> F:
    """Turn every error a user can cause (a bad store, a bad trace, a read-only folder) into one line
    on stderr and exit status 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except WindowsmithError as e:
            _fail(e)
        except RecursionError:
            _fail(WindowsmithError("the input is nested too deeply to process; flatten it (at most a few "
                                   "hundred levels of nested lists and objects)"))
        except OSError as e:
            where = f" {e.filename}" if getattr(e, "filename", None) else ""
            hint = ("; the file system is read-only: pass --store (or set WINDOWSMITH_HOME) to a writable folder"
                    if e.errno == errno.EROFS else "")
            _fail(WindowsmithError(f"cannot access{where}: {e.strerror or e}{hint}"))

    return cast(F, wrapper)


def _engine(model: str, store: Any, window: int | None = None, fmt: str | None = None) -> Any:
    from .engine import Engine

    return Engine(model=model, store=store, window=window, format=fmt)


@contextlib.contextmanager
def _existing_store(store: str | None, tenant: str | None = None) -> Iterator[Any]:
    """The store ``--store`` names, which must exist (read-only commands never create one), as ``--tenant``
    sees it (:meth:`Store.for_tenant`)."""
    from .store import open_store

    with open_store(store, create=False) as base:
        if tenant is None:
            yield base
            return
        with base.for_tenant(tenant) as view:
            yield view


def _no_session(session_id: str, st: Any) -> NoReturn:
    """Exit with the one-line error for a session the store (as its tenant sees it) does not hold."""
    whose, flag = (f" of tenant {st.tenant!r}", f" --tenant {shlex.quote(st.tenant)}") if st.tenant else ("", "")
    _fail(WindowsmithError(f"no session {session_id!r} in the store{whose}; "
                           f"list them with `windowsmith sessions{flag}`"))


def _fits(cols: list[tuple[str, str, list[str]]], width: int, *, drop: Sequence[str] = (),
          fold: str | None = None) -> tuple[list[tuple[str, str, list[str]]], list[str]]:
    """The columns (header, justify, cells) that fit in ``width`` characters, dropping those named in
    ``drop`` (in that order) until they do; ``fold`` is a text column that may wrap (counted at 12)."""
    def need(cs: list[tuple[str, str, list[str]]]) -> int:
        return 1 + sum(3 + (min(12, _natural(c)) if c[0] == fold else _natural(c)) for c in cs)

    hidden: list[str] = []
    for name in drop:
        if need(cols) <= width:
            break
        if any(c[0] == name for c in cols):
            cols = [c for c in cols if c[0] != name]
            hidden.append(name)
    return cols, hidden


def _natural(col: tuple[str, str, list[str]]) -> int:
    return max([len(col[0]), *(len(v) for v in col[2])])


def _table(title: str, cols: list[tuple[str, str, list[str]]], console: Console, *, drop: Sequence[str] = (),
           fold: str | None = None) -> Table:
    """A table readable at the console's width: numbers never truncated ("8,…"); optional columns
    dropped (named in the caption) when the terminal is too narrow; ``fold`` wraps instead."""
    cols, hidden = _fits(cols, console.width, drop=drop, fold=fold)
    caption = f"hidden at {console.width} columns: {', '.join(hidden)} (widen the terminal or use --json)" if hidden else None
    t = Table(title=title, caption=caption, pad_edge=True)
    for name, just, cells in cols:
        justify: JustifyMethod = "left" if just == "left" else "right"
        if name == fold:
            t.add_column(name, justify=justify, overflow="fold", min_width=min(12, _natural((name, justify, cells))))
        else:
            t.add_column(name, justify=justify, no_wrap=True, min_width=_natural((name, justify, cells)))
    for row in zip(*(c[2] for c in cols), strict=True):
        t.add_row(*map(Text, row))  # cells are data (a memory's text, an action's reason), never markup
    return t


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="windowsmith")
def main() -> None:
    """windowsmith: budgeted, cache-ordered context windows for LLM agents."""


_SHORT = {"instructions": "instr", "history": "history", "evidence": "evid", "knowledge": "know"}

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
        *[(_SHORT.get(n, n), "right", [f"{r.layers.get(n, 0):,}" for r in turns]) for n in layer_names],
        ("total", "right", [f"{r.tokens:,}" for r in turns]),
        ("shared", "right", [f"{r.shared_prefix_tokens:,}" for r in turns]),
        ("read", "right", [f"{r.cache_read_tokens:,}" for r in turns]),
        ("write", "right", [f"{r.cache_write_tokens:,}" for r in turns]),
        ("$", "right", [f"{r.cost_usd:.4f}" for r in turns]),
    ]
    if any(r.actions for r in turns):
        cols.append(("actions", "left", [", ".join(r.actions) for r in turns]))
    optional = ["shared", "msgs", *[_SHORT.get(n, n) for n in reversed(layer_names) if n != "history"], "write"]
    return _table(title, cols, console, drop=optional, fold="actions")


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
    from .replay import replay_trace

    with _engine(model, store, window, fmt) as engine:
        n_calls = sum(1 for m in trace.messages if m.role == "assistant")
        if as_json:
            return replay_trace(trace, engine, session_id=session_id, replace=replace)
        with Progress(TextColumn("[bold]replaying[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task(escape(trace.id), total=n_calls)  # (a run id is data, not markup)
            return replay_trace(trace, engine, session_id=session_id, replace=replace,
                                on_turn=lambda r: progress.advance(task))


def _print_replay(result: Any, console: Console) -> None:
    names = _layer_names(result.turns)
    console.print(_turn_table(
        f"{result.trace_id} → {result.model} ({result.format}), window {result.window:,}", result.turns, names,
        console))
    console.print(TURN_LEGEND.format(layers=", ".join(_SHORT.get(n, n) for n in names) or "layers"), style="dim")
    d = result.to_dict()["totals"]
    console.print(
        f"{d['turns']} model calls, {d['input_tokens']:,} input tokens, peak {d['peak_tokens']:,}, "
        f"{d['cache_read_share']:.0%} read from cache, cost ${d['cost_usd']:.4f}; session {result.session_id}"
    )
    if result.repairs:
        console.print(f"[yellow]{len(result.repairs)} repair(s) on import:[/] " + escape("; ".join(result.repairs[:5])))


def _action_label(a: dict[str, Any]) -> str:
    """``kind layer``, for a shrink the messages it shrank: ``shrink history (seq 1 6,812→1,190)``, for an
    emergency cut the size and head of its identifier index: ``emergency history (index 42: HAT170, a/b.py, KeyError +39)``."""
    label = f"{a['kind']} {a['layer']}"
    detail = a.get("detail") or {}
    shrunk = detail.get("shrunk") if a["kind"] == "shrink" else None
    if shrunk:
        label += " (" + "; ".join(f"seq {x['seq']} {x['tokens_before']:,}→{x['tokens_after']:,}" for x in shrunk) + ")"
    index = detail.get("index") if a["kind"] == "emergency" else None
    if index:
        label += f" (index {len(index)}: " + ", ".join(index[:3]) + (f" +{len(index) - 3}" if len(index) > 3 else "") + ")"
    return label


@main.command()
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Model whose window and prices to use.")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the per-turn report as JSON.")
@click.option("--replace", is_flag=True, help="Replace an existing 'demo' session instead of writing to demo-2, demo-3, ...")
@_clean_errors
def demo(model: str, store: str | None, as_json: bool, replace: bool) -> None:
    """Replay the bundled real tau-bench trace through the engine and print a per-turn report.

    Writes to a new session ('demo', or the first free 'demo-N'); --replace overwrites 'demo'."""
    from .traces import demo_trace_path, load_traces

    trace = load_traces(demo_trace_path())[0]
    result = _run_replay(trace, model, store, None, None, as_json, session_id="demo", replace=replace)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    console = _console()
    _print_replay(result, console)
    console.print(f"inspect it with: windowsmith inspect {result.session_id}", markup=False)


@main.command()
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
@_clean_errors
def replay(trace_path: Path, trace_format: str | None, index: int, model: str, window: int | None, fmt: str | None,
           store: str | None, as_json: bool, html_out: Path | None = None, session_id: str | None = None,
           replace: bool = False) -> None:
    """Feed a recorded trace turn by turn through the engine and report each model call.

    Each replay goes to its own new session; an existing one is replaced only with --replace."""
    from .traces import load_traces

    traces = load_traces(trace_path, format=trace_format)
    if not 0 <= index < len(traces):
        raise click.BadParameter(f"{trace_path} holds {len(traces)} run(s); --index must be in 0..{len(traces) - 1}")
    result = _run_replay(traces[index], model, store, window, fmt, as_json, session_id=session_id, replace=replace)
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
@click.option("--strategies", default=None, help="Comma-separated subset of: full, sticky, sliding, sliding-per-turn, "
              "masking, clear, summarize-langchain, summarize-openhands, windowsmith; or the opt-in variant windowsmith-recall (recall over history).")
@click.option("--split", type=click.Choice(["all", "dev", "validation"]), default="all", show_default=True,
              help="Runs to replay: the dev or validation half (by a hash of the run id), or all.")
@click.option("--limit-runs", type=click.IntRange(min=1), default=None, help="At most N runs per trace file.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes (default: min(2, CPUs)).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the result JSON here.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the HTML report here.")
@click.option("--markdown", "md_out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write a markdown table here.")
@click.option("--misses", "misses_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every call that lost a target here, one JSON object a line: the run, strategy, window, call, "
                   "the identifiers its request lacked and those no reference in it reaches.")
def bench(paths: tuple[Path, ...], windows: str, model: str, strategies: str | None, split: str,
          limit_runs: int | None, workers: int | None, json_out: Path | None, html_out: Path | None,
          md_out: Path | None, misses_out: Path | None) -> None:
    """Compare context strategies on every run of the trace files under PATHS."""
    from .bench import cli as bench_cli

    bench_cli.run(paths, windows, model, strategies, limit_runs, workers, json_out, html_out, md_out, split=split,
                  misses_out=misses_out)


@main.command()
@click.argument("session_id")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the manifests as JSON.")
@_clean_errors
def inspect(session_id: str, store: str | None, tenant: str | None, as_json: bool) -> None:
    """Per-turn composition of every pack built for SESSION_ID."""
    from .manifest import Manifest

    with _existing_store(store, tenant) as st:
        if st.get_session(session_id) is None:
            _no_session(session_id, st)
        packs = [Manifest.from_dict(m) for m in st.list_packs(session_id)]
    if as_json:
        click.echo(json.dumps([p.to_dict() for p in packs], indent=2))
        return
    names: dict[str, None] = {}
    for p in packs:
        for k, v in p.layers.items():
            if v["used"]:
                names.setdefault(k, None)
    cols: list[tuple[str, str, list[str]]] = [
        ("#", "right", [str(i) for i in range(1, len(packs) + 1)]),
        ("pack", "left", [p.pack_id[:15] for p in packs]),
        ("seq", "right", [str(p.seq) for p in packs]),
        *[(_SHORT.get(n, n), "right", [f"{p.layers.get(n, {}).get('used', 0):,}" for p in packs]) for n in names],
        ("total", "right", [f"{p.tokens:,}" for p in packs]),
        ("fill", "right", [f"{p.fill:.0%}" for p in packs]),
        ("prefix", "right", [f"{p.cache.get('prefix_tokens', 0):,}" for p in packs]),
        ("actions", "left", [", ".join(_action_label(a) for a in p.actions) for p in packs]),
    ]
    optional = ["#", "seq", "prefix", *[_SHORT.get(n, n) for n in reversed(names) if n != "history"]]
    console = _console()
    console.print(_table(f"session {session_id}: {len(packs)} pack(s)", cols, console, drop=optional, fold="actions"))
    lines = _retrieved_lines(packs)
    if lines:
        console.print("retrieved into the window (pack #, layer: id, source, score, why):")
        for line in lines:
            console.print(line, markup=False, overflow="fold")


def _retrieved_lines(packs: list[Any]) -> list[str]:
    """One line per item a retrieval layer (memory, knowledge, recall) put in a pack, from its manifest."""
    out = []
    for i, p in enumerate(packs, 1):
        for layer, usage in p.layers.items():
            for r in usage.get("retrieved", ()):
                where = r.get("source", "")
                if "lines" in r:
                    where += f"#L{r['lines'][0]}-{r['lines'][1]}"
                if r.get("scope"):
                    where += f" ({r['scope']})"
                why = r.get("why") or ("matched " + ", ".join(r["matched"]) if r.get("matched") else "")
                out.append(f"  #{i} {layer}: {r.get('id')} {where} score {r.get('score')}" + (f"  {why}" if why else ""))
    return out


@main.command()
@click.argument("pack_a")
@click.argument("pack_b")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@_clean_errors
def diff(pack_a: str, pack_b: str, store: str | None, tenant: str | None, as_json: bool) -> None:
    """What changed between two packs (ids or unique prefixes) and where the cache prefix broke."""
    from .manifest import Manifest
    from .manifest import diff as diff_manifests

    with _existing_store(store, tenant) as st:
        ma, mb = st.get_pack(pack_a), st.get_pack(pack_b)
        for pid, m in ((pack_a, ma), (pack_b, mb)):
            if m is None:
                _fail(WindowsmithError(f"no pack {pid!r}; list packs with `windowsmith inspect SESSION`"))
    assert ma is not None and mb is not None
    d = diff_manifests(Manifest.from_dict(ma), Manifest.from_dict(mb))
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    c = _console()
    c.print(f"[bold]{escape(d['a'])}[/] → [bold]{escape(d['b'])}[/]: tokens {d['tokens']['a']:,} → {d['tokens']['b']:,} "
            f"({d['tokens']['delta']:+,})" + ("  [green]identical[/]" if d["identical"] else ""))
    for name, v in d["layers"].items():
        c.print(f"  {name}: {v['a']:,} → {v['b']:,} ({v['delta']:+,})", markup=False)
    cp = d["cache_prefix"]
    if cp["kept"]:
        c.print(f"  cache prefix kept: all {cp['a_prefix_parts']} cached parts of A are unchanged in B")
    else:
        c.print(f"  [red]cache prefix broke[/] at part {cp['broke_at_part']} ({escape(str(cp['broke_in']))})")
    for a in d["actions_b"]:
        c.print(f"  B: {a['kind']} {a['layer']}: {a['reason']}", markup=False)


@main.command()
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@_clean_errors
def sessions(store: str | None, tenant: str | None) -> None:
    """List the sessions in the store."""
    with _existing_store(store, tenant) as st:
        records = st.list_sessions()
    cols: list[tuple[str, str, list[str]]] = [
        ("session", "left", [r.id for r in records]),
        ("events", "right", [f"{r.event_count:,}" for r in records]),
        ("created (UTC)", "left", [r.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") for r in records]),
    ]
    console = _console()
    console.print(_table(f"sessions ({len(records)})", cols, console, fold="session"))


@main.command()
@click.argument("session_id")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@_clean_errors
def verify(session_id: str, store: str | None, tenant: str | None) -> None:
    """Recompute every hash of SESSION_ID's log and check the parent links."""
    with _existing_store(store, tenant) as st:
        if st.get_session(session_id) is None:
            _no_session(session_id, st)
        st.verify(session_id)
    click.echo(f"session {session_id}: log verified")


@main.command()
@click.argument("session_id")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Model whose window and prices to use.")
@click.option("--window", type=int, default=None, help="Override the model's context window (tokens).")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--reason", default=None, help="Why (recorded in the compaction record).")
@_clean_errors
def compact(session_id: str, model: str, window: int | None, store: str | None, tenant: str | None,
            reason: str | None) -> None:
    """Compact SESSION_ID now: fold old tool results, summarize the oldest span (offline summarizer).

    Appends compaction records to the log; nothing is deleted."""
    with _existing_store(store, tenant) as st, _engine(model, st, window) as eng:
        if eng.store.get_session(session_id) is None:
            _no_session(session_id, eng.store)
        result = eng.session(session_id).compact(reason=reason or "windowsmith compact")
    click.echo(result.describe())


@main.command()
@click.argument("session_id")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_clean_errors
def delete(session_id: str, store: str | None, tenant: str | None, yes: bool) -> None:
    """Delete SESSION_ID: its events, packs and blob references.

    Its blobs, and the space it took in the store, are freed by `windowsmith gc`."""
    with _existing_store(store, tenant) as st:
        rec = st.get_session(session_id)
        if rec is None:
            _no_session(session_id, st)
        if not yes:
            click.confirm(f"delete session {session_id!r} ({rec.event_count:,} events)?", abort=True, err=True)
        st.delete_session(session_id)
    click.echo(f"deleted session {session_id}; run `windowsmith gc` to free its blobs and shrink the store")


@main.command()
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--grace", "grace_seconds", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              help="Keep blob references younger than this many seconds (an append may still be on its way).")
@click.option("--no-vacuum", is_flag=True, help="Skip VACUUM (which rewrites a SQLite file and needs free space).")
@_clean_errors
def gc(store: str | None, tenant: str | None, grace_seconds: float, no_vacuum: bool) -> None:
    """Free blobs no session uses (deleted sessions, lost appends), then VACUUM the store so deleted
    content leaves the file. Blobs are per tenant: --tenant frees that tenant's."""
    from .artifacts import collect_garbage

    with _existing_store(store, tenant) as st:
        r = collect_garbage(st, grace_seconds=grace_seconds, vacuum=not no_vacuum)
    click.echo(f"dropped {r['refs_dropped']:,} orphan reference(s), deleted {r['blobs_deleted']:,} blob(s); "
               f"store {r['bytes_before']:,} → {r['bytes_after']:,} bytes")


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
        return
    if not cm.last_update.files:  # (an empty line said nothing: a wrong directory, or a language it does not read)
        from .codemap import EXTENSIONS

        click.echo(f"no source files under {path} that the map reads ({', '.join(sorted(EXTENSIONS))}); "
                   "nothing to map", err=True)
        return
    click.echo(text)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind. The default serves this machine only; 0.0.0.0 exposes the proxy (use --token).")
@click.option("--port", type=click.IntRange(0, 65535), default=8750, show_default=True, help="TCP port (0: any free port).")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--openai-base-url", default=None, help="Upstream for /v1/chat/completions (default: the OpenAI SDK's).")
@click.option("--anthropic-base-url", default=None, help="Upstream for /v1/messages (default: the Anthropic SDK's).")
@click.option("--model-window", type=click.IntRange(min=1), default=None,
              help="Build windows of this many tokens instead of each model's full window.")
@click.option("--token", "tokens", multiple=True, metavar="TOKEN[=TENANT]",
              help="Require this API token (repeatable); TOKEN=TENANT scopes it to a tenant. Also WINDOWSMITH_TOKENS "
                   "(comma-separated).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes over the one store; a session's turns never interleave across them (POSIX).")
@_clean_errors
def serve(host: str, port: int, store: str | None, openai_base_url: str | None, anthropic_base_url: str | None,
          model_window: int | None, tokens: tuple[str, ...], workers: int) -> None:
    """Run the proxy (POST /v1/chat/completions, /v1/messages), the JSON API (/api/...) and the dashboard (/)."""
    import os

    import uvicorn

    from .server import ServerConfig, create_app

    pairs = list(tokens) + [t for t in os.environ.get("WINDOWSMITH_TOKENS", "").split(",") if t.strip()]
    token_map: dict[str, str | None] = {}
    for item in pairs:
        tok, _, tenant = item.strip().partition("=")
        token_map[tok] = tenant or None
    config = ServerConfig(store=store, openai_base_url=openai_base_url, anthropic_base_url=anthropic_base_url,
                          model_window=model_window, tokens=token_map)
    if workers == 1:
        app = create_app(config)
        click.echo(f"windowsmith serving on http://{host}:{port} (dashboard at /, proxy at /v1)", err=True)
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
        return
    _serve_workers(config, host, port, workers)


def _serve_workers(config: ServerConfig, host: str, port: int, workers: int) -> None:
    """``serve --workers N``: the store opened (and migrated) once here, then N uvicorn worker processes, each
    building the app from :data:`~windowsmith.server.app.SERVE_ENV`, with one lock directory for the session locks
    (removed when the server stops)."""
    import os
    import shutil
    import tempfile
    from dataclasses import replace

    import uvicorn

    from .errors import UsageError
    from .server.app import SERVE_ENV, config_to_env
    from .server.locks import cross_process_locks
    from .store import open_store

    if not cross_process_locks():
        raise UsageError("--workers needs POSIX file locks (fcntl), which this system lacks: run one worker")
    open_store(config.store).close()  # migrate once, before the workers race to
    lock_dir = tempfile.mkdtemp(prefix="windowsmith-serve-locks-")
    try:
        os.environ[SERVE_ENV] = config_to_env(replace(config, lock_dir=lock_dir))
        click.echo(f"windowsmith serving on http://{host}:{port} with {workers} workers (dashboard at /, proxy at /v1)",
                   err=True)
        uvicorn.run("windowsmith.server.app:app_from_env", factory=True, workers=workers, host=host, port=port,
                    log_level="warning", access_log=False)
    finally:
        os.environ.pop(SERVE_ENV, None)
        shutil.rmtree(lock_dir, ignore_errors=True)


from . import cli_context  # noqa: E402,F401  (registers instructions, memory, recall)

if __name__ == "__main__":  # pragma: no cover
    main()
