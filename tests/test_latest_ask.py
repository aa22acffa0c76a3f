"""The user's latest message survives the cut: a session where the user asks again (a second task, a customer's
answer) keeps what the user last said in every request. The pinned request is the first ask; a later one was
history, and once a cut dropped it the request said only what the agent had done since (the work log's newest
lines, an index of the newest names), not what it was asked to do. A cut now carries the newest user message it
drops after the summary message (``SessionState.ask_message``), unless the kept history holds a newer one."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from windowsmith.bench.run import extends_previous
from windowsmith.model import Message, ToolCall, ToolSpec
from windowsmith.stand_ins import ASK_CHARS, ASK_HEAD

MODEL = "claude-sonnet-4-5"
TASK_B = "Task B: make parse_header() in src/http/headers.py tolerate a missing x-trace-id header (ticket WS-4411)"


def request_text(pack: ws.Pack) -> str:
    return "\n".join(m.text for m in pack.neutral.messages)


def exchange(s: ws.Session, k: int, lines: int = 40) -> None:
    s.add(Message("assistant", (ToolCall(f"c{k}", "bash", {"command": f"cat src/b{k}.py"}),)))
    s.tool_result(f"c{k}", f"def b{k}():\n    return {k}\n" * lines)


@pytest.mark.slow
def test_the_users_second_task_stays_in_every_request_after_the_cut_drops_it(tmp_path):
    db = tmp_path / "w.db"
    with ws.Engine(model=MODEL, store=db, window=8000) as e:
        s = e.session("two-tasks")
        s.system("You are a careful engineer.")
        s.tools([ToolSpec("bash", "run a command", {"type": "object", "properties": {"command": {"type": "string"}}})])
        s.user("Task A: rename foo_alpha to foo_beta in src/a.py")
        for k in range(6):
            exchange(s, k)
        s.assistant("Done with task A.")
        s.user(TASK_B)
        ask_seq = s.state.seq
        prev = None
        carried_builds = 0
        for k in range(6, 70):
            exchange(s, k)
            pack = s.build()
            text = request_text(pack)
            assert "WS-4411" in text and "Task B: make parse_header()" in text, k  # kept, or carried
            assert pack.tokens <= pack.manifest.available
            if s.state.keep_from_seq > ask_seq:  # the cut took the message: it is carried after the summary message
                carried_builds += 1
                assert any(m.text == ASK_HEAD + TASK_B for m in pack.neutral.messages)
            if prev is not None and not pack.manifest.actions:
                assert extends_previous(prev, pack.neutral)  # carried or not, an append-only build extends the last
            prev = pack.neutral
        assert carried_builds > 20
        said = [a["reason"] for m in e.store.list_packs(s.id) for a in m["actions"]
                if a["kind"] in ("emergency", "truncate")]
        assert any(f"user message at seq {ask_seq}" in r for r in said)  # the manifest says what the cut carried
    with ws.Engine(model=MODEL, store=db, window=8000) as e2:  # the log rebuilds the same request
        assert e2.session("two-tasks").build().request == pack.request


@pytest.mark.slow
def test_a_long_ask_is_carried_by_a_view_that_keeps_its_names():
    """A second request of demonstration, issue and instructions in one message (as SWE-agent 1.x writes a task):
    carried by a view of about ASK_CHARS characters that keeps its head, its tail and the issue's line between them
    (``message_view``), not by its head alone, which is the demonstration."""
    demo = "\n".join(f"Demonstration step {i}: think about the interface before you act." for i in range(60))
    issue = "ISSUE: parse_header() in src/http/headers.py raises KeyError 'x-trace-id' when the header is missing"
    rules = "\n".join(f"Rule {i}: keep the change small and run the tests." for i in range(30))
    text = f"Task C follows.\n{demo}\n{issue}\n{rules}"
    with tempfile.TemporaryDirectory() as tmp, ws.Engine(model=MODEL, store=Path(tmp) / "w.db", window=8000) as e:
        s = e.session("long-ask")
        s.user("Task A: rename foo_alpha to foo_beta")
        exchange(s, 0)
        s.assistant("Done.")
        s.user(text)
        for k in range(1, 60):
            exchange(s, k)
            s.build()
        carried = [m.text for m in s.build().neutral.messages if m.text.startswith(ASK_HEAD)]
        assert len(carried) == 1
        view = carried[0]
        assert view.startswith(ASK_HEAD + "Task C follows.") and "Rule 29: keep the change small" in view
        assert "src/http/headers.py" in view and "x-trace-id" in view  # the issue, from the middle
        assert f"a view of a message of {len(text):,} characters" in view
        assert len(view) < ASK_CHARS + 400


@pytest.mark.slow
def test_a_request_after_the_agents_finish_tool_is_carried(tmp_path):
    """An agent that ends its turn through a tool (OpenHands ``finish``, SWE-agent ``submit``) yields there: the user
    message after that exchange is the user asking again, carried like one after a text reply."""
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=8000) as e:
        s = e.session("finish")
        s.user("Task A: rename foo_alpha to foo_beta in src/a.py")
        for k in range(4):
            exchange(s, k)
        s.add(Message("assistant", (ToolCall("fin", "finish", {"message": "renamed"}),)))
        s.tool_result("fin", "done")
        s.user(TASK_B)
        for k in range(4, 60):
            exchange(s, k)
            assert "WS-4411" in request_text(s.build()), k
        assert any(m.text == ASK_HEAD + TASK_B for m in s.build().neutral.messages)


@pytest.mark.slow
def test_a_harness_message_after_a_tool_result_is_not_carried(tmp_path):
    """OpenHands sends an error for a malformed call as a user message after the tool result: the agent has not
    yielded, so the user did not speak; nothing is carried."""
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=8000) as e:
        s = e.session("harness")
        s.user("Task A: rename foo_alpha to foo_beta")
        for k in range(60):
            exchange(s, k)
            if k % 10 == 3:
                s.user("Parameter 'command' is expected to be one of ['view', 'create'].")
            s.build()
        assert s.state.keep_from_seq > 0
        assert not any(m.text.startswith(ASK_HEAD) for m in s.build().neutral.messages)


@pytest.mark.slow
def test_a_text_protocol_agents_observation_is_not_carried(tmp_path):
    """mini-swe-agent writes its command in a fenced block and gets the output back as a user message: an
    observation, not the user speaking."""
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=8000) as e:
        s = e.session("text-protocol")
        s.user("Fix the failing test in tests/test_io.py")
        for k in range(60):
            s.assistant(f"Let me look.\n```bash\ncat src/m{k}.py\n```")
            s.user(f"def m{k}():\n    return {k}\n" * 40)
            s.build()
        assert s.state.keep_from_seq > 0
        assert not any(m.text.startswith(ASK_HEAD) for m in s.build().neutral.messages)


def test_nothing_is_carried_while_the_kept_history_holds_a_newer_user_message(tmp_path):
    """A customer answers every few calls: the kept history holds the newest answer, so the older one a cut drops
    is not carried beside it."""
    with ws.Engine(model=MODEL, store=tmp_path / "w.db", window=8000) as e:
        s = e.session("chatty")
        s.user("I want to change my flight, reservation ZFA04Y")
        carried = 0
        newest = "reservation ZFA04Y"
        for k in range(80):
            exchange(s, k, lines=25)
            if k % 3 == 2:
                s.assistant(f"Which date do you prefer for leg {k}?")
                newest = f"The {k}th of May, please."
                s.user(newest)
            pack = s.build()
            carried += any(m.text.startswith(ASK_HEAD) for m in pack.neutral.messages)
            assert newest in request_text(pack), k  # the newest answer, always
        assert s.state.keep_from_seq > 0 and carried == 0


step = st.one_of(
    st.tuples(st.just("tool"), st.integers(20, 900)),
    st.tuples(st.just("ask"), st.integers(1, 60)),  # the user speaks after the agent's text reply
    st.tuples(st.just("harness"), st.integers(1, 30)),  # a user message after a tool result
)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.lists(step, max_size=8), ask=st.integers(1, 60), after=st.lists(step, min_size=15, max_size=40),
       window=st.sampled_from([6000, 8000, 12000]))
def test_the_newest_ask_is_in_every_request_property(before, ask, after, window):
    """Whatever the mix of exchanges, user answers and harness messages: every request holds the newest message the
    user spoke (whole, or its head when longer than ASK_CHARS), fits the budget, and a build that compacted nothing
    extends the previous request."""
    with tempfile.TemporaryDirectory() as tmp, ws.Engine(model=MODEL, store=Path(tmp) / "w.db", window=window) as e:
        s = e.session("mix")
        s.tools([ToolSpec("bash", "run", {"type": "object", "properties": {"command": {"type": "string"}}})])
        s.user("the first task: fix the parser")
        newest_ask: str | None = None
        prev = None
        for k, (kind, size) in enumerate([*before, ("ask", ask), *after]):
            if kind == "tool":
                s.add(Message("assistant", (ToolCall(f"c{k}", "bash", {"command": f"ls {k}"}),)))
                s.tool_result(f"c{k}", f"out{k} " * size)
            elif kind == "ask":
                s.assistant(f"reply {k}")
                newest_ask = f"ask-{k}: " + " ".join(f"word{k}_{j}" for j in range(size))
                s.user(newest_ask)
            else:
                s.user(f"harness-{k}: " + "note " * size)
            pack = s.build()
            assert pack.tokens <= pack.manifest.available
            if newest_ask is not None:
                assert newest_ask[:200] in request_text(pack), (k, newest_ask[:40])
            if prev is not None and not pack.manifest.actions:
                assert extends_previous(prev, pack.neutral), k
            prev = pack.neutral
