"""``windowsmith demo``: a real run on a small window, where results are offloaded and history is compacted, and one
summary against the full history and a sliding window whose figures are the benchmark's own."""

from __future__ import annotations

import json

from click.testing import CliRunner

from windowsmith.cli import main
from windowsmith.cli.demo import DEMO_TRACE, DEMO_WINDOW, compare
from windowsmith.traces import demo_trace_path, load_traces


def run(*args: str, **kw: object):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, **kw)


def bench_figures(trace, model: str, window: int) -> dict[str, object]:
    """The three strategies measured directly with the benchmark's functions (not through the demo)."""
    from windowsmith.bench.base import BenchConfig
    from windowsmith.bench.metrics import prepare
    from windowsmith.bench.run import run_strategy
    from windowsmith.bench.strategies import make_strategy
    from windowsmith.registry import load_registry

    spec = load_registry().get(model)
    out = {}
    for name, w in (("windowsmith", window), ("full", spec.context_window), ("sliding", window)):
        s = make_strategy(name, BenchConfig.make(spec, w))
        try:
            out[name] = run_strategy(prepare(trace), s)
        finally:
            s.close()
    return out


def test_the_default_demo_offloads_compacts_and_prints_the_benchs_comparison(tmp_path):
    r = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["demo", "--store", str(tmp_path / "ws.db")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = r.output
    assert f"window {DEMO_WINDOW:,}" in out
    assert "cut history" in out and "→" in out  # a compaction and an offload (tokens → the view sent)
    assert "emergency" not in out  # the routine cut is named for what it is
    assert "vs the full history:" in out and "vs a sliding window:" in out
    figures = bench_figures(load_traces(DEMO_TRACE)[0], "claude-sonnet-5-5", DEMO_WINDOW)
    for rm in figures.values():  # every figure of the summary is the benchmark's
        assert f"{rm.input_tokens:,}" in out
        assert f"${rm.cost_usd:.4f}" in out
        assert f"{rm.cache_read_tokens:,}" in out
        assert f"{rm.targets - rm.strict_hits} of {rm.targets}" in out
    ws, full = figures["windowsmith"], figures["full"]
    assert ws.input_tokens < full.input_tokens and ws.cost_usd < full.cost_usd  # what the demo is there to show
    assert "stored as session demo in" in out and "inspect it with: windowsmith inspect demo" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_demo_json_has_offloads_compaction_and_the_comparison(tmp_path):
    r = run("demo", "--store", str(tmp_path / "ws.db"), "--json")
    d = json.loads(r.output)
    assert d["window"] == DEMO_WINDOW
    assert any(t["offloaded"] for t in d["turns"])
    assert any("emergency history" in t["actions"] for t in d["turns"])  # the record kind on disk is unchanged
    assert [c["strategy"] for c in d["comparison"]] == ["windowsmith", "full", "sliding"]
    # the replay prices output as the bench does: its totals are the bench's windowsmith row
    ws = d["comparison"][0]
    assert ws["cache_read_tokens"] == sum(t["cache_read_tokens"] for t in d["turns"])
    assert abs(ws["cost_usd"] - d["totals"]["cost_usd"]) < 0.001


def test_demo_window_and_trace_options(tmp_path):
    r = run("demo", "--trace", str(demo_trace_path()), "--window", "12000", "--store", str(tmp_path / "ws.db"),
            "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["window"] == 12000 and d["trace_id"] == load_traces(demo_trace_path())[0].id
    assert {c["window"] for c in d["comparison"] if c["strategy"] != "full"} == {12000}
    peers = compare(load_traces(demo_trace_path())[0], "claude-sonnet-5-5", 12000)
    assert [p.tokens for p in peers] == [c["tokens"] for c in d["comparison"]]


def test_demo_writes_the_html_report_with_the_comparison(tmp_path):
    out = tmp_path / "demo.html"
    r = run("demo", "--trace", str(demo_trace_path()), "--store", str(tmp_path / "ws.db"), "--html", str(out))
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "Against the full history and a sliding window" in page and "<svg" in page
    assert f"wrote {out}" in r.output


def test_demo_never_touches_other_sessions(tmp_path):
    import windowsmith as ws

    db = tmp_path / "ws.db"
    with ws.Engine(model="claude-sonnet-5-5", store=db) as e:
        e.session("demo").user("mine")
    before = [ev.hash for ev in ws.SQLiteStore(db).events("demo")]
    r = run("demo", "--trace", str(demo_trace_path()), "--store", str(db))
    assert r.exit_code == 0 and "session demo-2" in r.output
    with ws.SQLiteStore(db) as st:
        assert [ev.hash for ev in st.events("demo")] == before


def test_progress_is_a_plain_line_when_stderr_is_not_a_terminal(tmp_path):
    r = run("demo", "--trace", str(demo_trace_path()), "--store", str(tmp_path / "ws.db"))
    n = sum(1 for m in load_traces(demo_trace_path())[0].messages if m.role == "assistant")
    assert any(line.startswith("replaying ") and f"/{n} calls" in line for line in r.output.splitlines())


def test_the_demo_runs_on_a_core_install(tmp_path):
    """CI runs ``windowsmith demo`` right after ``pip install -e .``: no extra (no langchain-core, no server, no
    tree-sitter) may be imported, the comparison's benchmark code included."""
    import subprocess
    import sys

    core = ["tiktoken", "tiktoken_ext", "click", "rich", "pydantic", "pydantic_core", "jsonschema", "regex",
            "json_repair", "windowsmith", "markdown_it", "mdurl", "pygments", "annotated_types", "typing_extensions",
            "typing_inspection", "attrs", "attr", "referencing", "rpds", "jsonschema_specifications"]
    code = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in {core!r} or top.startswith("_"):
            return None
        raise ModuleNotFoundError(f"not in a core install: {{name}}", name=name)
sys.meta_path.insert(0, Block())
from windowsmith.cli import main
main(["demo", "--store", {str(tmp_path / "ws.db")!r}, "--html", {str(tmp_path / "r.html")!r}])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "vs the full history" in out.stdout and (tmp_path / "r.html").is_file()


def test_a_window_too_small_says_which_option_to_change(tmp_path):
    r = run("demo", "--window", "4000", "--store", str(tmp_path / "ws.db"))
    assert r.exit_code == 2
    assert r.output.startswith("error: a 4,000-token window is too small for this trace")
    assert r.output.rstrip().endswith("pass a larger --window") and "BudgetConfig" not in r.output
