"""The mask stage in detail: what a fold points at (per call), what its keys hold, and image stubs."""

from __future__ import annotations

import hashlib
from typing import Any

import windowsmith as ws
from windowsmith.compaction import CompactionConfig
from windowsmith.compaction.pipeline import _fold_artifacts
from windowsmith.compaction.references import result_keys

BIG = "\n".join(f"2024-01-01 12:00:{i % 60:02d} worker-{i % 7} RefundError in refund_twice ZFA{i:03d}Y" for i in range(400))
SMALL = "retries = 3\nREFUND_MODE=strict"


def sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def records(s: ws.Session, typ: str) -> list[dict[str, Any]]:
    return [c for c in s.state.compactions if c.get("type") == typ]


def filler(s: ws.Session, i: int) -> None:
    s.assistant(f"I will run step {i}.", tool_calls=[{"id": f"f{i}", "name": "run", "arguments": {"command": f"pytest -k t{i}"}}])
    s.tool_result(f"f{i}", "collected 30 items\n" + "".join(f"tests/test_{i}.py::test_{k} PASSED\n" for k in range(30)))


def mixed_session(e: ws.Engine, sid: str = "mix") -> ws.Session:
    """The first exchange has two calls: a big result (offloaded at ingest), then a small inline one."""
    s = e.session(sid, goal="Fix the refund bug in src/billing/refund.py")
    s.user("ORIGINAL TASK: the refund endpoint refunds twice.")
    s.assistant("I will read the log and the config.", tool_calls=[
        {"id": "big", "name": "read_log", "arguments": {"path": "logs/app.log"}},
        {"id": "small", "name": "read_config", "arguments": {"path": "config/app.toml"}},
    ])
    s.tool_result("big", BIG)
    s.tool_result("small", SMALL)
    assert f"is stored as artifact://{sha(BIG)}" in s.messages[2].tool_results[0].text  # offloaded at ingest
    assert s.messages[3].tool_results[0].text == SMALL  # inline
    return s


# --------------------------------------------------------------------------- per-call artifacts


def test_mixed_exchange_maps_each_call_to_its_own_artifact(tmp_path):
    cfg = CompactionConfig(keep_turns=2)
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=200_000, compaction=cfg,
                   ingest=ws.IngestConfig(offload_tokens=200)) as e:
        s = mixed_session(e)
        for i in range(4):
            filler(s, i)
        s.compact()
        fold = next(f for r in records(s, "mask") for f in r["folds"] if f["first_seq"] == s.state.message_seqs[1])
        assert fold["calls"] == {"big": sha(BIG), "small": sha(SMALL)}
        assert fold["artifacts"] == [sha(BIG), sha(SMALL)]
        assert "read_log(path=logs/app.log) → 2024-01-01" in fold["text"]
        assert f"(artifact://{sha(BIG)}); read_config(path=config/app.toml)" in fold["text"]
        assert e.artifacts.get(sha(BIG)).decode() == BIG and e.artifacts.get(sha(SMALL)).decode() == SMALL
        # the summary's references point each call at its own result
        assert records(s, "summary")
        refs = {r["detail"].get("call_id"): r["detail"].get("artifact") for r in s.state.summary["refs"]
                if r["kind"] == "command"}
        assert refs["big"] == sha(BIG) and refs["small"] == sha(SMALL)
        sections = {sec.split("\n", 1)[0]: sec for sec in s.reconstruct(100_000, kinds=["command"]).split("### ")}
        small = next(v for k, v in sections.items() if k.startswith("command: read_config"))
        big = next(v for k, v in sections.items() if k.startswith("command: read_log"))
        assert SMALL in small and "RefundError" not in small
        assert "ZFA000Y" in big and "REFUND_MODE" not in big


def test_fold_artifacts_reads_records_written_before_the_per_call_mapping(tmp_path):
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db") as e:
        s = e.session("old")
        s.user("go")
        s.assistant("", tool_calls=[{"id": "a", "name": "run", "arguments": {}}, {"id": "b", "name": "run", "arguments": {}}])
        s.tool_result("a", "out a")
        s.tool_result("b", "out b")
        s.user("next")
        first, last = s.state.message_seqs[1], s.state.message_seqs[3]
        s._append("compaction", {"type": "mask", "saved_tokens": 0, "reason": "old record",
                                 "folds": [{"first_seq": first, "last_seq": last, "text": "[turn 1] run() → out a",
                                            "artifacts": [sha("out a"), sha("out b")]}]})
        assert s.state.units[1].folded
        assert _fold_artifacts(s.state, first) == {"a": sha("out a"), "b": sha("out b")}
        assert _fold_artifacts(s.state, last + 1) == {}


# --------------------------------------------------------------------------- keys


def test_fold_keys_skip_windowsmith_boilerplate(tmp_path):
    footer = (f"[windowsmith: the full result (400 lines, 9,000 tokens) is stored as artifact://{'a' * 64}; "
              "read more with read_result(ref, offset, limit) or search_result(ref, pattern)]")
    text = f"order #W2378156 failed\ntoken=[REDACTED:aws_secret_access_key] user_id_key=1\n{footer}"
    keys = result_keys(text)
    assert "#W2378156" in keys and "user_id_key" in keys
    assert not {"read_result", "search_result", "aws_secret_access_key"} & set(keys)
    binary = f"[binary output: 2,048 bytes of PNG image, stored as artifact://{'b' * 64}; it cannot be shown as text]"
    assert result_keys(binary) == []
    # end to end: the fold of a result offloaded at ingest lists the result's ids, not the retrieval tools
    cfg = CompactionConfig(keep_turns=2)
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=200_000, compaction=cfg,
                   ingest=ws.IngestConfig(offload_tokens=200)) as e:
        s = mixed_session(e)
        for i in range(3):
            filler(s, i)
        s.compact()
        line = records(s, "mask")[0]["folds"][0]["text"]
        assert "[keys: " in line and "refund_twice" in line
        assert "read_result" not in line and "search_result" not in line
