"""``stub_images`` and ``shrink_texts`` (one walk, ``state._replace_blocks``): the block of their kind at
each path becomes the given text, nothing else changes, and paths that hold another kind are skipped."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from windowsmith.model import Image, Message, Text, ToolResult
from windowsmith.units import shrink_texts, stub_images

pytestmark = pytest.mark.slow  # every test here replays real traces or runs processes

_inner = st.one_of(st.builds(Text, st.sampled_from(["a", "b", "ok"])),
                   st.builds(Image, url=st.sampled_from(["https://x/1.png", "https://x/2.png"])))
_block = st.one_of(_inner, st.builds(ToolResult, st.sampled_from(["c1", "c2"]), st.tuples(_inner, _inner)))
_paths = st.dictionaries(st.one_of(st.tuples(st.integers(-1, 4)), st.tuples(st.integers(-1, 4), st.integers(-1, 3))),
                         st.sampled_from(["[stub]", "[view]"]), max_size=4)


def _at(m: Message, path: tuple[int, ...]) -> object | None:
    if not 0 <= path[0] < len(m.content):
        return None
    b = m.content[path[0]]
    if len(path) == 1:
        return b
    return b.content[path[1]] if isinstance(b, ToolResult) and 0 <= path[1] < len(b.content) else None


@given(st.lists(_block, min_size=1, max_size=4), _paths)
def test_each_path_of_the_kind_is_replaced_and_nothing_else(blocks: list, paths: dict) -> None:
    m = Message("tool" if all(isinstance(b, ToolResult) for b in blocks) else "user", tuple(blocks))
    for fn, kind in ((stub_images, Image), (shrink_texts, Text)):
        out = fn(m, paths)
        hit = {p: t for p, t in paths.items() if isinstance(_at(m, p), kind)}
        if not hit:
            assert out is m
            continue
        assert len(out.content) == len(m.content) and out.role == m.role
        for p, text in hit.items():
            assert _at(out, p) == Text(text)
        for i, b in enumerate(m.content):  # every other block, inner ones included, is as it was
            if isinstance(b, ToolResult):
                for j, inner in enumerate(b.content):
                    if (i, j) not in hit:
                        assert out.content[i].content[j] == inner  # type: ignore[union-attr]
            elif (i,) not in hit:
                assert out.content[i] == b
