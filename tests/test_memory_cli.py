"""``windowsmith memory add|edit|promote|why`` on a SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import windowsmith as ws
from windowsmith.cli import main
from windowsmith.memory import MemoryConfig


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, list(args), catch_exceptions=False)


def test_memory_add_edit_promote_and_why(tmp_path: Path) -> None:
    db = str(tmp_path / "ws.db")
    with ws.Engine("gpt-4o", store=db, memory=MemoryConfig(project="shop")) as e:
        e.session("s1", goal="refund order 42").user("hello")
    r = run("memory", "add", "Refunds are confirmed by e-mail", "--project", "shop", "--subject", "refund confirmation",
            "--store", db, "--json")
    assert r.exit_code == 0, r.output
    old = json.loads(r.output)[0]
    assert old["scope"] == "project:shop" and old["provenance"]["subject"] == "refund confirmation"
    new = json.loads(run("memory", "add", "Refunds are confirmed by SMS", "--project", "shop", "--subject",
                         "refund confirmation", "--store", db, "--json").output)[0]
    r = run("memory", "edit", str(new["id"]), "Refunds over 500 EUR are confirmed by SMS", "--project", "shop",
            "--store", db, "--json")
    assert json.loads(r.output)[0]["text"] == "Refunds over 500 EUR are confirmed by SMS"
    assert run("memory", "edit", "999999", "x y", "--project", "shop", "--store", db).exit_code != 0
    lesson = json.loads(run("memory", "add", "the refund tool needs the order id with its # sign", "--session", "s1",
                            "--store", db, "--json").output)[0]
    assert lesson["scope"] == "session:s1"
    r = run("memory", "promote", str(lesson["id"]), "--session", "s1", "--project", "shop", "--store", db, "--json")
    moved = json.loads(r.output)[0]
    assert moved["scope"] == "project:shop" and moved["provenance"]["promoted_from"] == "session:s1"
    with ws.Engine("gpt-4o", store=db, memory=MemoryConfig(project="shop")) as e:
        s = e.session("s2", goal="refund order 42 over 500 EUR")
        s.user("How do we confirm refunds over 500 EUR to the customer?")
        pack = s.build()
    why = json.loads(run("memory", "why", pack.manifest.pack_id, str(new["id"]), "--project", "shop", "--store", db,
                         "--json").output)
    assert why["injected"] is True and why["reason"].startswith("injected")
    why = json.loads(run("memory", "why", pack.manifest.pack_id, str(old["id"]), "--project", "shop", "--store", db,
                         "--json").output)
    assert why["injected"] is False and f"superseded by item {new['id']}" in why["reason"]
    r = run("memory", "why", pack.manifest.pack_id, str(old["id"]), "--store", db)
    assert "not in a scope that session reads" in r.output
    assert run("memory", "why", "nopack", "1", "--store", db).exit_code != 0
