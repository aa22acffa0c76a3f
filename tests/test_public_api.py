"""The curated public API: __all__ is sorted, complete for what the README uses, and importable."""

import windowsmith


def test_all_is_sorted_and_importable():
    assert windowsmith.__all__ == sorted(windowsmith.__all__)
    for name in windowsmith.__all__:
        assert getattr(windowsmith, name) is not None, name


def test_every_public_class_of_the_top_level_is_exported():
    exported = set(windowsmith.__all__)
    public = {n for n, v in vars(windowsmith).items() if not n.startswith("_") and isinstance(v, type)}
    assert public <= exported, sorted(public - exported)


def test_what_the_readme_imports_is_top_level_and_internals_are_not():
    for name in ("Engine", "Session", "Pack", "Manifest", "BudgetConfig", "CompactionConfig", "IngestConfig",
                 "RESULT_TOOLS", "COMPACT_CONTEXT_TOOL", "OfflineSummarizer", "FakeSummarizer", "SQLiteStore",
                 "UsageError", "RuntimeFailure"):
        assert name in windowsmith.__all__, name
    for internal in ("Action", "Assembly", "LayerUsage", "Segment", "CachePlan", "Calibration", "TokenCounter",
                     "NeutralRequest", "Budget"):
        assert internal not in windowsmith.__all__, internal
        assert not hasattr(windowsmith, internal), internal
    assert windowsmith.CompactionConfig is windowsmith.compaction.CompactionConfig
    assert windowsmith.COMPACT_CONTEXT_TOOL["name"] == "compact_context"


def test_the_core_import_path_leaves_out_the_benchmark_the_cli_and_the_test_doubles():
    """``import windowsmith`` loads neither the bench extra's strategies, nor the CLI, nor the server's
    dependencies (``windowsmith.testing`` needs the server extra and is imported only by tests that use it)."""
    import subprocess
    import sys

    code = ("import sys, windowsmith; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('starlette', 'uvicorn') or m.startswith(('windowsmith.bench', 'windowsmith.cli', 'windowsmith.testing'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_test_doubles_are_a_public_module():
    import windowsmith.testing as testing

    assert testing.__all__ == sorted(testing.__all__) == ["BackgroundServer", "FakeUpstream"]
    for name in testing.__all__:
        assert getattr(testing, name).__module__ == "windowsmith.testing", name


#: The stable modules (docs/architecture.md, "Public surface"); every other module is internal.
STABLE_MODULES = (
    "windowsmith", "windowsmith.errors", "windowsmith.formats", "windowsmith.formats.anthropic",
    "windowsmith.formats.openai_chat", "windowsmith.formats.openai_responses", "windowsmith.formats.gemini",
    "windowsmith.testing", "windowsmith.integrations.langchain", "windowsmith.integrations.pydantic_ai",
    "windowsmith.integrations.openai_agents", "windowsmith.integrations.adk", "windowsmith.server",
    "windowsmith.store", "windowsmith.layers.base", "windowsmith.compaction", "windowsmith.traces",
)


def test_every_stable_module_declares_what_it_exports_and_the_map_names_it():
    """A stable module says what it exports (``__all__``, every name present), and the architecture map's
    public-surface paragraph names it, so what users may import is written down in one place."""
    import importlib
    from pathlib import Path

    surface = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text().split("## Public surface")[1]
    surface = surface.split("\n## ")[0]
    for name in STABLE_MODULES:
        module = importlib.import_module(name)
        assert isinstance(getattr(module, "__all__", None), list), f"{name} has no __all__"
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"{name}.__all__ names what it does not have: {missing}"
        short = name.rsplit(".", 1)[0] + ".*" if name.startswith("windowsmith.integrations.") else name
        assert f"`{short}`" in surface or f"`{name}`" in surface or name.startswith("windowsmith.formats."), name
