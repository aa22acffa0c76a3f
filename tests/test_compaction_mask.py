"""The mask stage in detail: what a fold points at (per call), what its keys hold, and image stubs."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from typing import Any

import pytest

import windowsmith as ws
from conftest import DATA, needs_data
from windowsmith.bench.base import BenchConfig
from windowsmith.bench.metrics import prepare
from windowsmith.bench.strategies import WindowsmithStrategy
from windowsmith.compaction import CompactionConfig
from windowsmith.compaction.config import MASK_FLOOR_ROOM
from windowsmith.compaction.mask import fold_artifacts
from windowsmith.compaction.references import result_keys
from windowsmith.refs import image_stub
from windowsmith.registry import load_registry
from windowsmith.text import identifiers
from windowsmith.traces import load_traces

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


@contextmanager
def compacted_mixed(tmp_path, fillers: int) -> Iterator[tuple[ws.Engine, ws.Session]]:
    """The mixed exchange, ``fillers`` exchanges after it, then compacted as after a provider overflow (keep_turns=2:
    on demand, a summary of these short folds would be longer than they are, and is not written)."""
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=200_000,
                   compaction=CompactionConfig(keep_turns=2), ingest=ws.IngestConfig(offload_tokens=200)) as e:
        s = mixed_session(e)
        for i in range(fillers):
            filler(s, i)
        s.compact(harder=True)
        yield e, s


def test_mixed_exchange_maps_each_call_to_its_own_artifact(tmp_path):
    with compacted_mixed(tmp_path, 4) as (e, s):
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
        assert fold_artifacts(s.state, first) == {"a": sha("out a"), "b": sha("out b")}
        assert fold_artifacts(s.state, last + 1) == {}


# --------------------------------------------------------------------------- keys


def test_fold_keys_of_a_json_result_are_its_values_not_its_field_names():
    """A customer-service profile (a real tau-bench result): its field names ('first_name', 'payment_methods') are
    the schema, its values the ids the agent looks up next; with the names in the keys, the fold's twelve kept
    neither of the last two reservations the agent read next (tau-bench with thinking at 16K: strict recall
    97.8% -> 98.9% on the dev runs, `full` 99.3%)."""
    profile = ('{"name": {"first_name": "Sophia", "last_name": "Martin"}, "email": "sophia.martin3149@example.com", '
               '"payment_methods": {"gift_card_6829926": {"source": "gift_card", "amount": 35, "id": "gift_card_6829926"}, '
               '"credit_card_1402274": {"source": "credit_card", "last_four": "8834", "id": "credit_card_1402274"}}, '
               '"saved_passengers": [{"first_name": "Ivan"}], "reservations": ["MFRB94", "PUNERT", "HSR97W", "SE9KEL", '
               '"FDZ0T5", "HTR26G", "5BGGWZ"]}')
    assert result_keys(profile) == ["sophia.martin3149@example.com", "gift_card_6829926", "credit_card_1402274",
                                    "MFRB94", "HSR97W", "SE9KEL", "FDZ0T5", "HTR26G", "5BGGWZ"]
    assert result_keys("{'user_id': 'mia_li_3668'}") == ["mia_li_3668"]  # a Python dict's repr too
    assert result_keys("see credit_card and gift_card") == ["credit_card", "gift_card"]  # no ids: the words stay


def test_fold_keys_hold_a_results_dates_and_no_timestamp_fragment():
    """'2024-05-13T19:22:05' holds '13T19', capitals and digits like an id: a real tau-bench reservation's
    ``created_at`` put it in every fold line's keys (and the index), in place of an id the agent reads next. Its
    flights' dates were in no key: an agent that lists the customer's flights by day needs them. They come after
    the ids (dates first: on the dev runs with thinking, strict recall at 16K fell 98.4% -> 97.6%; after: 98.6%)."""
    reservation = ('{"reservation_id": "SE9KEL", "flights": [{"flight_number": "HAT034", "date": "2024-05-17"}], '
                   '"payment_history": [{"payment_id": "credit_card_1402274", "amount": 349}], '
                   '"created_at": "2024-05-13T19:22:05"}')
    assert result_keys(reservation) == ["SE9KEL", "HAT034", "credit_card_1402274", "2024-05-17"]
    # a date takes a key only where the ids leave room: dated flights in front of the ids keep the ids first
    flights = ", ".join(f'{{"date": "2024-05-{d:02d}", "flight_number": "HAT{d:03d}"}}' for d in range(10, 20))
    assert result_keys(f"[{flights}]", 12) == [f"HAT{d:03d}" for d in range(10, 20)] + ["2024-05-10", "2024-05-11"]
    found = identifiers(reservation)
    assert "13T19" not in found and "2024-05-13" in found  # the timestamp's date is one, as a date
    assert "ZFA04Y" in identifiers("order-ZFA04Y") and "ZFA04Y" in result_keys("order-ZFA04Y")  # after a word: still


def test_a_fold_line_keeps_its_keys_beside_its_preview(tmp_path):
    """What the fold's preview shows does not use up one of its ``fold_keys``."""
    profile = ('{"name": {"first_name": "Sophia", "last_name": "Martin"}, "email": "sophia.martin3149@example.com", '
               '"reservations": [' + ", ".join(f'"R{k:04d}X"' for k in range(20)) + '], "notes": "'
               + "prefers aisle seats, travels for work " * 40 + '"}')
    cfg = CompactionConfig(keep_turns=2, fold_keys=12)
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", compaction=cfg) as e:
        s = e.session("cs")
        s.user("Which of my reservations are on the same day?")
        s.assistant("Looking you up.", tool_calls=[{"id": "u", "name": "get_user_details",
                                                    "arguments": {"user_id": "sophia_martin_4574"}}])
        s.tool_result("u", profile)
        for i in range(3):
            filler(s, i)
        s.compact()
        line = next(f["text"] for r in records(s, "mask") for f in r["folds"] if "u" in f["calls"])
    assert "sophia.martin3149@example.com" in line  # in the preview (160 characters)
    preview, rest = line.split("[keys: ", 1)
    keys = rest.split("]", 1)[0].split(", ")
    shown = [f"R{k:04d}X" for k in range(20) if f"R{k:04d}X" in preview]
    assert shown and keys == [f"R{k:04d}X" for k in range(20) if f"R{k:04d}X" not in shown][:12]


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
    with compacted_mixed(tmp_path, 3) as (_e, s):
        line = records(s, "mask")[0]["folds"][0]["text"]
        assert "[keys: " in line and "refund_twice" in line
        assert "read_result" not in line and "search_result" not in line


