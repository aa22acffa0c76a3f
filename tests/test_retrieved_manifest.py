"""What the retrieval layers (MEMORY, KNOWLEDGE, RECALL) put in a window is recorded in the pack's
manifest (ids, sources, scores, matched terms; never the text) and shown by ``windowsmith inspect``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import windowsmith as ws
from windowsmith.cli import main
from windowsmith.layers.builtin import default_layers
from windowsmith.memory import MemoryConfig

MODEL = "claude-sonnet-4-5"


def run(*args: str) -> Any:
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, list(args), catch_exceptions=False)


def _texts(entries: list[dict[str, Any]]) -> str:
    return json.dumps(entries)


def test_memory_and_knowledge_items_are_recorded_with_id_source_and_score(tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    with ws.Engine(MODEL, store=db, memory=MemoryConfig(project="shop")) as e:
        e.knowledge.add("# Refunds\n\nRefunds over 500 EUR need the approve_refund tool and a manager's ok.\n",
                        name="docs/refunds.md")
        s = e.session("t-1", goal="refund order 42 for the customer")
        kept = s.remember("the customer prefers refunds to store credit", scope="project")
        other = s.remember("deploys happen on fridays", scope="project")
        assert kept is not None and other is not None
        s.user("please refund order 42, it is over 500 EUR")
        pack = s.build()
    layers = pack.manifest.layers
    mem = layers["memory"]["retrieved"]
    assert kept.id in [r["id"] for r in mem]
    for r in mem:
        assert set(r) <= {"id", "source", "score", "matched", "scope", "why"}
        assert r["source"] == "user" and r["scope"] == "project" and r["score"] > 0
    know = layers["knowledge"]["retrieved"]
    assert len(know) == 1 and know[0]["source"].startswith("docs/refunds.md#L")
    assert know[0]["score"] > 0 and "refund" in " ".join(know[0]["matched"])
    assert len(mem) == layers["memory"]["items"] and len(know) == layers["knowledge"]["items"]
    # ids and scores only: the text stays in the request
    assert "store credit" not in _texts(mem) and "approve_refund" not in _texts(know)
    assert "store credit" in json.dumps(pack.request)
    # the stored manifest keeps them, and inspect says what went in and why
    r = run("inspect", "t-1", "--store", str(db), "--json")
    assert json.loads(r.output)[-1]["layers"]["memory"]["retrieved"] == mem
    r = run("inspect", "t-1", "--store", str(db))
    assert r.exit_code == 0, r.output
    assert "retrieved into the window" in r.output
    assert f"#1 memory: {kept.id} user (project) score " in r.output
    assert f"#1 knowledge: {know[0]['id']} {know[0]['source']} score {know[0]['score']}  matched " in r.output


def test_recalled_snippets_are_recorded_with_their_artifact_lines(tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    with ws.Engine(MODEL, store=db, layers=lambda: default_layers(recall=True)) as e:
        s = e.session("t-2", goal="fix the failing checkout tests")
        s.user("run the tests")
        s.assistant("running", tool_calls=[{"id": "c1", "name": "bash", "arguments": {"cmd": "pytest"}}])
        # large: offloaded, and its view lists the first lines only
        s.tool_result("c1", "\n".join(f"tests/test_shop.py::test_case_{i} PASSED with fixture shop_fixture_{i * 7}"
                                       for i in range(400)))
        s.assistant("looking at it")
        s.user("what did shop_fixture_1652 print?")
        pack = s.build()
    rec = pack.manifest.layers.get("recall", {}).get("retrieved", [])
    assert rec, pack.manifest.layers.get("recall")
    for r in rec:
        assert r["source"].startswith("artifact://") and r["source"] in pack.manifest.artifacts
        assert len(r["lines"]) == 2 and r["lines"][0] <= r["lines"][1] and r["score"] > 0
    assert any("shop_fixture_1652" in r.get("matched", []) for r in rec)
    assert "shop_fixture_1610" not in json.dumps(rec)  # what the snippet adds stays in the request
    r = run("inspect", "t-2", "--store", str(db))
    assert "recall: " in r.output and "#L" in r.output


def test_a_build_without_retrieval_records_none(tmp_path: Path) -> None:
    with ws.Engine(MODEL, store=tmp_path / "ws.db") as e:
        s = e.session("t-3")
        s.user("hello")
        pack = s.build()
        assert all("retrieved" not in usage for usage in pack.manifest.layers.values())
        r = run("inspect", "t-3", "--store", str(tmp_path / "ws.db"))
        assert r.exit_code == 0 and "retrieved into the window" not in r.output
