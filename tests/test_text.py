"""The offload index of a numbered listing: line numbers as ranges, the names and body numbers as entries."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import windowsmith as ws
from windowsmith.model import Message, ToolCall
from windowsmith.text import (
    gutter_only,
    identifier_index,
    identifier_kinds,
    identifier_mentions,
    identifiers,
    line_ranges,
)


def _expand(ranges: str) -> set[int]:
    assert ranges.startswith("lines ")
    out: set[int] = set()
    for part in ranges[len("lines "):].split(", "):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


@pytest.mark.slow
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


def test_every_viewer_gutter_is_a_gutter():
    """The listing's line pattern is the compressors' (``NUMBERED_LINE``): SWE-agent's viewer writes ``N:`` then the
    line as it is (a top-level definition right after the colon), Claude Code's Read an arrow."""
    swe = "[File: /repo/m.py (300 lines total)]\n" + "\n".join(
        f"{i}:def handler_{i}(x):" if i % 10 == 0 else f"{i}:    return x + {i % 7}" for i in range(1, 301))
    assert {"100", "290"} <= gutter_only(swe)  # before: only lines followed by a blank counted, not ``100:def``
    claude = "\n".join(f"{i:6d}→value_{i % 5} = {i % 3}" for i in range(1, 200))
    assert {"150", "199"} <= gutter_only(claude)


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


def _swe_view(start: int, n: int, newline: str = "\r\n") -> str:
    """SWE-agent's file viewer: ``[File: …]``, then ``1457:    code`` lines (the number, a colon, the line)."""
    lines = ["[File: src/marshmallow/fields.py (1997 lines total)]", f"({start - 1} more lines above)"]
    for i in range(start, start + n):
        if i % 7 == 0:
            code = ""
        elif i % 5 == 0:
            code = "        except (TypeError, ValueError) as error:"  # a code line that reads like a failure
        elif i == start + n // 2:
            code = "        return int(value.total_seconds() / base_unit.total_seconds())"
        else:
            code = f"        item_{i % 11} = self.field_{i % 3}"
        lines.append(f"{i}:{code and ' ' + code}")
    return newline.join(lines)


def test_a_colon_gutter_is_a_listing_too_with_crlf_line_ends():
    for nl in ("\n", "\r\n"):
        text = _swe_view(1457, 100, nl)
        g = gutter_only(text)
        assert {"1457", "1463", "1500", "1556"} <= g, nl  # blank numbered lines (``1463:``) included
    assert gutter_only("see 12:30 and 14:45\n") == set()  # a time is not a gutter


def test_an_offloaded_swe_agent_view_keeps_its_names_not_its_line_numbers():
    """The numbers of lines that read like failures (``except … as error:``) ranked first and filled the index
    of a SWE-agent view before its colon gutter counted as one: the dotted names the next edit quotes fell out."""
    full = _swe_view(1457, 100)
    view = full[: full.index("1470:")]  # the head kept, the rest cut
    count = len  # a character count stands in for tokens: the ranking is what is tested
    idx = identifier_index(full, view, 260, lambda s: count(s) // 3)
    assert "value.total_seconds" in idx and "base_unit.total_seconds" in idx, idx
    assert re.search(r"lines 14\d\d-1556", idx), idx
    bare = [k for k in identifiers(idx) if k.isdigit()]
    assert all(re.search(rf"(?<!\d){k}-\d|\d-{k}(?!\d)", idx) for k in bare), bare  # numbers only as range bounds


def test_identifier_mentions_name_each_mention_where_it_is_and_whether_its_line_reports_a_failure():
    text = "open src/app/models.py\nERROR: KeyError in parse_header at src/app/models.py:12\nparse_header ok 1458"
    got = list(identifier_mentions(text))
    assert all(text[at:at + len(k)] == k for k, _, _, at in got)
    assert [(k, on_fail) for k, _, on_fail, _ in got if k == "src/app/models.py"] == [("src/app/models.py", False),
                                                                                     ("src/app/models.py", True)]
    assert ("KeyError", "error", True) in [(k, kind, f) for k, kind, f, _ in got]
    assert identifier_kinds(text)["src/app/models.py"] == ("path", True)  # one mention on a failure line
    assert identifier_kinds(text)["1458"] == ("number", False)


def test_an_identifier_index_leaves_out_what_a_json_record_holds_only_as_keys():
    # a customer record's view named ``address1, address2`` (its keys, which its shape already shows) before the zip
    # code and the order ids the next call passed
    from windowsmith.text import identifier_index, json_keys_only
    from windowsmith.tokens import count_text

    record = json.dumps({"order_id": "#W1994898", "user_id": "yusuf_hernandez_6785",
                         "address": {"address1": "565 Elm Street", "address2": "Suite 501", "zip": "20307"},
                         "note": "ship to address2 only"})
    assert json_keys_only(record, ["address1", "address2", "zip", "user_id", "20307"]) == {"address1", "zip", "user_id"}
    line = identifier_index(record, '{"order_id": "#W1994898"', 200, count_text)
    assert "address1" not in line and "20307" in line and "yusuf_hernandez_6785" in line
    assert "address2" in line  # also in a value: not only a key
    assert json_keys_only("address1: x", ["address1"]) == set()  # not JSON
    assert json_keys_only("\n  " + record, ["zip", "20307"]) == {"zip"}  # JSON after leading whitespace
    assert json_keys_only('x {"zip": 1}', ["zip"]) == set()  # JSON inside text is not a JSON text

