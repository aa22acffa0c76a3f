"""CLI commands over what goes in besides the transcript: ``instructions``, ``memory``, ``recall``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
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
    """List, search, add, edit, promote and forget long-term memory items; say why one was injected."""


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


_SCOPE_CHOICE = click.Choice(["session", "project", "user"])


@memory.command("add")
@click.argument("text", callback=_query)
@click.option("--scope", "target", type=_SCOPE_CHOICE, default=None,
              help="Where to keep it (default: the narrowest scope named: session, else project, else user).")
@click.option("--subject", default=None, help="What it is about; it supersedes older items on the same subject.")
@click.option("--expires-days", type=click.FloatRange(min=0, min_open=True), default=None, help="Forget it after N days.")
@_scoped
@clean_errors
def memory_add(text: str, target: str | None, subject: str | None, expires_days: float | None, store: str | None,
               tenant: str | None, session_id: str | None, project: str | None, user: str | None, as_json: bool) -> None:
    """Remember TEXT (redacted; a near-duplicate is merged into the item it repeats)."""
    scope = target or ("session" if session_id else "project" if project else "user")
    with existing_store(store, tenant) as st:
        item = _memory(st, session_id, project, user).add(text, scope=scope, subject=subject, expires_days=expires_days)
    if item is None:  # pragma: no cover - only named writes (lessons) return None
        fail(WindowsmithError("nothing added"))
    _print_items([item], f"memory item {item.id}", as_json)


@memory.command("edit")
@click.argument("item_id", type=int)
@click.argument("text", callback=_query)
@_scoped
@clean_errors
def memory_edit(item_id: int, text: str, store: str | None, tenant: str | None, session_id: str | None,
                project: str | None, user: str | None, as_json: bool) -> None:
    """Replace the text of memory item ITEM_ID with TEXT (redacted)."""
    with existing_store(store, tenant) as st:
        item = _memory(st, session_id, project, user).replace(item_id, text)
    if item is None:
        fail(WindowsmithError(f"no memory item {item_id} in those scopes; list them with `windowsmith memory list`"))
    _print_items([item], f"memory item {item_id}", as_json)


@memory.command("promote")
@click.argument("item_id", type=int)
@click.option("--to", "target", type=click.Choice(["project", "user"]), default="project", show_default=True,
              help="The scope to move it to.")
@_scoped
@clean_errors
def memory_promote(item_id: int, target: str, store: str | None, tenant: str | None, session_id: str | None,
                   project: str | None, user: str | None, as_json: bool) -> None:
    """Move memory item ITEM_ID (e.g. a session's lesson) to the project or user scope, with its provenance."""
    with existing_store(store, tenant) as st:
        item = _memory(st, session_id, project, user).promote(item_id, target)
    if item is None:
        fail(WindowsmithError(f"no memory item {item_id} in those scopes; list them with `windowsmith memory list`"))
    _print_items([item], f"memory item {item.id} ({target})", as_json)


@memory.command("why")
@click.argument("pack_id")
@click.argument("item_id", type=int)
@click.option("--project", default=None, help="The project the pack's engine shared memory with.")
@click.option("--user", default=None, help="The user the pack's engine shared memory with.")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@clean_errors
def memory_why(pack_id: str, item_id: int, project: str | None, user: str | None, store: str | None,
               tenant: str | None, as_json: bool) -> None:
    """Why memory item ITEM_ID was or was not injected in pack PACK_ID (an id or a unique prefix)."""
    with existing_store(store, tenant) as st:
        manifest = st.get_pack(pack_id)
        if manifest is None:
            fail(WindowsmithError(f"no pack {pack_id!r}; list a session's packs with `windowsmith packs SESSION`"))
        got = {"pack": pack_id, "item": item_id, **why_item(st, manifest, item_id, project, user)}
    click.echo(json.dumps(got) if as_json else f"memory item {item_id} in pack {pack_id}: {got['reason']}")


def why_item(st: Any, manifest: dict[str, Any], item_id: int, project: str | None, user: str | None) -> dict[str, Any]:
    """Whether the pack's MEMORY section held the item, and the reason."""
    from ..memory import Memory, MemoryConfig, live

    used = (manifest.get("layers") or {}).get("memory", {}).get("retrieved") or []
    entry = next((e for e in used if e.get("id") == item_id), None)
    if entry is not None:
        terms = ", ".join(entry.get("matched", [])) or entry.get("why", "related")
        return {"injected": True, "score": entry.get("score"),
                "reason": f"injected (score {entry.get('score')}, {terms})"}
    item = Memory(st, manifest.get("session_id"), MemoryConfig(project=project, user=user)).get(item_id)
    if item is None:
        reason = "not injected: the item is not in a scope that session reads (pass --project/--user as its engine did)"
    elif "superseded_by" in item.provenance:
        reason = f"not injected: superseded by item {item.provenance['superseded_by']} on the same subject"
    elif not live(item.provenance, datetime.now(UTC)):
        reason = f"not injected: expired ({item.provenance.get('expires')})"
    else:
        reason = ("not injected: not among the best items for that pack's task and newest turn (below the relevance "
                  "floor, or outranked within the MEMORY budget)")
    return {"injected": False, "reason": reason}


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
