"""The codebase map: tree-sitter parsing per language, the file graph and personalized PageRank, the
budgeted render, incremental updates, the layer (focus from the session, cache prefix untouched) and the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import windowsmith as ws
from test_invariants import (
    _replay_packs,
    assert_prefix_kept_between_compactions,
)
from windowsmith.cli import main
from windowsmith.codemap import CodeMap, CodeMapLayer, parse_source
from windowsmith.codemap import parse as parse_mod
from windowsmith.layers.builtin import default_layers
from windowsmith.tokens import count_text
from windowsmith.traces import load_traces

SRC = Path(__file__).resolve().parents[1] / "src"


def test_each_language_yields_definitions_signatures_nesting_imports_and_references():
    py = parse_source("pkg/a.py", b"import os\nfrom .b import helper\nclass A(Base):\n    def run(self,\n            x: int) -> int:\n        return helper(x)\n")
    assert [(d.name, d.kind, d.line, d.signature, d.depth) for d in py.definitions] == [
        ("A", "class", 3, "class A(Base)", 0), ("run", "function", 4, "def run(self, x: int) -> int", 1)]
    assert py.imports == ["import os", "from .b import helper"] and py.references["helper"] == 2
    ts = parse_source("a.ts", b'import {x} from "./b";\nexport class A implements I { m(a: number): string { return x(a) } }\ninterface I {}\n')
    assert [(d.name, d.kind, d.depth) for d in ts.definitions] == [("A", "class", 0), ("m", "method", 1), ("I", "interface", 0)]
    assert ts.imports == ['"./b"']
    js = parse_source("a.js", b'import y from "./y.js";\nconst f = (a) => y(a);\nclass K { m() {} }\n')
    assert [d.name for d in js.definitions] == ["f", "K", "m"] and js.references["y"] == 2
    go = parse_source("m/a.go", b'package m\nimport "example.com/p/util"\ntype T struct{}\nfunc (t T) M(a int) error { return util.Do(a) }\n')
    assert [(d.name, d.kind, d.signature) for d in go.definitions] == [("T", "type", "T struct{}"), ("M", "method", "func (t T) M(a int) error")]
    java = parse_source("A.java", b"import a.b.C;\nclass A { void m(int x) { C.f(x); } }\n")
    assert [(d.name, d.signature) for d in java.definitions] == [("A", "class A"), ("m", "void m(int x)")]
    rs = parse_source("src/lib.rs", b"use crate::util::Y;\nmod util;\nstruct S;\nimpl S { fn f(&self) -> u8 { g() } }\n")
    assert [d.name for d in rs.definitions] == ["util", "S", "f"] and rs.imports == ["use crate::util::Y;", "util"]


def test_missing_grammars_name_the_extra(monkeypatch):
    real = parse_mod.importlib.import_module

    def fake(name, *a):
        if name.startswith("tree_sitter"):
            raise ImportError(name)
        return real(name, *a)

    parse_mod._language.cache_clear()
    monkeypatch.setattr(parse_mod.importlib, "import_module", fake)
    with pytest.raises(ws.ConfigError, match=r"pip install 'windowsmith\[codemap\]'"):
        parse_source("a.py", b"x = 1\n")
    monkeypatch.undo()
    parse_mod._language.cache_clear()
    assert parse_source("a.py", b"def f(): pass\n").definitions[0].name == "f"


def _repo(tmp_path: Path) -> Path:
    files = {
        "pkg/__init__.py": "",
        "pkg/core.py": "class Store:\n    def get(self, k):\n        return k\n\ndef helper(x):\n    return Store().get(x)\n",
        "pkg/api.py": "from .core import helper, Store\n\ndef handle(req):\n    return helper(req)\n\ndef ping():\n    return Store()\n",
        "pkg/cli.py": "from pkg.api import handle\n\ndef main():\n    handle('x')\n    handle('y')\n",
        "pkg/extra.py": "def unused_thing():\n    return 1\n",
        "web/app.ts": 'import { util } from "./lib/util";\nexport function start(): void { util(); }\n',
        "web/lib/util.ts": "export function util(): number { return 1 }\n",
    }
    for rel, text in files.items():
        p = tmp_path / "repo" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path / "repo"


def test_graph_ranks_the_most_referenced_file_and_follows_imports(tmp_path):
    cm = CodeMap(_repo(tmp_path))
    g = cm.graph()
    assert g.imports["pkg/api.py"] == ["pkg/core.py"] and g.imports["pkg/cli.py"] == ["pkg/api.py"]
    assert g.imports["web/app.ts"] == ["web/lib/util.ts"]
    ranks = g.pagerank()
    assert max(ranks, key=ranks.get) == "pkg/core.py"  # everything leads there
    assert g.import_chain(["pkg/cli.py"]) == {"pkg/cli.py": 0, "pkg/api.py": 1, "pkg/core.py": 2}
    personal = g.pagerank({"web/app.ts": 1.0})
    assert personal["web/lib/util.ts"] > personal["pkg/core.py"]


def test_render_fits_the_budget_and_puts_the_focus_and_its_imports_first(tmp_path):
    cm = CodeMap(_repo(tmp_path))
    text = cm.render(60, focus_files=["pkg/cli.py"])
    assert count_text(text) <= 60
    assert text.splitlines()[0] == "pkg/cli.py:" and text.splitlines()[1] == "  3: def main()"
    assert text.index("pkg/api.py") < text.index("pkg/core.py")
    big = cm.render(2000)
    assert all(f in big for f in ("pkg/core.py", "pkg/api.py", "web/lib/util.ts")) and "    2: def get(self, k)" in big
    small = cm.render(20)
    assert count_text(small) <= 20
    with pytest.raises(ws.ConfigError, match="not source files"):
        cm.render(100, focus_files=["nope.py"])


def test_incremental_update_by_mtime_and_hash_and_the_cache_file(tmp_path):
    root = _repo(tmp_path)
    cache = tmp_path / "cm.json"
    cm = CodeMap(root, cache=cache)
    assert cm.last_update.to_dict() == {"files": 7, "parsed": 7, "touched": 0, "removed": 0}
    assert cm.update().to_dict() == {"files": 7, "parsed": 0, "touched": 0, "removed": 0}
    p = root / "pkg/extra.py"
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched, same bytes: not re-parsed
    assert cm.update().to_dict() == {"files": 7, "parsed": 0, "touched": 1, "removed": 0}
    p.write_text("def renamed_thing(a, b):\n    return a\n")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    assert cm.update().parsed == 1
    assert "renamed_thing(a, b)" in cm.render(2000) and "unused_thing" not in cm.render(2000)
    (root / "web/lib/util.ts").unlink()
    assert cm.update().removed == 1 and cm.graph().imports["web/app.ts"] == []
    again = CodeMap(root, cache=cache)  # a new process: the cache file saves every parse
    assert again.last_update.to_dict() == {"files": 6, "parsed": 0, "touched": 0, "removed": 0}
    assert again.render(2000) == cm.render(2000)
    cache.write_text("{not json")
    assert CodeMap(root, cache=cache).last_update.parsed == 6  # a broken cache is rebuilt


def test_layer_focuses_on_edited_files_and_the_task(make_engine, tmp_path):
    root = _repo(tmp_path)
    layer = CodeMapLayer(root, budget_tokens=120)
    s = make_engine(layers=lambda: [*default_layers(), layer]).session("cm", goal="make handle() retry on errors")
    s.user("the CLI fails")
    s.assistant(tool_calls=[{"id": "e1", "name": "str_replace_editor",
                             "arguments": {"command": "str_replace", "path": "/repo/pkg/cli.py", "old_str": "x", "new_str": "y"}}])
    s.tool_result("e1", "edited")
    pack = s.build()
    tail = pack.neutral.tail
    section = tail[tail.index("## CODEMAP\n") + len("## CODEMAP\n"):]
    assert section.startswith("pkg/cli.py:\n  3: def main()")
    rep = pack.manifest.guidance["codemap"]
    assert rep["edited"] == ["pkg/cli.py"] and rep["focus_names"] == ["handle"] and rep["files"] == 7
    assert pack.manifest.layers["codemap"]["used"] <= 120 + 8


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses", "gemini"])
def test_codemap_layer_keeps_the_cache_prefix_on_a_real_trace(traces_dir, tmp_path, fmt):
    trace = load_traces(traces_dir / "tau-bench/gpt-4o-airline.json")[0]
    model = {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-pro"}.get(fmt, "gpt-4.1")
    layer = CodeMapLayer(SRC, budget_tokens=300)
    with ws.Engine(model=model, store=tmp_path / "w.db", layers=lambda: [*default_layers(), layer]) as engine:
        packs = _replay_packs(engine, trace, fmt, "c")
    assert all("## CODEMAP" in p.neutral.tail for p in packs)
    assert_prefix_kept_between_compactions(packs, fmt)


def test_cli_map(tmp_path):
    root = _repo(tmp_path)
    r = CliRunner().invoke(main, ["map", str(root), "--budget", "60", "--focus", "pkg/cli.py"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("pkg/cli.py:\n") and count_text(r.output) <= 61
    r = CliRunner().invoke(main, ["map", str(root), "--json", "--cache", str(tmp_path / "c.json")])
    assert json.loads(r.output)["update"] == {"files": 7, "parsed": 7, "touched": 0, "removed": 0}
    r = CliRunner().invoke(main, ["map", str(root), "--focus", "missing.py"])
    assert r.exit_code != 0 and "not source files" in r.output
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.txt").write_text("no code here\n")
    r = CliRunner().invoke(main, ["map", str(tmp_path / "docs")])
    assert r.exit_code == 0 and "no source files under" in r.output and ".py" in r.output  # not an empty line


def test_layer_renders_again_only_when_files_or_focus_change(make_engine, tmp_path, monkeypatch):
    root = _repo(tmp_path)
    layer = CodeMapLayer(root, budget_tokens=200)
    calls = []
    real = layer.map.render
    monkeypatch.setattr(layer.map, "render", lambda *a, **k: calls.append(a) or real(*a, **k))
    s = make_engine(layers=lambda: [*default_layers(), layer]).session("r", goal="fix pkg/api.py")
    s.user("go")
    first = s.build().neutral.tail
    s.assistant("looking")
    s.user("and?")
    assert s.build().neutral.tail.endswith(first.split("## CODEMAP\n", 1)[1]) and len(calls) == 1
    (root / "pkg/api.py").write_text("def handle(req, retries=3):\n    return req\n")
    s.assistant("edited")
    s.user("done?")
    tail = s.build().neutral.tail
    assert len(calls) == 2 and "def handle(req, retries=3)" in tail


def test_cli_map_without_the_extra_names_it(tmp_path, monkeypatch):
    real = parse_mod.importlib.import_module

    def fake(name, *a):
        if name.startswith("tree_sitter"):
            raise ImportError(name)
        return real(name, *a)

    parse_mod._language.cache_clear()
    monkeypatch.setattr(parse_mod.importlib, "import_module", fake)
    r = CliRunner().invoke(main, ["map", str(_repo(tmp_path))])
    monkeypatch.undo()
    parse_mod._language.cache_clear()
    assert r.exit_code != 0 and "pip install 'windowsmith[codemap]'" in r.output
