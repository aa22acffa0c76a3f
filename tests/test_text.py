"""The offload index of a numbered listing: line numbers as ranges, the names and body numbers as entries."""

from __future__ import annotations

import itertools
import re

from hypothesis import given
from hypothesis import strategies as st

import windowsmith as ws
from windowsmith.model import Message, ToolCall
from windowsmith.text import gutter_only, identifier_index, identifiers, line_ranges


def _expand(ranges: str) -> set[int]:
    assert ranges.startswith("lines ")
    out: set[int] = set()
    for part in ranges[len("lines "):].split(", "):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


@given(st.sets(st.integers(min_value=0, max_value=5000), min_size=1, max_size=300))
def test_line_ranges_cover_exactly_the_numbers(ns):
    text = line_ranges([str(n) for n in ns])
    assert _expand(text) == ns
    # runs are maximal: no two written runs touch
    bounds = [tuple(int(x) for x in p.split("-")) for p in text[len("lines "):].split(", ")]
    for a, b in itertools.pairwise(bounds):
        assert b[0] > a[-1] + 1


def _listing(n: int) -> str:
    body = []
    for i in range(1, n + 1):
        code = f"    total_{i % 9} = compute_item(row_{i % 13})"
        if i == 300:
            code = "    MAX_ROWS = 1458  # KeyError when exceeded"
        body.append(f"{i:6d}\t{code}")
    return "Here's the result of running `cat -n` on /repo/src/table.py:\n" + "\n".join(body) + "\n"


def test_gutter_numbers_are_only_those_the_body_never_names():
    text = _listing(600)
    g = gutter_only(text)
    assert "300" in g and "599" in g
    assert "1458" not in g  # a value in the code, not a line number
    text_with_ref = text + "see line 450 above\n"
    assert "450" not in gutter_only(text_with_ref)  # named outside the gutter: an identifier like any other
    assert gutter_only("no listing here 123\n") == set()


def test_an_offloaded_listing_lists_its_lost_line_numbers_as_ranges(tmp_path):
    full = _listing(600)
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=16_000) as e:
        s = e.session("listing")
        s.user("fix table.py")
        s.add(Message("assistant", (ToolCall("c1", "view", {"path": "/repo/src/table.py"}),)))
        s.tool_result("c1", full)
        view = s.state.units[-1].messages[-1].tool_results[0].text
        m = re.search(r"artifact://([0-9a-f]{64})", view)
        assert m is not None
        assert e.artifacts.get(m.group(1)).decode() == full  # nothing is lost: the listing is one read away
    idx = view[view.index("[also in the full text: "):].split("\n", 1)[0]
    assert re.search(r"lines \d+-\d+", idx) and "-600" in idx  # the lines the view cut, as ranges
    assert "1458" in idx and "MAX_ROWS" in idx and "KeyError" in idx  # what the body names stays an entry
    shown = set(identifiers(view[: view.index("[also in the full text: ")]))
    bare = {k for k in identifiers(idx) if k.isdigit()} - {"1458", "600"} - shown
    # no bare line numbers beyond the range bounds
    assert all(re.search(rf"(?<![\d]){k}-\d|\d-{k}(?!\d)", idx) for k in bare), bare


def test_a_text_without_a_listing_keeps_its_numbers_as_entries():
    count = len
    idx = identifier_index("a/b.py FooError 12345 keep_me", "keep_me", 80, count)
    assert idx == "[also in the full text: FooError, a/b.py, 12345]"
