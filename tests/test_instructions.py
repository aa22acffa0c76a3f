"""Instruction files: discovery, order, dedup, caps, scoping by touched paths, cache-safe placement, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import windowsmith as ws
from conftest import open_backend
from test_store import pg_schema  # noqa: F401  (fixture)
from windowsmith.cli import main
from windowsmith.errors import UsageError
from windowsmith.instructions import PER_FILE_CHARS, TOTAL_CHARS, TRUNCATED, cap, discover, in_scope

REPO = Path(__file__).resolve().parents[1]


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "proj"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / ".windowsmith" / "instructions").mkdir(parents=True)
    (root / "node_modules" / "x").mkdir(parents=True)
    (root / "AGENTS.md").write_text("Run tests with pytest -q.\n")
    (root / "CLAUDE.md").write_text("Run   tests with pytest -q.\n")  # same text: a duplicate
    (root / ".windowsmith" / "instructions" / "b.md").write_text("Style: ruff, 120 columns.\n")
    (root / ".windowsmith" / "instructions" / "a.md").write_text("Never push to main.\n")
    (root / "pkg" / "AGENTS.md").write_text("pkg: keep the public API in __init__.py.\n")
    (root / "pkg" / "sub" / "CLAUDE.md").write_text("sub: " + "long rule line\n" * 600)
    (root / "node_modules" / "x" / "AGENTS.md").write_text("never loaded\n")
    user = tmp_path / "home"
    (user / "instructions").mkdir(parents=True)
    (user / "AGENTS.md").write_text("Answer in English.\n")
    return root, user


def test_discovery_order_dedup_and_caps(tmp_path: Path) -> None:
    root, user = _tree(tmp_path)
    files = discover(root, user)
    assert [f.path for f in files] == [
        "~user/AGENTS.md", "AGENTS.md", "CLAUDE.md", ".windowsmith/instructions/a.md", ".windowsmith/instructions/b.md",
        "pkg/AGENTS.md", "pkg/sub/CLAUDE.md",
    ]
    assert [f.origin for f in files][:2] == ["user", "root"]
    dup = files[2]
    assert dup.duplicate_of == "AGENTS.md" and dup.text == ""
    big = files[-1]
    assert big.scope == "pkg/sub" and big.truncated and big.text.endswith(TRUNCATED) and len(big.text) <= PER_FILE_CHARS
    assert files[-2].scope == "pkg" and not files[-2].truncated
    assert discover(root, user) == files  # stable


def test_total_cap_is_kept_across_files(tmp_path: Path) -> None:
    root = tmp_path / "r"
    for i in range(6):
        (root / f"d{i}").mkdir(parents=True)
        (root / f"d{i}" / "AGENTS.md").write_text(f"rules {i}\n" + f"line {i}\n" * 800)
    files = discover(root)
    assert sum(len(f.text) for f in files) <= TOTAL_CHARS
    assert all(f.truncated for f in files)
    assert cap("abc", 10) == ("abc", False)
    with pytest.raises(UsageError, match="not a folder"):
        discover(root / "nope")


def test_in_scope() -> None:
    assert in_scope("/w/proj/pkg/a.py", "pkg", "/w/proj")
    assert in_scope("pkg/sub/x.py", "pkg", "/w/proj")
    assert in_scope("./pkg/x.py", "pkg", "")
    assert not in_scope("pkgx/a.py", "pkg", "/w/proj")
    assert not in_scope("/w/proj/other/a.py", "pkg", "/w/proj")


def _request_text(p: ws.Pack) -> str:
    return json.dumps(p.request)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_scoped_file_joins_the_tail_when_touched_then_the_cache_at_compaction(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    root, user = _tree(tmp_path)
    store = open_backend(backend, tmp_path, request)
    with ws.Engine("gpt-4o", store=store) as e:
        s = e.session("i")
        s.user("tidy the package")
        files = s.instructions(root=root, user_dir=user)
        assert len(files) == 7
        n_events = len(s.store.events("i"))
        s.instructions(root=root, user_dir=user)  # unchanged: nothing appended
        assert len(s.store.events("i")) == n_events
        p1 = s.build("anthropic", model="claude-sonnet-4-5")
        text = _request_text(p1)
        assert "Answer in English." in text and "Never push to main." in text and "pkg: keep" not in text
        assert text.index("Answer in English.") < text.index("tidy the package")  # session context before history
        s.assistant([ws.ToolCall("c1", "read_file", {"path": str(root / "pkg" / "mod.py")})])
        s.tool_result("c1", "x = 1")
        p2 = s.build("anthropic", model="claude-sonnet-4-5")
        text2 = _request_text(p2)
        assert "pkg: keep the public API" in text2 and "sub: long" not in text2
        # newly in scope: in the dynamic tail, so the cached prefix of p1 is still the prefix of p2
        n = p1.rendered.cache_prefix_parts
        assert n >= 2 and p2.rendered.parts[:n] == p1.rendered.parts[:n]
        assert "## INSTRUCTIONS" in (p2.neutral.tail or "") and "pkg: keep" in (p2.neutral.tail or "")
        # after a compaction the file is part of the cached session context
        for i in range(20):  # enough that the summary is shorter than what it replaces (else compact() does nothing)
            s.assistant([ws.ToolCall(f"r{i}", "run", {"cmd": f"pytest -k case_{i}"})])
            s.tool_result(f"r{i}", f"case_{i} output line\n" * 150)
        s.compact("anthropic")
        p3 = s.build("anthropic", model="claude-sonnet-4-5")
        assert s.state.records
        assert "pkg: keep the public API" in _request_text(p3) and "INSTRUCTIONS" not in (p3.neutral.tail or "")
    store.close()


def test_instruction_text_is_redacted(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    (root / "AGENTS.md").write_text("deploy with AWS key AKIAIOSFODNN7EXAMPLF and password=hunter2hunter2x\n")
    with ws.Engine("gpt-4o", store=tmp_path / "w.db") as e:
        s = e.session("r")
        s.instructions(root=root)
        s.user("go")
        text = _request_text(s.build("openai-chat"))
        assert "AKIAIOSFODNN7EXAMPLF" not in text and "hunter2hunter2x" not in text and "[REDACTED:" in text
    assert b"hunter2hunter2x" not in (tmp_path / "w.db").read_bytes()


def test_cli_instructions_lists_this_repository() -> None:
    r = CliRunner().invoke(main, ["instructions", str(REPO), "--json"])
    assert r.exit_code == 0, r.output
    files = json.loads(r.output)
    assert all(len(f["text"]) <= PER_FILE_CHARS for f in files)
    r = CliRunner().invoke(main, ["instructions", str(REPO / "nope")])
    assert r.exit_code == 2
