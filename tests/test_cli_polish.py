"""What a CLI user reads: warnings as one line naming the option, no retired default model, progress on a
non-terminal, tables that keep identifiers whole at 80 columns, and the routine cut named for what it is."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from windowsmith.cli import main
from windowsmith.cli.helpers import CLIENT_MODEL, progress, warning_line
from windowsmith.errors import ModelRetiredWarning
from windowsmith.registry import load_registry
from windowsmith.traces import demo_trace_path

RETIRED = "claude-sonnet-4-5"


def run(*args: str, width: int | None = None):
    env = {"COLUMNS": str(width)} if width else None  # rich reads the width from COLUMNS off a terminal
    return CliRunner(env=env).invoke(main, list(args), catch_exceptions=False, terminal_width=width)


def test_a_retired_model_is_one_warning_line_naming_the_option(tmp_path):
    spec = load_registry().get(RETIRED)
    assert spec.retired() and spec.successor  # the registry's data: retired 2026-11-30
    r = run("replay", str(demo_trace_path()), "--model", RETIRED, "--store", str(tmp_path / "ws.db"))
    assert r.exit_code == 0, r.output
    lines = [line for line in r.output.splitlines() if "retired" in line]
    assert lines == [f"warning: model '{RETIRED}' was retired by its provider on {spec.retires}: requests for it will "
                     f"be refused; pass --model {spec.successor}"]
    assert "Engine(" not in r.output and "ModelRetiredWarning" not in r.output and "warnings.warn" not in r.output


def test_every_command_shows_warnings_as_one_line(tmp_path):
    """A warning raised anywhere under a command (here: inside ``compact``) reaches the user as one line."""
    db = str(tmp_path / "ws.db")
    assert run("demo", "--trace", str(demo_trace_path()), "--store", db, "--json").exit_code == 0
    r = run("compact", "demo", "--store", db, "--model", RETIRED)
    assert r.exit_code == 0, r.output
    assert sum("warning: model" in line for line in r.output.splitlines()) == 1
    assert not re.search(r"\.py:\d+", r.output)  # no source location, no source line


def test_the_serve_warning_names_what_the_client_sends():
    w = ModelRetiredWarning(f"model '{RETIRED}' was retired by its provider on 2026-11-30: requests for it will be "
                            "refused; switch to 'claude-sonnet-5-5' (Engine(model=...))")
    assert warning_line(w) == (f"warning: model '{RETIRED}' was retired by its provider on 2026-11-30: requests for "
                               "it will be refused; pass --model claude-sonnet-5-5")
    assert warning_line(w, model=CLIENT_MODEL).endswith("; have the client ask for 'claude-sonnet-5-5'")
    assert warning_line(UserWarning("a\n  b")) == "warning: a b"


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in group.commands.items():
        out.append((prefix + name, cmd))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, prefix + name + " ")
    return out


def test_no_command_defaults_to_a_retired_model():
    registry = load_registry()
    checked = 0
    for name, cmd in _commands(main):
        for p in cmd.params:
            if p.name == "model" and isinstance(p.default, str):
                checked += 1
                assert not registry.get(p.default).retired(), f"windowsmith {name} defaults to a retired model"
    assert checked >= 4  # demo, replay, bench, compact


def test_progress_is_a_plain_line_every_n_items_off_a_terminal(capsys):
    with progress("mapping src", None, unit="files", every=2) as advance:
        for _ in range(5):
            advance(1)
    err = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in err] == ["mapping src: 2 files", "mapping src: 4 files"]
    with progress("replaying x", 3, unit="calls", every=10) as advance:
        for _ in range(3):
            advance(1)
    assert capsys.readouterr().err.startswith("replaying x: 3/3 calls")  # the end is always said
    with progress("quiet", 3, quiet=True) as advance:
        advance(3)
    assert capsys.readouterr().err == ""


def test_map_reports_progress_off_a_terminal(tmp_path, monkeypatch):
    pytest.importorskip("tree_sitter")
    for i in range(5):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    monkeypatch.setattr("windowsmith.cli.codemap.PROGRESS_EVERY", 2)
    r = CliRunner().invoke(main, ["map", str(tmp_path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    said = [line.split(",")[0] for line in r.output.splitlines() if line.startswith("mapping ")]
    assert said == [f"mapping {tmp_path}: 2 files", f"mapping {tmp_path}: 4 files"]


def _instruction_tree(root: Path) -> None:
    deep = root / "packages" / "frontend" / "components"
    deep.mkdir(parents=True)
    (root / "AGENTS.md").write_text("Use pytest. Run ruff.\n")
    (root / "CLAUDE.md").write_text("Use pytest. Run ruff.\n")
    (deep / "CLAUDE.md").write_text("Components: keep them small.\n")


def test_instructions_keeps_the_file_and_its_note_at_80_columns(tmp_path):
    _instruction_tree(tmp_path)
    r = run("instructions", str(tmp_path), width=80)
    assert r.exit_code == 0, r.output
    assert all(len(line) <= 80 for line in r.output.splitlines())
    assert "packages/frontend/components/CLAUDE.md" in r.output  # the key column, whole
    assert "dup of #1" in r.output  # the note stays
    wide = run("instructions", str(tmp_path), width=160)
    assert "under packages/frontend/components/" in wide.output


def test_inspect_at_80_columns_never_breaks_an_identifier(tmp_path):
    db = str(tmp_path / "ws.db")
    assert run("demo", "--store", db, "--json").exit_code == 0  # the bundled run on 16K: three cuts
    packs = json.loads(run("inspect", "demo", "--store", db, "--json").output)
    r = run("inspect", "demo", "--store", db, width=80)
    out = r.output
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "cut history (index" in out and "emergency" not in out
    cells = " ".join(line.split("│")[-2] for line in out.splitlines() if line.count("│") > 2)
    for p in packs:
        assert p["pack_id"][:15] in out
        for a in p["actions"]:
            for x in (a.get("detail") or {}).get("index", [])[:3]:
                if len(x) <= 24:
                    assert x in cells.split() or f"{x}," in cells.split(), x  # whole, on one line


def test_the_cut_is_named_for_what_it_is_in_the_manifest_and_compact(tmp_path):
    db = str(tmp_path / "ws.db")
    assert run("demo", "--store", db, "--json").exit_code == 0
    packs = json.loads(run("inspect", "demo", "--store", db, "--json").output)
    cuts = [a for p in packs for a in p["actions"] if a["kind"] == "emergency"]  # the kind on disk is unchanged
    assert cuts and all("model-free cut" in a["reason"] and "emergency" not in a["reason"] for a in cuts)
