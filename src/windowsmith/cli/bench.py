"""``windowsmith bench``: context strategies compared on real traces.

The benchmark (``windowsmith.bench``: re-implementations of other projects' strategies) is imported only when
the command runs, so that ``windowsmith`` and its other commands never load it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import click

from ..errors import UsageError
from .helpers import fail


def bench_cli() -> ModuleType:
    """:mod:`windowsmith.bench.cli`, or exit with the extra to install when a dependency of it is missing."""
    try:
        from ..bench import cli
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] == "windowsmith":
            raise
        fail(UsageError(f"windowsmith bench needs {e.name!r}, which is not installed: "
                        "pip install 'windowsmith[bench]'"))
    return cli


@click.command()
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
    bench_cli().run(paths, windows, model, strategies, limit_runs, workers, json_out, html_out, md_out, split=split,
                    misses_out=misses_out)


COMMANDS: tuple[click.Command, ...] = (bench,)

__all__ = ["COMMANDS", "bench", "bench_cli"]
