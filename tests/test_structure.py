"""The shape of the package, held by a test (issue 49): no import circle, no mixin, no private name taken
across modules, small modules and functions, and the live path never reading through the trace importers.

Imports are read from the source with ``ast``, counting those inside functions and under ``TYPE_CHECKING``:
a circle that only closes at run time is still a circle a reader has to hold in their head.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "windowsmith"

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    path = MODULES[module]
    base = module.split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"))


def _imports(module: str) -> Iterator[tuple[str, ast.stmt, list[str]]]:
    """(imported module, node, names) for every import in ``module``, wherever it stands."""
    tree = _tree(module)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node, []
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:
                    yield sub, node, []
                else:
                    yield target, node, [alias.name]


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _, _ in _imports(module):
            if target in MODULES and target != module:
                graph[module].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle() -> None:
    circles = _circles(_graph())
    assert circles == [], "import circles (counting imports inside functions and under TYPE_CHECKING):\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


def test_no_mixin_class() -> None:
    mixins = [
        f"{m}.{node.name}"
        for m, path in MODULES.items()
        for node in ast.walk(_tree(m))
        if isinstance(node, ast.ClassDef) and node.name.endswith("Mixin")
    ]
    assert mixins == []


def test_no_private_name_imported_across_modules() -> None:
    taken = [
        f"{module} takes {target}.{name}"
        for module in MODULES
        for target, _, names in _imports(module)
        for name in names
        if target.startswith("windowsmith") and name.startswith("_") and not name.startswith("__")
    ]
    assert taken == []


def test_modules_and_functions_are_small() -> None:
    too_long: list[str] = []
    for module, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            too_long.append(f"module {module}: {lines} lines")
        for node in ast.walk(_tree(module)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"function {module}.{node.name}: {length} lines")
    assert too_long == [], f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function:\n" + "\n".join(
        too_long
    )


def test_live_path_never_reads_through_trace_importers() -> None:
    """A proxied request, an adapter and a loaded history read provider messages through ``formats``."""
    live = [m for m in MODULES if m.startswith(("windowsmith.server", "windowsmith.integrations"))]
    live += ["windowsmith.loading"] if "windowsmith.loading" in MODULES else []
    offenders = [
        f"{module} imports {target}"
        for module in live
        for target, _, _ in _imports(module)
        if target == "windowsmith.traces" or target.startswith("windowsmith.traces.")
    ]
    assert offenders == []


def test_formats_hold_the_four_providers() -> None:
    for name in ("anthropic", "openai_chat", "openai_responses", "gemini", "units", "reader"):
        assert f"windowsmith.formats.{name}" in MODULES, name
