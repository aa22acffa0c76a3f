"""Shared fixtures: engines over a fresh SQLite file, and where the real traces live.

Real trace data is read from the shared folder next to the checkout (``../shared/data/traces``), never by
an absolute path; tests that need it skip when it is absent.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import windowsmith as ws
from windowsmith.store import SQLiteStore, Store

#: The real traces (tau-bench, tau2-bench, SWE-agent, mini-swe-agent, OpenHands) shared by the team.
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
MODEL = "claude-sonnet-4-5"

#: The PostgreSQL server the store tests use (override with WINDOWSMITH_TEST_PG_DSN).
PG_DSN = os.environ.get(
    "WINDOWSMITH_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"
)


def new_pg_schema() -> Iterator[str]:
    """A fresh schema name on the test server, dropped afterwards; skips if the server is unreachable.
    The body of the ``pg_schema`` fixtures (per test here; per run in test_store)."""
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    try:
        admin = psycopg.connect(PG_DSN, autocommit=True)
    except psycopg.OperationalError as e:
        pytest.skip(
            f"PostgreSQL is not reachable at {PG_DSN!r} ({' '.join(str(e).split())[:120]}); start it or run -m 'not postgres'"
        )
    name = f"ws_test_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        admin.close()


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema for one test (see :func:`new_pg_schema`)."""
    yield from new_pg_schema()


def open_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "ws.db")
    from windowsmith.store.postgres import PostgresStore

    schema = request.getfixturevalue("pg_schema")
    store = PostgresStore(PG_DSN, schema=schema)
    pg_truncate(schema)  # one schema per run: each test starts from empty tables
    return store


def pg_truncate(schema: str) -> None:
    import psycopg
    from psycopg import sql

    tables = ["sessions", "events", "packs", "blobs", "blob_refs", "kv", "chunks"]
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("TRUNCATE {} CASCADE").format(sql.SQL(", ").join(sql.Identifier(schema, t) for t in tables))
        )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    s = open_backend(backend, tmp_path, request)
    try:
        yield s
    finally:
        s.close()


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


#: a model of the provider each request format goes to (a Claude engine rendering for OpenAI or Gemini
#: must name the model the request is for: ``build(fmt, model=model_for(fmt))``)
FORMAT_MODEL = {"anthropic": "claude-haiku-4-5", "openai-chat": "gpt-4.1", "openai-responses": "gpt-4.1", "gemini": "gemini-2.5-pro"}


def model_for(fmt: str) -> str:
    return FORMAT_MODEL[fmt]

#: skip a test that reads the shared traces when they are not next to the checkout
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available (../shared/data/traces)")


def replay_strategies(run: Any, cfg: Any, names: tuple[str, ...], tmp_path: Path) -> dict[str, Any]:
    """Each named strategy of the yardstick replayed over a prepared run (``bench.run.run_strategy``), closed after."""
    from windowsmith.bench.run import run_strategy
    from windowsmith.bench.strategies import make_strategy

    got = {}
    for name in names:
        s = make_strategy(name, cfg, tmp_dir=str(tmp_path))
        try:
            got[name] = run_strategy(run, s)
        finally:
            s.close()
    return got


def thought(text: str) -> ws.Thinking:
    """An Anthropic thinking block (a made-up signature: the bench and the engine never check it)."""
    return ws.Thinking(provider="anthropic", data={"type": "thinking", "thinking": text, "signature": "c2ln"}, text=text)


def lookup(s: ws.Session, i: int, *, think: bool = True, flights: int = 0) -> None:
    """One exchange of a customer-service agent: it thinks (or not) and looks up reservation ``i``; the result lists
    ``flights`` flights besides the route."""
    call = ws.ToolCall(f"c{i}", "get_reservation_details", {"reservation_id": f"R{i:05d}"})
    s.add(ws.Message("assistant", (thought(f"Look up reservation {i} before answering, carefully. " * 8), call)
                     if think else (call,)))
    result: dict[str, Any] = {"reservation_id": f"R{i:05d}", "origin": "JFK", "destination": "SEA"}
    if flights:
        result["flights"] = [{"flight": f"HAT{i * 7 + k:03d}", "date": f"2024-05-{k + 1:02d}", "status": "landed"}
                             for k in range(flights)]
    s.tool_result(f"c{i}", json.dumps(result))


def with_screenshots(messages: tuple[ws.Message, ...]) -> tuple[ws.Message, ...]:
    """A real run's messages with a screenshot after every tool result's content (an image by URL: a browser or
    computer-use agent; ``benchmarks/bench_stress.py``'s ``shots`` variant for agents with native tool calls)."""
    out = []
    for i, m in enumerate(messages):
        if m.role == "tool":
            m = ws.Message("tool", tuple(ws.ToolResult(r.call_id, (*r.content, ws.Image(url=f"https://shots.invalid/{i}.png")),
                                                       r.is_error, r.name) for r in m.tool_results))
        out.append(m)
    return tuple(out)


def item_lookup_session(e: Any, session_id: str, system: str, turns: int, *, price: bool = False) -> tuple[Any, list[Any]]:
    """A customer-service-like session (goal: refund order #W2378156) whose every turn looks up an item whose result
    names new ids (``HAT1nn``, ``SKU5nnnX``, ``wh_n_east``), with a build after each; at a small window the emergency
    stage cuts it every few calls. ``price``: the results also name a price."""
    s = e.session(session_id, goal="refund the damaged items of order #W2378156")
    s.system(system)
    s.user("Hi, my hat arrived damaged; order #W2378156.")
    packs = []
    for i in range(turns):
        s.assistant(f"Let me look up item {i}.", tool_calls=[{"id": f"c{i}", "name": "get_item",
                                                              "arguments": {"item_id": f"HAT{100 + i}"}}])
        cost = f'"price": {1000 + i}.5, ' if price else ""
        s.tool_result(f"c{i}", f'{{"item_id": "HAT{100 + i}", "sku": "SKU{5000 + i}X", {cost}'
                               f'"note": "{"in stock " * 30}", "warehouse": "wh_{i}_east"}}')
        packs.append(s.build())
    return s, packs
