"""Session state: a pure, incremental fold of the session's log.

``SessionState.apply(event)`` is the only way state changes, so the state after loading a log is the
same as the state that was built live, and every pack is a function of (log, config).

The history view groups messages into *units* that are kept or dropped together: a user message, an
assistant message without tool calls, or an *exchange* (an assistant message with tool calls plus the
tool messages answering them). A tool call is never separated from its result. If a new message
arrives while calls are unanswered, the exchange is closed with a synthetic error result and the
repair is recorded (the log itself is not edited). Units, and the edits records make to their messages' blocks,
are in :mod:`windowsmith.units`; the messages that stand for compacted history (the summary message, the pending
message, the user's last message carried past a cut) are written by :mod:`windowsmith.stand_ins`.

Compaction records (``compaction`` events, typed in :mod:`windowsmith.records`) fold into the view here, so resuming a session replays
them instead of recomputing them (no summarizer runs on load). They carry their own text:

* ``mask``: ``{"folds": [{"first_seq", "last_seq", "text", "artifacts", "calls"}], ...}`` — each listed
  exchange unit (a tool call with its results) becomes one assistant text message, ``text``. A folded
  unit is never folded again (markers never nest). ``calls`` maps each tool-call id to the artifact
  holding its full result (older records lack it; ``artifacts`` lists every artifact the line links).
  ``"images": [{"seq", "at", "text", "artifact"}]`` (optional) — the image block at path ``at`` (``[block]``,
  or ``[block, item]`` inside a tool result) of the message logged at ``seq`` becomes the text block
  ``text`` (a stub naming the image and its ``artifact://``). Units folded by this or an earlier record
  are skipped (their fold covers the image), and so is a path that no longer holds an image.
* ``summary``: ``{"keep_from_seq", "summary": Summary.to_dict(), ...}`` — units before ``keep_from_seq``
  (except the pinned request: the user messages before the first reply) leave the view; one user message
  holding the summary text (and the work log, if any) takes their place. A newer summary replaces the older one (rolling).
  ``"transcript"``: the sha of an artifact holding the summarized messages verbatim, whose first line
  links the previous compaction's transcript; the summary message ends with a reference to the newest.
* ``emergency``: ``{"keep_from_seq", "work_log": [lines], "index": [identifiers], ...}`` — like ``truncate``
  but the dropped exchanges leave one line each in the work log shown after the summary (the record holds
  the whole log, older lines first; a later summary absorbs and clears it), followed by the record's index
  of the identifiers the dropped history named and the view lost (``render_index``; cleared by a later
  summary too); ``"transcript"`` as for ``summary``.
* ``truncate``: ``{"keep_from_seq", "transcript", ...}`` — the assembler dropped the oldest units to fit;
  their transcript is linked like a summary's.
* ``shrink``: ``{"entries": [{"seq", "at", "text", "artifact", ...}], ...}`` — the text block at path ``at``
  (``[block]``, or ``[block, item]`` inside a tool result) of the message logged at ``seq`` becomes ``text``:
  a compressed view naming the artifact that holds it whole. Written when a message the history must keep
  (the pinned request, the newest user or tool message) is larger than the history's share: it is shrunk,
  never dropped. A folded unit, or a path that holds no text, is skipped.
* ``failed`` (and any other type): recorded for audit; the view does not change.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidMessageError, StoreError
from .model import Event, Message, Text, ToolResult, ToolSpec, Usage
from .records import (
    CompactionRecord,
    EmergencyRecord,
    ImageStubEntry,
    MaskRecord,
    ShrinkRecord,
    SummaryRecord,
    TruncateRecord,
    compaction_record,
)
from .refs import image_stub
from .request import Lineage
from .snapshot import Snapshot
from .stand_ins import ask_stand_in, dropped_ask, logged_whole, pending_stand_in, summary_stand_in
from .units import NO_CALLS, Unit, edit_units, message_images, new_unit, shrink_texts, stub_images

#: logged messages per chunk of persisted token counts (``unit_counts.py``); the state keeps the chain hash of
#: each chunk's last message (``SessionState.chunk_hashes``) to check them against
COUNTS_CHUNK = 512

MISSING_RESULT_TEXT = "[windowsmith: no result was recorded for this tool call]"
WORK_LOG_LINES = 60  # the work log keeps its newest lines
#: tools through which an agent ends its turn (OpenHands ``finish``, SWE-agent ``submit``, Cline
#: ``attempt_completion``, ...): a user message after one is the user speaking again, not the harness
FINISH_TOOLS = frozenset({"finish", "submit", "attempt_completion", "task_complete", "complete_task", "final_answer",
                          "finish_task", "end_task", "task_done"})


#: the most user messages before the agent's first reply that the pinned request holds (the rest are history)
PINNED_MESSAGES = 8


@dataclass
class TaskState:
    goal: str | None = None
    step: str | None = None
    acceptance: tuple[tuple[str, bool], ...] = ()
    required: bool = False

    @property
    def declared(self) -> bool:
        return bool(self.goal or self.acceptance)

    def to_dict(self) -> dict[str, Any]:
        return {
            "goal": self.goal,
            "step": self.step,
            "acceptance": [{"item": a, "done": d} for a, d in self.acceptance],
            "required": self.required,
        }


@dataclass
class Repair:
    seq: int
    what: str

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "what": self.what}


@dataclass
class SessionState:
    session_id: str
    system: dict[str, str] = field(default_factory=dict)  # layer name → text (system, instructions, ...)
    context: dict[str, str] = field(default_factory=dict)  # stable session context, by name
    tools: tuple[ToolSpec, ...] = ()
    task: TaskState = field(default_factory=TaskState)
    messages: list[Message] = field(default_factory=list)  # the full transcript, never trimmed
    units: list[Unit] = field(default_factory=list)
    view: list[Message] = field(default_factory=list)  # flat history as sent (with repairs), append-only
    unit_start: list[int] = field(default_factory=list)  # index in ``view`` of each unit's first message
    notes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # memory/evidence/knowledge items
    usages: list[tuple[int, Usage, str | None]] = field(default_factory=list)  # (seq, usage, pack id)
    keep_from_seq: int = 0  # history truncation boundary (from compaction records)
    cut_units: int = 0  # how many units the session had when the boundary last moved (``carried_ask``)
    compactions: list[dict[str, Any]] = field(default_factory=list)  # compaction events' data as logged, with seq
    records: list[CompactionRecord] = field(default_factory=list)  # the same, typed (records.py)
    repairs: list[Repair] = field(default_factory=list)
    call_names: dict[str, str] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    head: str | None = None
    seq: int = -1
    version: int = 0  # bumps on every change of the history view
    message_seqs: list[int] = field(default_factory=list)  # log seq of each entry of ``messages``
    chunk_hashes: list[str] = field(default_factory=list)  # chain hash of every COUNTS_CHUNK-th message's event
    # indices of the units that open with an assistant message or were folded (each starts a turn), of those that
    # are exchanges (open with tool calls) or folds, and of those a message holding an image was added to (whether
    # a stub replaced it since or not): kept as the log is folded, so the mask planner walks no unit to find them
    turn_units: list[int] = field(default_factory=list)
    exchange_units: list[int] = field(default_factory=list)
    # indices of the user units that answer an assistant message without tool calls: a text-protocol agent's
    # observations (mini-swe-agent, SWE-agent 0.x: the command is in the reply's text, its output comes back as the
    # next user message), which the mask planner may fold like an exchange (``CompactionConfig.fold_observations``)
    observation_units: list[int] = field(default_factory=list)
    # the units where the user may be speaking (``carried_ask``): the observation units, and the user messages that
    # follow an exchange whose call is a finishing tool (:data:`FINISH_TOOLS`: the agent yielded through it)
    speech_units: list[int] = field(default_factory=list)
    image_units: list[int] = field(default_factory=list)
    last_fold: int = -1  # the newest folded unit (a mask record's), -1 before any fold
    summary: dict[str, Any] | None = None  # the latest summary record's Summary.to_dict()
    work_log: list[str] = field(default_factory=list)  # one line per exchange dropped by emergency truncation
    index: list[str] = field(default_factory=list)  # identifiers the dropped history named and the view lost, best first
    # cuts that left the summary message as it was (deferred, ``EmergencyRecord.deferred``): the first seq of their
    # spans, how many, the identifiers those spans lost and their newest transcript (the pending message's content)
    pending_seq: int | None = None
    deferred_cuts: int = 0
    pending_index: list[str] = field(default_factory=list)
    pending_transcript: str | None = None
    lessons: list[dict[str, Any]] = field(default_factory=list)  # memory candidates with provenance
    transcript: str | None = None  # sha of the newest compacted-span transcript (each links the one before)
    rewrites: int = 0  # bumps when units already in the view are rewritten (mask, summary)
    tool_events: list[dict[str, Any]] = field(default_factory=list)  # tools_loaded / tool_scope meta events
    _summary_message: Message | None = None
    _summary_messages: tuple[Message, ...] | None = None
    _asks: dict[int, tuple[Message, Message]] = field(default_factory=dict, compare=False, repr=False)  # ask_message
    _view_epoch: object = field(default_factory=object, compare=False, repr=False)  # new when the view is rewritten
    _history: tuple[Any, ...] | None = field(default=None, compare=False, repr=False)  # see history_view

    # ------------------------------------------------------------------ folding events

    def apply(self, event: Event, message: Message | None = None) -> None:
        """Fold one event into the state. ``message``: a ``message`` event's message, already built from the
        event's data (a replay of the session's own log builds it without validating it again; resume.py)."""
        if event.parent != self.head:
            raise StoreError(
                f"session {self.session_id!r}: event seq {event.seq} has parent {event.parent!r}, "
                f"expected {self.head!r}; the log is corrupt (run `windowsmith verify`)"
            )
        d = event.data
        kind = event.kind
        if kind == "system":
            name = d.get("name", "system")
            if d.get("slot") == "session":
                self.context[name] = d["text"]
            else:
                self.system[name] = d["text"]
        elif kind == "tools":
            self.tools = tuple(ToolSpec(t["name"], t.get("description", ""), t["parameters"]) for t in d["tools"])
        elif kind == "task":
            self.task = TaskState(
                goal=d.get("goal"),
                step=d.get("step"),
                acceptance=tuple((a["item"], bool(a.get("done", False))) for a in d.get("acceptance", [])),
                required=bool(d.get("required", False)),
            )
        elif kind == "message":
            self.apply_message(message if message is not None else Message.from_dict(d["message"]), event.seq,
                               event.hash, event.parent)
            return
        elif kind == "usage":
            self.usages.append((event.seq, Usage.from_dict(d["usage"]), d.get("pack_id")))
        elif kind == "compaction":
            self.compactions.append({**d, "seq": event.seq})
            rec = compaction_record(d, event.seq)
            self.records.append(rec)
            self._apply_compaction(rec)
        elif kind == "meta" and d.get("type") == "note":
            self.notes.setdefault(d["layer"], []).append({**d, "seq": event.seq})
        elif kind == "meta" and d.get("type") in ("tools_loaded", "tool_scope"):
            self.tool_events.append({**d, "seq": event.seq})
        elif kind == "meta" and d.get("type") == "repair":
            self.repairs.append(Repair(event.seq, str(d.get("what", "repair"))))
        elif kind == "meta" and d.get("type") == "lesson":
            self.lessons.append({**d, "seq": event.seq})
        elif kind == "meta" and d.get("type") == "repair":  # a repair made while loading a history
            self.repairs.append(Repair(event.seq, str(d.get("what", ""))))
        self.head = event.hash
        self.seq = event.seq

    def apply_message(self, message: Message, seq: int, hash_: str, parent: str | None) -> None:
        """``apply`` of a ``message`` event whose message is built already (a replay; see resume.py). (One method,
        not several: it runs for every message of a resumed session.)"""
        if parent != self.head:
            raise StoreError(
                f"session {self.session_id!r}: event seq {seq} has parent {parent!r}, "
                f"expected {self.head!r}; the log is corrupt (run `windowsmith verify`)"
            )
        self.version += 1
        messages = self.messages
        messages.append(message)
        self.message_seqs.append(seq)
        role = message.role
        if role == "tool":
            self._apply_tool_message(message, seq)
        elif role == "user" and not self.turn_units and len(self.units) == 1 and self.units[0].pinned \
                and len(self.units[0].messages) < PINNED_MESSAGES:
            # before the agent's first reply every user message is the request: SWE-agent sends a demonstration,
            # then the issue; a harness its instructions, then the task. All of them are pinned, shrunk (largest
            # first) when over their share, never dropped
            u = self.units[0]
            if not message.image_free and not self.image_units:
                self.image_units.append(0)
            self.view.append(message)
            self.units[0] = new_unit((*u.messages, message), u.first_seq, seq, NO_CALLS, True)
        else:
            units = self.units
            if units and units[-1].open_calls:
                self._close_open_unit(seq)
            opened = NO_CALLS
            n = len(units)
            # (only an assistant message holds calls; ``plain`` first: a message replayed lazily is not built)
            if role == "assistant":
                self.turn_units.append(n)
                if not message.plain:
                    calls = message.call_pairs  # (read without building a tool message replayed lazily)
                    if calls:
                        self.call_names.update(calls)
                        opened = frozenset([c[0] for c in calls])
                        self.exchange_units.append(n)
            elif role == "user" and n and self.turn_units and self.turn_units[-1] == n - 1 \
                    and not (self.exchange_units and self.exchange_units[-1] == n - 1):
                self.observation_units.append(n)  # (the unit before is an assistant message without calls)
                self.speech_units.append(n)
            elif role == "user" and n and self.exchange_units and self.exchange_units[-1] == n - 1 \
                    and any(name.lower() in FINISH_TOOLS for _, name in units[n - 1].messages[0].call_pairs):
                self.speech_units.append(n)  # the agent yielded through a finishing tool: the user speaks next
            if not message.image_free:
                self.image_units.append(n)
            view = self.view
            self.unit_start.append(len(view))
            view.append(message)
            units.append(new_unit((message,), seq, seq, opened, not units and role == "user"))
        if len(messages) % COUNTS_CHUNK == 0:
            self.chunk_hashes.append(hash_)
        self.head = hash_
        self.seq = seq

    def _apply_compaction(self, rec: CompactionRecord) -> None:
        if isinstance(rec, MaskRecord):
            self._apply_mask(rec)
        elif isinstance(rec, ShrinkRecord):
            changed = edit_units(self.units, self.message_seqs, rec.entries, shrink_texts)
            if changed:
                self._rewrite_view(min(changed))
        elif isinstance(rec, SummaryRecord | EmergencyRecord | TruncateRecord):
            self._apply_cut(rec)
        # else failed, or a type this version does not know: audit only

    def _apply_mask(self, rec: MaskRecord) -> None:
        """Fold each listed exchange (or observation) unit into its one-line fold, and stub the listed images."""
        first_changed: int | None = None
        for f in rec.folds:
            i = self.unit_index(f.first_seq)
            if i is None:
                continue
            u = self.units[i]
            if u.folded or u.pinned or u.is_open or u.first_seq != f.first_seq:
                continue  # a fold of a fold is not possible; nor of the pinned request or an open call
            if f.role == "user":  # an observation's fold: the unit stays a user message, in no turn list
                k = bisect.bisect_left(self.observation_units, i)
                if k == len(self.observation_units) or self.observation_units[k] != i:
                    continue  # not an observation (a record of another log, or edited by hand)
                self.units[i] = Unit((Message("user", (Text(f.text),)),), u.first_seq, u.last_seq, frozenset(),
                                     False, True)
            else:
                fold = Message("assistant", (Text(f.text),))
                self.units[i] = Unit((fold,), u.first_seq, u.last_seq, frozenset(), False, True)
                for at in (self.turn_units, self.exchange_units):  # a fold is both
                    k = bisect.bisect_left(at, i)
                    if k == len(at) or at[k] != i:
                        at.insert(k, i)
            first_changed = i if first_changed is None else min(first_changed, i)
            self.last_fold = max(self.last_fold, i)
        for i in edit_units(self.units, self.message_seqs, rec.images, stub_images):
            first_changed = i if first_changed is None else min(first_changed, i)
        if first_changed is not None:
            self._rewrite_view(first_changed)

    def _rewrite_view(self, from_unit: int) -> None:
        """Units from ``from_unit`` on were rewritten in place: the view is rebuilt from there."""
        self._rebuild_view(from_unit)
        self.rewrites += 1
        self.version += 1

    def _apply_cut(self, rec: SummaryRecord | EmergencyRecord | TruncateRecord) -> None:
        """Move the boundary of the view to the record's ``keep_from_seq``, and update what stands for the history
        it took out (the summary, the work log, the index, the transcript, the pending message)."""
        if isinstance(rec, SummaryRecord) and rec.summary:
            self.summary = dict(rec.summary)
            self.work_log = []  # the summary absorbed it
            self.index = []
        if isinstance(rec, EmergencyRecord) and rec.deferred:
            # the summary message stays byte for byte; the pending message after it names what the span lost
            if self.pending_seq is None:
                self.pending_seq = rec.first_seq
            self.deferred_cuts += 1
            self.pending_index = list(rec.index)
            self.pending_transcript = rec.transcript or self.pending_transcript
            self._summary_messages = None
            self._move_boundary(rec.keep_from_seq)
            self.rewrites += 1
            self.version += 1
            return
        if isinstance(rec, TruncateRecord):  # the deferred spans still wait for a refresh of the work log
            if rec.transcript:
                self.pending_transcript = None  # the new transcript links it
            if rec.index:  # what the dropped units named and the kept request lost (the whole new index)
                self.index = list(rec.index)
                self._summary_message = None
        else:  # a summary or a refreshing cut took them
            if self.pending_transcript and not rec.transcript:  # the newest link of the chain stays referenced
                self.transcript = self.pending_transcript
                self._summary_message = None
            self.pending_seq, self.deferred_cuts, self.pending_index, self.pending_transcript = None, 0, [], None
        self._summary_messages = None
        if isinstance(rec, EmergencyRecord):
            self.work_log = list(rec.work_log)[-WORK_LOG_LINES:]  # the whole new log
            self.index = list(rec.index)
        if rec.transcript:
            self.transcript = rec.transcript
            self._summary_message = None
        if isinstance(rec, SummaryRecord | EmergencyRecord):
            self._summary_message = None
            self.rewrites += 1
            self.version += 1
        self._move_boundary(rec.keep_from_seq)
        self.version += 1

    def _move_boundary(self, keep_from_seq: int) -> None:
        if keep_from_seq > self.keep_from_seq:
            self.keep_from_seq = keep_from_seq
            self.cut_units = len(self.units)

    def _rebuild_view(self, from_unit: int) -> None:
        self._view_epoch = object()  # the view is no longer an extension of what was issued before
        start = self.unit_start[from_unit]
        # a new list, not an edit in place: snapshots of the old view (earlier requests' histories) stay as they were
        self.view = self.view[:start]
        del self.unit_start[from_unit:]
        for u in self.units[from_unit:]:
            self.unit_start.append(len(self.view))
            self.view.extend(u.messages)

    def _apply_tool_message(self, msg: Message, seq: int) -> None:
        last = self.units[-1] if self.units else None
        ids = msg.result_ids  # (read without building a message replayed lazily)
        if last is None or not last.open_calls.issuperset(ids):
            # validated at the API edge; a log written by an older version may still hold one
            raise InvalidMessageError(f"tool result(s) {ids} at seq {seq} answer no open tool call")
        self.answered.update(ids)
        self.view.append(msg)
        if not msg.image_free and (not self.image_units or self.image_units[-1] != len(self.units) - 1):
            self.image_units.append(len(self.units) - 1)
        self.units[-1] = new_unit((*last.messages, msg), last.first_seq, seq, last.open_calls.difference(ids), last.pinned)

    def _close_open_unit(self, seq: int) -> None:
        last = self.units[-1]
        synth = tuple(
            ToolResult(call_id=cid, content=(Text(MISSING_RESULT_TEXT),), is_error=True, name=self.call_names.get(cid))
            for cid in sorted(last.open_calls)
        )
        self.repairs.append(
            Repair(seq, f"tool call(s) {sorted(last.open_calls)} had no result when the next message arrived; "
                        "a synthetic error result was inserted in the view")
        )
        self.view.append(Message("tool", synth))
        self.units[-1] = Unit((*last.messages, Message("tool", synth)), last.first_seq, last.last_seq, frozenset(), last.pinned)

    # ------------------------------------------------------------------ queries

    @property
    def open_calls(self) -> frozenset[str]:
        return self.units[-1].open_calls if self.units else frozenset()

    def unit_index(self, first_seq: int) -> int | None:
        """Index of the unit that starts at log seq ``first_seq``, or None."""
        i = bisect.bisect_left(self.units, first_seq, key=lambda u: u.first_seq)
        return i if i < len(self.units) and self.units[i].first_seq == first_seq else None

    @property
    def summary_message(self) -> Message | None:
        """The user message that stands for everything compacted away: the summary, then the work log."""
        if self._summary_message is None and (self.summary or self.work_log or self.index or self.transcript):
            self._summary_message = summary_stand_in(self.summary, self.work_log, self.index, self.transcript)
        return self._summary_message

    @property
    def summary_messages(self) -> tuple[Message, ...]:
        """What stands for the compacted history in the view: the summary message, then the pending message (the
        identifiers and transcript of the spans cuts took out since the summary message was last rewritten), each
        when there is one."""
        if self._summary_messages is None:
            out = []
            if self.summary_message is not None:
                out.append(self.summary_message)
            ask = self.carried_ask(self.first_visible_unit(), self.cut_units)
            if ask is not None:
                out.append(self.ask_message(ask))
            if self.pending_index or self.pending_transcript:
                out.append(pending_stand_in(self.pending_index, self.pending_transcript))
            self._summary_messages = tuple(out)
        return self._summary_messages

    def carried_ask(self, first_unit: int, upto: int, work_log: Sequence[str] | None = None) -> int | None:
        """The unit whose user message a history starting at ``first_unit`` carries after its summary message
        (``ask_message``): the user's newest message a cut before ``first_unit`` drops (``stand_ins.dropped_ask``;
        ``upto``: the units the session had when the cut was made), unless the work log (the session's, or
        ``work_log``: the one a cut is writing) holds it whole (``stand_ins.logged_whole``)."""
        ask = dropped_ask(self.units, self.speech_units, bool(self.tools) or bool(self.exchange_units), first_unit, upto)
        lines = self.work_log if work_log is None else work_log
        if ask is not None and logged_whole(self.units[ask].messages[0], lines):
            return None
        return ask

    def carried_tokens(self, first_unit: int, upto: int, raw_message: Callable[[Message], int]) -> int:
        """Raw tokens (``raw_message``: a counter's) of the message :meth:`carried_ask` carries, 0 if none."""
        ask = self.carried_ask(first_unit, upto)
        return 0 if ask is None else raw_message(self.ask_message(ask))

    def ask_message(self, unit: int) -> Message:
        """The user message that carries the user's message of ``unit`` (``dropped_ask``): its text, or a view of
        it (``stand_ins.ask_stand_in``)."""
        m = self.units[unit].messages[0]
        cached = self._asks.get(unit)
        if cached is not None and cached[0] is m:
            return cached[1]
        out = ask_stand_in(m)
        self._asks[unit] = (m, out)
        return out

    def image_stubs(self, unit: Unit) -> Iterator[tuple[int, ImageStubEntry, bytes]]:
        """Each image of ``unit``'s logged messages as the stub that would replace it: the message's position in
        the unit, the entry (seq, path, stub text, artifact) and what the artifact holds (``refs.image_stub``)."""
        seqs = [q for q, _ in self.span_messages(unit.first_seq, unit.last_seq)]
        for k, m in enumerate(unit.messages[: len(seqs)]):  # a repair message after them holds no image
            for path, img in message_images(m):
                st = image_stub(img)
                yield k, ImageStubEntry(seqs[k], tuple(path), st.text, st.sha), st.raw

    def span_messages(self, first_seq: int, last_seq: int) -> list[tuple[int, Message]]:
        """The original (never compacted) messages logged at seqs ``first_seq..last_seq``."""
        lo = bisect.bisect_left(self.message_seqs, first_seq)
        hi = bisect.bisect_right(self.message_seqs, last_seq)
        return list(zip(self.message_seqs[lo:hi], self.messages[lo:hi], strict=True))

    def first_visible_unit(self) -> int:
        """Index of the first unit at or after the truncation boundary (units are sorted by seq)."""
        if self.keep_from_seq <= 0:
            return 0
        return bisect.bisect_left(self.units, self.keep_from_seq, key=lambda u: u.first_seq)

    def fold_end(self) -> int | None:
        """The unit after the newest folded one, when that fold is visible and not the newest unit: the next mask
        batch folds only later units (a fold is never folded again), so the history through it stays as it is (the
        history layer's ``fold`` breakpoint; the mask cost model's rewrite starts there); None before any."""
        f = self.last_fold
        return f + 1 if self.first_visible_unit() <= f < len(self.units) - 1 else None

    def first_compactable_unit(self) -> int:
        """The oldest unit a summary or truncation may take out of the view: the first visible one, past
        the pinned original request."""
        lo = self.first_visible_unit()
        return 1 if lo == 0 and self.pinned else lo

    @property
    def pinned(self) -> bool:
        """Whether the first unit is the user's original request, kept even when older history goes."""
        return bool(self.units) and self.units[0].pinned

    def view_slice(self, first_unit: int) -> tuple[Message, ...]:
        """The history as sent: the pinned first unit (if before ``first_unit``) plus units from there on."""
        if first_unit >= len(self.units):
            return ()
        if first_unit == 0:
            return tuple(self.view)  # one copy: a long session's history is built once per build
        out: list[Message] = []
        if self.pinned:
            out += self.view[:self.unit_start[1] if len(self.units) > 1 else len(self.view)]
        out += self.summary_messages
        out += self.view[self.unit_start[first_unit]:]
        return tuple(out)

    def history_view(self, first_unit: int) -> tuple[Sequence[Message], Lineage]:
        """``view_slice(first_unit)`` as a :class:`~windowsmith.snapshot.Snapshot` of the view (no copy of the
        session's messages), and its :class:`~windowsmith.request.Lineage`: the same lineage object as long as the
        view only grew at its end (same view epoch, first unit and summary), so later stages prove that this
        history extends the previous one without comparing them. A call with nothing new returns the same one."""
        summary = self.summary_messages if first_unit > 0 else None
        c = self._history
        if c is None or c[0] is not self._view_epoch or c[1] != first_unit or c[2] is not summary:
            c = (self._view_epoch, first_unit, summary, Lineage(), -1)
        lin: Lineage = c[3]
        if c[4] != len(self.view):  # (a new lineage has -1)
            if first_unit >= len(self.units):
                lin.messages = ()
            else:
                head: tuple[Message, ...] = ()
                if first_unit > 0 and self.pinned:
                    head = tuple(self.view[:self.unit_start[1] if len(self.units) > 1 else len(self.view)])
                if summary is not None:
                    head = (*head, *summary)
                lin.messages = Snapshot(head, self.view, self.unit_start[first_unit], len(self.view))
            c = (*c[:4], len(self.view))
        self._history = c
        return lin.messages, lin

    def notes_for(self, layer: str) -> list[Mapping[str, Any]]:
        return list(self.notes.get(layer, ()))


__all__ = ["COUNTS_CHUNK", "MISSING_RESULT_TEXT", "PINNED_MESSAGES", "Repair", "SessionState", "TaskState"]
