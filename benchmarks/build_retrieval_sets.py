"""Build the labelled retrieval sets shipped in ``benchmarks/data/retrieval_sets.json`` from the shared
MIT-licensed traces (tau-bench, tau2-bench, mini-swe-agent, SWE-agent, OpenHands).

Every conversation becomes a list of *turns* (one memory item each: a message's text, tool calls as
``name {arguments}``). A case is a query and the turns it needs, among the turns before a cut-off:

* ``user-facts``: an agent tool call whose argument value (an e-mail, a name, a reservation or order id,
  a zip code, a date) the *user* stated earlier and that is not in the newest two turns; the query is
  the newest two turns, the relevant items the earlier turns holding the value.
* ``tool-facts``: the same for values an earlier *tool result* produced (a payment method id, a flight
  number, a user id the agent looked up).
* ``multi-hop``: tool calls needing two or more such values from different earlier turns; a case is
  found at k only when every value has a turn in the top k.
* ``agent-ids``: identifiers a coding agent reuses from an observation at least 6 messages back (the
  chunked observations are the items), as ``bench_retrieval.py`` has always measured.
* ``no-relevant``: queries from one domain asked of a conversation of another (telecom and coding
  questions of airline and retail conversations, airline requests of coding runs): nothing should be
  injected.

Each run goes to ``dev`` or ``validation`` by a hash of its id (``bench.metrics.split_of``): tune on dev,
report validation. Run:  .venv/bin/python benchmarks/build_retrieval_sets.py
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any

from windowsmith.bench.identifiers import action_identifiers, message_text
from windowsmith.bench.metrics import split_of
from windowsmith.model import Message, ToolCall
from windowsmith.retrieval.history import chunk_lines
from windowsmith.traces import load_traces

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
OUT = ROOT / "benchmarks" / "data" / "retrieval_sets.json"
TURN_CHARS = 800  # a turn is stored up to this many characters (the value sought is always kept)
QUERY_TURNS = 2
MIN_GAP = 4  # the needed turn is at least this many turns before the query
TAU_RUNS = 50  # runs per tau file
CASES_PER_RUN = 3
AGENT_CASES = 60
TRIVIAL = frozenset({"true", "false", "none", "null", "economy", "business", "basic_economy", "one_way", "round_trip"})
_VALUE_OK = re.compile(r"[A-Za-z0-9]")


def turn_text(m: Message) -> str:
    return message_text(m).strip()


def clip(text: str, keep: str = "") -> str:
    """``text`` up to TURN_CHARS characters, around ``keep`` when it lies further in."""
    if len(text) <= TURN_CHARS:
        return text
    at = text.find(keep) if keep else -1
    if at < 0 or at + len(keep) <= TURN_CHARS:
        return text[:TURN_CHARS]
    start = max(0, at - TURN_CHARS // 2)
    return text[start:start + TURN_CHARS]


def values(m: Message) -> list[str]:
    """String argument values of a message's tool calls worth remembering."""
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            s = v.strip()
            if 4 <= len(s) <= 80 and s.lower() not in TRIVIAL and _VALUE_OK.search(s):
                out.append(s)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for b in m.content:
        if isinstance(b, ToolCall):
            walk(dict(b.arguments))
    return list(dict.fromkeys(out))


def tau_sets(rng: random.Random) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    runs: dict[str, Any] = {}
    cases: list[dict[str, Any]] = []
    for path in sorted((DATA / "tau-bench").glob("*.json")) + sorted((DATA / "tau2-bench").glob("*.json")):
        traces = load_traces(path)
        domain = path.stem
        for tr in traces[:TAU_RUNS]:
            msgs = [m for m in tr.messages if m.role != "system"]
            texts = [turn_text(m) for m in msgs]
            keep: dict[int, set[str]] = {}
            found: list[dict[str, Any]] = []
            for i, m in enumerate(msgs):
                if m.role != "assistant" or i < MIN_GAP + QUERY_TURNS:
                    continue
                query = "\n".join(texts[i - QUERY_TURNS:i])
                needed: list[tuple[str, list[int], str]] = []
                for v in values(m):
                    if v.lower() in query.lower():
                        continue
                    rel = [j for j in range(i - QUERY_TURNS - MIN_GAP + 1) if v.lower() in texts[j].lower()]
                    if not rel:
                        continue
                    needed.append((v, rel, msgs[rel[0]].role))
                if not needed:
                    continue
                if len({tuple(r) for _, r, _ in needed}) >= 2:
                    kind = "multi-hop"
                else:
                    kind = "user-facts" if needed[0][2] == "user" else "tool-facts"
                found.append({"set": kind, "run": tr.id, "cut": i - QUERY_TURNS, "query": query[-2000:],
                              "needs": [{"value": v, "turns": rel} for v, rel, _ in needed]})
                for v, rel, _ in needed:
                    for j in rel:
                        keep.setdefault(j, set()).add(v)
            if not found:
                continue
            users = [c for c in found if c["set"] == "user-facts"]
            rest = [c for c in found if c["set"] != "user-facts"]
            picked = rng.sample(users, min(2, len(users)))
            picked += rng.sample(rest, min(CASES_PER_RUN - len(picked), len(rest)))
            for c in picked:
                c["split"] = split_of(tr.id)
                c["domain"] = domain
            cases.extend(picked)
            last = max(c["cut"] for c in picked)
            runs[tr.id] = {"domain": domain, "split": split_of(tr.id),
                           "turns": [{"role": msgs[j].role, "text": clip(texts[j], next(iter(keep.get(j, {""}))))}
                                     for j in range(last) if texts[j]]}
            # turn indices above count empty turns too: re-map them to the stored list
            index = {j: n for n, j in enumerate(j for j in range(last) if texts[j])}
            for c in picked:
                c["cut"] = sum(1 for j in range(c["cut"]) if texts[j])
                for need in c["needs"]:
                    need["turns"] = [index[j] for j in need["turns"] if j in index]
    return runs, cases


