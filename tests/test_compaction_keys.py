"""The emergency stage's identifier index (compaction/keys.py): what it ranks first, that it stays within its
share of the budget, and that the record, the request, the manifest and ``windowsmith inspect`` show it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from conftest import item_lookup_session
from windowsmith.cli import main
from windowsmith.compaction import CompactionConfig
from windowsmith.compaction.keys import BODY_CHARS, Mention, fit_index, mention, present, rank_lost, shape
from windowsmith.errors import ConfigError
from windowsmith.records import INDEX_HEAD, EmergencyRecord, render_index
from windowsmith.refs import offload_footer
from windowsmith.tokens import TokenCounter


def test_ranking_puts_goal_failures_recent_and_frequent_identifiers_first():
    dropped = [
        Mention("tool", "listing: old_helper.py OLD_CONSTANT 1001"),
        Mention("tool", "Traceback: KeyError raised in parse_header at src/http/headers.py"),
        Mention("assistant", "I will look at ORD4521X and refund_total next"),
        Mention("tool", "order ORD4521X: refund_total 1999, item HAT170"),
        Mention("tool", "plain note 1002"),
    ]
    ranked = rank_lost(dropped, kept=["the kept request still shows HAT170"], goal="refund order #W2378156",
                       previous=["PREV_ONE", "refund_total"])
    assert "HAT170" not in ranked  # the request still shows it
    # a failure line's names rank above the same kind elsewhere; the agent's own, recent, repeated ones high
    assert ranked.index("KeyError") < ranked.index("old_helper.py")
    assert ranked.index("ORD4521X") < ranked.index("OLD_CONSTANT")
    assert ranked.index("refund_total") < ranked.index("1001")
    assert ranked.index("1002") < ranked.index("1001")  # the same kind: the newer mention first
    assert ranked[-1] == "PREV_ONE"  # the previous index follows (refund_total is in the new span already)
    goal_first = rank_lost([Mention("tool", "a HAT999 b ZZZ_TOP"), Mention("tool", "ZZZ_TOP again, KeyError")],
                           goal="please check HAT999")
    assert goal_first[0] == "HAT999"


def test_the_index_lists_a_json_results_values_not_its_field_names():
    """A dropped tau-bench reservation's field names (``created_at``, ``payment_id``, ``user_id``) are its schema:
    they took ten of the index's entries on the validation runs at 8K, ahead of the flight dates the agent searched
    next (strict recall on tau-bench 8K 99.16% -> 99.53%). Its values stay, and so does a snake_case word in prose."""
    reservation = ('{"reservation_id": "2FBBAH", "user_id": "omar_davis_3817", "flights": [{"flight_number": '
                   '"HAT080", "date": "2024-05-28"}], "payment_history": [{"payment_id": "gift_card_3481935"}], '
                   "'created_at': '2024-05-06T01:02:03'}")
    ranked = rank_lost([Mention("tool", reservation), Mention("assistant", "I will check the payment_history")])
    assert {"2FBBAH", "omar_davis_3817", "HAT080", "2024-05-28", "gift_card_3481935", "2024-05-06"} <= set(ranked)
    assert not {"reservation_id", "user_id", "flight_number", "payment_id", "created_at"} & set(ranked)
    assert "payment_history" in ranked  # named outside a key: an identifier


def test_a_file_body_the_agent_writes_is_named_not_acted_on():
    """An assistant's long argument value (the body of a file it writes) goes to ``Mention.written``: its names are
    mentions, not names the agent acted on, so they do not outrank the ids it passed in short arguments."""
    body = "\n".join(f"def helper_{k}(): return CONFIG_{k}" for k in range(120))
    call = ws.Message("assistant", (ws.Text("Writing the module for RES7Q2."), ws.ToolCall(
        "c1", "create", {"path": "src/mod.py", "file_text": body, "options": {"mode": "w"}})))
    m = mention(call)
    assert m.text == "Writing the module for RES7Q2.\nsrc/mod.py\nw" and m.written == body
    assert mention(ws.Message("assistant", (ws.ToolCall("c2", "get", {"id": "HAT170"}),))) == \
        Mention("assistant", "HAT170", passed="HAT170")  # short arguments only: as message_text reads it
    assert len(body) >= BODY_CHARS
    # the id the agent passed a turn before ranks above the hundreds of names of the file it then writes
    older = [Mention("tool", "log line one"), Mention("tool", "log line two"), Mention("tool", "log line three"),
             Mention("assistant", "get_reservation ZZ9X1Q")]
    ranked = rank_lost([*older, m])
    assert ranked[:2] == ["src/mod.py", "RES7Q2"]  # the writing message's own short values first
    assert ranked.index("ZZ9X1Q") < ranked.index("helper_0")
    # read as one text (before), the body's names took the agent's bonus too and pushed the id behind them
    flat = rank_lost([*older, Mention("assistant", f"{m.text}\n{body}")])
    assert flat.index("helper_0") < flat.index("ZZ9X1Q")
    # counted once per message: a name in both parts is one mention, not two (two would rank ZZZ_SHARED first;
    # one ties it with AAA_NAME, which the name order puts first)
    both = rank_lost([Mention("assistant", "check AAA_NAME and ZZZ_SHARED", body + "\nZZZ_SHARED = 1")])
    assert "CONFIG_1" in both and both.index("AAA_NAME") < both.index("ZZZ_SHARED")


def test_a_file_body_that_names_errors_is_not_failure_evidence_and_a_shown_handle_still_leads():
    """Failure evidence is what the agent saw fail (an error in a result), not the words of a file it writes; and a
    name the agent passed says which list it walks even when the kept request still shows it (a work log line). A
    body that handles errors ("raise ValueError", "failed") gave each of its names the failure bonus, and the opened
    reservation, shown by the work log, gave the rest of the customer's list no bonus: the next reservation ranked
    behind the body's hundred paths (dev tau-bench with a 12,000-character ``file_text`` every third call,
    ``bench_stress.py bigargs``, 16K: strict recall 96.7% -> 98.7%)."""
    profile = ws.Message("tool", (ws.ToolResult("c1", (ws.Text(
        '{"user_id": "ethan_martin_2396", "reservations": ["DQST39", "P824NH", "3HE6QG"]}'),)),))
    body = "\n".join(f"if not ok: raise ValueError('load failed: /srv/app/conf_{k}.yaml')  # error path {k}"
                     for k in range(40))
    opened = ws.Message("assistant", (ws.ToolCall("c2", "get_reservation_details",
                                                   {"reservation_id": "DQST39", "file_text": body}),))
    result = ws.Message("tool", (ws.ToolResult("c2", (ws.Text('{"reservation_id": "DQST39", "cabin": "economy"}'),)),))
    dropped = [mention(ws.Message("assistant", (ws.ToolCall("c1", "get_user_details",
                                                            {"user_id": "ethan_martin_2396"}),))),
               mention(profile), mention(opened), mention(result)]
    assert dropped[2].written == body and dropped[2].passed == "DQST39"
    log = ["[turn 2] get_reservation_details(reservation_id=DQST39) → economy (artifact://…)"]  # the work log
    ranked = rank_lost(dropped, kept=log)
    assert "DQST39" not in ranked  # shown: not listed
    body_names = [k for k in ranked if k.startswith("/srv/app/")]
    assert len(body_names) == 40
    # the reservations not yet opened (listed beside the opened one) come before every name the body holds
    assert max(ranked.index("P824NH"), ranked.index("3HE6QG")) < min(ranked.index(k) for k in body_names)
    # a failure the agent saw outranks the names of a file it wrote after it, error lines and all
    test_run = mention(ws.Message("tool", (ws.ToolResult("c0", (ws.Text(
        "FAILED tests/test_loader.py::test_reload - KeyError: 'conf_path'"),), is_error=True),)))
    after = rank_lost([test_run, mention(ws.Message("assistant", (ws.ToolCall(
        "c3", "create", {"path": "src/loader.py", "file_text": body}),)))])
    assert after.index("tests/test_loader.py") < min(after.index(k) for k in after if k.startswith("/srv/app/"))
    # the same lines in a result that failed are evidence: there they rank above the reservations
    failed = mention(ws.Message("tool", (ws.ToolResult("c2", (ws.Text(body),), is_error=True),)))
    seen = rank_lost([*dropped[:2], mention(ws.Message("assistant", (ws.ToolCall(
        "c2", "get_reservation_details", {"reservation_id": "DQST39"}),))), failed], kept=log)
    assert seen.index("/srv/app/conf_0.yaml") < seen.index("P824NH")


def test_an_id_passed_to_a_tool_outranks_names_the_agent_only_restated():
    """A customer gives their ids, the agent passes one to a tool, then restates the result's flights and dates in its
    reply. The cut that drops all four messages in a tiny room (an 8K window whose system prompt leaves about 1,100
    tokens) keeps a few index entries: the reservation the agent acted on comes before the names it only restated
    (tau-bench airline with a 3,000-token longer system prompt, 8K, dev: the index held the flights and dates, and the
    next call passed the reservation id)."""
    said = ws.Message("user", (ws.Text("Certainly, my user ID is lucas_brown_4047, and the reservation ID is EUJUY6."),))
    call = ws.Message("assistant", (ws.ToolCall("c1", "get_reservation_details", {"reservation_id": "EUJUY6"}),))
    result = ws.Message("tool", (ws.ToolResult("c1", (ws.Text(
        '{"reservation_id": "EUJUY6", "user_id": "lucas_brown_4047", "flights": [{"flight_number": "HAT238", '
        '"date": "2024-05-14"}, {"flight_number": "HAT290", "date": "2024-05-14"}], "passengers": [{"dob": '
        '"1965-01-01"}]}'),)),))
    reply = ws.Message("assistant", (ws.Text("Flights HAT238 and HAT290 on 2024-05-14; passenger born 1965-01-01. "
                                             "What would you like to change?"),))
    dropped = [mention(m) for m in (said, call, result, reply)]
    assert dropped[1].passed == "EUJUY6"
    ranked = rank_lost(dropped)
    assert ranked[0] == "EUJUY6"
    assert set(ranked[1:]) == {"HAT238", "HAT290", "2024-05-14", "1965-01-01", "lucas_brown_4047"}
    # restated in the agent's text only, it ranked behind the newer flights and dates
    assert rank_lost([*dropped[:1], Mention("assistant", "EUJUY6"), *dropped[2:]]).index("EUJUY6") > 2


def test_the_rest_of_a_list_the_agent_is_walking_ranks_above_names_it_only_restated(monkeypatch):
    """A customer's profile lists five reservations; the agent looks up the first, whose result names its flights,
    and moves on. The ones still to look up (listed beside the one it passed) rank above those flights, though named
    less recently (chained tau-bench runs at 8K, dev: the next lookup's reservation had fallen out of the index)."""
    import windowsmith.compaction.keys as keys

    profile = ws.Message("tool", (ws.ToolResult("c0", (ws.Text(
        '{"user_id": "sofia_kim_7287", "reservations": ["KA7I60", "OBUT9V", "4BMN53", "HSR97W", "SE9KEL"]}'),)),))
    call = ws.Message("assistant", (ws.ToolCall("c1", "get_reservation_details", {"reservation_id": "KA7I60"}),))
    result = ws.Message("tool", (ws.ToolResult("c1", (ws.Text(
        '{"reservation_id": "KA7I60", "flights": [{"flight_number": "HAT160"}, {"flight_number": "HAT167"}]}'),)),))
    reply = ws.Message("assistant", (ws.Text("Not that one. Let me look at the next reservation."),))
    dropped = [mention(m) for m in (profile, call, result, reply)]
    assert dropped[0].blocks and keys.listed_beside(dropped, {"KA7I60"}) == {
        "KA7I60", "OBUT9V", "4BMN53", "HSR97W", "SE9KEL"}
    assert keys.listed_beside(dropped, {"HAT160"}) == set()  # a list of objects is not a list of names
    ranked = rank_lost(dropped)
    assert ranked[0] == "KA7I60"
    assert all(ranked.index(r) < ranked.index("HAT160") for r in ("OBUT9V", "4BMN53", "HSR97W", "SE9KEL"))
    monkeypatch.setattr(keys, "SIBLING_BONUS", 0.0)
    flat = rank_lost(dropped)
    assert flat.index("HAT160") < flat.index("OBUT9V")


@pytest.mark.parametrize(("a", "b"), [("gift_card_6276644", "sofia_kim_7287"), ("I57WUD", "HAT128"),
                                      ("2024-05-18", "1986-05-05"), ("src/a.py", "/workspace/x/y.c"),
                                      ("credit_card_9879898", "gift_card_1")])
def test_names_of_the_same_kind_have_the_same_shape(a, b):
    assert shape(a) == shape(b)


@pytest.mark.parametrize(("a", "b"), [("gift_card_6276644", "certificate_8544743"), ("I57WUD", "HAT1280"),
                                      ("TK_LAMBDA", "sofia_kim_7287"), ("ast.c", "src/ast.c"), ("1069", "2024-05-18")])
def test_names_of_other_kinds_have_other_shapes(a, b):
    assert shape(a) != shape(b)


def test_names_shaped_like_those_the_agent_passed_rank_above_a_logs_names(monkeypatch):
    """The agent looked up a customer by id; the profile names their payment methods, each shaped like that id
    (``a_a_9``), and the verbose tool's output after it names a dozen symbols and files. The payment ids rank above
    the log's names, which the kind bonus put first (files and symbols above ids: dev tau-bench with 6,000 more
    characters of another agent's output in every observation at 8K, strict recall 89.4% -> 91.0% with the bonus)."""
    import windowsmith.compaction.keys as keys

    call = ws.Message("assistant", (ws.ToolCall("c0", "get_user_details", {"user_id": "sofia_kim_7287"}),))
    profile = ws.Message("tool", (ws.ToolResult("c0", (ws.Text(
        '{"user_id": "sofia_kim_7287", "payment_methods": {"gift_card_6276644": {"id": "gift_card_6276644", '
        '"balance": 52}, "credit_card_9879898": {"id": "credit_card_9879898", "brand": "visa"}}}\n'
        + "compiling ast.c lexer.c parser.c token.c frame.c\n"
        + "warning: TK_LAMBDA TK_OBJECT TK_LBRACE AST_NODE SET_FLAG unused\n"),)),))
    reply = ws.Message("assistant", (ws.Text("I found your profile. Which card would you like to use?"),))
    dropped = [mention(m) for m in (call, profile, reply)]
    log_names = ("ast.c", "lexer.c", "TK_LAMBDA", "AST_NODE")
    ranked = rank_lost(dropped)
    for pay in ("gift_card_6276644", "credit_card_9879898"):
        assert all(ranked.index(pay) < ranked.index(n) for n in log_names), ranked
    monkeypatch.setattr(keys, "SHAPE_BONUS", 0.0)
    flat = rank_lost(dropped)
    assert any(flat.index(n) < flat.index("gift_card_6276644") for n in log_names), flat


def _airline_cut(tmp_path: Path, name: str) -> EmergencyRecord:
    """A real session at 8K behind a 4,000-token policy: the customer's ids, one lookup the agent passes a reservation
    to, its reply restating the flights, then twenty flight searches, until a cut drops the lookup."""
    policy = "\n".join(f"Rule {i}: agents must check the reservation's cabin, the flight status and the payment method "
                       f"before any change ({i})." for i in range(130))
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / f"{name}.db", window=8000) as e:
        s = e.session("airline")
        s.system(policy)
        s.user("Hi, I need to change a flight reservation.")
        s.assistant("Sure. Could you give me your user ID and the reservation ID?")
        s.user("My user ID is lucas_brown_4047 and the reservation ID is EUJUY6.")
        s.assistant("", tool_calls=[{"id": "c0", "name": "get_reservation_details",
                                     "arguments": {"reservation_id": "EUJUY6"}}])
        s.tool_result("c0", '{"reservation_id": "EUJUY6", "user_id": "lucas_brown_4047", "flights": [{"flight_number": '
                            '"HAT238", "date": "2024-05-14"}, {"flight_number": "HAT290", "date": "2024-05-14"}]}')
        s.assistant("Your flights are HAT238 and HAT290 on 2024-05-14. What would you like to change?")
        s.user("Can you check whether later flights exist on that route?")
        for i in range(20):
            s.assistant("", tool_calls=[{"id": f"f{i}", "name": "search_direct_flight", "arguments": {
                "origin": "ORD", "destination": "DEN", "date": f"2024-05-{15 + i}"}}])
            s.tool_result(f"f{i}", "[" + ", ".join(f'{{"flight_number": "HAT{300 + 10 * i + k}", "status": "available"}}'
                                                   for k in range(4)) + "]")
            s.build()
        return next(r for r in s.state.records if isinstance(r, EmergencyRecord))