def c_listing(n: int) -> str:
    """An editor's ``cat -n`` view of a C file: includes first, then functions spread over ``n`` lines."""
    lines = [f'#include "../type/h{i}.h"' for i in range(12)] + [""]
    for f in range(5):
        lines += [f"static int handler_{f}(ctx_t* ctx, int arg)", "{"]
        lines += [f"  int v_{k} = step(ctx, {k});" for k in range(n // 5 - 4)] + ["  return 0;", "}"]
    body = "\n".join(f"{i:6d}\t{ln}" for i, ln in enumerate(lines, 1))
    return "Here's the result of running `cat -n` on /repo/src/handlers.c:\n" + body + "\n"


def test_a_folded_file_read_names_its_outline_first(tmp_path):
    """The fold of a file read keeps each definition's name and the lines its block spans (what the agent opens
    next), not the first lines' include paths."""
    from windowsmith.compaction.references import outline_keys

    listing = c_listing(300)
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=200_000,
                   compaction=CompactionConfig(keep_turns=2), ingest=ws.IngestConfig(offload_tokens=1000)) as e:
        s = e.session("outline", goal="Fix handler_3 in src/handlers.c")
        s.user("handler_3 returns the wrong value")
        s.assistant("I will read the file.", tool_calls=[
            {"id": "v", "name": "str_replace_editor", "arguments": {"command": "view", "path": "/repo/src/handlers.c"}}])
        s.tool_result("v", listing)
        view = s.messages[2].tool_results[0].text
        assert "Outline (lines: definition):" in view
        keys = outline_keys(view)
        assert [k.split()[0] for k in keys] == [f"handler_{f}" for f in range(5)]
        for i in range(3):
            filler(s, i)
        s.compact()
        line = records(s, "mask")[0]["folds"][0]["text"]
    shown = line[line.index("[keys: ") + 7:]
    assert shown.startswith(", ".join(keys))  # every definition with its lines, before anything else
    first, span = keys[3].split()
    lo, hi = (int(x) for x in span.split("-"))
    assert first == "handler_3" and f"{lo:6d}\tstatic int handler_3(" in listing and f"{hi:6d}\t}}" in listing
    assert outline_keys("no outline here") == []


# --------------------------------------------------------------------------- image stubs

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(255, -1, -1)) * 4


