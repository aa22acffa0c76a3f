"""The linters are part of the suite: ruff and mypy run clean on the shipped code."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def test_ruff_is_clean() -> None:
    r = subprocess.run([_tool("ruff"), "check", "src", "tests", "benchmarks"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_is_clean() -> None:
    r = subprocess.run([_tool("mypy"), "src"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