def test_a_real_cut_indexes_the_reservation_the_agent_looked_up_before_flights_it_never_used(tmp_path, monkeypatch):
    """End to end on a SQLite session: the cut's index ranks the reservation the agent passed to a tool above the
    flight numbers of the newer search results it dropped, which the agent never passed to anything."""
    import windowsmith.compaction.keys as keys

    index = list(_airline_cut(tmp_path, "handles").index)
    flights = [k for k in index if k.startswith("HAT")]
    assert "EUJUY6" in index and flights and all(index.index("EUJUY6") < index.index(f) for f in flights)
    monkeypatch.setattr(keys, "HANDLE_BONUS", 0.0)  # without the bonus the newest results' names come first
    flat = list(_airline_cut(tmp_path, "flat").index)
    first = next(k for k in flat if k.startswith("HAT"))
    assert "EUJUY6" not in flat or flat.index(first) < flat.index("EUJUY6")


def test_present_sees_path_tails_and_skips_windowsmith_notes():
    shown = present("edit django/contrib/admin/utils.py (artifact://" + "a" * 64 + ")")
    assert {"django/contrib/admin/utils.py", "utils.py"} <= shown
    assert not any("a" * 64 in k for k in shown)
    ranked = rank_lost([Mention("tool", "KeyError\n" + offload_footer(120, 4000, "b" * 64))])
    assert ranked == ["KeyError"]