def agent_set(rng: random.Random) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Identifier reuse in coding-agent runs: the items are the chunked earlier observations."""
    runs: dict[str, Any] = {}
    cases: list[dict[str, Any]] = []
    gap = 6
    for path in sorted(p for p in DATA.rglob("*") if p.is_file() and "tau" not in p.parts[-2]):
        try:
            traces = load_traces(path)
        except Exception:
            continue
        for tr in traces[:20]:
            msgs = list(tr.messages)
            found = []
            obs: list[tuple[int, str]] = []
            for i, m in enumerate(msgs):
                if m.role == "assistant" and i >= gap and obs:
                    recent = " ".join(message_text(x) for x in msgs[max(0, i - gap):i])
                    for ident in sorted(action_identifiers(m)):
                        if ident in recent or len(ident) < 5:
                            continue
                        src = next((j for j, t in reversed(obs) if j < i - gap and ident in t), None)
                        if src is not None:
                            found.append((i, ident))
                            break
                if m.role in ("tool", "user"):
                    obs.append((i, message_text(m)))
            if not found:
                continue
            i, ident = rng.choice(found)
            items: list[dict[str, Any]] = []
            relevant: list[int] = []
            for j, t in obs:
                if j >= i - gap:
                    break
                for _a, _b, body in chunk_lines(t[:60_000], blocks=False):
                    if ident in body:
                        relevant.append(len(items))
                    items.append({"role": "tool", "text": body})
            if not relevant or len(items) > 400:
                continue
            newest = "\n".join(message_text(x) for x in msgs[max(0, i - 2):i])[-2000:]
            runs[tr.id] = {"domain": path.parts[len(DATA.parts)], "split": split_of(tr.id), "turns": items}
            cases.append({"set": "agent-ids", "run": tr.id, "cut": len(items), "query": newest, "split": split_of(tr.id),
                          "domain": runs[tr.id]["domain"], "needs": [{"value": ident, "turns": relevant}]})
    rng.shuffle(cases)
    keep = cases[:AGENT_CASES]
    used = {c["run"] for c in keep}
    return {k: v for k, v in runs.items() if k in used}, keep


def no_relevant(runs: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    """Queries of another domain: telecom and coding questions to airline/retail runs, airline to coding."""
    by_domain: dict[str, list[str]] = {}
    for rid, r in runs.items():
        by_domain.setdefault(r["domain"], []).append(rid)
    telecom = [t["text"] for rid in by_domain.get("gpt-4o_telecom_dual-control", []) for t in runs[rid]["turns"]
               if t["role"] == "user" and len(t["text"]) > 40]
    coding = [t["text"][:600] for d in ("mini-swe-agent", "swe-agent", "openhands") for rid in by_domain.get(d, [])
              for t in runs[rid]["turns"][:1]]
    airline = [t["text"] for d in ("gpt-4o-airline", "claude-sonnet-4-5_airline") for rid in by_domain.get(d, [])
               for t in runs[rid]["turns"] if t["role"] == "user" and len(t["text"]) > 40]
    out = []
    for rid, r in sorted(runs.items()):
        d = r["domain"]
        if "telecom" in d:
            continue
        pool = airline if d in ("mini-swe-agent", "swe-agent", "openhands") else telecom + coding
        if not pool:
            continue
        for q in rng.sample(pool, min(2, len(pool))):
            out.append({"set": "no-relevant", "run": rid, "cut": len(r["turns"]), "query": q, "split": r["split"],
                        "domain": d, "needs": []})
    return out


def main() -> int:
    rng = random.Random(53)
    runs, cases = tau_sets(rng)
    aruns, acases = agent_set(rng)
    runs.update(aruns)
    cases += acases
    cases += no_relevant(runs, rng)
    sets: dict[str, dict[str, int]] = {}
    for c in cases:
        s = sets.setdefault(c["set"], {"dev": 0, "validation": 0})
        s[c["split"]] += 1
    out = {"about": "labelled retrieval sets built by benchmarks/build_retrieval_sets.py from MIT-licensed traces "
                    "(sierra-research/tau-bench, sierra-research/tau2-bench, mini-swe-agent, SWE-agent, OpenHands)",
           "license": "MIT (the traces' license)", "sets": sets, "runs": runs, "cases": cases}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, separators=(",", ":"), ensure_ascii=False) + "\n")
    print(json.dumps(sets), f"{OUT.stat().st_size / 1e6:.2f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
