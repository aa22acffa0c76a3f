"""The README and the docs in lockstep with the code.

- Every ```python block of README.md and docs/**/*.md runs: a page's blocks in order, in one namespace, in a fresh
  working directory (as a user's would be, with the checkout's ``benchmarks``, ``src`` and ``tests`` beside it).
  A block followed by "prints" and a ```text block must print exactly that text. A block marked ``python no-test``
  is skipped; it needs a provider key or the network, and its first line is a comment saying so. A block marked
  ``python postgres`` runs when the PostgreSQL server of the tests is reachable.
- Every ``windowsmith`` command line in a ```bash block names a real command and real options.
- Every CLI command is documented (README or docs) and has help text.
- ``mkdocs build --strict`` passes.

The page runs and the site build are marked slow; the checks of the text alone stay in the fast loop.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import windowsmith as ws
from conftest import PG_DSN
from windowsmith.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
PRINTS = re.compile(r"\A\s*prints:?\s*\Z")


def fences(page: Path) -> list[tuple[str, str, int, str]]:
    """(info string, code, line number, the text between this fence and the next) for every fenced block."""
    text = page.read_text()
    found = list(FENCE.finditer(text))
    out = []
    for i, m in enumerate(found):
        after = text[m.end(): found[i + 1].start()] if i + 1 < len(found) else text[m.end():]
        out.append((m.group(1).strip(), m.group(2), text.count("\n", 0, m.start()) + 1, after))
    return out


def python_blocks(page: Path) -> list[tuple[str, str, int, str | None]]:
    """(tags, code, line, the text it must print or None) for every ```python block of the page."""
    blocks = fences(page)
    out = []
    for i, (info, code, line, after) in enumerate(blocks):
        if info.split(" ")[0] != "python":
            continue
        expected = None
        if i + 1 < len(blocks) and blocks[i + 1][0] == "text" and PRINTS.match(after):
            expected = blocks[i + 1][1]
        out.append((info, code, line, expected))
    return out


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


PAGES_WITH_CODE = [p for p in PAGES if any("no-test" not in info for info, *_ in python_blocks(p))]


def test_the_pages_have_code():
    assert README in PAGES_WITH_CODE and len(PAGES_WITH_CODE) >= 15, [rel(p) for p in PAGES_WITH_CODE]


def test_every_skipped_block_says_why():
    for page in PAGES:
        for info, code, line, _ in python_blocks(page):
            if "no-test" in info:
                first = code.lstrip().splitlines()[0]
                assert first.startswith("# needs"), f"{rel(page)}:{line}: a no-test block starts with '# needs ...'"


def postgres_reachable() -> bool:
    try:
        import psycopg
    except ImportError:
        return False
    try:
        psycopg.connect(PG_DSN).close()
    except psycopg.OperationalError:
        return False
    return True


def drop_schemas(code: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        for name in set(re.findall(r"[?&]schema=(\w+)", code)):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.mark.slow  # 1 to 8 s a page (the frameworks' imports, local servers)
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=rel)
def test_python_blocks_run(page: Path, tmp_path, monkeypatch):
    for name in ("benchmarks", "src", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__docs__"}
    skipped: list[str] = []
    try:
        for info, code, line, expected in python_blocks(page):
            where = f"{rel(page)}:{line}"
            if "no-test" in info:
                continue
            if "postgres" in info.split():
                if not postgres_reachable():
                    skipped.append(where)
                    continue
                drop_schemas(code)
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(compile(code, where, "exec"), ns)
            finally:
                if "postgres" in info.split():
                    drop_schemas(code)
            if expected is not None:
                assert out.getvalue().rstrip() == expected.rstrip(), f"{where} prints something else"
    finally:
        for value in list(ns.values()):
            if isinstance(value, ws.Engine):
                value.close()
    if skipped:
        pytest.skip(f"PostgreSQL is not reachable at {PG_DSN!r}: did not run {', '.join(skipped)}")


def command_lines(text: str) -> list[str]:
    """The shell lines of a bash block (continuations joined, comments dropped)."""
    lines, current = [], ""
    for raw in text.splitlines():
        current += raw.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        lines.append(current)
        current = ""
    return [line for line in lines if line.strip()]


def windowsmith_invocations(line: str) -> list[list[str]]:
    """Each ``windowsmith ...`` command of a shell line, as its arguments."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # a quote the shell would continue on the next line: not ours to judge
        return []
    found, current, start = [], None, True
    for w in words:
        if w in ("&&", "||", ";", "&", "|"):
            current, start = None, True
            continue
        if start and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w):  # VAR=value before the command
            continue
        if start and (w == "windowsmith" or w.endswith("/windowsmith")):
            current = []
            found.append(current)
        elif current is not None:
            current.append(w)
        start = False
    return found


def test_every_windowsmith_command_line_in_the_docs_is_real():
    checked = 0
    for page in PAGES:
        for info, code, line, _ in fences(page):
            if info not in ("bash", "sh", "shell", "console"):
                continue
            for shell_line in command_lines(code):
                for args in windowsmith_invocations(shell_line):
                    where = f"{rel(page)}:{line}: windowsmith {' '.join(args)}"
                    assert args and args[0] in main.commands, f"{where}: no such command"
                    cmd = main.commands[args[0]]
                    rest = args[1:]
                    if isinstance(cmd, click.Group):
                        assert rest and rest[0] in cmd.commands, f"{where}: no such subcommand"
                        cmd, rest = cmd.commands[rest[0]], rest[1:]
                    opts = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
                    for a in rest:
                        if a.startswith("-") and not re.fullmatch(r"-\d[\d.]*", a):
                            assert a.split("=")[0] in opts, f"{where}: {a} is not an option of {args[0]}"
                    checked += 1
    assert checked >= 10, checked


def test_every_cli_command_is_documented_with_help():
    text = "\n".join(p.read_text() for p in PAGES)
    for name, cmd in main.commands.items():
        assert f"windowsmith {name}" in text, f"`windowsmith {name}` is in neither the README nor the docs"
        assert cmd.help, f"`windowsmith {name}` has no help text"
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            assert sub.help, f"`windowsmith {name} {sub_name}` has no help text"
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0


def test_the_readmes_links_into_the_docs_resolve():
    """mkdocs checks the links between the docs pages; the README is outside the site, so its links are checked here."""
    links = re.findall(r"\]\(((?:docs/)[^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    assert len(links) >= 20, links
    for link in links:
        assert (ROOT / link).is_file(), f"README links to {link}, which does not exist"


def test_what_the_docs_say_the_proxy_serves_is_what_it_serves(tmp_path):
    """The README and the proxy guide say which provider APIs the proxy serves today (its POST routes) and which
    not yet: a new API route fails here until both pages name it."""
    pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
    from windowsmith.server import ServerConfig, create_app

    app = create_app(ServerConfig(store=str(tmp_path / "proxy.db")))
    served = {r.path for r in app.routes
              if "POST" in (getattr(r, "methods", None) or ()) and not r.path.startswith("/api/")}
    assert {"/v1/chat/completions", "/v1/messages", "/v1/responses"} <= served
    not_yet = {"/v1/responses": "does not serve the Responses API", "/v1beta/": "does not serve the Gemini API"}
    for page in (README, DOCS / "guides" / "proxy.md"):
        text = page.read_text()
        for path in served:
            named = path.split("{")[0]  # a pattern route (Gemini's /v1beta/models/{model}:...) by its fixed part
            assert named in text, f"the proxy serves POST {path}; {rel(page)} does not say so"
        for route, claim in not_yet.items():
            if any(route in path for path in served):
                assert claim not in text, f"{rel(page)} says the proxy {claim}, but it serves {route} now"


def test_readme_shows_every_command_ci_runs():
    """Each command `.ci/run` runs (but the chromium install, a machine set-up) is in the README as written."""
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    commands = [line.strip() for line in ci if line.startswith(("python3 -m venv", ".venv/bin/"))]
    assert len(commands) >= 5 and ".venv/bin/pytest" in commands
    for command in commands:
        assert f"\n{command}\n" in text, f".ci/run runs `{command}`; the README does not show it"
    assert "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/windowsmith demo" in commands
    assert '.venv/bin/pytest -m "not slow"' in text
    assert len(text.splitlines()) < 250, "the README stays short: the details go in docs/"


@pytest.mark.slow  # the demo's replay, about 5 s
def test_the_demo_prints_what_the_readme_and_getting_started_show(tmp_path):
    result = CliRunner().invoke(main, ["demo", "--store", str(tmp_path / "demo.db")])
    assert result.exit_code == 0, result.output
    printed = " ".join(result.output.split())
    for page in (README, DOCS / "getting-started.md"):
        shown = re.search(r"```text\n(vs the full history.*?)```", page.read_text(), re.S)
        assert shown, f"{rel(page)} shows no demo comparison"
        for line in shown.group(1).strip().splitlines():
            assert " ".join(line.split()) in printed, f"{rel(page)}: the demo no longer prints {line!r}"


@pytest.mark.slow
def test_the_docs_site_builds_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_click"):
        if importlib.util.find_spec(module.split(".")[0]) is None or (
                "." in module and importlib.util.find_spec(module) is None):
            pytest.skip(f"{module} is not installed: pip install -e '.[docs]' to build the docs")
    site = tmp_path / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    # the API reference documents the public API: every name windowsmith exports but the layer interface, which
    # static analysis cannot reach while windowsmith/layers/ has no __init__.py (the layers page describes it)
    api = (site / "reference" / "api" / "index.html").read_text()
    documented = set(re.findall(r'id="windowsmith\.([A-Za-z_]+)"', api))
    assert set(ws.__all__) - documented <= {"Layer", "Item", "BuildContext"}, sorted(set(ws.__all__) - documented)
    modules = (site / "reference" / "modules" / "index.html").read_text()
    for name in re.findall(r"^::: (\S+)", (DOCS / "reference" / "modules.md").read_text(), re.M):
        assert f'id="{name}"' in modules, f"the stable module {name} is not on the reference page"
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for name in main.commands:
        assert f'id="windowsmith-{name}"' in cli, name