def test_fit_index_respects_its_budget_exactly():
    counter = TokenCounter("o200k_base")
    ranked = [f"name_{i}_{'x' * (i % 7)}" for i in range(500)]
    for budget in (0, 15, 16, 30, 64, 200, 1000):
        entries = fit_index(ranked, budget, counter.raw_text)
        assert counter.raw_text(render_index(entries)) <= budget if entries else True
        assert list(entries) == ranked[:len(entries)]  # a head of the ranking, in order
    assert fit_index(ranked, 10, counter.raw_text) == ()
    assert fit_index([], 1000, counter.raw_text) == ()
    assert render_index(()) == ""


def test_config_bounds_the_index_share():
    assert CompactionConfig(index_ratio=0).index_ratio == 0
    for bad in (-0.1, 0.5, 2):
        with pytest.raises(ConfigError, match="index_ratio"):
            CompactionConfig(index_ratio=bad)
    assert CompactionConfig(index_floor=0).index_floor == 0
    for bad in (-1, 5000):
        with pytest.raises(ConfigError, match="index_floor is the raw tokens the index keeps"):
            CompactionConfig(index_floor=bad)


def test_record_round_trips_and_older_logs_have_no_index():
    rec = EmergencyRecord(1, 9, 10, ("[turn 1] x",), None, (), "why", index=("HAT170", "a/b.py"))
    d = rec.to_dict()
    assert d["index"] == ["HAT170", "a/b.py"] and EmergencyRecord.from_dict(d).index == rec.index
    old = {k: v for k, v in d.items() if k != "index"}
    assert "index" not in EmergencyRecord(1, 9, 10, (), None, (), "why").to_dict()  # chain of old logs unchanged
    assert EmergencyRecord.from_dict(old).index == ()


