"""``--tenant`` on every CLI command that reads or changes a store: each tenant sees its own sessions,
packs, memory and history, on SQLite and on PostgreSQL (row-level security, an ordinary role)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import windowsmith as ws
from test_tenants import _pg_store
from windowsmith.cli import main
from windowsmith.memory import MemoryConfig


def run(*args: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "shared.db")
        return
    gen = _pg_store()
    make = next(gen)
    make().close()  # creates the schema's tables as the application role
    yield make.url  # type: ignore[attr-defined]
    with contextlib.suppress(StopIteration):
        next(gen)


def _fill(url: str) -> None:
    """Two tenants, one session each, with a pack, a project memory item and a searchable history."""
    for tenant in ("team-a", "team-b"):
        with ws.Engine("claude-sonnet-4-5", store=url, tenant=tenant, memory=MemoryConfig(project="shop")) as e:
            s = e.session(f"{tenant}-1", goal=f"fix the {tenant} build")
            s.user(f"the {tenant} build fails in pytest")
            s.assistant("running it", tool_calls=[{"id": f"{tenant}-c1", "name": "bash", "arguments": {"cmd": "pytest"}}])
            module = f"tests/test_{tenant.replace('-', '_')}.py"  # large: offloaded, so recall can find it
            s.tool_result(f"{tenant}-c1", "\n".join(f"FAILED {module}::test_checkout_{i} AssertionError: {i}"
                                                     for i in range(600)))
            s.build()
            s.remember(f"{tenant} deploys on fridays", scope="project")


@pytest.mark.slow
def test_every_store_command_sees_only_its_tenant(store_url: str) -> None:
    _fill(store_url)
    r = run("sessions", "--store", store_url, "--tenant", "team-a")
    assert r.exit_code == 0 and "team-a-1" in r.output and "team-b-1" not in r.output, r.output
    r = run("sessions", "--store", store_url)  # the default tenant has no session
    assert r.exit_code == 0 and "team-a-1" not in r.output and "team-b-1" not in r.output, r.output

    r = run("inspect", "team-a-1", "--store", store_url, "--tenant", "team-a", "--json")
    assert r.exit_code == 0 and len(json.loads(r.output)) == 1, r.output
    pack_a = json.loads(r.output)[0]["pack_id"]
    for cmd in (["inspect", "team-a-1"], ["verify", "team-a-1"], ["compact", "team-a-1"],
                ["delete", "team-a-1", "--yes"], ["recall", "team-a-1", "pytest"]):
        r = run(*cmd, "--store", store_url, "--tenant", "team-b")
        assert r.exit_code == 2, (cmd, r.output)
        assert "no session 'team-a-1' in the store of tenant 'team-b'; list them with " \
               "`windowsmith sessions --tenant team-b`" in r.output, (cmd, r.output)
    r = run("diff", pack_a, pack_a, "--store", store_url, "--tenant", "team-b")
    assert r.exit_code == 2 and "no pack" in r.output
    assert run("diff", pack_a, pack_a, "--store", store_url, "--tenant", "team-a").exit_code == 0
    assert run("verify", "team-a-1", "--store", store_url, "--tenant", "team-a").exit_code == 0

    r = run("recall", "team-a-1", "test_checkout", "--store", store_url, "--tenant", "team-a")
    assert r.exit_code == 0 and "test_team_a.py" in r.output and "team_b" not in r.output, r.output

    for me, other in (("team-a", "team-b"), ("team-b", "team-a")):
        r = run("memory", "list", "--store", store_url, "--tenant", me, "--project", "shop", "--json")
        items = json.loads(r.output)
        assert [m["text"] for m in items] == [f"{me} deploys on fridays"], r.output
        r = run("memory", "search", "deploys fridays", "--store", store_url, "--tenant", me, "--project", "shop",
                "--json")
        assert [m["text"] for m in json.loads(r.output)] == [f"{me} deploys on fridays"], r.output
        r = run("memory", "forget", str(items[0]["id"]), "--store", store_url, "--tenant", other, "--project", "shop")
        assert r.exit_code == 2, r.output  # another tenant's item is not there to forget
    assert json.loads(run("memory", "list", "--store", store_url, "--project", "shop", "--json").output) == []

    r = run("memory", "list", "--store", store_url, "--tenant", "team-b", "--session", "team-a-1")
    assert r.exit_code == 2 and "of tenant 'team-b'" in r.output
    r = run("delete", "team-a-1", "--store", store_url, "--tenant", "team-a", "--yes")
    assert r.exit_code == 0, r.output
    # blobs are per tenant: only gc as the tenant frees the deleted session's
    assert "deleted 0 blob(s)" in run("gc", "--store", store_url, "--grace", "0").output
    r = run("gc", "--store", store_url, "--tenant", "team-b", "--grace", "0")
    assert r.exit_code == 0 and "deleted 0 blob(s)" in r.output, r.output
    r = run("gc", "--store", store_url, "--tenant", "team-a", "--grace", "0")
    assert r.exit_code == 0 and "deleted 0 blob(s)" not in r.output and "deleted " in r.output, r.output
    r = run("sessions", "--store", store_url, "--tenant", "team-b")
    assert "team-b-1" in r.output  # the other tenant's session is untouched


@pytest.mark.parametrize("tenant", [" padded", "x" * 300, "tab\there"])
def test_an_invalid_tenant_is_one_line_and_changes_nothing(tmp_path: Path, tenant: str) -> None:
    db = tmp_path / "ws.db"
    ws.Engine("claude-sonnet-4-5", store=db).close()
    before = db.read_bytes()
    for cmd in (["sessions"], ["memory", "list", "--project", "p"], ["recall", "s", "q"], ["gc"]):
        r = run(*cmd, "--store", str(db), "--tenant", tenant)
        assert r.exit_code == 2 and r.output.startswith("error: tenant ") and "Traceback" not in r.output, r.output
    assert db.read_bytes() == before
