"""The proxy's "append what is new" rule as a property: an agent that resends its whole conversation
every turn gets each of its messages into the log exactly once, whatever it echoes back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windowsmith.model import Message, Text
from windowsmith.server.conversation import (
    ANTHROPIC,
    OPENAI,
    ConversationDivergedError,
    ConversationError,
    Sync,
    message_digest,
    new_messages,
    parse_conversation,
    stable_session_id,
)

texts = st.text(alphabet="abc xyz", min_size=1, max_size=8)


def msg(role: str, text: str) -> Message:
    return Message(role, (Text(text),))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(texts, min_size=1, max_size=3), texts, st.booleans()), min_size=1, max_size=8))
def test_each_client_message_is_appended_once(turns: list[tuple[list[str], str, bool]]) -> None:
    """turns: (new user texts, the reply text, whether the client echoes the reply in its own form)."""
    sync = Sync()
    client: list[Message] = []
    log: list[Message] = []
    for users, reply, echo_differently in turns:
        client += [msg("user", u) for u in users]
        new, _ = new_messages(sync, client)
        log += new
        sync.digests = [message_digest(m) for m in client]
        recorded = msg("assistant", reply)
        log.append(recorded)  # what the proxy records from the upstream response
        sync.pending = message_digest(recorded)
        # the client echoes the reply, maybe reformatted (streamed text, other ids): skipped by position
        client.append(msg("assistant", reply + (" " if echo_differently else "")))
    expected: list[Message] = []
    for users, reply, _ in turns:
        expected += [msg("user", u) for u in users] + [msg("assistant", reply)]
    assert log == expected


def test_an_edited_history_diverges_and_says_where() -> None:
    sync = Sync()
    conv = [msg("user", "a"), msg("assistant", "b"), msg("user", "c")]
    new_messages(sync, conv)
    sync.digests = [message_digest(m) for m in conv]
    with pytest.raises(ConversationDivergedError, match="at message 1"):
        new_messages(sync, [conv[0], msg("assistant", "B"), conv[2], msg("user", "d")])
    with pytest.raises(ConversationDivergedError, match="sends 2"):
        new_messages(sync, conv[:2])


def test_parse_both_formats_and_refuse_bad_bodies() -> None:
    o = parse_conversation(OPENAI, {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]})
    a = parse_conversation(ANTHROPIC, {"system": "sys", "messages": [{"role": "user", "content": "hi"}]})
    assert o.system == a.system == "sys" and o.messages == a.messages
    assert stable_session_id(OPENAI, o) != stable_session_id(ANTHROPIC, a)  # the format is part of the id
    assert stable_session_id(OPENAI, o, "team-a") != stable_session_id(OPENAI, o, "team-b")
    assert stable_session_id(OPENAI, o) == stable_session_id(OPENAI, parse_conversation(OPENAI, {
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                     {"role": "assistant", "content": "later turns do not change the id"}]}))
    for bad in ({}, {"messages": []}, {"messages": "hi"}, {"messages": [{"role": "wizard", "content": "x"}]}):
        with pytest.raises(ConversationError):
            parse_conversation(OPENAI, bad)


def test_serve_without_the_server_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from click.testing import CliRunner

    from windowsmith.cli import main

    monkeypatch.setitem(sys.modules, "starlette", None)  # makes `import starlette` raise ImportError
    result = CliRunner().invoke(main, ["serve", "--port", "0"])
    assert result.exit_code == 2
    assert "pip install 'windowsmith[server]'" in result.output


def test_plan_turn_appends_replays_resends() -> None:
    from windowsmith.server.conversation import plan_turn

    conv = [msg("user", "a")]
    sync = Sync()
    assert plan_turn(sync, conv).kind == "append"
    sync.digests = [message_digest(conv[0])]
    assert plan_turn(sync, conv).kind == "append"  # no turn was sent yet: build from the log
    sync.turn = {"at": 1, "seq": 2, "pack": "p", "request": "x"}
    assert plan_turn(sync, conv).kind == "resend"  # sent, not answered: the same request again
    sync.pending = "d"
    assert plan_turn(sync, conv).kind == "replay"  # answered: the answer again
    plan = plan_turn(sync, [*conv, msg("assistant", "b"), msg("user", "c")])
    assert plan.kind == "append" and [m.text for m in plan.new] == ["c"]


def test_reconcile_catches_up_with_a_lost_sync_write() -> None:
    from windowsmith.server.conversation import reconcile

    conv = [msg("user", "a"), msg("assistant", "b"), msg("user", "c")]
    sync = Sync([message_digest(conv[0])], None, 3, {"at": 1, "seq": 3, "pack": "p", "request": "x"})
    # the log gained the recorded reply at seq 4 but the sync write after it was lost
    out = reconcile(sync, [conv[0], msg("assistant", "b")], [2, 4], 5, conv[:1])
    assert out.pending is not None and out.seq == 5
    # a client message appended at seq 6 whose sync write was lost
    sync2 = Sync([message_digest(conv[0])], None, 5, None)
    out2 = reconcile(sync2, [conv[0], msg("user", "c")], [2, 6], 6, [conv[0], conv[2]])
    assert out2.digests == [message_digest(conv[0]), message_digest(conv[2])]


def test_unique_call_ids_renames_the_same_way_on_both_paths() -> None:
    from windowsmith.model import ToolCall, ToolResult
    from windowsmith.server.conversation import unique_call_ids, with_unique_call_ids

    def call() -> Message:
        return Message("assistant", (ToolCall("call_0", "bash", {}),))

    def result() -> Message:
        return Message("tool", (ToolResult("call_0", (Text("ok"),)),))

    client = with_unique_call_ids([msg("user", "go"), call(), result(), call(), result(), call()])
    names = [b.id if m.role == "assistant" else b.call_id for m in client[1:] for b in m.content]
    assert names == ["call_0", "call_0", "call_0~2", "call_0~2", "call_0~3"]
    # the reply recorded against the session's ids gets the name the client's echo will get
    reply = unique_call_ids(call(), {"call_0", "call_0~2"}, {})
    assert reply.content[0].id == "call_0~3"
