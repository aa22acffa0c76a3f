"""Adversarial inputs for the reference and fold-key scanners (issue 13: every regex on tool output linear-time).

Each input is a long run of one character class between a prefix and a suffix that make a pattern try, and
fail, from many starts (``ab`` + digits + ``_`` for ids, ``a.a.a…`` + ``()`` for function calls, ``a-a-…`` + ``/``
for paths...), or a short unit repeated. Each is timed at two lengths, a quarter and all of ``--chars``
(default 20,000; the references scan a result's first and last 20,000 characters, the fold keys its first
50,000): a linear scanner takes about 4 times as long on the longer one, a quadratic one about 16 times.
The scanners are timed through the public API on a tool result: ``extract_refs`` (references and error
lines), ``result_keys`` (fold keys) and ``identifier_index`` (the offload index, gutter ranges included); and the summarizer's sentence scans (``sentences_with``, ``QUESTION_RE``) on
the same text as user or assistant text. Prints a table; writes nothing.

Run:  .venv/bin/python benchmarks/bench_scan_adversarial.py [--chars N] [--all]
      (--all lists every input, not only those over a ratio of 6)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from windowsmith.compaction.references import extract_refs, result_keys, sentences_with
from windowsmith.compaction.summarizer import NEXT_STEP_WORDS, PREFERENCE_WORDS, QUESTION_RE
from windowsmith.model import Message, Text, ToolResult
from windowsmith.text import identifier_index

PREFIXES = ["", "ab", "a_", "#", "A", "x/", "def ", "a.", "a@b.", "1:"]
RUNS = ["1", "a", "a1", "A1", "a.", "a/", "a-", "1_", "a_", "_a", "()", "a()", ".a", "a@", "1.", " ", "a.b(", "/a",
        "-a", "a#1", "Error", "e1", "0123456789abcdef", "12: x\n", "7\tx\n", " 1:\r\n"]
SUFFIXES = ["", "_", "!", "x", "/", ".py", "()", "@a.b", "Error"]


def shapes() -> dict[str, Callable[[int], str]]:
    out: dict[str, Callable[[int], str]] = {}
    for p in PREFIXES:
        for r in RUNS:
            for s in SUFFIXES:
                out[f"{p!r} + {r!r}*n + {s!r}"] = lambda n, p=p, r=r, s=s: p + r * (n // len(r)) + s
    return out


_runs = 0


def _timed(scan: Callable[[str], object], text: str) -> float:
    global _runs
    _runs += 1
    text = f"{text}\nrun {_runs}"  # a new text each time: the scanners keep what they found per text
    start = time.process_time()
    scan(text)
    return time.process_time() - start


SCANNERS: dict[str, Callable[[str], object]] = {
    "references": lambda t: extract_refs([Message("tool", (ToolResult("c1", (Text(t),), is_error=True),))]),
    "fold keys": lambda t: result_keys(t, 40),
    # the index an offloaded or shrunk view carries of what its cut lost (identifiers, a listing's gutter as ranges)
    "offload index": lambda t: identifier_index(t, t[:200], 400, len),
    # the summarizer's sentence scans (preferences in user text, questions, the next step in the assistant's last text)
    "sentences": lambda t: (sentences_with(PREFERENCE_WORDS, t, 3), QUESTION_RE.findall(t), sentences_with(NEXT_STEP_WORDS, t)),
}


def main(argv: list[str]) -> int:
    chars = int(argv[argv.index("--chars") + 1]) if "--chars" in argv else 20_000
    rows = []
    for name, make in shapes().items():
        for scanner, scan in SCANNERS.items():
            short, long = _timed(scan, make(chars // 4)), _timed(scan, make(chars))
            rows.append((long, long / max(short, 1e-4), scanner, name))
    rows.sort(reverse=True)
    print(f"{'seconds':>8} {'ratio':>6}  scanner     input (n = {chars // 4:,} and {chars:,}; linear: ratio about 4)")
    shown = [r for r in rows if "--all" in argv or (r[1] > 6 and r[0] > 0.01)]
    for long, ratio, scanner, name in shown:
        print(f"{long:>8.3f} {ratio:>6.1f}  {scanner:<11} {name}")
    worst = rows[0]
    print(f"{len(rows)} inputs; slowest {worst[0]:.3f} s ({worst[2]}, {worst[3]}); "
          f"{sum(1 for r in rows if r[1] > 6 and r[0] > 0.01)} over a ratio of 6")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
