"""What every command module of the CLI shares: the common option help, the console, one-line errors and
warnings, progress, the store a read-only command opens, and tables fitted to the terminal's width."""

from __future__ import annotations

import contextlib
import errno
import functools
import re
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar, cast

import click
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from ..errors import WindowsmithError

#: the model the commands use when --model is not given: a current one (see the registry's `retires` dates)
DEFAULT_MODEL = "claude-sonnet-5-5"
STORE_HELP = "Session store: a SQLite file path or a postgresql:// URL (default ./.windowsmith/windowsmith.db)."
TENANT_HELP = ("Work as this tenant of a shared store, as Engine(tenant=...) does: other tenants' sessions, packs "
               "and memory are invisible (default: the default tenant '').")

#: what a user reads for a compaction record's kind, where its name on disk says less (the ``emergency`` record is
#: the routine model-free cut of the oldest history, not an emergency)
ACTION_NAMES = {"emergency": "cut"}

#: a layer's name in a table header, where the full name is too wide
SHORT = {"instructions": "instr", "history": "history", "evidence": "evid", "knowledge": "know"}

Column = tuple[str, str, list[str]]
"""A table column: header, justification ("left" or "right") and its cells."""


def console() -> Console:
    return Console(highlight=False)


def action_name(kind: str) -> str:
    """A compaction action's kind as the CLI shows it (:data:`ACTION_NAMES`)."""
    return ACTION_NAMES.get(kind, kind)


#: how a library warning's advice reads in a command that takes ``--model`` (and in ``serve``, where the model is
#: the one each client asks for)
MODEL_OPTION = "--model"
CLIENT_MODEL = "the model the client asks for"
_SWITCH = re.compile(r";? ?switch to '([^']+)' \(Engine\(model=\.\.\.\)\)")


def warning_line(message: Warning | str, *, model: str = MODEL_OPTION) -> str:
    """One line for a Python warning shown to a CLI user: ``warning: <text>``, never a source line, with the
    Python argument it advises (``Engine(model=...)``) replaced by what the user of the command sets: ``model``
    (the ``--model`` option, or :data:`CLIENT_MODEL` in ``serve``)."""
    text = " ".join(str(message).split())
    if model == MODEL_OPTION:
        text = _SWITCH.sub(r"; pass --model \1", text)
    else:
        text = _SWITCH.sub(r"; have the client ask for '\1'", text)
    return "warning: " + text.replace("(Engine(model=...))", f"({model})").replace("Engine(model=...)", model)