def _cut_session(e: ws.Engine, turns: int = 60) -> tuple[ws.Session, list[ws.Pack]]:
    """A customer-service-like session whose results each name new ids; a small window cuts it in emergencies."""
    return item_lookup_session(e, "keys", "You are a support agent.", turns, price=True)


def test_an_emergency_cut_indexes_what_it_lost_and_every_view_shows_it(tmp_path):
    db = tmp_path / "w.db"
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=8000) as e:
        s, packs = _cut_session(e)
        recs = [r for r in s.state.records if isinstance(r, EmergencyRecord)]
        assert recs and all(r.index for r in recs)
        pack = packs[-1]
        counter = s.counter(pack.manifest.format)
        cap = int(CompactionConfig().index_ratio * pack.manifest.available / counter.scale)
        for r in recs:
            assert counter.raw_text(render_index(r.index)) <= cap
        last = recs[-1]
        request_text = "\n".join(m.text for m in pack.neutral.messages)
        assert render_index(last.index) in request_text and INDEX_HEAD in request_text
        # what the index names was in the dropped span and is nowhere else in the request
        span = "\n".join(m.text + "".join(r.text for r in m.tool_results) + "".join(str(c.arguments) for c in m.tool_calls)
                         for _, m in s.state.span_messages(0, last.last_seq))
        rest = request_text.replace(render_index(last.index), "")
        assert all(k in span for k in last.index)
        assert not any(k in present(rest) for k in last.index)
        # the manifest of the pack that cut carries the index; inspect prints it
        cut = next(p for p in packs if any(a["kind"] == "emergency" for a in p.manifest.actions))
        act = next(a for a in cut.manifest.actions if a["kind"] == "emergency")
        assert act["detail"]["index"] and "identifier(s) the cut lost" in act["reason"]
        sid = s.id
    r = CliRunner(env={"COLUMNS": "400"}).invoke(main, ["inspect", sid, "--store", str(db)], catch_exceptions=False)
    assert r.exit_code == 0 and f"cut history (index {len(act['detail']['index'])}: " in r.output
    # resumed from the log alone: the same index in the same place
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=8000) as e2:
        again = e2.session(sid)
        assert [x.index for x in again.state.records if isinstance(x, EmergencyRecord)] == [x.index for x in recs]


