"""Resume: the trusted replay builds the same state as validating every event, and persisted token counts
(unit_counts.py) change nothing a request holds; stale, foreign or edited rows are ignored. Real SQLite files
and a real PostgreSQL schema."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import windowsmith as ws
from conftest import PG_DSN
from windowsmith.compaction import CompactionConfig
from windowsmith.model import Message
from windowsmith.resume import message_from_stored, paused_gc
from windowsmith.state import COUNTS_CHUNK, SessionState

FMT = "openai-chat"
MODEL = "gpt-4.1"


def _turn(s: ws.Session, i: int) -> None:
    s.user(f"step {i}: check item {i} in src/m{i}.py")
    s.assistant(tool_calls=[ws.ToolCall(f"c{i}", "read", {"path": f"src/m{i}.py", "n": i})])
    s.tool_result(f"c{i}", f"def f{i}():\n    return {i * 7919 % 10007}  # line {i}\n" * (1 + i % 3))
    s.assistant(f"done {i}")


def _text_turn(s: ws.Session, i: int) -> None:
    """A text-protocol agent's turn (mini-swe-agent): the command in the reply, its output as a user message."""
    s.assistant(f"THOUGHT: check item {i}.\n\n```bash\nnl -ba src/m{i}.py\n```")
    s.user("<returncode>0</returncode>\n<output>\n"
           + "".join(f"{k:6d}\tdef f{i}_{k}(): return {i * 7919 % 10007 + k}\n" for k in range(4 + i % 5)) + "</output>")


def _engine(store: Any, compaction: CompactionConfig | None = None, **kw: Any) -> ws.Engine:
    return ws.Engine(model=MODEL, store=store, window=200_000, compaction=compaction or CompactionConfig(keep_turns=4),
                     **kw)


def _grow(store: Any, turns: int, offset: int = 0, turn: Callable[[ws.Session, int], None] = _turn,
          compaction: CompactionConfig | None = None) -> None:
    with _engine(store, compaction) as e:
        s = e.session("long", goal="Check every item")
        for i in range(turns):
            turn(s, i + offset)
            if i % 8 == 7:
                s.build(FMT)
        s.build(FMT)


def _sent(pack: ws.Pack) -> str:
    """The request as JSON and the checksums over its part digests (the manifest's and the cached prefix's)."""
    return json.dumps([pack.request, pack.manifest.checksum, pack.rendered.prefix_hash], sort_keys=True)


def _packs(store: Any, start: int, turns: int, hinted: list[int] | None = None,
           turn: Callable[[ws.Session, int], None] = _turn,
           compaction: CompactionConfig | None = None) -> tuple[list[str], int, bool]:
    """Resume, then (a build, a turn) ``turns`` times: the requests as JSON (with their checksums), how many
    counts were seeded and whether the first build planned folds from persisted counts. ``hinted``: gets how many
    persisted part digests the first build used."""
    out = []
    with _engine(store, compaction) as e:
        s = e.session("long")
        s.user("resume here")
        out.append(_sent(s.build(FMT)))
        if hinted is not None:
            hinted.append(s._builder.counts.hinted)
        seeded = s._builder.counts.seeded
        lazy = any(f.lazy for f in s.compactor.planner._planned)
        for j in range(turns):
            turn(s, start + j)
            if j == 1:
                s.compact(FMT)  # on demand: folds the aged exchanges, the lazily planned ones written out
            out.append(_sent(s.build(FMT)))
        records = [r.kind for r in s.state.records]
    assert "mask" in records  # the turns after resume applied folds (lazy ones written out)
    return out, seeded, lazy


