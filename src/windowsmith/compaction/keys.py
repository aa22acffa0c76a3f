"""The identifier index of the emergency stage: the names the dropped history held that the kept request lost.

An emergency cut keeps the pinned request, the summary, a work log (one line per dropped unit) and the newest
messages. Whatever else the dropped span named (a product id, a path, a symbol, an error name, a date) is only
behind the transcript reference. The index puts the most useful of those names back, as one line within a
share of the budget (``CompactionConfig.index_ratio``)::

    [windowsmith: identifiers the dropped history named, most relevant first: HAT170, src/a/b.py, KeyError, …]

    ranked = rank_lost(dropped, kept=kept_text, goal=goal, previous=state.index)
    entries = fit_index(ranked, budget_tokens, counter.raw_text)   # what EmergencyRecord.index holds

Ranking (:func:`rank_lost`), highest first: an identifier of the goal; one on a line that reports a failure (in
what the agent read or said, not in the body of a file it writes: code that raises an error is not evidence of one);
then by how recently it was referenced (its newest mention in the dropped span), how often (the messages that
mention it), whether the agent itself used it (an assistant message's text or short argument values: not the
body of a file it writes), whether it passed it to a tool (a short argument value: the reservation it looked up
ranks above the flights it then restated in its reply) or it is listed beside one it passed (the rest of a JSON list
of names the agent walks, one lookup at a time) or has the shape of one it passed (:func:`shape`: the kinds of
thing the agent acts on, above the names of a log it only read), and its kind (error names and paths above numbers).
The names the agent passed say which list it walks and what its handles look like even when the kept request still
shows them (a work log line names the reservation it opened). A dev tau-bench run with a 12,000-character body
written every third call (``bench_stress.py bigargs``, 16K) lost its customer's remaining reservations behind the
body's hundred paths: the body's "error" and "failed" lines gave each the failure bonus, and the opened reservations,
shown by the work log, gave their siblings no bonus. Windowsmith alone, dev: strict recall bigargs tau-bench 8K / 16K /
32K 87.8% / 96.7% / 99.5% -> 90.5% / 98.7% / 99.7%, tau2-bench 93.0% / 97.6% / 99.2% -> 94.5% / 99.4% / 100%, inflated
OpenHands 16K 98.2% -> 100%, no cost moving by 0.03%; the shared traces: validation tau-bench 8K 99.41% -> 99.72%,
tau2-bench 8K 98.88% -> 99.12%, OpenHands 8K / 16K 96.38% / 98.55% -> 96.01% / 98.45%; dev tau2-bench 8K 99.52% ->
99.36%. Identifiers the kept request still shows (pinned request, kept messages, work log, summary, system)
are not listed. The previous index's entries follow the ones the new span names, in their order: they stand for
older history. No model, no randomness: the same log gives the same index.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..model import Message, Text, ToolCall, ToolResult
from ..records import INDEX_HEAD, render_index
from ..refs import ARTIFACT_RE
from ..text import (
    IDENT_SCAN_CHARS,
    NOT_JSON,
    fit_entries,
    identifier_kinds,
    identifiers,
    leaf_values,
    named_text,
    try_json,
)
from .references import BOILERPLATE_RE

#: How much of the dropped history the ranking reads, newest first (characters).
SCAN_CHARS = 400_000
#: What an identifier's kind adds to its rank (error names and codes matter more than bare numbers).
KIND_BONUS: dict[str, float] = {"error": 1.0, "code": 0.8, "path": 0.6, "dotted": 0.6, "camel": 0.4, "id": 0.5,
                                "email": 0.5, "uuid": 0.4, "date": 0.4, "snake": 0.4, "digit": 0.2, "number": 0.0}
#: What passing an identifier to a tool adds (an argument value: a handle the agent acts with, above a name it
#: only wrote in its text).
HANDLE_BONUS = 1.0
#: What being listed beside a passed name adds: the other strings of a JSON list in a result that holds a name the
#: agent passed to a tool (a customer's reservations, looked up one at a time: the next one has not been passed yet).
SIBLING_BONUS = 2.0
_ANY_ARTIFACT = re.compile(ARTIFACT_RE.pattern)
#: What having the shape of a name the agent passed to a tool adds (:func:`shape`: a payment id shaped like the user id
#: it looked up, a reservation like the one it opened): the kinds of thing the agent acts on in this session, above
#: the names of text it only read (a verbose tool's log). Dev tau-bench with 6,000 more characters of another agent's
#: output in every observation (``bench_stress.py`` ``inflate``): strict recall 89.4% -> 91.0% at 8K, 94.9% -> 95.5% at
#: 16K (the OpenHands condenser 95.9%); 3.0 took those to 91.9% / 96.6% but tau2-bench with a long system prompt at
#: 8K, where the index holds a dozen names of the customer's own, from 88.4% to 87.6% (1.5: 88.1%; windowsmith alone
#: over all 54 runs; on the 44 every strategy completes, the stress table's, 88.3% -> 88.1%).
SHAPE_BONUS = 1.5
_SEP_RE = re.compile(r"([/._:\-]+)")


def shape(k: str) -> str:
    """An identifier's shape: each part between separators as the classes of its characters (``A`` upper, ``a``
    lower, ``9`` digit) with the separators kept, and a single part's length: ``gift_card_6276644`` and
    ``sofia_kim_7287`` are ``a_a_9``, ``I57WUD`` and ``HAT128`` ``A9#6``, ``2024-05-18`` ``9-9-9``; a path is
    ``path``."""
    if "/" in k:
        return "path"
    parts = _SEP_RE.split(k)
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a run of separators: its first
            out.append(part[0])
            continue
        out.append(("A" if any(c.isupper() for c in part) else "") + ("a" if any(c.islower() for c in part) else "")
                   + ("9" if any(c.isdigit() for c in part) else ""))
    return "".join(out) + (f"#{len(k)}" if len(parts) == 1 else "")


@dataclass(frozen=True)
class Mention:
    """One dropped message as the ranking reads it: its role and its text."""

    role: str
    text: str
    written: str = ""  # an assistant message's long argument values (a file's body it writes): named, not acted on
    passed: str = ""  # its short argument values: the names it passed to a tool (an order id, a path it opens)
    blocks: tuple[str, ...] = ()  # a result's or an observation's texts, one per block (its JSON lists are read)


def message_text(m: Message) -> str:
    """What a message names: its text, its tool calls' argument values (not the schema's keys), its results."""
    return named_text(m, results=True)


#: an argument value at least this long is a body the agent writes (a file's text), not a name it acts on
BODY_CHARS = 1_000


def mention(m: Message) -> Mention:
    """A dropped message as the ranking reads it. An assistant message's long argument values (at least
    :data:`BODY_CHARS`: a file's text it writes) go to :attr:`Mention.written`: their names count as mentions, not as
    names the agent acted on, so a written file's hundreds of names do not outrank the ids, dates and paths the
    agent passed (a 12,000-character ``file_text`` on every third call, the stress bench's ``bigargs``: tau-bench
    8K 86.2% -> 87.2%, tau2-bench 8K 90.1% -> 91.6%, dev; no shared trace moves)."""
    if m.role != "assistant":
        return Mention(m.role, message_text(m), blocks=tuple(b.text for b in m.content if isinstance(b, Text | ToolResult)))
    if not m.tool_calls:
        return Mention(m.role, message_text(m))
    short: list[str] = []
    long: list[str] = []
    passed: list[str] = []
    for b in m.content:  # (in order: what message_text joins)
        if isinstance(b, Text):
            short.append(b.text)
        elif isinstance(b, ToolCall):
            for v in leaf_values(dict(b.arguments)):
                if len(v) >= BODY_CHARS:
                    long.append(v)
                else:
                    short.append(v)
                    passed.append(v)
    return Mention(m.role, "\n".join(short), "\n".join(long), "\n".join(passed))


def _clean(text: str) -> str:
    """The message's own text: windowsmith's notes (offload footers, redaction markers, image stubs) and
    artifact references are not identifiers the agent wrote or read."""
    if "[windowsmith:" in text or "[binary output:" in text or "[REDACTED:" in text or "[image: " in text:
        text = BOILERPLATE_RE.sub(" ", text)
    if "artifact://" in text:
        text = _ANY_ARTIFACT.sub(" ", text)
    return text


def present(text: str) -> set[str]:
    """The identifiers ``text`` shows, with the last part of each path (``a/b/models.py`` shows ``models.py``)."""
    out = set(identifiers(_clean(text)))
    out.update(k.rsplit("/", 1)[-1] for k in list(out) if "/" in k)
    return out


def rank_lost(dropped: Sequence[Mention], *, kept: Iterable[str] = (), goal: str = "",
              previous: Sequence[str] = ()) -> list[str]:
    """The identifiers of ``dropped`` (oldest message first) that ``kept`` (the texts the request still
    holds) does not show, best first, then the ``previous`` index's entries still missing."""
    shown: set[str] = set()
    for t in kept:
        shown |= present(t)
    goal_ids = present(goal) if goal else set()
    # newest first, within the scan budget: a long session's index costs O(SCAN_CHARS), not O(session)
    budget = SCAN_CHARS
    picked: list[tuple[int, Mention]] = []
    for i in range(len(dropped) - 1, -1, -1):
        if budget <= 0:
            break
        picked.append((i, dropped[i]))
        budget -= min(len(dropped[i].text), IDENT_SCAN_CHARS) + min(len(dropped[i].written), IDENT_SCAN_CHARS)
    n = max(1, len(dropped))
    last: dict[str, int] = {}
    count: dict[str, int] = {}
    acted: set[str] = set()
    handles: set[str] = set()
    failed: set[str] = set()
    kind: dict[str, str] = {}
    for i, m in picked:
        named: set[str] = set()  # (a name in both parts of a message is one mention)
        for text, own, body in ((_clean(m.text), m.role == "assistant", False),
                                (_clean(m.written) if m.written else "", False, True)):
            for k, (kd, on_fail) in identifier_kinds(text).items():
                if k in shown:
                    continue
                last.setdefault(k, i)  # newest mention: ``picked`` runs newest first
                if k not in named:
                    count[k] = count.get(k, 0) + 1
                    named.add(k)
                kind.setdefault(k, kd)
                if own:
                    acted.add(k)
                if on_fail and not body:
                    failed.add(k)
        if m.passed:
            # every name the agent passed, shown or not: one the request still shows (a work log line) still says
            # which list the agent is walking and what its handles look like
            handles.update(identifier_kinds(_clean(m.passed)))

    siblings = listed_beside([m for _, m in picked], handles) - handles if handles else set()
    shapes = {shape(h) for h in handles}

    def score(k: str) -> float:
        recency = (last[k] + 1) / n
        return (10.0 * (k in goal_ids) + 2.0 * (k in failed) + 3.0 * recency + 0.8 * math.log2(1 + count[k])
                + 1.0 * (k in acted) + HANDLE_BONUS * (k in handles) + SIBLING_BONUS * (k in siblings) + KIND_BONUS.get(kind[k], 0.0)
                + (SHAPE_BONUS if shapes and shape(k) in shapes else 0.0))

    ranked = sorted(last, key=lambda k: (-score(k), -last[k], k))
    seen = set(ranked)
    ranked += [k for k in previous if k not in seen and k not in shown]
    return ranked