def test_index_ratio_zero_writes_no_index(tmp_path):
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=8000,
                   compaction=CompactionConfig(index_ratio=0)) as e:
        s, packs = _cut_session(e, turns=40)
        recs = [r for r in s.state.records if isinstance(r, EmergencyRecord)]
        assert recs and not any(r.index for r in recs)
        assert INDEX_HEAD not in "\n".join(m.text for m in packs[-1].neutral.messages)


word = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-", min_size=1, max_size=24)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(results=st.lists(st.lists(word, min_size=1, max_size=60), min_size=12, max_size=40),
       window=st.sampled_from([6000, 8000, 12000]), ratio=st.sampled_from([0.01, 0.05, 0.2]))
def test_the_index_never_exceeds_its_share(results, window, ratio):
    """Over random sessions of random identifiers, every emergency record's index, as rendered into the
    request, fits ``index_ratio`` of the available budget."""
    with tempfile.TemporaryDirectory() as tmp, \
            ws.Engine(model="gpt-4o", store=Path(tmp) / "w.db", window=window,
                      compaction=CompactionConfig(index_ratio=ratio)) as e:
        s = e.session("p", goal="fix ERR_42 in src/app.py")
        s.user("start")
        for i, words in enumerate(results):
            s.assistant("", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"command": f"grep {words[0]}"}}])
            s.tool_result(f"c{i}", " ".join(words * 8))
            pack = s.build()
            assert pack.manifest.tokens <= pack.manifest.available
        counter = s.counter(pack.manifest.format)
        cap = int(ratio * pack.manifest.available / counter.scale)
        for r in s.state.records:
            if isinstance(r, EmergencyRecord) and r.index:
                assert counter.raw_text(render_index(r.index)) <= cap