def _drop_counts(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("DELETE FROM kv WHERE scope LIKE 'counts:%'")
    con.commit()
    con.close()



def _grown_and_expected(tmp_path: Path) -> tuple[Path, list[str]]:
    """A 300-turn session's store (with its count rows), and the requests of 4 more turns built from a copy
    without them: what a resume must reproduce whatever rows it finds."""
    a = tmp_path / "a.db"
    _grow(a, 300)
    clean = tmp_path / "clean.db"
    shutil.copy(a, clean)
    _drop_counts(clean)
    expected, _, _ = _packs(clean, 300, 4)
    return a, expected

def test_replay_builds_the_state_validation_builds(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with ws.Engine(model=MODEL, store=db) as e:
        s = e.session("mixed")
        s.user([{"type": "text", "text": "look"}, {"type": "image", "url": "https://example.com/a.png"}])
        s.assistant("thinking aloud", tool_calls=[ws.ToolCall("a", "read", {"path": "x", "deep": {"k": [1, 2.5, None]}})])
        s.tool_result("a", "ok, token=ghp_" + "a1B2c3D4e5" * 4, is_error=True)  # ingest meta with redactions
        s.assistant([{"type": "thinking", "provider": "anthropic", "data": {"type": "thinking", "thinking": "t",
                                                                            "signature": "s"}, "text": "t"}])
        s.user("next")
        store = e.store
        slow = SessionState("mixed")
        for ev in store.events("mixed"):
            slow.apply(ev)
        fast = s.state
        assert fast.messages == slow.messages and fast.view == slow.view and fast.units == slow.units
        assert fast.head == slow.head and fast.chunk_hashes == slow.chunk_hashes
        for row in store.event_rows("mixed"):
            if row[1] == "message":
                m = message_from_stored(json.loads(row[2]), row[2], row[3], row[4])
                assert "digest" in m.__dict__  # taken from the stored text
                assert m.digest == Message.from_dict(m.to_dict()).digest
                assert m == Message.from_dict(json.loads(row[2])["message"])
        # a dict in another shape goes through from_dict, digest computed as before
        m = message_from_stored({"message": {"role": "user", "content": "plain text"}})
        assert m == Message.user("plain text") and "digest" not in m.__dict__


_PIECES = st.text(alphabet=st.characters(codec="utf-8")) | st.sampled_from(
    ['"', "\\", '","type":"text"},{"text":"', '"}],"role":"user"}}', "\n", "\x00", "é", "😀"])
_TEXTS = st.lists(st.lists(_PIECES, max_size=5).map("".join), min_size=1, max_size=4)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(texts=_TEXTS, role=st.sampled_from(["user", "assistant"]), extra=st.sampled_from([None, "image", "call", "ingest"]))
def test_a_text_only_message_is_recognised_in_its_stored_json_and_rebuilt_exactly(
        texts: list[str], role: str, extra: str | None) -> None:
    """The stored JSON of a user or assistant message of text blocks (whatever the texts hold) is recognised, and
    the message replayed lazily from it equals the original; any other message or event shape is not."""
    from windowsmith.hashing import canonical_json
    from windowsmith.resume import plain_message
    from windowsmith.unit_counts import message_shape

    blocks: list[Any] = [ws.Text(t) for t in texts]
    if extra == "image":
        blocks.append(ws.Image(url="https://example.com/a.png"))
    elif extra == "call" and role == "assistant":
        blocks.append(ws.ToolCall("c1", "read", {"text": texts[0], "type": "text"}))
    m = Message(role, tuple(blocks))  # type: ignore[arg-type]
    data: dict[str, Any] = {"message": m.to_dict()}
    if extra == "ingest":
        data["ingest"] = {"redactions": 1}
    got = plain_message(canonical_json(data))
    if extra in ("image", "ingest") or (extra == "call" and role == "assistant"):
        assert got is None
        return
    assert got == (role, canonical_json(m.to_dict()))
    lazy = Message.stored_text(got[0], got[1], m.digest)
    assert lazy.n_blocks == len(texts) and message_shape(lazy) == message_shape(m)  # without building it
    assert "content" not in lazy.__dict__ and lazy.plain and lazy.role == role
    assert lazy == m and lazy.to_dict() == m.to_dict() and "_stored" not in lazy.__dict__
    assert Message.stored_text(got[0], got[1], m.digest).content == m.content


_IDS = st.lists(_PIECES, min_size=1, max_size=3).map("".join).filter(bool)
_SCALARS = st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False, allow_infinity=False) \
    | _PIECES
_ARGS = st.dictionaries(_PIECES, _SCALARS | st.lists(_SCALARS, max_size=2) | st.dictionaries(_PIECES, _SCALARS, max_size=2),
                        max_size=4)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.lists(_PIECES, max_size=3).map("".join), max_size=2),
       calls=st.lists(st.tuples(_IDS, _IDS, _ARGS), min_size=1, max_size=3, unique_by=lambda c: c[0]),
       results=st.lists(st.tuples(_IDS, st.lists(st.lists(_PIECES, max_size=3).map("".join), max_size=2),
                                  st.booleans(), st.none() | _PIECES, st.booleans()), min_size=1, max_size=3),
       ingest=st.sampled_from([None, [], [{"call_id": "c", "tokens": 3, "kind": "text"}], {"redactions": 1},
                               [{"deep": {"x": 1}}]]))