def image_session(e: ws.Engine, sid: str = "img") -> ws.Session:
    """A base64 image in a user message (turn 1) and one in a tool result (turn 2)."""
    s = e.session(sid, goal="Make the checkout page match the mockup")
    s.system("You are a front-end agent.")
    s.tools([{"name": "screenshot", "description": "Screenshot a page.",
              "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}},
             {"name": "run", "description": "Run a shell command.",
              "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}])
    s.user("ORIGINAL TASK: make the checkout page match the mockup.")
    s.assistant("Please send me the mockup.")
    s.user([{"type": "text", "text": "Here it is."},
            {"type": "image", "data": base64.b64encode(PNG).decode(), "media_type": "image/png",
             "caption": "mockup of the checkout page"}])
    s.assistant("I will screenshot the current page.",
                tool_calls=[{"id": "shot", "name": "screenshot", "arguments": {"url": "http://localhost/checkout"}}])
    s.tool_result("shot", [{"type": "text", "text": "page rendered in 120 ms"},
                           {"type": "image", "data": base64.b64encode(JPEG).decode(), "media_type": "image/jpeg"}])
    return s


def images_in(pack: ws.Pack) -> int:
    n = 0
    for m in pack.neutral.messages:
        for b in m.content:
            n += isinstance(b, ws.Image) or sum(isinstance(c, ws.Image) for c in getattr(b, "content", ()))
    return n


def check_pairs(msgs: tuple[ws.Message, ...]) -> None:
    for i, m in enumerate(msgs):
        if m.role == "assistant" and m.tool_calls:
            assert msgs[i + 1].role == "tool"
            assert {c.id for c in m.tool_calls} == {r.call_id for r in msgs[i + 1].tool_results}


IMAGE_CFG = CompactionConfig(image_keep_turns=3, keep_turns=20, mask_at=0.01, mask_min_tokens=1000, cost_aware=False)


def test_images_become_stubs_after_n_turns_and_a_resumed_session_agrees(tmp_path):
    db = tmp_path / "w.db"
    png_stub = f"[image: mockup of the checkout page (image/png, {len(PNG):,} bytes) (artifact://{sha(PNG)})]"
    jpeg_stub = f"[image: image/jpeg, {len(JPEG):,} bytes (artifact://{sha(JPEG)})]"
    with ws.Engine(model="claude-sonnet-4-5", store=db, compaction=IMAGE_CFG) as e:
        s = image_session(e)
        packs = [s.build()]
        assert images_in(packs[0]) == 2 and not records(s, "mask")
        for i in range(3):
            filler(s, i)
            packs.append(s.build())
        # fewer turns than image_keep_turns: kept; the user's image goes first, the tool's a turn later
        assert images_in(packs[1]) == 2
        assert images_in(packs[2]) == 1 and png_stub in packs[2].neutral.messages[2].text
        assert images_in(packs[3]) == 0
        pack = packs[3]
        masks = records(s, "mask")
        assert [len(r["images"]) for r in masks] == [1, 1] and all(r["folds"] == [] for r in masks)
        assert "1 image(s) older than 3 turn(s) replaced by text stubs" in masks[0]["reason"]
        assert packs[2].manifest.actions[0]["kind"] == "mask" and pack.manifest.actions[0]["kind"] == "mask"
        msgs = pack.neutral.messages
        assert msgs[2].role == "user" and msgs[2].text == "Here it is.\n" + png_stub
        result = msgs[4].tool_results[0]
        assert result.call_id == "shot" and result.text == "page rendered in 120 ms\n" + jpeg_stub
        check_pairs(msgs)
        assert "base64" not in json.dumps(pack.request) and sha(PNG) in json.dumps(pack.request)
        assert {f"artifact://{sha(PNG)}", f"artifact://{sha(JPEG)}"} <= set(pack.manifest.artifacts)
        # the artifacts hold the image bytes; the log keeps the originals
        assert e.artifacts.get(sha(PNG)) == PNG and e.artifacts.get(sha(JPEG)) == JPEG
        assert isinstance(s.messages[2].content[1], ws.Image) and isinstance(s.messages[4].tool_results[0].content[1], ws.Image)
        # counted as tokens.py counts them: an image costs the format's fixed overhead, the stub its text
        counter = s.counter("anthropic")
        for rec, stub in zip(masks, (png_stub, jpeg_stub), strict=True):
            assert rec["saved_tokens"] == int((counter.overheads.image - counter.raw_text(stub)) * counter.scale)
    with ws.Engine(model="claude-sonnet-4-5", store=db, compaction=IMAGE_CFG) as e2:
        again = e2.session("img").build()
    assert again.request == pack.request and again.manifest.checksum == pack.manifest.checksum


def test_image_stubs_wait_for_the_hysteresis_floor(tmp_path):
    cfg = CompactionConfig(image_keep_turns=1, keep_turns=20, mask_at=0.01, mask_min_tokens=5000)
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", compaction=cfg) as e:
        s = image_session(e)
        for i in range(4):
            filler(s, i)
            pack = s.build()
        assert images_in(pack) == 2 and not records(s, "mask")  # two images save ~3,100 < 5,000 tokens
        s.compact()  # on demand: any batch
        assert images_in(s.build()) == 0 and len(records(s, "mask")[0]["images"]) == 2
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "n.db",
                   compaction=CompactionConfig(image_keep_turns=None, keep_turns=20)) as e:
        s = image_session(e)
        for i in range(4):
            filler(s, i)
        s.compact()
        assert images_in(s.build()) == 2  # image_keep_turns=None: images stay


def test_an_image_in_a_folded_exchange_is_named_by_its_stub(tmp_path):
    cfg = CompactionConfig(image_keep_turns=50, keep_turns=2)
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", compaction=cfg) as e:
        s = image_session(e)
        for i in range(3):
            filler(s, i)
        s.compact()
        fold = next(f for f in records(s, "mask")[0]["folds"] if f["calls"].keys() == {"shot"})
        jpeg_stub = f"[image: image/jpeg, {len(JPEG):,} bytes (artifact://{sha(JPEG)})]"
        assert f"→ page rendered in 120 ms {jpeg_stub} (artifact://{sha('page rendered in 120 ms')})" in fold["text"]
        assert fold["artifacts"] == [sha("page rendered in 120 ms"), sha(JPEG)]
        assert base64.b64encode(JPEG).decode()[:40] not in fold["text"]
        assert e.artifacts.get(sha(JPEG)) == JPEG
        assert "images" not in records(s, "mask")[0]  # the user's image is younger than 50 turns


def test_image_stub_forms():
    url = image_stub(ws.Image(url="https://example.com/a.png", caption="  the\nlogo "))
    assert url.text == f"[image: the logo (at https://example.com/a.png) (artifact://{sha('https://example.com/a.png')})]"
    assert url.raw == b"https://example.com/a.png"
    data_url = image_stub(ws.Image(url="data:image/gif;base64," + base64.b64encode(b"GIF89a").decode()))
    assert data_url.raw == b"GIF89a" and data_url.text.startswith("[image: image/gif, 6 bytes (artifact://")
    assert result_keys(f"saw {data_url.text} in ZFA04Y") == ["ZFA04Y"]


def test_screenshots_every_turn_do_not_rewrite_the_cache_every_few_turns(tmp_path):
    """A browser agent's every result is a screenshot; the newest image_keep_turns of them cannot fold, so a
    batch made whenever the request passed mask_at bought two or three turns and rewrote the cache each time
    (a synthetic browser run at 32K: 4 batches in 15 calls, +31% against a sticky cut; this session: 3, now 2). A
    batch now has to pay back under the summary threshold: the request grows, and what cuts it cuts deeper."""
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=32_000) as e:
        s = e.session("browser", goal="find the failing job on the admin dashboard")
        s.tools([{"name": "browser", "description": "Drive a browser.",
                  "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}}])
        s.user("Open the dashboard at https://example.test/admin and find the failing job id.")
        for i in range(14):
            s.build()
            s.assistant(f"Step {i}: taking a screenshot.",
                        tool_calls=[{"id": f"t{i}", "name": "browser", "arguments": {"url": f"https://example.test/{i}"}}])
            shot = PNG + bytes([i]) * 64  # a distinct image each turn
            s.tool_result(f"t{i}", [{"type": "text", "text": f"page {i}: job-{1000 + i} " + "row " * 300},
                                    {"type": "image", "data": base64.b64encode(shot).decode(), "media_type": "image/png"}])
        last = s.build()
        masks = [c for c in s.state.compactions if c["type"] == "mask"]
        assert len(masks) <= 2, [c["reason"] for c in masks]
        assert images_in(last) >= 1 and last.manifest.tokens <= last.manifest.available  # the newest screenshot stays


@pytest.mark.slow
@needs_data
def test_the_fold_floor_does_not_grow_with_a_large_window():
    """The hysteresis floor is 8% of the room only up to a 32K room: a turn grows a request by as many tokens
    in gpt-4o's 128K window as at 32K, and 8% of 128K (8.7K tokens) held back every fold batch of this real
    OpenHands run while the same batches paid back (validation, OpenHands at 128K: $1.384 -> $1.199)."""
    spec = load_registry().get("gpt-4o")
    cfg = BenchConfig.make(spec, None)
    assert cfg.available > 100_000
    run = prepare(next(t for t in load_traces(DATA / "openhands" / "msb_example_output.jsonl")
                       if t.id.endswith("ponyc-4588")))
    strategy = WindowsmithStrategy(cfg)
    strategy.start(run.id, run.system, run.tools, native_tools=run.native_tools)
    calls = set(run.calls)
    try:
        for i, m in enumerate(run.messages):
            if i in calls:
                assert strategy.build().tokens <= cfg.available
            strategy.observe(m)
        masks = [c for c in strategy.session.state.compactions if c["type"] == "mask"]
    finally:
        strategy.finish()
        strategy.close()
    assert masks, "no fold batch ran at the model's own window"
    for c in masks:
        # each batch paid back by the cost model, and saved less than the floor a 128K room set before
        assert c["net_usd"] > 0 and c["saved_tokens"] < int(cfg.available * 0.08)
        assert c["saved_tokens"] >= CompactionConfig().min_saving(cfg.available) == int(MASK_FLOOR_ROOM * 0.08)


def test_images_the_history_must_keep_over_its_share_become_stubs_the_newest_last(tmp_path):
    # a computer-use step: four parallel screenshots in the newest tool message, 6,400 tokens of images in an 8K
    # window. No text view can shrink an image, so the build was refused (BudgetBlockedError); now the oldest
    # images become stubs (a mask record with no fold) until the history fits, the newest screenshot stays
    db = tmp_path / "w.db"
    shots = [bytes([k]) * 64 + PNG for k in range(4)]
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=8000) as e:
        s = e.session("cu", goal="Check out the cart")
        s.system("You are a computer-use agent.")
        s.tools([{"name": "screenshot", "description": "Screenshot a display.",
                  "parameters": {"type": "object", "properties": {"display": {"type": "integer"}}}}])
        s.user("Check out the cart on every display.")
        s.assistant("Screenshots of the four displays.",
                    tool_calls=[{"id": f"d{k}", "name": "screenshot", "arguments": {"display": k}} for k in range(4)])
        for k in range(4):
            s.tool_result(f"d{k}", [{"type": "text", "text": f"display {k}"},
                                    {"type": "image", "data": base64.b64encode(shots[k]).decode(),
                                     "media_type": "image/png"}])
        pack = s.build()
        assert pack.tokens <= pack.manifest.available
        results = [r for m in pack.neutral.messages if m.role == "tool" for r in m.tool_results]
        assert [r.call_id for r in results] == ["d0", "d1", "d2", "d3"]
        kept = [k for k, r in enumerate(results) if any(isinstance(c, ws.Image) for c in r.content)]
        assert kept and kept[-1] == 3 and 0 not in kept  # the newest screenshot stays, the oldest went first
        for k in range(4):
            if k not in kept:
                stub = f"[image: image/png, {len(shots[k]):,} bytes (artifact://{sha(shots[k])})]"
                assert results[k].text == f"display {k}\n{stub}"
                assert e.artifacts.get(sha(shots[k])) == shots[k]
        act = next(a for a in pack.manifest.actions if a["layer"] == "history")
        assert act["kind"] == "shrink" and "image(s) of the messages that must stay replaced by stubs" in act["reason"]
        assert [d["artifact"] for d in act["detail"]["images_stubbed"]] == \
            [f"artifact://{sha(shots[k])}" for k in range(4) if k not in kept]
        mask = records(s, "mask")
        assert len(mask) == 1 and mask[0]["folds"] == [] and len(mask[0]["images"]) == 4 - len(kept)
        assert isinstance(s.messages[-1].tool_results[0].content[1], ws.Image)  # the log keeps the original
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=8000) as e2:
        again = e2.session("cu").build()
    assert again.request == pack.request


def test_a_mask_batch_pays_back_over_the_turns_the_run_is_expected_to_live(tmp_path):
    cfg = CompactionConfig()
    assert cfg.expected_turns == 10
    # a run of age a lives t more turns with odds a / (a + t): of a ten-turn horizon a young run is expected to
    # live four turns, one of six turns five and a half, an old one nearly all ten, never more
    assert [cfg.remaining_turns(t) for t in (0, 1, 3, 6, 10, 40, 1000)] == [4.04, 4.04, 4.04, 5.58, 6.69, 8.83, 9.95]
    assert CompactionConfig(expected_turns=2).remaining_turns(8) == 1.69  # 8/9 + 8/10
    assert CompactionConfig(expected_turns=0).remaining_turns(8) == 0
    ages = range(0, 300, 7)
    assert all(cfg.remaining_turns(a) <= cfg.remaining_turns(b) for a, b in pairwise(ages))
    # and the cost model prices a batch with it: a browser run's batch at its ninth turn
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=32_000) as e:
        s = e.session("young")
        s.tools([{"name": "browser", "description": "Open a URL and screenshot it.",
                  "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}}])
        s.user("Open the dashboard.")
        for i in range(14):
            s.build()
            s.assistant(f"Step {i}", tool_calls=[{"id": f"t{i}", "name": "browser", "arguments": {"url": f"https://e/{i}"}}])
            s.tool_result(f"t{i}", [{"type": "text", "text": f"page {i}: job-{1000 + i} " + "row " * 300},
                                    {"type": "image", "data": base64.b64encode(PNG + bytes([i]) * 64).decode(),
                                     "media_type": "image/png"}])
        s.build()
        masks = records(s, "mask")
        assert masks
        for c in masks:
            turns = sum(1 for _, m in s.state.span_messages(0, c["seq"]) if m.role == "assistant")
            assert c["expected_turns"] == cfg.remaining_turns(turns)
        # priced over fewer turns than the run has had (the rule before said as many, up to ten: 9 here), and the
        # record's net is what that horizon gives
        c = masks[0]
        turns = sum(1 for _, m in s.state.span_messages(0, c["seq"]) if m.role == "assistant")
        assert turns == 9 and c["expected_turns"] == 6.47 < turns
        assert c["net_usd"] == pytest.approx(c["saving_usd_per_turn"] * c["expected_turns"] - c["rewrite_usd"], abs=2e-6)


@needs_data
def test_an_image_batch_after_a_fold_batch_claims_only_what_it_saves():
    """A real tau-bench run with a screenshot in every tool result, at 16K: a fold batch at the summary threshold,
    then batches that stub aged images only. Each batch's claimed saving is what the next request really lost:
    an image-only batch once counted the folds of the batch before it (a 1,548-token stub claimed 5,806 tokens
    saved and passed the cost model on that saving, rewriting the cache every turn). And the cache rewrite each
    batch is priced at is the one the provider bills: with explicit breakpoints the cache holds the prefixes the
    last request marked, so an edit re-writes from the carry (here the pinned head) on, not from the edit."""
    from windowsmith.costs import call_cost
    from windowsmith.model import Image, Message, ToolResult

    spec = load_registry().get("claude-sonnet-4-5")
    cfg = BenchConfig.make(spec, 16_000)
    trace = next(t for t in load_traces(DATA / "tau-bench" / "gpt-4o-airline.json")
                 if t.id.endswith("task-4/trial-0"))
    run = prepare(trace)
    strategy = WindowsmithStrategy(cfg)
    strategy.start(run.id, run.system, run.tools, native_tools=run.native_tools)
    calls = set(run.calls)
    checked = []
    prices = spec.prices
    prev = None
    try:
        for i, m in enumerate(run.messages):
            if i in calls:
                pack = strategy.session.build(cfg.fmt)
                cost, _ = call_cost(spec, cfg.fmt, prev, pack.neutral, cfg.counter, prompt_tokens=pack.manifest.tokens)
                prev = pack.neutral
                for a in pack.manifest.actions:
                    if a["kind"] == "mask":
                        # the counted request after the batch is what the batch said it would leave
                        assert abs(pack.manifest.tokens - a["tokens_after"]) <= 0.02 * pack.manifest.tokens, a
                        rewrite = a["detail"]["rewrite_usd"] * 1e6 / (prices.cache_write - prices.cache_read)
                        assert abs(rewrite - cost.cache_write_tokens) <= 0.02 * cost.cache_write_tokens, (a, cost)
                        checked.append(a["detail"].get("images", 0))
            if m.role == "tool":
                m = Message("tool", tuple(ToolResult(r.call_id, (*r.content, Image(url=f"https://shots.invalid/{i}.png")),
                                                     r.is_error, r.name) for r in m.tool_results))
            strategy.observe(m)
    finally:
        strategy.finish()
        strategy.close()
    assert any(checked) and len(checked) >= 2, checked  # a fold batch and at least one image batch


# --------------------------------------------------------------------------- a text-protocol agent's observations


def _listing(i: int) -> str:
    """A command's output as a text-protocol agent gets it back: a user message."""
    rows = "".join(f"{k:4d}\tdef handler_{i}_{k}(request): return Refund{i}Error('R{i:02d}{k:03d}')\n"
                   for k in range(60))
    return f"<returncode>0</returncode>\n<output>\nsrc/billing/refund_{i}.py\n{rows}</output>"


#: how a text-protocol agent's reply acts (mini-swe-agent, ReAct, an action tag) and a chat reply that does not
REPLIES = {
    "bash": "THOUGHT: read the handlers of module {i}.\n\n```bash\nnl -ba src/billing/refund_{i}.py\n```",
    "react": "Thought: read module {i}.\nAction: read_file[src/billing/refund_{i}.py]",
    "tag": "Reading module {i}.\n<execute_bash>\nnl -ba src/billing/refund_{i}.py\n</execute_bash>",
    "chat": "Thanks! Could you paste the handlers of module {i} too?",
}


def text_agent(e: ws.Engine, sid: str, rounds: int, *, tools: bool = False, reply: str = "bash") -> ws.Session:
    """mini-swe-agent's protocol: the command in the reply's text, its output back as the next user message."""
    s = e.session(sid)
    if tools:
        s.tools([{"name": "noop", "description": "Unused.", "parameters": {"type": "object", "properties": {}}}])
    s.user("Fix the double refund. Reply with one bash block per turn.")
    for i in range(rounds):
        s.assistant(REPLIES[reply].format(i=i))
        s.user(_listing(i))
    return s


def test_a_text_agents_old_observations_fold_into_user_messages_naming_their_artifact(tmp_path):
    db = tmp_path / "w.db"
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=200_000,
                   compaction=CompactionConfig(keep_turns=2)) as e:
        s = text_agent(e, "txt", 6)
        replies = [m for m in s.state.view if m.role == "assistant"]
        s.compact()
        masks = records(s, "mask")
        assert len(masks) == 1 and "4 observation(s) (user messages) older than the last 2 folded" in masks[0]["reason"]
        folds = masks[0]["folds"]
        assert [f["role"] for f in folds] == ["user"] * 4
        assert [f["first_seq"] for f in folds] == [s.state.message_seqs[2 + 2 * i] for i in range(4)]
        for i, f in enumerate(folds):
            assert f["text"].startswith(f"[turn {i + 1}] output → ")
            assert f["calls"] == {} and f["artifacts"] == [sha(_listing(i))]
            assert f["text"].endswith(f"(artifact://{sha(_listing(i))})")
            assert e.artifacts.get(sha(_listing(i))).decode() == _listing(i)  # the whole output, readable
            assert f"Refund{i}Error" in f["text"] and f"src/billing/refund_{i}.py" in f["text"]  # its keys
        view = s.state.view
        assert [m.role for m in view] == ["user", *(["assistant", "user"] * 6)]
        assert [m.text for m in view[2:9:2]] == [f["text"] for f in folds]
        assert [m for m in view if m.role == "assistant"] == replies  # the replies that ran the commands stay
        assert view[-1].text == _listing(5) and view[-3].text == _listing(4)  # the newest two stay verbatim
        # the log is untouched, and the turn numbers of later folds did not move (a user fold starts no turn)
        assert s.messages[2].text == _listing(0) and len(s.state.turn_units) == 6
        pack = s.build()
    with ws.Engine(model="claude-sonnet-4-5", store=db, window=200_000,
                   compaction=CompactionConfig(keep_turns=2)) as e2:  # a resume replays the record
        again = e2.session("txt").build()
    assert again.request == pack.request


def test_observations_fold_only_in_a_session_without_tools_unless_asked(tmp_path):
    def folded(cfg: CompactionConfig, sid: str, *, tools: bool = False, reply: str = "bash") -> list[str]:
        with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / f"{sid}.db", window=200_000, compaction=cfg) as e:
            s = text_agent(e, sid, 6, tools=tools, reply=reply)
            s.compact()
            return [f.get("role", "assistant") for r in records(s, "mask") for f in r["folds"]]

    for reply in ("bash", "react", "tag"):  # a reply that acts in its text: its answer is the action's output
        assert folded(CompactionConfig(keep_turns=2), f"auto-{reply}", reply=reply) == ["user"] * 4
    # a chat reply (a question) is answered by the user speaking, even with the same long text (a tau-bench
    # customer before the agent's first call, in a trace without tool definitions)
    assert folded(CompactionConfig(keep_turns=2), "chat", reply="chat") == []
    # a session that declares tools: a user message after a text reply is the user speaking
    assert folded(CompactionConfig(keep_turns=2), "tools", tools=True) == []
    assert folded(CompactionConfig(keep_turns=2, fold_observations=True), "forced", tools=True) == ["user"] * 4
    assert folded(CompactionConfig(keep_turns=2, fold_observations=True), "forced-chat", reply="chat") == ["user"] * 4
    assert folded(CompactionConfig(keep_turns=2, fold_observations=False), "off") == []


@pytest.mark.slow
def test_observations_never_fold_at_the_summary_threshold_where_the_cut_takes_them(tmp_path):
    """At gpt-4o's prices a batch of observations pays back even at the summary threshold (86% to 95% full here),
    but the free cut there makes deeper room for the same rewrite: the batch is left out and the cut runs. (Without
    the rule this session folds observations at 86%, 95% and 92% full, each a 'cost model: pays back' batch.)"""
    with ws.Engine(model="gpt-4o", store=tmp_path / "w.db", window=16_000) as e:
        s = e.session("thr")
        s.user("Fix the double refund. Reply with one bash block per turn.")
        for i in range(40):
            s.build()
            s.assistant(REPLIES["bash"].format(i=i))
            s.user(_listing(i))
        assert not [f for r in records(s, "mask") for f in r["folds"] if f.get("role") == "user"]
        cuts = records(s, "emergency")
        assert len(cuts) >= 4 and all("% of the 11,680 available" in c["reason"] for c in cuts)


def test_a_customers_messages_never_fold_where_the_agent_calls_tools_without_declaring_them(tmp_path):
    """tau-bench traces without tool definitions: the agent calls tools, and the user messages after its text
    replies are a customer's (ids, dates), not a command's output."""
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=200_000,
                   compaction=CompactionConfig(keep_turns=2)) as e:
        s = e.session("cs")
        s.user("I want to cancel a reservation.")
        for i in range(6):
            s.assistant(f"Looking up reservation {i}.",
                        tool_calls=[{"id": f"c{i}", "name": "get_reservation", "arguments": {"id": f"R{i}"}}])
            s.tool_result(f"c{i}", _listing(i))
            s.assistant("Which one should I cancel?")
            s.user(f"The one from my trip {i}: " + _listing(i))
        s.compact()
        folds = [f for r in records(s, "mask") for f in r["folds"]]
        assert folds and all("role" not in f for f in folds)  # exchanges only
        assert all(m.text.startswith("The one from my trip") for m in s.state.view[1:] if m.role == "user")


def test_a_user_fold_for_a_unit_that_is_no_observation_changes_nothing():
    from windowsmith.model import Event
    from windowsmith.records import Fold, MaskRecord
    from windowsmith.state import SessionState

    st = SessionState("s")
    head = None
    msgs = [ws.Message("user", (ws.Text("task"),)), ws.Message("user", (ws.Text("more task"),)),
            ws.Message("assistant", (ws.Text("reply"),)), ws.Message("user", (ws.Text("observation " * 50),))]
    for seq, m in enumerate(msgs):
        ev = Event(seq=seq, kind="message", data={"message": m.to_dict()}, parent=head, hash=f"h{seq}")
        st.apply(ev)
        head = ev.hash
    assert st.observation_units == [2]  # the pinned request's messages and the reply are no observation
    view = list(st.view)
    rec = MaskRecord((Fold(2, 2, "[turn 1] reply folded", (), {}, "user"),
                      Fold(1, 1, "[turn 0] the request folded", (), {}, "user")), 0, "test")
    st.apply(Event(seq=4, kind="compaction", data=rec.to_dict(), parent=head, hash="h4"))
    assert st.view == view  # an assistant unit, a pinned one: not folded as observations
    rec = MaskRecord((Fold(3, 3, "[turn 1] output → observation (artifact://x)", ("x",), {}, "user"),), 0, "test")
    st.apply(Event(seq=5, kind="compaction", data=rec.to_dict(), parent="h4", hash="h5"))
    assert st.view[-1] == ws.Message("user", (ws.Text("[turn 1] output → observation (artifact://x)"),))
    assert st.turn_units == [1] and st.exchange_units == []


@needs_data
def test_a_real_mini_swe_agent_run_folds_its_observations_where_the_batch_pays():
    """gpt-4o's window and prices (a cache read at half the input price, no write premium): the run's history fits
    whole, so only a fold batch that pays back makes it cheaper. Each fold names an artifact holding the observation
    as the trace sent it."""
    spec = load_registry().get("gpt-4o")
    trace = load_traces(DATA / "mini-swe-agent" / "django__django-11119.traj.json")[0]
    run = prepare(trace)
    strat = WindowsmithStrategy(BenchConfig.make(spec))
    try:
        strat.start(run.id, run.system, run.tools)
        calls = set(run.calls)
        for i, m in enumerate(run.messages):
            if i in calls:  # a build before every model call, as the agent made them
                strat.session.build()
            strat.observe(m)
        state = strat.session.state
        folds = [(r, f) for r in state.records if r.kind == "mask" for f in r.folds]
        assert folds and all(f.role == "user" for _r, f in folds)
        assert all(r.economics["net_usd"] > 0 for r, _f in folds)  # each batch paid back on the cost model
        logged = dict(zip(state.message_seqs, state.messages, strict=True))
        for _r, f in folds:
            assert logged[f.first_seq].role == "user" and f.text.startswith("[turn ")
            assert strat.engine.artifacts.get(f.artifacts[0]).decode() == logged[f.first_seq].text
    finally:
        strat.finish()
        strat.close()
