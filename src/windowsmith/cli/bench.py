"""``windowsmith bench``: context strategies compared on real traces.

The benchmark (``windowsmith.bench``: re-implementations of other projects' strategies) is imported only when
the command runs, so that ``windowsmith`` and its other commands never load it."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import click

from ..errors import ModelRetiredWarning, UsageError
from .helpers import DEFAULT_MODEL, fail, one_line_warnings


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
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="Model whose tokenizer, window and prices to use (the published results pass --model claude-sonnet-4-5).")
@click.option("--strategies", default=None, help="Comma-separated subset of: full, sticky, sliding, sliding-per-turn, "
              "masking, clear, summarize-langchain, summarize-openhands, windowsmith; or the opt-in variants windowsmith-recall (recall over history) and anthropic-context-editing (Anthropic's server-side clear_tool_uses edit).")
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
    with one_line_warnings(), retired_once(model):
        bench_cli().run(paths, windows, model, strategies, limit_runs, workers, json_out, html_out, md_out, split=split,
                        misses_out=misses_out)


@contextlib.contextmanager
def retired_once(model: str) -> Iterator[None]:
    """Say once that ``model`` is retired (a bench of a retired model's prices is still a fair comparison), then
    silence that warning: in this process, and in the worker processes the bench spawns (``PYTHONWARNINGS``)."""
    from ..registry import load_registry

    try:
        spec = load_registry().get(model)
    except Exception:  # an unknown model: the bench says so, with the fix
        yield
        return
    if not spec.retired():
        yield
        return
    successor = f"; pass --model {spec.successor}" if spec.successor else ""
    warnings.warn(ModelRetiredWarning(f"model {model!r} was retired by its provider on {spec.retires}: its prices "
                                      f"and window still compare strategies, but requests for it are refused{successor}"),
                  stacklevel=2)
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [before, f"ignore:model {model!r}:UserWarning"]))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=ModelRetiredWarning)
            yield
    finally:
        if before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = before


COMMANDS: tuple[click.Command, ...] = (bench,)

__all__ = ["COMMANDS", "bench", "bench_cli", "retired_once"]
