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
