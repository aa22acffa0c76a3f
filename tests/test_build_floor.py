"""The fixed cost of a build (what a small session pays on every turn) stays small: no memory search when the memory
holds nothing, one write transaction of two statements (three when a delta chain starts) to save the pack, none when the build repeats, and the
manifest turned into a dict without ``dataclasses.asdict``'s per-value checks. The statements are counted, never
timed (``benchmarks/bench_build.py`` times build() against LangChain's ``trim_messages``).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import windowsmith as ws
from windowsmith.model import Message, Text, ToolCall, ToolResult
from windowsmith.store import SQLiteStore


def _turn(i: int) -> list[Message]:
    return [Message("user", (Text(f"step {i}: check src/m{i}.py"),)),
            Message("assistant", (ToolCall(f"c{i}", "read", {"path": f"src/m{i}.py"}),)),
            Message("tool", (ToolResult(f"c{i}", f"def f_{i}(): return {i}\n" * 3),)),
            Message("assistant", (Text(f"done {i}"),))]


@contextmanager
def _statements(engine: ws.Engine) -> Iterator[list[str]]:
    store = engine.store
    assert isinstance(store, SQLiteStore)
    conn: sqlite3.Connection = store._conn  # type: ignore[assignment]
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def test_a_build_searches_no_empty_memory_and_saves_its_pack_in_one_short_transaction(tmp_path):
    with ws.Engine(model="gpt-4.1", store=tmp_path / "s.db") as engine:
        s = engine.session("s", goal="work through the items")
        for i in range(30):
            for m in _turn(i):
                s.add(m)
            s.build("openai-chat")
        s.user("one more step")
        with _statements(engine) as seen:
            s.build("openai-chat")
        assert not [q for q in seen if "chunks_fts" in q]  # nothing to find: no full-text search
        writes = seen[next(i for i, q in enumerate(seen) if q.startswith("BEGIN")):]
        # the session and the chain's last pack read in one statement, the row inserted (and, when the row starts a
        # new delta chain, its snapshot ord set)
        assert writes[-1] == "COMMIT" and writes[2].startswith("INSERT INTO packs"), writes
        assert len(writes) == 4 or (len(writes) == 5 and writes[3].startswith("UPDATE packs SET snap_ord")), writes
        with _statements(engine) as seen:
            again = s.build("openai-chat")  # nothing new: the same pack, saved already
        assert not [q for q in seen if q.startswith(("BEGIN", "INSERT"))], seen
        assert engine.store.get_pack(again.id) == again.manifest.to_dict()
        s.remember("the items to work through live in tests/unit", scope="session")
        with _statements(engine) as seen:
            pack = s.build("openai-chat")
        assert [q for q in seen if "chunks_fts" in q]  # something to find: searched
        assert "tests/unit" in json.dumps(pack.request)


def test_manifest_to_dict_is_asdict(tmp_path):
    with ws.Engine(model="gpt-4o-mini", store=tmp_path / "s.db", window=3_000) as engine:
        s = engine.session("s", goal="work through the items")
        packs = []
        for i in range(40):
            for m in _turn(i):
                s.add(m)
            packs.append(s.build("openai-chat"))
    assert any(p.manifest.actions for p in packs)
    for p in packs:
        d = p.manifest.to_dict()
        assert d == dataclasses.asdict(p.manifest)
        d["layers"]["history"]["used"] = -1  # a deep copy: the manifest keeps its own values
        d["cache"]["marks"].append("x")
        assert p.manifest.layers["history"]["used"] != -1 and "x" not in p.manifest.cache["marks"]