def test_a_tool_message_is_recognised_in_its_stored_json_and_rebuilt_exactly(
        texts: list[str], calls: list[Any], results: list[Any], ingest: Any) -> None:
    """The stored JSON of an assistant message of text blocks then calls with flat arguments, and of a tool message
    of results holding text blocks only, is recognised (whatever the strings hold), and the message replayed lazily
    from it answers as the original and equals it once built; nested arguments, an image, an ingest record with
    nesting are not recognised."""
    from windowsmith.hashing import canonical_json
    from windowsmith.resume import stored_blocks, tool_message
    from windowsmith.unit_counts import message_shape

    flat = all(not isinstance(v, dict | list) for _, _, a in calls for v in a.values())
    a = Message("assistant", (*(ws.Text(t) for t in texts), *(ws.ToolCall(c, n, args) for c, n, args in calls)))
    blocks = []
    for cid, parts, err, name, image in results:
        content: list[Any] = [ws.Text(t) for t in parts]
        if image:
            content.append(ws.Image(url="https://example.com/a.png"))
        blocks.append(ws.ToolResult(cid, tuple(content), err, name))
    t = Message("tool", tuple(blocks))
    nested_ingest = ingest == [{"deep": {"x": 1}}]
    for m, ok in ((a, flat), (t, not nested_ingest and not any(r[4] for r in results))):
        data: dict[str, Any] = {"message": m.to_dict()}
        if m.role == "tool" and ingest is not None:
            data["ingest"] = ingest
        got = tool_message(canonical_json(data))
        if not ok:
            assert got is None
            continue
        assert got is not None and got[0] == m.role and got[1] == canonical_json(m.to_dict())
        lazy = Message.stored_tools(got[0], got[1], m.digest, got[2], stored_blocks)
        facts = (lazy.plain, lazy.image_free, lazy.call_pairs, lazy.result_ids, lazy.n_blocks,
                 message_shape(lazy))
        assert "content" not in lazy.__dict__
        assert facts == (m.plain, m.image_free, m.call_pairs, m.result_ids, m.n_blocks,
                         message_shape(m))
        assert lazy == m and lazy.to_dict() == m.to_dict() and "_stored" not in lazy.__dict__


