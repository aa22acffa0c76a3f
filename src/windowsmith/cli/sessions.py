"""Commands over the sessions of an existing store: ``inspect``, ``diff``, ``sessions``, ``verify``, ``compact``,
``delete`` and ``gc``."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import click
from rich.markup import escape

from ..errors import WindowsmithError
from .helpers import (
    DEFAULT_MODEL,
    SHORT,
    STORE_HELP,
    TENANT_HELP,
    action_name,
    clean_errors,
    console,
    existing_store,
    fail,
    no_session,
    open_engine,
    table,
)

#: identifiers longer than this are counted, not shown, in the head of a cut's index (``inspect``'s actions)
INDEX_HEAD_CHARS = 24


def _action_label(a: dict[str, Any]) -> str:
    """``kind layer``, for a shrink the messages it shrank: ``shrink history (seq 1 6,812→1,190)``, for the
    model-free cut (an ``emergency`` record) the size and head of its identifier index:
    ``cut history (index 42: HAT170, a/b.py, KeyError +39)``."""
    label = f"{action_name(a['kind'])} {a['layer']}"
    detail = a.get("detail") or {}
    shrunk = detail.get("shrunk") if a["kind"] == "shrink" else None
    if shrunk:
        label += " (" + "; ".join(f"seq {x['seq']} {x['tokens_before']:,}→{x['tokens_after']:,}" for x in shrunk) + ")"
    index = detail.get("index") if a["kind"] == "emergency" else None
    if index:  # the head of the index: its first short identifiers, whole (a long path is only counted)
        head = [x for x in index if len(x) <= INDEX_HEAD_CHARS][:3]
        more = len(index) - len(head)
        label += f" (index {len(index)}: " + ", ".join(head) + (f" +{more}" if more else "") + ")"
    return label



@click.command()
@click.argument("session_id")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the manifests as JSON.")
@clean_errors
def inspect(session_id: str, store: str | None, tenant: str | None, as_json: bool) -> None:
    """Per-turn composition of every pack built for SESSION_ID."""
    from ..manifest import Manifest

    with existing_store(store, tenant) as st:
        if st.get_session(session_id) is None:
            no_session(session_id, st)
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
        *[(SHORT.get(n, n), "right", [f"{p.layers.get(n, {}).get('used', 0):,}" for p in packs]) for n in names],
        ("total", "right", [f"{p.tokens:,}" for p in packs]),
        ("fill", "right", [f"{p.fill:.0%}" for p in packs]),
        ("prefix", "right", [f"{p.cache.get('prefix_tokens', 0):,}" for p in packs]),
        ("actions", "left", [", ".join(_action_label(a) for a in p.actions) for p in packs]),
    ]
    optional = ["#", "seq", "prefix", *[SHORT.get(n, n) for n in reversed(names) if n != "history"]]
    con = console()
    con.print(table(f"session {session_id}: {len(packs)} pack(s)", cols, con, drop=optional, fold="actions"))
    lines = _retrieved_lines(packs)
    if lines:
        con.print("retrieved into the window (pack #, layer: id, source, score, why):")
        for line in lines:
            con.print(line, markup=False, overflow="fold")


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


@click.command()
@click.argument("pack_a")
@click.argument("pack_b")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@clean_errors
def diff(pack_a: str, pack_b: str, store: str | None, tenant: str | None, as_json: bool) -> None:
    """What changed between two packs (ids or unique prefixes) and where the cache prefix broke."""
    from ..manifest import Manifest
    from ..manifest import diff as diff_manifests

    with existing_store(store, tenant) as st:
        ma, mb = st.get_pack(pack_a), st.get_pack(pack_b)
        for pid, m in ((pack_a, ma), (pack_b, mb)):
            if m is None:
                fail(WindowsmithError(f"no pack {pid!r}; list packs with `windowsmith inspect SESSION`"))
    assert ma is not None and mb is not None
    d = diff_manifests(Manifest.from_dict(ma), Manifest.from_dict(mb))
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    c = console()
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
        c.print(f"  B: {action_name(a['kind'])} {a['layer']}: {a['reason']}", markup=False)


@click.command()
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@clean_errors
def sessions(store: str | None, tenant: str | None) -> None:
    """List the sessions in the store."""
    with existing_store(store, tenant) as st:
        records = st.list_sessions()
    cols: list[tuple[str, str, list[str]]] = [
        ("session", "left", [r.id for r in records]),
        ("events", "right", [f"{r.event_count:,}" for r in records]),
        ("created (UTC)", "left", [r.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") for r in records]),
    ]
    con = console()
    con.print(table(f"sessions ({len(records)})", cols, con, fold="session"))


@click.command()
@click.argument("session_id")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@clean_errors
def verify(session_id: str, store: str | None, tenant: str | None) -> None:
    """Recompute every hash of SESSION_ID's log and check the parent links."""
    with existing_store(store, tenant) as st:
        if st.get_session(session_id) is None:
            no_session(session_id, st)
        st.verify(session_id)
    click.echo(f"session {session_id}: log verified")