@contextlib.contextmanager
def one_line_warnings(*, model: str = MODEL_OPTION) -> Iterator[None]:
    """Show every warning raised inside (each text once) as one line on stderr (:func:`warning_line`)."""
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        click.echo(warning_line(message, model=model), err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        yield


def fail(e: Exception) -> NoReturn:
    """Print ``error: <e>`` on stderr and exit with status 2."""
    click.echo(f"error: {e}", err=True)
    sys.exit(2)


F = TypeVar("F", bound=Callable[..., Any])


def clean_errors(fn: F) -> F:
    """Turn every error a user can cause (a bad store, a bad trace, a read-only folder) into one line
    on stderr and exit status 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with one_line_warnings():
                return fn(*args, **kwargs)
        except WindowsmithError as e:
            fail(e)
        except RecursionError:
            fail(WindowsmithError("the input is nested too deeply to process; flatten it (at most a few "
                                  "hundred levels of nested lists and objects)"))
        except OSError as e:
            where = f" {e.filename}" if getattr(e, "filename", None) else ""
            hint = ("; the file system is read-only: pass --store (or set WINDOWSMITH_HOME) to a writable folder"
                    if e.errno == errno.EROFS else "")
            fail(WindowsmithError(f"cannot access{where}: {e.strerror or e}{hint}"))

    return cast(F, wrapper)


class PlainProgress:
    """Progress for a stderr that is not a terminal (CI logs, files): ``<label>: <done>/<total> <unit>, <s> s``
    every ``every`` items (and at the end), so a long run is never silent."""

    def __init__(self, label: str, total: int | None, unit: str, every: int) -> None:
        self.label, self.total, self.unit, self.every = label, total, unit, max(1, every)
        self.done = 0
        self.t0 = time.monotonic()

    def advance(self, n: int = 1) -> None:
        before, self.done = self.done, self.done + n
        if self.done // self.every > before // self.every or (self.total is not None and self.done == self.total):
            of = f"/{self.total:,}" if self.total is not None else ""
            click.echo(f"{self.label}: {self.done:,}{of} {self.unit}, {time.monotonic() - self.t0:.0f} s", err=True)


def _no_progress(n: int = 1) -> None:
    """The ``advance`` of a quiet run."""


@contextlib.contextmanager
def progress(label: str, total: int | None, *, unit: str = "items", every: int = 100,
             quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """An ``advance(n)`` callable for a long loop: a rich progress bar on a terminal (stderr), one plain line
    every ``every`` items otherwise (:class:`PlainProgress`); nothing when ``quiet`` (``--json``)."""
    if quiet:
        yield _no_progress
        return
    err = Console(stderr=True)
    if not err.is_terminal:
        yield PlainProgress(label, total, unit, every).advance
        return
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}[/]"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task(escape(label), total=total)  # (a label holds data: a run id, a path)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        yield advance


@contextlib.contextmanager
def window_hint(window: int | None) -> Iterator[None]:
    """A window too small for a trace's fixed part, said in the command's terms (``--window``), not the library's."""
    from ..errors import BudgetExceededError, UsageError

    try:
        yield
    except BudgetExceededError as e:
        if window is None or type(e) is not BudgetExceededError:
            raise
        raise UsageError(f"a {window:,}-token window is too small for this trace: its required part ({e.layer!r} "
                         f"the largest) needs {e.needed:,} tokens and {e.available:,} are left after the reserved "
                         "output; pass a larger --window") from None


def open_engine(model: str, store: Any, window: int | None = None, fmt: str | None = None) -> Any:
    from ..engine import Engine

    return Engine(model=model, store=store, window=window, format=fmt)


@contextlib.contextmanager
def existing_store(store: str | None, tenant: str | None = None) -> Iterator[Any]:
    """The store ``--store`` names, which must exist (read-only commands never create one), as ``--tenant``
    sees it (:meth:`Store.for_tenant`)."""
    from ..store import open_store

    with open_store(store, create=False) as base:
        if tenant is None:
            yield base
            return
        with base.for_tenant(tenant) as view:
            yield view


def no_session(session_id: str, st: Any) -> NoReturn:
    """Exit with the one-line error for a session the store (as its tenant sees it) does not hold."""
    whose, flag = (f" of tenant {st.tenant!r}", f" --tenant {shlex.quote(st.tenant)}") if st.tenant else ("", "")
    fail(WindowsmithError(f"no session {session_id!r} in the store{whose}; "
                          f"list them with `windowsmith sessions{flag}`"))


def fits(cols: list[Column], width: int, *, drop: Sequence[str] = (),
         fold: str | None = None) -> tuple[list[Column], list[str]]:
    """The columns (header, justify, cells) that fit in ``width`` characters, dropping those named in
    ``drop`` (in that order) until they do; ``fold`` is a text column that may wrap between words (counted at
    its longest word, at least 12)."""
    def need(cs: list[Column]) -> int:
        return 1 + sum(3 + (_fold_width(c) if c[0] == fold else _natural(c)) for c in cs)

    hidden: list[str] = []
    for name in drop:
        if need(cols) <= width:
            break
        if any(c[0] == name for c in cols):
            cols = [c for c in cols if c[0] != name]
            hidden.append(name)
    return cols, hidden


def _natural(col: Column) -> int:
    return max([len(col[0]), *(len(v) for v in col[2])])


def _fold_width(col: Column) -> int:
    """The narrowest a wrapping column gets: its longest word (an identifier is never broken), at least 12."""
    longest = max([0, *(len(w) for v in col[2] for w in v.split())])
    return min(_natural(col), max(12, longest, len(col[0])))


def table(title: str, cols: list[Column], console: Console, *, drop: Sequence[str] = (),
          fold: str | None = None) -> Table:
    """A table readable at the console's width: numbers never truncated ("8,…"); optional columns
    dropped (named in the caption) when the terminal is too narrow; ``fold`` wraps instead."""
    cols, hidden = fits(cols, console.width, drop=drop, fold=fold)
    room = console.width - 1 - sum(3 + _natural(c) for c in cols if c[0] != fold) - 3  # what the fold column has
    caption = f"hidden at {console.width} columns: {', '.join(hidden)} (widen the terminal or use --json)" if hidden else None
    t = Table(title=title, caption=caption, pad_edge=True)
    for name, just, cells in cols:
        justify: JustifyMethod = "left" if just == "left" else "right"
        if name == fold:  # wraps between words; a word (an identifier, a path) is broken only if wider than the screen
            width = _fold_width((name, justify, cells))
            t.add_column(name, justify=justify, overflow="fold", min_width=max(min(12, width), min(width, room)))
        else:
            t.add_column(name, justify=justify, no_wrap=True, min_width=_natural((name, justify, cells)))
    for row in zip(*(c[2] for c in cols), strict=True):
        t.add_row(*map(Text, row))  # cells are data (a memory's text, an action's reason), never markup
    return t


__all__ = ["ACTION_NAMES", "DEFAULT_MODEL", "SHORT", "STORE_HELP", "TENANT_HELP", "Column", "PlainProgress",
           "CLIENT_MODEL", "MODEL_OPTION", "action_name", "clean_errors", "console", "existing_store", "fail", "fits", "no_session", "one_line_warnings",
           "open_engine", "progress", "table", "warning_line", "window_hint"]
