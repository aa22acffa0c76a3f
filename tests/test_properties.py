"""Property tests over whole sessions: every pack fits, pairs never split, builds are deterministic."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from conftest import model_for

pytestmark = pytest.mark.slow  # every test here replays real traces or runs processes

step = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 400)),
    st.tuples(st.just("tool"), st.integers(0, 3000), st.integers(1, 3)),
    st.tuples(st.just("say"), st.integers(1, 300)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=40), window=st.sampled_from([3000, 6000, 12000]),
       fmt=st.sampled_from(["anthropic", "openai-chat", "openai-responses", "gemini"]))
def test_every_pack_fits_and_keeps_pairs(steps, window, fmt):
    with tempfile.TemporaryDirectory() as tmp, \
            ws.Engine(model="gpt-4o", store=Path(tmp) / "w.db", window=window,
                      budget=ws.BudgetConfig(reserved_output=500)) as e:
        s = e.session("p", goal="do the thing")
        s.system("Be concise.")
        s.user("start")
        n = 0
        for st_ in steps:
            if st_[0] == "user":
                s.user("word " * st_[1])
            elif st_[0] == "say":
                s.assistant("thinking " * st_[1])
            else:
                ids = []
                for _k in range(st_[2]):
                    n += 1
                    ids.append(f"c{n}")
                s.assistant("", tool_calls=[{"id": i, "name": "run", "arguments": {"k": i}} for i in ids])
                for i in ids:
                    s.tool_result(i, "line of output\n" * st_[1])
            pack = s.build(fmt, model=model_for(fmt))
            m = pack.manifest
            assert m.tokens <= e.budget.block_tokens(m.available), m.summary()  # block_at is a ceiling
            assert s.build(fmt, model=model_for(fmt)).manifest.checksum == m.checksum
            msgs = pack.neutral.messages
            for i, msg in enumerate(msgs):
                if msg.role == "tool":
                    calls = {c.id for c in msgs[i - 1].tool_calls} if i and msgs[i - 1].role == "assistant" else set()
                    prev_tool = msgs[i - 1].role == "tool"
                    assert prev_tool or {r.call_id for r in msg.tool_results} <= calls, "a result without its call"
                if msg.role == "assistant" and msg.tool_calls:
                    answered = {r.call_id for t in msgs[i + 1: i + 1 + len(msg.tool_calls)] if t.role == "tool"
                                for r in t.tool_results}
                    assert {c.id for c in msg.tool_calls} <= answered, "a call without its result"
