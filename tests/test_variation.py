"""Structural variation: the tail's format and the guidance phrasing rotate by turn, nothing before the tail
changes (a property, and a replay of real traces in every format), and JSON tool results can go in compact."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from test_invariants import (
    _replay_packs,
    assert_prefix_kept_between_compactions,
)
from windowsmith.guidance import guided_layers
from windowsmith.guidance.failures import FailuresLayer
from windowsmith.guidance.recitation import RecitationLayer
from windowsmith.guidance.variation import TAIL_STYLES, TailStyle, VariationLayer, compact_json
from windowsmith.layers.builtin import default_layers
from windowsmith.traces import load_traces


def varied_layers() -> list:
    return [*default_layers(), FailuresLayer(vary=True), RecitationLayer(base_period=1, vary=True), VariationLayer()]


def _session(engine: ws.Engine, sid: str = "v") -> ws.Session:
    s = engine.session(sid, goal="make the parser tests pass", acceptance=["pytest passes"])
    s.user("fix the parser")
    return s


def test_tail_format_rotates_every_turn_and_headers_keep_their_order(make_engine):
    s = _session(make_engine(layers=varied_layers))
    tails = []
    for i in range(4):
        s.assistant(tool_calls=[{"id": f"c{i}", "name": "bash", "arguments": {"command": "pytest tests/test_parser.py"}}])
        s.tool_result(f"c{i}", "FAILED tests/test_parser.py::test_dates - AssertionError\n1 failed")
        pack = s.build()
        tails.append(pack.neutral.tail)
        assert pack.manifest.guidance["variation"] == {"style": (i + 1) % 4, "turn": i + 1}
    styles = [TAIL_STYLES[(i + 1) % 4] for i in range(4)]
    for tail, style in zip(tails, styles, strict=True):
        assert tail.startswith(style.header.format("TASK") + "\n")
        assert tail.index(style.header.format("ACCEPTANCE")) < tail.index(style.header.format("FAILURES")) \
            < tail.index(style.header.format("FOCUS"))
        assert "\n- [ ] pytest passes" in tail  # the checklist keeps its own form
    assert len(set(tails)) == 4
    # the guidance phrasing rotates too: three wordings of the same repeated failure
    firsts = [t.split(s.header.format("FAILURES") + "\n", 1)[1].split("\n", 1)[0] for t, s in zip(tails[1:], styles[1:], strict=True)]
    assert len({f[2:20] for f in firsts}) == 3 and all("pytest tests/test_parser.py" in f for f in firsts)


def test_tail_style_is_validated():
    with pytest.raises(ValueError, match="must contain"):
        TailStyle("HEADER")
    with pytest.raises(ValueError):
        VariationLayer(every=0)


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": 1, "b": [1, 2, {"c": "é"}]}', '{"a":1,"b":[1,2,{"c":"é"}]}'),
    ('[\n  {"id": "x"},\n  {"id": "y"}\n]\n', '[{"id":"x"},{"id":"y"}]'),
    ('{"a":1}', None),  # already compact
    ("not json {", None),
    ('"a string"', None),
])
def test_compact_json(text, expected):
    assert compact_json(text) == expected


@pytest.mark.slow
def test_compact_json_ingest_on_a_real_trace(traces_dir, make_engine):
    trace = load_traces(traces_dir / "tau-bench/gpt-4o-airline.json")[0]
    sizes = {}
    for flag in (False, True):
        s = make_engine(ingest=ws.IngestConfig(compact_json=flag, offload_tokens=100_000)).session(f"j{flag}")
        for m in trace.messages:
            s.add(m)
        results = [r for m in s.messages for r in m.tool_results]
        sizes[flag] = sum(ws.count_text(r.text) for r in results)
        if flag:
            assert all(json.loads(r.text) is not None for r in results if r.text.startswith("{"))
            assert all(", " not in r.text[:40] for r in results if r.text.startswith('{"'))
    assert sizes[True] < sizes[False] * 0.9


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses", "gemini"])
def test_variation_keeps_the_cache_prefix_on_real_traces(traces_dir, tmp_path, fmt):
    model = {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-pro"}.get(fmt, "gpt-4.1")
    trace = load_traces(traces_dir / "tau-bench/gpt-4o-airline.json")[13]
    with ws.Engine(model=model, store=tmp_path / "w.db", layers=varied_layers) as engine:
        packs = _replay_packs(engine, trace, fmt, "v")
    assert len({p.neutral.tail.split("\n", 1)[0] for p in packs}) == 4  # every style was used
    assert_prefix_kept_between_compactions(packs, fmt)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=1, max_value=9), st.integers(min_value=1, max_value=3))
def test_variation_changes_nothing_but_the_tail(tmp_path_factory, turns, every):
    path = tmp_path_factory.mktemp("v") / "w.db"
    with ws.Engine(model="claude-sonnet-4-5", store=path, layers=guided_layers) as plain, \
            ws.Engine(model="claude-sonnet-4-5", store=path,
                      layers=lambda: [*guided_layers(), VariationLayer(every=every)]) as varied:
        s = _session(plain, "p")
        for i in range(turns):
            s.assistant(f"step {i}", tool_calls=[{"id": f"c{i}", "name": "bash", "arguments": {"command": f"ls {i % 2}"}}])
            s.tool_result(f"c{i}", "error: No such file or directory" if i % 2 else "ok")
        a, b = s.build(), varied.session("p").build()
    na, nb = a.neutral, b.neutral
    assert (na.tools, na.system, na.session, na.messages) == (nb.tools, nb.system, nb.session, nb.messages)
    assert a.manifest.cache["prefix_hash"] == b.manifest.cache["prefix_hash"]
    k = (turns // every) % len(TAIL_STYLES)
    assert nb.tail.startswith(TAIL_STYLES[k].header.format("TASK"))