@pytest.mark.slow
def test_work_log_and_index_scale_down_with_the_room_tools_and_system_leave(tmp_path):
    """Where tools and system leave little room, the work log and the index together take at most
    ``carry_share`` of it (they are carried by every request after a cut); with room to spare, or with
    ``carry_share=None``, they keep their shares of the budget."""

    def carried(system: str, share: float | None) -> tuple[list[EmergencyRecord], float, float]:
        with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / f"{len(system)}-{share}.db", window=8000,
                       compaction=CompactionConfig(carry_share=share)) as e:
            s = e.session("keys", goal="refund the damaged items of order #W2378156")
            s.system(system)
            s.user("Hi, my hat arrived damaged; order #W2378156.")
            for i in range(40):
                s.assistant(f"Let me look up item {i}.", tool_calls=[{"id": f"c{i}", "name": "get_item",
                                                                      "arguments": {"item_id": f"HAT{100 + i}"}}])
                s.tool_result(f"c{i}", f'{{"item_id": "HAT{100 + i}", "sku": "SKU{5000 + i}X", '
                                       f'"note": "{"in stock " * 30}", "warehouse": "wh_{i}_east"}}')
                pack = s.build()
            counter = s.counter(pack.manifest.format)
            room = pack.manifest.available / counter.scale - counter.raw_segment(system) - counter.overheads.per_request
            recs = [r for r in s.state.records if isinstance(r, EmergencyRecord)]
            size = max(sum(counter.raw_text(x) + 1 for x in r.work_log) + counter.raw_text(render_index(r.index))
                       for r in recs)
            return recs, size, room

    policy = "Policy rule: always verify the order id and the customer's identity before any refund. " * 200
    recs, size, room = carried(policy, 0.15)
    assert recs and room < 3000
    assert size <= 0.15 * room + 40  # the kept log line overshoots by at most one line
    _, unbounded, _ = carried(policy, None)
    assert unbounded > size  # the full shares: work log 200+ tokens and 5% of the budget for the index
    # plenty of room: the bound does not bite, the caps are the budget's shares
    _, small_sys, room_small = carried("You are a support agent.", 0.15)
    _, small_none, _ = carried("You are a support agent.", None)
    assert room_small > 5000 and small_sys == small_none
