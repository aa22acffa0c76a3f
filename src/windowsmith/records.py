"""Typed log records written by compaction and folded by :mod:`windowsmith.state`: described once here.

Each record is frozen, has a ``kind`` (the ``type`` field of its ``compaction`` event, or ``lesson`` for
the ``meta`` event a summary leaves per lesson), an ``event`` (the log event kind it is written as),
``to_dict()`` (exactly the event data, so the hash chain is stable) and ``from_dict()`` (tolerant of
older logs: optional fields may be missing).

| kind | fields | effect on the view (see :mod:`windowsmith.state`) |
|---|---|---|
| ``mask`` | folds, images, saved_tokens, reason, economics | each fold's exchange becomes its line; images become stubs |
| ``summary`` | span, keep_from_seq, transcript, summary, summarizer, absorbs, reason | the span leaves; the summary replaces the previous one |
| ``emergency`` | span, keep_from_seq, work_log, transcript, artifacts, reason, index | the span leaves; the work log and the identifier index become the record's |
| ``truncate`` | keep_from_seq, transcript, dropped_units, dropped_tokens, reason | the assembler's drop, made durable |
| ``shrink`` | entries (seq, at, text, artifact, tokens), reason | each entry's text block becomes its compressed view |
| ``failed`` | stage, summarizer, span, reason | none: audit only (so is any unknown type) |

``seq`` is where the record sits in the log (``-1`` for a record not yet written); it is not part of
the event data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

EconomicsDict = dict[str, float | int]


@dataclass(frozen=True)
class Fold:
    """One unit folded into one line: an exchange (``role`` ``assistant``; ``calls``: tool-call id → artifact of
    its full result, None in records written before the mapping existed), or a text-protocol agent's observation,
    a user message answering an assistant message without tool calls (``role`` ``user``; ``artifacts`` holds it
    whole)."""

    first_seq: int
    last_seq: int
    text: str
    artifacts: tuple[str, ...] = ()
    calls: Mapping[str, str] | None = None
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"first_seq": self.first_seq, "last_seq": self.last_seq, "text": self.text,
                             "artifacts": list(self.artifacts)}
        if self.calls is not None:
            d["calls"] = dict(self.calls)
        if self.role != "assistant":  # (an exchange's fold is written as before: older readers take it)
            d["role"] = self.role
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Fold:
        calls = d.get("calls")
        return cls(int(d["first_seq"]), int(d["last_seq"]), str(d["text"]), tuple(str(a) for a in d.get("artifacts", ())),
                   {str(k): str(v) for k, v in calls.items()} if isinstance(calls, Mapping) else None,
                   "user" if d.get("role") == "user" else "assistant")


@dataclass(frozen=True)
class ImageStubEntry:
    """The image block at path ``at`` of the message logged at ``seq`` becomes the text block ``text``."""

    seq: int
    at: tuple[int, ...]
    text: str
    artifact: str

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": list(self.at), "text": self.text, "artifact": self.artifact}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ImageStubEntry:
        return cls(int(d["seq"]), tuple(int(x) for x in d["at"]), str(d["text"]), str(d.get("artifact", "")))


_ECONOMICS = ("saving_usd_per_turn", "rewrite_usd", "net_usd", "expected_turns")


@dataclass(frozen=True)
class MaskRecord:
    kind: ClassVar[str] = "mask"
    event: ClassVar[str] = "compaction"

    folds: tuple[Fold, ...]
    saved_tokens: int
    reason: str
    images: tuple[ImageStubEntry, ...] = ()
    economics: Mapping[str, float | int] = field(default_factory=dict)  # the cost model's figures, if it ran
    seq: int = field(default=-1, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.kind, "folds": [f.to_dict() for f in self.folds]}
        if self.images:
            d["images"] = [im.to_dict() for im in self.images]
        d["saved_tokens"] = self.saved_tokens
        d["reason"] = self.reason
        d.update(self.economics)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], seq: int = -1) -> MaskRecord:
        return cls(tuple(Fold.from_dict(f) for f in d.get("folds", ())), int(d.get("saved_tokens", 0)),
                   str(d.get("reason", "")), tuple(ImageStubEntry.from_dict(im) for im in d.get("images") or ()),
                   {k: d[k] for k in _ECONOMICS if k in d}, seq)


@dataclass(frozen=True)
class SummaryRecord:
    kind: ClassVar[str] = "summary"
    event: ClassVar[str] = "compaction"

    first_seq: int
    last_seq: int
    keep_from_seq: int
    transcript: str | None
    summary: Mapping[str, Any]  # Summary.to_dict(): text, refs, lessons, summarizer, token counts, sections
    summarizer: str
    absorbs: int | None
    reason: str
    seq: int = field(default=-1, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "first_seq": self.first_seq, "last_seq": self.last_seq,
                "keep_from_seq": self.keep_from_seq, "transcript": self.transcript, "summary": dict(self.summary),
                "summarizer": self.summarizer, "absorbs": self.absorbs, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], seq: int = -1) -> SummaryRecord:
        s = d.get("summary")
        return cls(int(d.get("first_seq", -1)), int(d.get("last_seq", -1)), int(d.get("keep_from_seq", 0)),
                   _opt_str(d.get("transcript")), dict(s) if isinstance(s, Mapping) else {},
                   str(d.get("summarizer", "")), _opt_int(d.get("absorbs")), str(d.get("reason", "")), seq)


@dataclass(frozen=True)
class EmergencyRecord:
    kind: ClassVar[str] = "emergency"
    event: ClassVar[str] = "compaction"

    first_seq: int
    last_seq: int
    keep_from_seq: int
    work_log: tuple[str, ...]  # the whole new work log, older lines first
    transcript: str | None
    artifacts: tuple[str, ...]
    reason: str
    seq: int = field(default=-1, compare=False)
    index: tuple[str, ...] = ()  # the whole new index of identifiers the dropped history lost, best first
    # True: the cut left the summary message (work log, index, transcript reference) as it was, so its cached prefix
    # holds; the span waits for the next cut that refreshes it (``SessionState.pending_seq``); work_log is empty,
    # index is the pending message's (what the deferred spans lost) and transcript is this span's
    deferred: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.kind, "first_seq": self.first_seq, "last_seq": self.last_seq,
                             "keep_from_seq": self.keep_from_seq, "work_log": list(self.work_log),
                             "transcript": self.transcript, "artifacts": list(self.artifacts), "reason": self.reason}
        if self.index:  # absent when empty: logs written before the index replay unchanged
            d["index"] = list(self.index)
        if self.deferred:  # absent when False: logs written before deferred cuts replay unchanged
            d["deferred"] = True
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], seq: int = -1) -> EmergencyRecord:
        return cls(int(d.get("first_seq", -1)), int(d.get("last_seq", -1)), int(d.get("keep_from_seq", 0)),
                   tuple(str(x) for x in d.get("work_log", ())), _opt_str(d.get("transcript")),
                   tuple(str(a) for a in d.get("artifacts", ())), str(d.get("reason", "")), seq,
                   tuple(str(x) for x in d.get("index", ()) or ()), d.get("deferred") is True)


#: The line that shows an emergency record's ``index`` in the summary message (``render_index``).
INDEX_HEAD = "[windowsmith: identifiers the dropped history named, most relevant first: "


def render_index(entries: Sequence[str]) -> str:
    """The line the summary message carries for an identifier index (``""`` for none)."""
    return INDEX_HEAD + ", ".join(entries) + "]" if entries else ""


@dataclass(frozen=True)
class TruncateRecord:
    kind: ClassVar[str] = "truncate"
    event: ClassVar[str] = "compaction"

    keep_from_seq: int
    transcript: str | None
    dropped_units: int
    dropped_tokens: int
    reason: str
    #: the identifiers the dropped units named and the kept request lost, best first, with the previous index's
    #: after them (the whole new index, as an emergency record's); empty: the index stays as it was
    index: tuple[str, ...] = ()
    seq: int = field(default=-1, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = {"type": self.kind, "keep_from_seq": self.keep_from_seq, "transcript": self.transcript,
             "dropped_units": self.dropped_units, "dropped_tokens": self.dropped_tokens, "reason": self.reason}
        if self.index:
            d["index"] = list(self.index)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], seq: int = -1) -> TruncateRecord:
        return cls(int(d.get("keep_from_seq", 0)), _opt_str(d.get("transcript")), int(d.get("dropped_units", 0)),
                   int(d.get("dropped_tokens", 0)), str(d.get("reason", "")),
                   tuple(str(x) for x in d.get("index", ())), seq)


@dataclass(frozen=True)
class ShrinkEntry:
    """The text block at path ``at`` (``[block]``, or ``[block, item]`` inside a tool result, or ``[block, key]``:
    the string argument ``key`` of a tool call) of the message logged at ``seq`` becomes ``text``: a compressed
    view of it naming ``artifact`` (the original, whole)."""

    seq: int
    at: tuple[int | str, ...]
    text: str
    artifact: str
    tokens_before: int = 0
    tokens_after: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": list(self.at), "text": self.text, "artifact": self.artifact,
                "tokens_before": self.tokens_before, "tokens_after": self.tokens_after}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ShrinkEntry:
        return cls(int(d["seq"]), tuple(x if isinstance(x, str) else int(x) for x in d["at"]), str(d["text"]),
                   str(d.get("artifact", "")), int(d.get("tokens_before", 0)), int(d.get("tokens_after", 0)))


@dataclass(frozen=True)
class ShrinkRecord:
    """Messages too large for the history's share, shrunk rather than dropped (the pinned request, a user
    message, the newest tool result): the history never goes blind."""

    kind: ClassVar[str] = "shrink"
    event: ClassVar[str] = "compaction"

    entries: tuple[ShrinkEntry, ...]
    reason: str
    seq: int = field(default=-1, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "entries": [e.to_dict() for e in self.entries], "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], seq: int = -1) -> ShrinkRecord:
        return cls(tuple(ShrinkEntry.from_dict(e) for e in d.get("entries") or ()), str(d.get("reason", "")), seq)


@dataclass(frozen=True)
class FailedRecord:
    kind: ClassVar[str] = "failed"
    event: ClassVar[str] = "compaction"

    stage: str
    summarizer: str
    first_seq: int
    last_seq: int
    reason: str
    seq: int = field(default=-1, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "stage": self.stage, "summarizer": self.summarizer, "first_seq": self.first_seq,
                "last_seq": self.last_seq, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], seq: int = -1) -> FailedRecord:
        return cls(str(d.get("stage", "")), str(d.get("summarizer", "")), int(d.get("first_seq", -1)),
                   int(d.get("last_seq", -1)), str(d.get("reason", "")), seq)


@dataclass(frozen=True)
class UnknownRecord:
    """A compaction record of a type this version does not know: kept for audit, no effect."""

    event: ClassVar[str] = "compaction"

    data: Mapping[str, Any]
    seq: int = field(default=-1, compare=False)

    @property
    def kind(self) -> str:
        return str(self.data.get("type", ""))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)


@dataclass(frozen=True)
class LessonRecord:
    """A memory candidate a summary extracted, with its provenance (a ``meta`` event)."""

    kind: ClassVar[str] = "lesson"
    event: ClassVar[str] = "meta"

    text: str
    source: str
    provenance: Mapping[str, Any]
    seq: int = field(default=-1, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "text": self.text, "source": self.source, "provenance": dict(self.provenance)}


CompactionRecord = (MaskRecord | SummaryRecord | EmergencyRecord | TruncateRecord | ShrinkRecord | FailedRecord
                    | UnknownRecord)
Record = CompactionRecord | LessonRecord

_BY_KIND: dict[str, Any] = {c.kind: c for c in (MaskRecord, SummaryRecord, EmergencyRecord, TruncateRecord,
                                                    ShrinkRecord, FailedRecord)}


def compaction_record(d: Mapping[str, Any], seq: int = -1) -> CompactionRecord:
    """The typed record of a ``compaction`` event's data (an :class:`UnknownRecord` for a type not known here)."""
    cls = _BY_KIND.get(str(d.get("type")))
    if cls is None:
        return UnknownRecord(dict(d), seq)
    rec: CompactionRecord = cls.from_dict(d, seq)
    return rec


def last_of(records: Sequence[CompactionRecord], kind: type[Any]) -> Any:
    """The newest record of a type, or None."""
    return next((r for r in reversed(records) if isinstance(r, kind)), None)


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


__all__ = [
    "INDEX_HEAD",
    "CompactionRecord",
    "EmergencyRecord",
    "FailedRecord",
    "Fold",
    "ImageStubEntry",
    "LessonRecord",
    "MaskRecord",
    "Record",
    "ShrinkEntry",
    "ShrinkRecord",
    "SummaryRecord",
    "TruncateRecord",
    "UnknownRecord",
    "compaction_record",
    "last_of",
    "render_index",
]