def _lazy_state_matches(store: Any) -> tuple[int, int]:
    """Grow a session past two chunks of text, tool and image messages (one call and several, flat and nested
    arguments, errors, escaped ids), resume it, and compare its state with one replayed by validating every event;
    returns how many text and how many tool messages the resume left unbuilt."""
    from windowsmith.hashing import content_digest
    from windowsmith.unit_counts import message_shape

    with _engine(store) as e:
        s = e.session("lazy", goal="Check every item")
        for i in range(300):
            _turn(s, i)
            if i % 50 == 0:
                s.user([ws.Text(f'two "blocks" \\ é {i}'), ws.Text("second")])
                s.user([{"type": "text", "text": "see"}, {"type": "image", "url": f"https://example.com/{i}.png"}])
                s.assistant([ws.Text(""), ws.Text("empty first")])
            if i % 40 == 1:  # parallel calls (an escaped id, no arguments) answered by one message, an error
                calls = [ws.ToolCall(f'p"{i}\\', "grep", {"q": 'a "b"', "n": -1.5e-7, "ok": True, "x": None}),
                         ws.ToolCall(f"q{i}", "look", {})]
                s.assistant(f"two at once {i}", tool_calls=calls)
                s.add(Message("tool", (ws.ToolResult(f'p"{i}\\', (ws.Text("no match"), ws.Text("at all")), True),
                                       ws.ToolResult(f"q{i}", (ws.Text("seen"),), False, "look"))))
            if i % 40 == 2:  # nested arguments and an image in a result: replayed as before
                s.assistant(tool_calls=[ws.ToolCall(f"n{i}", "edit", {"edits": [{"line": 1}]})])
                s.tool_result(f"n{i}", [{"type": "text", "text": "shot"},
                                        {"type": "image", "url": f"https://example.com/r{i}.png"}])
        s.build(FMT)
    with _engine(store) as e:
        s = e.session("lazy")
        msgs = s.state.messages
        lazy = [i for i, m in enumerate(msgs) if "content" not in m.__dict__]
        facts = [(m.plain, m.image_free, m.call_pairs if m.role == "assistant" else (),
                  m.result_ids if m.role == "tool" else (), m.n_blocks, message_shape(m)) for m in msgs]
        assert all("content" not in msgs[i].__dict__ for i in lazy)  # answered without building them
        unbuilt = (sum(msgs[i].plain for i in lazy), sum(not msgs[i].plain for i in lazy))
        assert any(len(msgs[i].call_pairs) == 2 for i in lazy) and any(len(msgs[i].result_ids) == 2 for i in lazy)
        nested = [i for i, m in enumerate(msgs) if any(c.startswith("n") for c, _ in m.call_pairs)]
        assert nested and not set(nested) & set(lazy)  # calls with nested arguments (and image results) are built
        slow = SessionState("lazy")
        for ev in e.store.events("lazy"):
            slow.apply(ev)
        assert all(m.digest == content_digest(m.to_dict()) for m in slow.messages)
        assert [m.digest for m in msgs] == [m.digest for m in slow.messages]
        assert facts == [(m.plain, m.image_free, m.call_pairs if m.role == "assistant" else (),
                          m.result_ids if m.role == "tool" else (), m.n_blocks, message_shape(m)) for m in slow.messages]
        st = s.state
        assert msgs == slow.messages and st.view == slow.view and st.units == slow.units
        assert st.call_names == slow.call_names and st.head == slow.head and st.answered == slow.answered
        assert (st.turn_units, st.exchange_units, st.image_units) == \
            (slow.turn_units, slow.exchange_units, slow.image_units)
        assert slow.image_units and len(slow.exchange_units) == 300 + 8 + 8
        assert all("content" in msgs[i].__dict__ for i in lazy)  # built when compared
        assert all(m.content == n.content and m.to_dict() == n.to_dict() for m, n in zip(msgs, slow.messages, strict=True))
    return unbuilt


@pytest.mark.slow
def test_text_and_tool_messages_are_replayed_lazily_to_the_same_state(tmp_path: Path) -> None:
    text, tool = _lazy_state_matches(tmp_path / "s.db")
    assert text >= COUNTS_CHUNK // 2 and tool >= COUNTS_CHUNK // 2


@pytest.mark.slow
@pytest.mark.postgres
def test_text_and_tool_messages_are_replayed_lazily_to_the_same_state_on_postgres(pg_schema: str) -> None:
    from windowsmith.store.postgres import PostgresStore

    with PostgresStore(PG_DSN, schema=pg_schema) as store:
        text, tool = _lazy_state_matches(store)
        assert text >= COUNTS_CHUNK // 2 and tool >= COUNTS_CHUNK // 2


