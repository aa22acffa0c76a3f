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
