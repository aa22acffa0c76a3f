"""Code map build and incremental update time on a real package of ~580 Python files (networkx, installed
in the venv as a dependency of the test extras), copied to a temporary folder so it can be edited.

Run:  .venv/bin/python benchmarks/bench_codemap.py     (writes benchmarks/results/codemap.json and .md)

Measured (median of 3 unless said): a cold build (scan + tree-sitter parse + graph, grammars already
loaded), an update with nothing changed (stat only), an update after editing 1 and 10 files (re-parse those
and rebuild the graph on the next render), a render of a 1,024-token map focused on one file, and a load
from the cache file in a new CodeMap (what ``windowsmith map --cache`` does on its second run).
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import networkx

from windowsmith.codemap import CodeMap, parse_source
from windowsmith.tokens import count_text

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
FOCUS = "algorithms/shortest_paths/weighted.py"


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    src = Path(networkx.__file__).parent
    parse_source("warm.py", b"x = 1\n")  # load the grammar once (not part of any figure)
    count_text("warm")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "networkx"
        shutil.copytree(src, root, ignore=shutil.ignore_patterns("__pycache__"))
        files = sorted(root.rglob("*.py"))
        lines = sum(p.read_text(errors="replace").count("\n") for p in files)
        build_s, cm = timed(lambda: CodeMap(root))
        assert isinstance(cm, CodeMap)
        render_cold_s, text = timed(lambda: (setattr(cm, "_graph", None), cm.render(1024, [FOCUS]))[1], 3)
        noop_s, stats = timed(cm.update)
        edits = {}
        for n in (1, 10):
            def edit_and_update(n: int = n) -> object:
                for p in files[:n]:
                    p.write_text(p.read_text() + f"\n\ndef _bench_added_{time.perf_counter_ns()}():\n    return 1\n")
                st = cm.update()
                cm.render(1024, [FOCUS])
                return st
            edits[n] = timed(edit_and_update)
        render_warm_s, _ = timed(lambda: cm.render(1024, [FOCUS]))
        cache = Path(tmp) / "cache.json"
        CodeMap(root, cache=cache)
        load_s, again = timed(lambda: CodeMap(root, cache=cache))
        assert isinstance(again, CodeMap) and again.last_update.parsed == 0
    res = {
        "package": f"networkx {networkx.__version__}", "files": len(files), "lines": lines,
        "build_s": round(build_s, 3), "update_nothing_changed_s": round(noop_s, 4),
        "update_and_render_1_edited_s": round(edits[1][0], 3), "update_and_render_10_edited_s": round(edits[10][0], 3),
        "render_1024_cold_graph_s": round(render_cold_s, 3), "render_1024_warm_s": round(render_warm_s, 3),
        "load_from_cache_s": round(load_s, 3), "map_tokens": count_text(str(text)),
        "noop_stats": stats.to_dict() if hasattr(stats, "to_dict") else None,  # type: ignore[union-attr]
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "codemap.json").write_text(json.dumps(res, indent=1) + "\n")
    md = [f"Code map of {res['package']} ({res['files']} Python files, {res['lines']:,} lines), focus `{FOCUS}`:", "",
          "| step | seconds |", "|---|---:|",
          f"| build (scan + tree-sitter parse of every file) | {res['build_s']} |",
          f"| update, nothing changed (stat only) | {res['update_nothing_changed_s']} |",
          f"| update + render after editing 1 file | {res['update_and_render_1_edited_s']} |",
          f"| update + render after editing 10 files | {res['update_and_render_10_edited_s']} |",
          f"| render 1,024 tokens (graph rebuilt) | {res['render_1024_cold_graph_s']} |",
          f"| render 1,024 tokens (graph cached) | {res['render_1024_warm_s']} |",
          f"| new CodeMap from the cache file | {res['load_from_cache_s']} |"]
    (OUT / "codemap.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
