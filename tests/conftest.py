"""Shared fixtures: engines over a fresh SQLite file, and where the real traces live.

Real trace data is read from the shared folder next to the checkout (``../shared/data/traces``), never by
an absolute path; tests that need it skip when it is absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import windowsmith as ws

#: The real traces (tau-bench, tau2-bench, SWE-agent, mini-swe-agent, OpenHands) shared by the team.
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
MODEL = "claude-sonnet-4-5"


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[Callable[..., ws.Engine]]:
    """``make_engine(**options)``: an Engine over ``tmp_path/ws.db`` (default model claude-sonnet-4-5),
    closed after the test."""
    opened: list[ws.Engine] = []

    def make(model: str = MODEL, **options: Any) -> ws.Engine:
        options.setdefault("store", tmp_path / "ws.db")
        e = ws.Engine(model=model, **options)
        opened.append(e)
        return e

    yield make
    for e in opened:
        e.close()


@pytest.fixture
def engine(make_engine: Callable[..., ws.Engine]) -> ws.Engine:
    """An Engine with the default settings over a fresh SQLite file."""
    return make_engine()


@pytest.fixture
def traces_dir() -> Path:
    """The shared real traces; skips the test when they are not there."""
    if not DATA.is_dir():
        pytest.skip("shared trace data not available (../shared/data/traces)")
    return DATA
