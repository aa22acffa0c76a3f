"""Deep nesting and huge integers in tool arguments, tool output and trace files are clear errors,
not RecursionError or ValueError tracebacks; what is under the limits still works end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import windowsmith as ws
from windowsmith.cli import main
from windowsmith.errors import InvalidMessageError, TraceFormatError
from windowsmith.jsonvalues import MAX_JSON_DEPTH, check_json_value
from windowsmith.model import parse_arguments
from windowsmith.traces import load_traces


def nested(depth: int, leaf: object = 1) -> object:
    v = leaf
    for _ in range(depth):  # depth levels of lists
        v = [v]
    return v


@pytest.fixture
def session(tmp_path: Path):
    with ws.Engine("claude-sonnet-4-5", store=tmp_path / "ws.db") as e:
        s = e.session("s")
        s.user("go")
        yield s


@pytest.mark.slow
def test_check_json_value_counts_levels_without_recursing() -> None:
    check_json_value(nested(MAX_JSON_DEPTH), "v")
    with pytest.raises(InvalidMessageError, match=f"v is nested more than {MAX_JSON_DEPTH} levels deep"):
        check_json_value(nested(MAX_JSON_DEPTH + 1), "v")
    with pytest.raises(InvalidMessageError, match="nested more than"):
        check_json_value({"a": nested(100_000)}, "v")  # far past the recursion limit
    with pytest.raises(InvalidMessageError, match=r"integer of about 4,\d{3} digits.*pass it as a string"):
        check_json_value({"n": [10**4400]}, "v")
    check_json_value({"n": 10**4000, "b": True, "s": "x" * 10_000}, "v")


@pytest.mark.slow
@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_deep_tool_arguments_and_output_are_usage_errors(session, depth: int) -> None:
    with pytest.raises(InvalidMessageError, match="arguments of tool call 'c1' is nested more than"):
        session.assistant("", tool_calls=[{"id": "c1", "name": "t", "arguments": {"x": nested(depth)}}])
    session.assistant("", tool_calls=[{"id": "c2", "name": "t", "arguments": {}}])
    with pytest.raises(InvalidMessageError, match="tool output is nested more than"):
        session.tool_result("c2", {"deep": nested(depth)})
    with pytest.raises(InvalidMessageError, match="tool output holds an integer"):
        session.tool_result("c2", {"n": 7 ** 6000})
    n = len(session.store.events("s"))
    # nothing half-written: the session goes on, and the limit itself is fine end to end
    session.tool_result("c2", {"deep": nested(MAX_JSON_DEPTH - 1, "leaf api_key=sk-abc")})
    session.assistant("", tool_calls=[{"id": "c3", "name": "t", "arguments": {"x": nested(MAX_JSON_DEPTH - 1)}}])
    session.tool_result("c3", "ok")
    assert len(session.store.events("s")) == n + 3
    assert session.build().tokens > 0


def test_deep_thinking_data_is_a_usage_error(session) -> None:
    with pytest.raises(InvalidMessageError, match=r"the data of a thinking block \(anthropic\) is nested more than"):
        session.add({"role": "assistant", "content": [
            {"type": "thinking", "provider": "anthropic", "data": {"d": nested(5_000)}}, {"type": "text", "text": "hi"}]})


def test_deep_or_huge_arguments_given_as_json_text_are_kept_raw() -> None:
    for raw in ("[" * 5000 + "]" * 5000, '{"n": ' + "9" * 5000 + "}", json.dumps({"x": nested(MAX_JSON_DEPTH + 5)})):
        assert parse_arguments(raw) == {"_raw": raw}


@pytest.mark.parametrize("depth", [50_000, 100_000])
def test_deeply_nested_trace_files_are_trace_format_errors(tmp_path: Path, depth: int) -> None:
    p = tmp_path / "deep.json"
    p.write_text('{"messages": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(TraceFormatError, match=r"deep\.json: nested too deeply to parse"):
        load_traces(p)
    jl = tmp_path / "deep.jsonl"
    jl.write_text('{"role": "user", "content": "hi"}\n' + '{"x": ' + "[" * depth + "]" * depth + "}\n" + "{}\n")
    with pytest.raises(TraceFormatError, match=r"deep\.jsonl at line 2: nested too deeply"):
        load_traces(jl)
    r = CliRunner().invoke(main, ["replay", str(p), "--store", str(tmp_path / "ws.db")], catch_exceptions=False)
    assert r.exit_code == 2 and r.output.startswith("error: ") and "nested too deeply" in r.output


def test_parseable_but_too_deep_trace_is_a_trace_format_error(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"messages": [{"role": "user", "content": "hi", "x": nested(MAX_JSON_DEPTH + 10)}]}))
    with pytest.raises(TraceFormatError, match=f"nested more than {MAX_JSON_DEPTH} levels"):
        load_traces(p)


def test_integers_over_4300_digits_in_a_trace_are_trace_format_errors(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    p.write_text('{"messages": [{"role": "user", "content": "hi", "n": ' + "9" * 5000 + "}]}")
    with pytest.raises(TraceFormatError, match=r"big\.json: a number is too long to read .*quote it as a string"):
        load_traces(p)
    r = CliRunner().invoke(main, ["replay", str(p), "--store", str(tmp_path / "ws.db")], catch_exceptions=False)
    assert r.exit_code == 2 and "a number is too long to read" in r.output
