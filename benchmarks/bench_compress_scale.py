"""How long the per-type compressors take on a 50 MB tool output (a log line repeated, one traceback in the
middle), per kind, with the exact o200k counter. The unit test only counts how much text gets tokenized
(tests/test_compress.py); the time is measured here.

Run:  .venv/bin/python benchmarks/bench_compress_scale.py     (writes benchmarks/results/compress_scale.json)
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from windowsmith.ingest.compress import compress
from windowsmith.tokens import count_text

OUT = Path(__file__).resolve().parent / "results" / "compress_scale.json"


def main() -> None:
    line = "2024-05-01T12:00:00Z INFO worker[3] processed batch {} in 0.42s (rows=512)\n"
    body = "".join(line.format(i) for i in range(50_000_000 // len(line) + 1))
    big = body[: len(body) // 2] + "Traceback (most recent call last):\n  File \"w.py\", line 3\nOSError: disk full\n" \
        + body[len(body) // 2:]
    rows = []
    for kind in (None, "command_output", "file_read", "table", "json", "html"):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            c = compress(big, kind=kind, budget_tokens=2000, count_tokens=count_text)
            times.append(time.perf_counter() - start)
        rows.append({"kind": kind or "detected", "seconds_median": round(sorted(times)[1], 3), "tokens": c.tokens})
        print(f"{kind or 'detected':>15}: {sorted(times)[1]:.2f} s (median of 3), {c.tokens:,} tokens kept")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"input_bytes": len(big), "budget_tokens": 2000, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
