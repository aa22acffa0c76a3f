"""Checks the linters cannot make: typing-only imports of our own modules resolve.

ruff and mypy run as their own steps in `.ci/run` (and by hand: `ruff check src tests benchmarks && mypy`), not
inside pytest, so that `pytest -m "not slow"` stays a fast inner loop."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_type_checking_imports_resolve() -> None:
    """mypy runs with ignore_missing_imports (for optional third-party packages), so a typing-only import
    of a module of ours that does not exist would silently become Any; import each one for real."""
    import ast
    import importlib
    import importlib.util

    bad: list[str] = []
    checked = 0
    src = ROOT / "src"
    for path in sorted((src / "windowsmith").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        package = ".".join(parts if parts[-1] == "__init__" else parts[:-1]).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for imp in (n for n in ast.walk(node) if isinstance(n, ast.ImportFrom) and n.level):
                    name = importlib.util.resolve_name("." * imp.level + (imp.module or ""), package)
                    module = importlib.import_module(name)
                    checked += 1
                    bad += [f"{path.name}: {name}.{a.name}" for a in imp.names if not hasattr(module, a.name)]
    assert not bad
