"""The body of ``windowsmith bench`` (kept here so the CLI module stays a thin wrapper)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..errors import WindowsmithError
from .html import bench_html
from .report import LEGEND, markdown, rich_tables, token_count_lines
from .run import run_bench
from .strategies import STRATEGIES, VARIANTS


def parse_windows(text: str) -> list[int | None]:
    out: list[int | None] = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        if not part:
            continue
        if part == "model":
            continue
        mult = 1000 if part.endswith("k") else 1
        try:
            n = int(float(part.rstrip("k")) * mult)
        except ValueError:
            raise click.BadParameter(f"window {part!r} is not a number of tokens (e.g. 8000 or 8k)",
                                     param_hint="--windows") from None
        if n <= 0:
            raise click.BadParameter(f"window {part!r} must be positive", param_hint="--windows")
        out.append(n)
    return [*dict.fromkeys(out), None]


def parse_strategies(text: str | None) -> list[str]:
    if not text:
        return list(STRATEGIES)
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in STRATEGIES + VARIANTS]
    if bad:
        raise click.BadParameter(f"unknown strategy {', '.join(bad)}; use {', '.join(STRATEGIES + VARIANTS)}",
                                 param_hint="--strategies")
    return names


class PlainProgress:
    """Plain progress lines for a stderr that is not a terminal (CI logs, files): one line every
    ``every_s`` seconds, and at the end."""

    def __init__(self, every_s: float = 10.0, write: Any = None, clock: Any = None) -> None:
        import time

        self.every_s = every_s
        self.clock = clock or time.monotonic
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self.t0 = self.clock()
        self.last = self.t0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if done == total or now - self.last >= self.every_s:
            self.last = now
            self.write(f"bench: {done}/{total} runs, {now - self.t0:.0f} s")


def run(paths: tuple[Path, ...], windows: str, model: str, strategies: str | None, limit_runs: int | None,
        workers: int | None, json_out: Path | None, html_out: Path | None, md_out: Path | None,
        split: str = "all", misses_out: Path | None = None) -> None:
    wins = parse_windows(windows)
    names = parse_strategies(strategies)
    console = Console(highlight=False) if sys.stdout.isatty() else Console(highlight=False, width=100)
    err = Console(stderr=True)
    try:
        if sys.stderr.isatty():
            with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
                          TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=True) as progress:
                task = progress.add_task("runs", total=None)

                def on_run(done: int, total: int) -> None:
                    progress.update(task, completed=done, total=total)

                result = run_bench([str(p) for p in paths], model=model, windows=wins, strategies=names,
                                   limit_runs=limit_runs, workers=workers, on_run=on_run, split=split,
                                   misses=misses_out is not None)
        else:
            result = run_bench([str(p) for p in paths], model=model, windows=wins, strategies=names,
                               limit_runs=limit_runs, workers=workers, on_run=PlainProgress(), split=split,
                               misses=misses_out is not None)
    except WindowsmithError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    result["command"] = "windowsmith bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 \
        else "windowsmith bench"
    for table in rich_tables(result):
        console.print(table)
    console.print(LEGEND, style="dim")
    for line in token_count_lines(result.get("token_count")):
        console.print(line, markup=False)
    if result["errors"]:
        console.print(f"[yellow]{len(result['errors'])} problem(s):[/] " + escape("; ".join(result["errors"][:5])))
    console.print(f"{result['runs']} runs, {result['calls']:,} calls in {result['elapsed_s']} s on {result['workers']} worker(s)")
    lost = result.pop("misses", None) or []
    if misses_out is not None:
        misses_out.parent.mkdir(parents=True, exist_ok=True)
        misses_out.write_text("".join(json.dumps(m) + "\n" for m in lost), encoding="utf-8")
        pairs = {(m["strategy"], m["window"]) for m in lost}
        err.print(f"wrote {misses_out}: {len(lost)} call(s) that lost a target, under {len(pairs)} "
                  f"strategy x window pair(s)", markup=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=1), encoding="utf-8")
        err.print(f"wrote {json_out}", markup=False)
    if html_out is not None:
        html_out.parent.mkdir(parents=True, exist_ok=True)
        html_out.write_text(bench_html(result), encoding="utf-8")
        err.print(f"wrote {html_out}", markup=False)
    if md_out is not None:
        md_out.parent.mkdir(parents=True, exist_ok=True)
        md_out.write_text(markdown(result, result["command"]), encoding="utf-8")
        err.print(f"wrote {md_out}", markup=False)