def listed_beside(mentions: Iterable[Mention], names: set[str]) -> set[str]:
    """The strings of the JSON lists of strings in ``mentions``' blocks (results, observations) that hold one of
    ``names``: a list the agent is walking, one lookup at a time."""
    out: set[str] = set()

    def walk(v: object) -> None:
        if isinstance(v, list):
            if v and all(isinstance(x, str) for x in v):
                if not names.isdisjoint(v):
                    out.update(v)
                return
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    for m in mentions:
        for text in m.blocks:
            if "[" in text:
                value = try_json(text)
                if value is not NOT_JSON:
                    walk(value)
    return out


def fit_index(ranked: Sequence[str], budget_tokens: int, count_tokens: Callable[[str], int]) -> tuple[str, ...]:
    """The longest head of ``ranked`` whose rendered line (:func:`render_index`) fits ``budget_tokens``."""
    if budget_tokens < 16 or not ranked:
        return ()
    return tuple(fit_entries(ranked, budget_tokens, count_tokens, INDEX_HEAD,
                             lambda out: count_tokens(render_index(out)) <= budget_tokens))


__all__ = ["BODY_CHARS", "HANDLE_BONUS", "INDEX_HEAD", "KIND_BONUS", "SCAN_CHARS", "SHAPE_BONUS", "SIBLING_BONUS", "Mention",
           "fit_index", "listed_beside", "mention", "message_text", "present", "rank_lost", "render_index", "shape"]
