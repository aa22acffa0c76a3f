"""Typed log records: every record round-trips through its event data, which is exactly what the log
holds (the hash chain depends on it), and older or unknown records still load."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windowsmith.compaction import STAGES, Breaker
from windowsmith.errors import UsageError
from windowsmith.hashing import canonical_json
from windowsmith.records import (
    EmergencyRecord,
    FailedRecord,
    Fold,
    ImageStubEntry,
    LessonRecord,
    MaskRecord,
    SummaryRecord,
    TruncateRecord,
    UnknownRecord,
    compaction_record,
)

seqs = st.integers(min_value=0, max_value=10_000)
texts = st.text(max_size=40)
shas = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
folds = st.builds(Fold, seqs, seqs, texts, st.tuples(shas), st.none() | st.dictionaries(texts, shas, max_size=3))
images = st.builds(ImageStubEntry, seqs, st.tuples(st.integers(0, 5)) | st.tuples(st.integers(0, 5), st.integers(0, 5)),
                   texts, shas)
economics = st.just({}) | st.fixed_dictionaries({"saving_usd_per_turn": st.floats(0, 1), "rewrite_usd": st.floats(0, 1),
                                                 "net_usd": st.floats(-1, 1),
                                                 "expected_turns": st.integers(0, 50) | st.floats(0, 50)})
records = st.one_of(
    st.builds(MaskRecord, st.lists(folds, max_size=3).map(tuple), st.integers(0, 10**6), texts,
              st.lists(images, max_size=3).map(tuple), economics),
    st.builds(SummaryRecord, seqs, seqs, seqs, st.none() | shas, st.fixed_dictionaries({"text": texts}), texts,
              st.none() | seqs, texts),
    st.builds(EmergencyRecord, seqs, seqs, seqs, st.lists(texts, max_size=3).map(tuple), st.none() | shas,
              st.lists(shas, max_size=2).map(tuple), texts),
    st.builds(TruncateRecord, seqs, st.none() | shas, st.integers(0, 100), st.integers(0, 10**6), texts),
    st.builds(FailedRecord, st.sampled_from(STAGES), texts, seqs, seqs, texts),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(records, seqs)
def test_every_record_round_trips_through_its_event_data(rec, seq):
    data = rec.to_dict()
    assert data["type"] == rec.kind and rec.event == "compaction"
    assert json.loads(canonical_json(data)) == data  # plain JSON: what the store hashes and holds
    back = compaction_record(json.loads(canonical_json(data)), seq)
    assert type(back) is type(rec) and back == rec and back.seq == seq
    assert back.to_dict() == data


def test_mask_record_writes_exactly_the_fields_the_log_always_held():
    rec = MaskRecord((Fold(3, 5, "[turn 1] run() → ok (artifact://" + "a" * 64 + ")", ("a" * 64,), {"c1": "a" * 64}),),
                     120, "why", (ImageStubEntry(7, (0,), "[image: …]", "b" * 64),),
                     {"saving_usd_per_turn": 0.1, "rewrite_usd": 0.2, "net_usd": 0.8, "expected_turns": 10})
    assert rec.to_dict() == {
        "type": "mask",
        "folds": [{"first_seq": 3, "last_seq": 5, "text": rec.folds[0].text, "artifacts": ["a" * 64],
                   "calls": {"c1": "a" * 64}}],
        "images": [{"seq": 7, "at": [0], "text": "[image: …]", "artifact": "b" * 64}],
        "saved_tokens": 120, "reason": "why",
        "saving_usd_per_turn": 0.1, "rewrite_usd": 0.2, "net_usd": 0.8, "expected_turns": 10,
    }
    assert "images" not in MaskRecord((), 0, "r").to_dict()  # optional fields stay out when empty


def test_older_and_unknown_records_still_load():
    old = compaction_record({"type": "mask", "saved_tokens": 0, "reason": "old record",
                             "folds": [{"first_seq": 1, "last_seq": 2, "text": "t", "artifacts": ["a" * 64]}]}, 4)
    assert isinstance(old, MaskRecord) and old.folds[0].calls is None and old.seq == 4
    assert "calls" not in old.to_dict()["folds"][0]  # written back as it was logged
    future = compaction_record({"type": "rewind", "to": 3}, 9)
    assert isinstance(future, UnknownRecord) and future.kind == "rewind" and future.to_dict() == {"type": "rewind", "to": 3}


def test_lesson_is_a_meta_event():
    rec = LessonRecord("prefers pytest -x", "compaction:offline", {"first_seq": 1, "last_seq": 9, "summary_seq": 10})
    assert rec.event == "meta" and rec.to_dict()["type"] == "lesson"


def test_breaker_runs_each_stage_once_and_names_the_stages():
    b = Breaker()
    assert "mask" not in b
    b.trip("mask")
    assert "mask" in b and "summary" not in b
    with pytest.raises(UsageError, match="unknown compaction stage"):
        b.trip("masking")
