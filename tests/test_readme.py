"""The README's examples run, and every CLI command is documented there with help text."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from windowsmith.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    text = README.read_text()
    return [m.group(2) for m in re.finditer(r"```python([^\n]*)\n(.*?)```", text, re.S) if "no-test" not in m.group(1)]


def test_readme_python_examples_run(tmp_path, capsys, monkeypatch):
    # the examples write their stores in the working directory, as a user's would, and read the repository's
    # benchmark data and source by their paths in a checkout
    for name in ("benchmarks", "src"):
        (tmp_path / name).symlink_to(README.parent / name)
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks()
    assert len(blocks) >= 3
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), ns)
    ns["engine"].close()
    assert "tokens" in capsys.readouterr().out


def test_every_cli_command_is_documented_with_help():
    text = README.read_text()
    for name, cmd in main.commands.items():
        assert f"windowsmith {name}" in text, f"`windowsmith {name}` is not in the README"
        assert cmd.help, f"`windowsmith {name}` has no help text"
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
