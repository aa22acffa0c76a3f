"""The ``windowsmith`` command line: thin click commands over the public API.

One module per topic, each listing its commands in ``COMMANDS``: :mod:`.demo` (``demo``), :mod:`.replay` (``replay``),
:mod:`.bench` (``bench``), :mod:`.sessions` (``inspect``, ``diff``, ``sessions``, ``verify``, ``compact``,
``delete``, ``gc``), :mod:`.context` (``instructions``, ``memory``, ``recall``), :mod:`.codemap` (``map``) and
:mod:`.serve` (``serve``), :mod:`.migrate` (``migrate``); :mod:`.helpers` holds what they share (one-line errors and warnings, progress, the store, tables).
"""

from __future__ import annotations

import click

from . import bench, codemap, context, demo, migrate, replay, serve, sessions


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="windowsmith")
def main() -> None:
    """windowsmith: budgeted, cache-ordered context windows for LLM agents."""


for _module in (demo, replay, bench, sessions, context, codemap, serve, migrate):
    for _command in _module.COMMANDS:
        main.add_command(_command)

__all__ = ["main"]
