"""The messages that stand in the history view for what compaction took out of it, after the pinned request:

* the summary message (:func:`summary_stand_in`): the latest summary, the work log of the exchanges emergency cuts
  dropped since (one line each, :func:`flat_text`), the index of the identifiers the dropped history named, and a
  reference to the transcript of the compacted history;
* the pending message (:func:`pending_stand_in`): the identifiers and transcript of the spans cuts took out since
  the summary message was last rewritten (a deferred cut leaves the summary message byte for byte);
* the user's last message before the cut (:func:`ask_stand_in`), whole or as a view: which one a cut carries is
  :func:`dropped_ask`'s answer (unless the work log holds it whole, :func:`logged_whole`).

The session state (``state.py``) holds what they are written from and decides which of them the view holds.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

from .model import Message, Text
from .records import render_index
from .text import acts
from .text_view import message_view
from .units import Unit

#: about the most characters of the user's latest message that a cut carries (``SessionState.ask_message``); a longer
#: one (a pasted log after the ask, a task written after a demonstration) goes by a view, the transcript holding it whole
ASK_CHARS = 1_200
ASK_HEAD = "[windowsmith: the user's last message before the cut]\n"
#: characters of a message's text, its whitespace folded (:func:`flat_text`), that a work-log line shows whole; a longer
#: one is cut to that many and the identifiers it cut are listed after it (``compaction.emergency``)
LOG_LINE_CHARS = 120
#: user units looked back over for the user's latest message where every user message may be an observation
ASK_LOOKBACK = 256
#: the pending message's line of identifiers (``SessionState.summary_messages``)
PENDING_HEAD = "[windowsmith: identifiers of the exchanges dropped since the work log above, most relevant first: "


def flat_text(m: Message) -> str:
    """A message's text with its whitespace folded to single spaces: what a work-log line shows of it."""
    return " ".join(m.text.split())


def _quarter(text: str) -> int:
    """A character count as tokens (four to one): what sizes a carried message's view the same everywhere."""
    return len(text) // 4


def summary_stand_in(summary: Mapping[str, Any] | None, work_log: Sequence[str], index: Sequence[str],
                     transcript: str | None) -> Message:
    """The user message that stands for everything compacted away: the summary (its ``text``), then the work log,
    the index of identifiers and the reference to the newest transcript, each when there is one."""
    parts = []
    if summary and summary.get("text"):
        parts.append(str(summary["text"]))
    if work_log:
        parts.append("[windowsmith: work log of earlier exchanges dropped to fit the window; "
                     "artifact:// references can be read back]\n" + "\n".join(work_log))
    if index:
        parts.append(render_index(index))
    if transcript:
        parts.append(f"[the full transcript of the compacted history: artifact://{transcript} "
                     "— read it with read_result or search_result]")
    return Message("user", (Text("\n\n".join(parts)),))


def pending_stand_in(pending_index: Sequence[str], pending_transcript: str | None) -> Message:
    """The user message naming what the cuts deferred since the summary message took out: the identifiers those
    spans lost and their newest transcript, each when there is one."""
    parts = []
    if pending_index:
        parts.append(PENDING_HEAD + ", ".join(pending_index) + "]")
    if pending_transcript:
        parts.append(f"[their transcript: artifact://{pending_transcript} — read it with read_result or "
                     "search_result]")
    return Message("user", (Text("\n".join(parts)),))


def dropped_ask(units: Sequence[Unit], speech_units: Sequence[int], tools: bool, first_unit: int,
                upto: int) -> int | None:
    """The unit of the user's newest message before ``first_unit`` (past the pinned request), or None: what the
    user last asked or answered once a cut drops it. Only the newest dropped one, so the message that carries it
    (``ask_message``, after the summary message) changes at a cut, never on an append. The user speaks when the
    agent has yielded: a user message that answers an assistant message without tool calls
    (``observation_units``), or one that follows a finishing tool's exchange (``state.FINISH_TOOLS``); any other
    after a tool result is the harness's (an error for a malformed call). ``speech_units`` are those units
    (``SessionState.speech_units``, in order). In a session without tools (``tools``: whether the session has tools
    or exchanges), a user message that answers a reply acting in its text (``text.acts``) is that
    action's output (mini-swe-agent, SWE-agent 0.x) and is passed over; as is a fold, or a message without text.
    None as well when the user spoke again in the units the cut kept, those before ``upto`` (the units the session
    had when the cut was made): the kept history then holds what the user last said (a customer's every answer
    carried beside it cost tau2-bench 0.5% at 8K for no recall)."""
    k = bisect.bisect_left(speech_units, first_unit)
    for j in range(k, min(bisect.bisect_left(speech_units, upto), k + ASK_LOOKBACK)):
        if _user_speaks(units, speech_units[j], tools):
            return None
    for j in range(k - 1, max(-1, k - 1 - ASK_LOOKBACK), -1):
        if _user_speaks(units, speech_units[j], tools):
            return speech_units[j]
    return None


def _user_speaks(units: Sequence[Unit], i: int, tools: bool) -> bool:
    """Whether unit ``i``, one of the speech units, is the user speaking (:func:`dropped_ask`)."""
    u = units[i]
    if u.folded or u.pinned:
        return False
    m = u.messages[0]
    if m.role != "user" or not m.text.strip():
        return False
    before = units[i - 1].messages[0] if i > 0 and units[i - 1].messages else None
    return tools or before is None or before.role != "assistant" or bool(before.call_pairs) or not acts(before)


def logged_whole(m: Message, work_log: Sequence[str]) -> bool:
    """Whether ``work_log`` holds the user message ``m`` whole: a message of up to :data:`LOG_LINE_CHARS`, which
    the emergency stage writes whole (then no message need carry it past the cut)."""
    if not work_log:
        return False
    flat = flat_text(m)
    end = f"] user: {flat}"
    return len(flat) <= LOG_LINE_CHARS and any(line.endswith(end) for line in work_log)


def ask_stand_in(m: Message) -> Message:
    """The user message that carries the user's message ``m`` past a cut: its text, or, over :data:`ASK_CHARS`
    characters, a view of about that many (``message_view``: its head, its tail and the lines between that name
    identifiers, sized by characters so the view is the same in every process) and how many characters the
    transcript holds."""
    text = m.text.strip()
    if len(text) > ASK_CHARS:
        text = (f"{message_view(text, ASK_CHARS // 4, _quarter)}\n[windowsmith: a view of a message of "
                f"{len(text):,} characters; the transcript of the compacted history holds the whole]")
    return Message("user", (Text(ASK_HEAD + text),))


__all__ = ["ASK_CHARS", "ASK_HEAD", "ASK_LOOKBACK", "LOG_LINE_CHARS", "PENDING_HEAD", "ask_stand_in", "dropped_ask",
           "flat_text", "logged_whole", "pending_stand_in", "summary_stand_in"]
