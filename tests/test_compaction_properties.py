"""Property tests for compaction: over random sessions and windows, with compaction stages firing,
the view always fits, tool calls never leave their results, every compacted span is recorded and
reconstructible, folds never nest, and the log rebuilds the same packs."""

from __future__ import annotations

import base64
import hashlib
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from conftest import model_for
from windowsmith.compaction import CompactionConfig, FakeSummarizer

pytestmark = pytest.mark.slow  # every test here replays real traces or runs processes

step = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 600)),
    st.tuples(st.just("tool"), st.integers(20, 400), st.integers(1, 2)),
    st.tuples(st.just("say"), st.integers(1, 200)),
    st.tuples(st.just("image"), st.booleans()),  # an image in a user message (True) or a tool result
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=10, max_size=50), window=st.sampled_from([6000, 9000, 14000]),
       fmt=st.sampled_from(["anthropic", "openai-chat", "openai-responses", "gemini"]),
       keep=st.integers(1, 6), bad=st.booleans())
def test_compacted_views_fit_keep_pairs_and_stay_reconstructible(steps, window, fmt, keep, bad):
    summarizer = FakeSummarizer(script=["empty", "echo"]) if bad else None
    cfg = CompactionConfig(keep_turns=keep, mask_batch=1)
    with tempfile.TemporaryDirectory() as tmp, \
            ws.Engine(model="gpt-4o", store=Path(tmp) / "w.db", window=window, compaction=cfg, summarizer=summarizer,
                      budget=ws.BudgetConfig(reserved_output=500)) as e:
        s = e.session("p", goal="fix the parser in src/parse.py")
        s.system("Be concise.")
        s.user("start: the parser fails on empty input")
        n = 0
        originals: dict[str, str] = {}
        images: dict[str, bytes] = {}  # sha → bytes of every image sent
        for st_ in steps:
            if st_[0] == "image":
                raw = f"image {len(images)} ".encode() * 40
                images[hashlib.sha256(raw).hexdigest()] = raw
                img = {"type": "image", "data": base64.b64encode(raw).decode(), "media_type": "image/png"}
                if st_[1]:
                    s.user([{"type": "text", "text": "look at this"}, img])
                else:
                    n += 1
                    s.assistant("", tool_calls=[{"id": f"c{n}", "name": "shot", "arguments": {}}])
                    s.tool_result(f"c{n}", [{"type": "text", "text": f"shot c{n}"}, img])
                    originals[f"c{n}"] = (f"shot c{n}", f"shot c{n}")
            elif st_[0] == "user":
                s.user("word " * st_[1])
            elif st_[0] == "say":
                s.assistant("I will check it. " * (st_[1] // 4 + 1))
            else:
                ids = []
                for _k in range(st_[2]):
                    n += 1
                    ids.append(f"c{n}")
                s.assistant("", tool_calls=[{"id": i, "name": "run", "arguments": {"command": f"pytest -k {i}"}}
                                            for i in ids])
                for i in ids:
                    out = f"error: case {i} failed\n" + f"line {i}\n" * st_[1]
                    originals[i] = (out, s.tool_result(i, out).tool_results[0].text)
            pack = s.build(fmt, model=model_for(fmt))
            m = pack.manifest
            assert m.tokens <= m.available, m.summary()
            msgs = pack.neutral.messages
            for k, msg in enumerate(msgs):  # pairs never split
                if msg.role == "tool":
                    j = k - 1
                    while msgs[j].role == "tool":
                        j -= 1
                    assert msgs[j].role == "assistant"
                    assert {r.call_id for r in msg.tool_results} <= {c.id for c in msgs[j].tool_calls}
                if msg.role == "assistant" and msg.tool_calls:
                    answered = set()
                    for t in msgs[k + 1:]:
                        if t.role != "tool":
                            break
                        answered |= {r.call_id for r in t.tool_results}
                    assert {c.id for c in msg.tool_calls} == answered
                assert msg.text.count("[turn ") <= max(1, msg.text.count("\n[turn ") + 1)  # a fold holds no fold
        for kind in sorted({r["type"] for r in s.state.compactions}):
            event(f"compaction: {kind}")
        if any(r.get("images") for r in s.state.compactions):
            event("compaction: image stubs")
        # every compacted span is recorded and reconstructible
        seen_folds: set[int] = set()
        for rec in s.state.compactions:
            if rec["type"] == "mask":
                for im in rec.get("images", ()):
                    assert e.store.get_blob(im["artifact"]) == images[im["artifact"]]
                    assert im["text"].endswith(f"(artifact://{im['artifact']})]")
                for f in rec["folds"]:
                    assert f["first_seq"] not in seen_folds  # folds never nest / never repeat
                    seen_folds.add(f["first_seq"])
                    span = s.state.span_messages(f["first_seq"], f["last_seq"])
                    results = [r for _, msg in span for r in msg.tool_results]
                    assert results
                    for r in results:
                        # byte for byte: the recorded result, or the original an ingest offload stored
                        sha = f["calls"][r.call_id]
                        assert sha in f["artifacts"]
                        assert e.store.get_blob(sha).decode() in originals[r.call_id]
            elif rec["type"] in ("summary", "emergency"):
                assert s.state.span_messages(rec["first_seq"], rec["last_seq"])
                assert rec["keep_from_seq"] > rec["last_seq"]
            elif rec["type"] == "failed":
                assert "history kept" in rec["reason"]
        for u in s.state.units:
            if u.folded:
                assert u.messages[0].text.startswith("[turn ") and "artifact://" in u.messages[0].text
        # nothing lost from the transcript
        assert len(s.messages) == len(s.state.message_seqs)
        # the log alone rebuilds the last pack
        with ws.Engine(model="gpt-4o", store=e.store, window=window, compaction=cfg,
                       budget=ws.BudgetConfig(reserved_output=500)) as e2:
            again = e2.session("p").build(fmt, model=model_for(fmt))
        assert again.manifest.checksum == pack.manifest.checksum