def test_paused_gc_restores_the_collector() -> None:
    import gc

    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()
    with paused_gc(freeze=True):
        made = [[i] for i in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() == 0 and len(made) == 1000  # nothing stays frozen


@pytest.mark.slow
def test_resume_with_persisted_counts_sends_the_same_bytes(tmp_path: Path) -> None:
    a = tmp_path / "a.db"
    _grow(a, 700)  # 2,800 messages: five full chunks
    b = tmp_path / "b.db"
    shutil.copy(a, b)
    _drop_counts(b)
    hinted: list[int] = []
    with_counts, seeded, lazy = _packs(a, 700, 12, hinted)
    without, none, _ = _packs(b, 700, 12, hinted)
    assert seeded >= 5 * COUNTS_CHUNK and none == 0
    assert hinted[0] >= 5 * COUNTS_CHUNK and hinted[1] == 0  # the first build took the persisted part digests
    assert lazy  # the first build after resume planned folds without writing their lines
    assert with_counts == without


@pytest.mark.slow
def test_a_text_agents_resume_plans_its_observation_folds_from_persisted_counts(tmp_path: Path) -> None:
    """The observations of a text-protocol agent fold like exchanges; their fold counts persist with the
    exchanges' and a resumed process plans them lazily (the line written only when the batch is applied), sending
    the same bytes as a resume that counts every fold line again."""
    # no batch is ever big enough here (mask_batch): the aged observations stay unfolded, with their fold counts
    # persisted, until the on-demand compaction after the resume
    cfg = CompactionConfig(keep_turns=4, mask_batch=100_000)
    a = tmp_path / "a.db"
    _grow(a, 700, turn=_text_turn, compaction=cfg)
    b = tmp_path / "b.db"
    shutil.copy(a, b)
    _drop_counts(b)
    with_counts, seeded, lazy = _packs(a, 700, 6, turn=_text_turn, compaction=cfg)
    without, none, _ = _packs(b, 700, 6, turn=_text_turn, compaction=cfg)
    assert seeded >= COUNTS_CHUNK and none == 0
    assert lazy  # the first build after resume planned observation folds without writing their lines
    assert with_counts == without
    with _engine(a, cfg) as e:
        folds = [f for r in e.session("long").state.records if r.kind == "mask" for f in r.folds]
    assert len(folds) > 600 and {f.role for f in folds} == {"user"}  # (written out from the lazy plan)


@pytest.mark.slow
def test_stale_foreign_and_edited_counts_are_ignored(tmp_path: Path) -> None:
    a, expected = _grown_and_expected(tmp_path)

    # edited: a count changed by hand (the row's checksum no longer matches)
    edited = tmp_path / "edited.db"
    shutil.copy(a, edited)
    con = sqlite3.connect(edited)
    rows = con.execute("SELECT key, value FROM kv WHERE scope = 'counts:long' AND key NOT LIKE 'digests|%' "
                       "ORDER BY key").fetchall()
    assert len(rows) >= 2
    for key, value in rows:
        v = json.loads(value)
        v["counts"][0] += 1000
        con.execute("UPDATE kv SET value = ? WHERE scope = 'counts:long' AND key = ?", (json.dumps(v), key))
    con.commit()
    con.close()
    got, seeded, _ = _packs(edited, 300, 4)
    assert seeded == 0 and got == expected

    # stale / foreign: rows of another log of the same session id (deleted and made again) do not match its hashes
    other = tmp_path / "other.db"
    _grow(other, 300, offset=1)
    other_clean = tmp_path / "other_clean.db"
    shutil.copy(other, other_clean)
    _drop_counts(other_clean)
    theirs, _, _ = _packs(other_clean, 400, 4)
    con = sqlite3.connect(other)
    con.execute("DELETE FROM kv WHERE scope = 'counts:long'")
    con.execute("ATTACH DATABASE ? AS a", (str(a),))
    con.execute("INSERT INTO kv SELECT * FROM a.kv WHERE scope = 'counts:long'")
    con.commit()
    con.close()
    got, seeded, _ = _packs(other, 400, 4)
    assert seeded == 0 and got == theirs

    # garbage: not an object, or not JSON at all
    junk = tmp_path / "junk.db"
    shutil.copy(a, junk)
    con = sqlite3.connect(junk)
    con.execute("UPDATE kv SET value = '[1, 2]' WHERE scope = 'counts:long'")
    con.commit()
    con.close()
    got, seeded, _ = _packs(junk, 300, 4)
    assert seeded == 0 and got == expected


@pytest.mark.slow
def test_wrong_part_digests_are_ignored(tmp_path: Path) -> None:
    from windowsmith.formats.base import RENDER_SCHEME
    from windowsmith.resume import pack_digests, row_check, unpack_digests

    a, expected = _grown_and_expected(tmp_path)

    def rewrite(db: Path, change: Any) -> None:
        con = sqlite3.connect(db)
        for key, value in con.execute("SELECT key, value FROM kv WHERE scope = 'counts:long' "
                                      "AND key NOT LIKE 'digests|%'").fetchall():
            v = json.loads(value)
            assert v["parts"]["render"] == RENDER_SCHEME and len(unpack_digests(v["parts"]["digests"], COUNTS_CHUNK, 32)) == COUNTS_CHUNK
            change(v)
            v["check"] = row_check(v)  # a consistent row: only the digests are wrong
            con.execute("UPDATE kv SET value = ? WHERE scope = 'counts:long' AND key = ?", (json.dumps(v), key))
        con.commit()
        con.close()

    # digests a changed renderer would not produce (one message of each shape of each chunk is checked)
    wrong = tmp_path / "wrong.db"
    shutil.copy(a, wrong)
    rewrite(wrong, lambda v: v["parts"].update(digests=pack_digests(["0" * 64] * COUNTS_CHUNK)))
    hinted: list[int] = []
    got, seeded, _ = _packs(wrong, 300, 4, hinted)
    assert seeded >= 2 * COUNTS_CHUNK and hinted == [0] and got == expected

    # digests cut short, or not base64: not handed to the renderer, the counts still taken
    wrong = tmp_path / "short.db"
    shutil.copy(a, wrong)
    rewrite(wrong, lambda v: v["parts"].update(digests=v["parts"]["digests"][:-8]))
    hinted = []
    got, seeded, _ = _packs(wrong, 300, 4, hinted)
    assert seeded >= 2 * COUNTS_CHUNK and hinted == [0] and got == expected
    wrong = tmp_path / "junk.db"
    shutil.copy(a, wrong)
    rewrite(wrong, lambda v: v["parts"].update(digests="!" + v["parts"]["digests"][1:]))
    hinted = []
    got, seeded, _ = _packs(wrong, 300, 4, hinted)
    assert seeded >= 2 * COUNTS_CHUNK and hinted == [0] and got == expected

    # another render scheme: ignored without a check
    other = tmp_path / "other.db"
    shutil.copy(a, other)
    rewrite(other, lambda v: v["parts"].update(render=RENDER_SCHEME + 1))
    hinted = []
    got, seeded, _ = _packs(other, 300, 4, hinted)
    assert seeded >= 2 * COUNTS_CHUNK and hinted == [0] and got == expected

    # rows written before part digests were kept: used for counts, and given their digests by the next build
    old = tmp_path / "old.db"
    shutil.copy(a, old)
    rewrite(old, lambda v: v.update(parts=None))
    hinted = []
    got, seeded, _ = _packs(old, 300, 4, hinted)
    assert seeded >= 2 * COUNTS_CHUNK and hinted == [0] and got == expected
    assert all(r["parts"] is not None for r in _rows(old))
    hinted = []
    assert _packs(old, 304, 1, hinted)[0][0] != ""
    assert hinted[0] >= 2 * COUNTS_CHUNK


@pytest.mark.slow
def test_rows_of_the_first_version_are_ignored_and_written_again(tmp_path: Path) -> None:
    """Count and digest rows of version 1 (digests as lists of hex strings) are never read as the packed form:
    a resume takes none of them, sends the same bytes, and its build writes them again in the current form."""
    from windowsmith.resume import DIGESTS_VERSION, persisted_digests, row_check, unpack_digests
    from windowsmith.store import SQLiteStore
    from windowsmith.unit_counts import VERSION

    a, expected = _grown_and_expected(tmp_path)

    con = sqlite3.connect(a)
    rows = con.execute("SELECT key, value FROM kv WHERE scope = 'counts:long' AND key NOT LIKE 'body|%'").fetchall()
    assert len(rows) >= 4
    for key, value in rows:  # as the previous release wrote them
        v = json.loads(value)
        if key.startswith("digests|"):
            assert v["v"] == DIGESTS_VERSION == 2
            v.update(v=1, digests=unpack_digests(v["digests"], COUNTS_CHUNK, 16))
        else:
            assert v["v"] == VERSION == 2
            v.update(v=1, parts={**v["parts"], "digests": unpack_digests(v["parts"]["digests"], COUNTS_CHUNK, 32)})
        v["check"] = row_check(v)
        con.execute("UPDATE kv SET value = ? WHERE scope = 'counts:long' AND key = ?", (json.dumps(v), key))
    con.commit()
    con.close()
    with SQLiteStore(a) as store:
        assert persisted_digests(store, "long", 0, store.event_rows("long")) == {}
    got, seeded, _ = _packs(a, 300, 4)
    assert seeded == 0 and got == expected
    assert all(r["v"] == VERSION and type(r["parts"]["digests"]) is str for r in _rows(a))
    with SQLiteStore(a) as store:
        assert len(persisted_digests(store, "long", 0, store.event_rows("long"))) >= 2 * COUNTS_CHUNK
    assert _packs(a, 304, 1)[1] >= 2 * COUNTS_CHUNK


@pytest.mark.slow
def test_persisted_message_digests(tmp_path: Path) -> None:
    from windowsmith.hashing import content_digest
    from windowsmith.resume import digests_key, pack_digests, persisted_digests, row_check
    from windowsmith.store import SQLiteStore

    a = tmp_path / "a.db"
    _grow(a, 300)  # 1,200 messages: two full chunks
    with SQLiteStore(a) as store:
        rows = store.event_rows("long")
        known = persisted_digests(store, "long", 0, rows)
        assert len(known) == 2 * COUNTS_CHUNK
        state = SessionState("long")
        for ev in store.events("long"):
            state.apply(ev)
        assert all(known[i] == state.messages[i].digest for i in known)
        # a resume takes them: the messages' digests are what hashing their content gives
        with _engine(store) as e:
            msgs = e.session("long").state.messages
            assert all(m.__dict__["digest"] == content_digest(m.to_dict()) for m in msgs)
        # a row of another log (its chain hash differs), an edited row and junk are ignored
        row = store.get_kv("counts:long", digests_key(0))
        store.set_kv("counts:long", digests_key(0), {**row, "hash": "b1:" + "0" * 64})
        edited = {**row, "digests": pack_digests(["f" * 32] * COUNTS_CHUNK)}  # its check no longer matches
        store.set_kv("counts:long", digests_key(1), edited)
        assert persisted_digests(store, "long", 0, rows) == {}
        store.set_kv("counts:long", digests_key(1), [1, 2])
        assert persisted_digests(store, "long", 0, rows) == {}
        assert row_check(row) == row["check"]
    b = tmp_path / "b.db"
    shutil.copy(a, b)
    _drop_counts(b)
    assert _packs(a, 300, 4)[0] == _packs(b, 300, 4)[0]
    with SQLiteStore(a) as store:  # the build after the resume wrote the rows again
        assert len(persisted_digests(store, "long", 0, store.event_rows("long"))) >= 2 * COUNTS_CHUNK


def _rows(db: Path) -> list[dict[str, Any]]:
    con = sqlite3.connect(db)
    rows = [json.loads(v) for (v,) in con.execute("SELECT value FROM kv WHERE scope = 'counts:long' "
                                                  "AND key NOT LIKE 'digests|%'")]
    con.close()
    return rows




@pytest.mark.slow
@pytest.mark.postgres
def test_persisted_counts_on_postgres(pg_schema: str) -> None:
    from windowsmith.store.postgres import PostgresStore

    def resumed_request() -> tuple[str, int]:
        with PostgresStore(PG_DSN, schema=pg_schema) as store, ws.Engine(model=MODEL, store=store) as e:
            s = e.session("long")
            return json.dumps(s.build(FMT).request, sort_keys=True), s._builder.counts.seeded

    with PostgresStore(PG_DSN, schema=pg_schema) as store, ws.Engine(model=MODEL, store=store) as e:
        s = e.session("long", goal="Check every item")
        for i in range(300):
            _turn(s, i)
        s.build(FMT)
    seeded_req, seeded = resumed_request()
    assert seeded >= 2 * COUNTS_CHUNK
    with PostgresStore(PG_DSN, schema=pg_schema) as store:
        for key in ("o200k_base|openai-chat|3.7.4.765|-|0",):
            row = store.get_kv("counts:long", key)
            assert row is not None
            row["counts"][1] += 5  # edited: ignored
            store.set_kv("counts:long", key, row)
    edited_req, edited = resumed_request()
    assert edited == seeded - COUNTS_CHUNK and edited_req == seeded_req
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg_schema)))
        conn.execute("DELETE FROM kv WHERE scope = 'counts:long'")
    plain_req, none = resumed_request()
    assert none == 0 and plain_req == seeded_req