@click.command()
@click.argument("session_id")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Model whose window and prices to use.")
@click.option("--window", type=int, default=None, help="Override the model's context window (tokens).")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--reason", default=None, help="Why (recorded in the compaction record).")
@clean_errors
def compact(session_id: str, model: str, window: int | None, store: str | None, tenant: str | None,
            reason: str | None) -> None:
    """Compact SESSION_ID now: fold old tool results, summarize the oldest span (offline summarizer).

    Appends compaction records to the log; nothing is deleted."""
    with existing_store(store, tenant) as st, open_engine(model, st, window) as eng:
        if eng.store.get_session(session_id) is None:
            no_session(session_id, eng.store)
        result = eng.session(session_id).compact(reason=reason or "windowsmith compact")
    click.echo(result.describe())


@click.command()
@click.argument("session_id")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@clean_errors
def delete(session_id: str, store: str | None, tenant: str | None, yes: bool) -> None:
    """Delete SESSION_ID: its events, packs and blob references.

    Its blobs, and the space it took in the store, are freed by `windowsmith gc`."""
    with existing_store(store, tenant) as st:
        rec = st.get_session(session_id)
        if rec is None:
            no_session(session_id, st)
        if not yes:
            click.confirm(f"delete session {session_id!r} ({rec.event_count:,} events)?", abort=True, err=True)
        st.delete_session(session_id)
    click.echo(f"deleted session {session_id}; run `windowsmith gc` to free its blobs and shrink the store")


@click.command()
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--tenant", default=None, help=TENANT_HELP)
@click.option("--grace", "grace_seconds", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              help="Keep blob references younger than this many seconds (an append may still be on its way).")
@click.option("--no-vacuum", is_flag=True, help="Skip VACUUM (which rewrites a SQLite file and needs free space).")
@clean_errors
def gc(store: str | None, tenant: str | None, grace_seconds: float, no_vacuum: bool) -> None:
    """Free blobs no session uses (deleted sessions, lost appends), then VACUUM the store so deleted
    content leaves the file. Blobs are per tenant: --tenant frees that tenant's."""
    from ..artifacts import collect_garbage

    with existing_store(store, tenant) as st:
        r = collect_garbage(st, grace_seconds=grace_seconds, vacuum=not no_vacuum)
    click.echo(f"dropped {r['refs_dropped']:,} orphan reference(s), deleted {r['blobs_deleted']:,} blob(s); "
               f"store {r['bytes_before']:,} → {r['bytes_after']:,} bytes")


COMMANDS: tuple[click.Command, ...] = (inspect, diff, sessions, verify, compact, delete, gc)

__all__ = ["COMMANDS", "compact", "delete", "diff", "gc", "inspect", "sessions", "verify"]
