"""CLI commands over what goes in besides the transcript: ``instructions``, ``memory``, ``recall``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..errors import WindowsmithError
from .helpers import STORE_HELP, TENANT_HELP, clean_errors, console, existing_store, fail, no_session, table


@click.command()
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--user-dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="User-global folder with AGENTS.md, CLAUDE.md, instructions/*.md.")
@click.option("--json", "as_json", is_flag=True, help="Print the files (with their loaded text) as JSON.")
@clean_errors
def instructions(path: Path, user_dir: Path | None, as_json: bool) -> None:
    """Which instruction files under PATH load, in what order and how large."""
    from ..instructions import TOTAL_CHARS, discover

    files = discover(path, user_dir)
    if as_json:
        click.echo(json.dumps([{**f.to_dict(), "duplicate_of": f.duplicate_of} for f in files], indent=2))
        return
    loaded = [f for f in files if f.duplicate_of is None]
    number = {f.path: i for i, f in enumerate(files, 1)}
    cols: list[tuple[str, str, list[str]]] = [
        ("#", "right", [str(i) for i in range(1, len(files) + 1)]),
        ("file", "left", [f.path for f in files]),
        ("chars", "right", [f"{f.chars:,}" for f in files]),
        ("loaded", "right", [f"{len(f.text):,}" if f.duplicate_of is None else "0" for f in files]),
        ("note", "left", [_note(f, number) for f in files]),
        ("applies", "left", ["always" if not f.scope else f"under {f.scope}/" for f in files]),
    ]
    con = console()
    total = sum(len(f.text) for f in loaded)
    # the file is the key: it stays whole; where the screen is narrow "applies" goes first (a file applies under
    # its own folder), the note (short: "dup of #1") stays
    con.print(table(f"{len(loaded)} instruction file(s), {total:,} of {TOTAL_CHARS:,} chars", cols, con,
                    drop=["applies"], fold="note"))


def _note(f: Any, number: dict[str, int]) -> str:
    """What to know about a file in one short cell: ``dup of #1`` (not loaded twice), ``truncated``."""
    if f.duplicate_of:
        n = number.get(f.duplicate_of)
        return f"dup of #{n}" if n is not None else f"duplicate of {f.duplicate_of}"
    return "truncated" if f.truncated else ""


@click.group()
def memory() -> None:
    """List, search and forget long-term memory items."""


def _memory(st: Any, session_id: str | None, project: str | None, user: str | None) -> Any:
    from ..memory import Memory, MemoryConfig

    if session_id is not None and st.get_session(session_id) is None:
        no_session(session_id, st)
    if session_id is None and not project and not user:
        fail(WindowsmithError("name what to read: --session ID, --project NAME and/or --user NAME"))
    return Memory(st, session_id, MemoryConfig(project=project, user=user))


_SCOPE_OPTS = [
    click.option("--store", default=None, help=STORE_HELP),
    click.option("--tenant", default=None, help=TENANT_HELP),
    click.option("--session", "session_id", default=None, help="A session's own memory."),
    click.option("--project", default=None, help="A project's memory."),
    click.option("--user", default=None, help="A user's memory."),
    click.option("--json", "as_json", is_flag=True, help="Print JSON."),
]


def _scoped(fn: Any) -> Any:
    for opt in reversed(_SCOPE_OPTS):
        fn = opt(fn)
    return fn


def _print_items(items: list[Any], title: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([{"id": m.id, "scope": m.scope, "text": m.text, "source": m.source, "trusted": m.trusted,
                                "provenance": m.provenance, "created_at": m.created_at.isoformat(),
                                "used_at": m.used_at.isoformat() if m.used_at else None, "uses": m.uses,
                                "score": m.score, "why": m.why} for m in items], indent=2))
        return
    cols: list[tuple[str, str, list[str]]] = [
        ("id", "right", [str(m.id) for m in items]),
        ("scope", "left", [m.scope.split(":", 1)[0] for m in items]),
        ("source", "left", [m.source + ("" if m.trusted else " (untrusted)") for m in items]),
        ("uses", "right", [str(m.uses) for m in items]),
        ("text", "left", [m.text for m in items]),
    ]
    con = console()
    con.print(table(title, cols, con, drop=["uses", "source"], fold="text"))


@memory.command("list")
@_scoped
@clean_errors
def memory_list(store: str | None, tenant: str | None, session_id: str | None, project: str | None, user: str | None,
                as_json: bool) -> None:
    """Memory items of a session, project or user, oldest first."""
    with existing_store(store, tenant) as st:
        items = _memory(st, session_id, project, user).list()
    _print_items(items, f"{len(items)} memory item(s)", as_json)


def _query(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A search of at least one word (an empty one matched nothing and said nothing, or answered in a tool's terms)."""
    if not value.strip():
        raise click.BadParameter("give the words to search for, e.g. 'IntegrityError models.py'")
    return value


@memory.command("search")
@click.argument("query", callback=_query)
@_scoped
@clean_errors
def memory_search(query: str, store: str | None, tenant: str | None, session_id: str | None, project: str | None,
                  user: str | None, as_json: bool) -> None:
    """Memory items relevant to QUERY, best first."""
    with existing_store(store, tenant) as st:
        items = _memory(st, session_id, project, user).search(query)
    _print_items(items, f"{len(items)} match(es) for {query!r}", as_json)


@memory.command("forget")
@click.argument("item_id", type=int)
@_scoped
@clean_errors
def memory_forget(item_id: int, store: str | None, tenant: str | None, session_id: str | None, project: str | None,
                  user: str | None, as_json: bool) -> None:
    """Delete memory item ITEM_ID (from the scopes named)."""
    with existing_store(store, tenant) as st:
        ok = _memory(st, session_id, project, user).forget(item_id)
    if not ok:
        fail(WindowsmithError(f"no memory item {item_id} in those scopes; list them with `windowsmith memory list`"))
    click.echo(json.dumps({"forgot": item_id}) if as_json else f"forgot memory item {item_id}")


@click.command()
@click.argument("session_id")
@click.argument("query", callback=_query)
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--limit", type=click.IntRange(1, 20), default=5, show_default=True, help="Snippets to show.")
@clean_errors
def recall(session_id: str, query: str, store: str | None, tenant: str | None, limit: int) -> None:
    """Search SESSION_ID's whole history (compacted spans, offloaded and folded results) for QUERY."""
    from ..engine import Engine

    with existing_store(store, tenant) as st:
        if st.get_session(session_id) is None:
            no_session(session_id, st)
        with Engine("gpt-4o", store=st) as e:
            click.echo(e.session(session_id).search_history(query, limit=limit))


COMMANDS: tuple[click.Command, ...] = (instructions, memory, recall)

__all__ = ["COMMANDS", "instructions", "memory", "recall"]
