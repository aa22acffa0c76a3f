"""``windowsmith map``: a budgeted map of a code base (the ``codemap`` extra)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..codemap import CodeMap
from ..errors import WindowsmithError
from .helpers import fail, progress

#: off a terminal, ``map`` says how far it got every this many files (a large tree takes minutes to parse)
PROGRESS_EVERY = 1000


@click.command("map")
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
        with progress(f"mapping {path}", None, unit="files", every=PROGRESS_EVERY, quiet=as_json) as advance:
            cm = CodeMap(path, cache=cache, on_file=lambda: advance(1))
        text = cm.render(budget, focus, names)
    except WindowsmithError as e:
        fail(e)
    if as_json:
        click.echo(json.dumps({"map": text, "update": cm.last_update.to_dict()}, indent=1))
        return
    if not cm.last_update.files:  # (an empty line said nothing: a wrong directory, or a language it does not read)
        from ..codemap import EXTENSIONS

        click.echo(f"no source files under {path} that the map reads ({', '.join(sorted(EXTENSIONS))}); "
                   "nothing to map", err=True)
        return
    click.echo(text)


COMMANDS: tuple[click.Command, ...] = (map_cmd,)

__all__ = ["COMMANDS", "PROGRESS_EVERY", "map_cmd"]
