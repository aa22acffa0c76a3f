"""Shrink, never drop: the history's messages that must stay (the pinned request, the newest user or tool
message) but are larger than their share of the history's budget.

Such a message is replaced by a compressed view of itself (ingest's compressors: errors of a command
output, the outline of a file; a message's head, tail and the lines between that name identifiers,
``ingest.compressors.message_view``) followed by a footer naming the artifact that holds
it whole (``[windowsmith: the full message (N lines, T tokens) is stored as artifact://<sha>; …]``).
:func:`plan_shrinks` only plans (the history layer stays a pure function of the state); the builder stores
the originals and appends a ``shrink`` record (``records.ShrinkRecord``), so every later request carries
the same bytes (the cache prefix holds) and the log rebuilds the pack.

The cut is a *water level*: the largest blocks are cut down to a common size first, so one huge message
pays for the overflow before several medium ones do, and no block goes below :data:`MIN_VIEW` tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..ingest.compress import compress
from ..ingest.pipeline import INDEX_SHARE
from ..model import Message, Text, ToolCall, ToolResult
from ..records import ImageStubEntry, ShrinkEntry
from ..refs import shrink_footer
from ..text import identifier_index
from ..text_view import message_view
from ..units import shrink_texts, stub_images

if TYPE_CHECKING:
    from ..state import SessionState
    from ..tokens import TokenCounter

MIN_VIEW = 160  # raw tokens a shrunk block keeps at least, footer included
MIN_SHRINKABLE = 256  # raw tokens under which a block is not worth shrinking
FOOTER_TOKENS = 60  # a generous bound on the footer's tokens


@dataclass(frozen=True)
class Shrink:
    """One planned shrink: the record's entry and the original text its artifact must hold."""

    entry: ShrinkEntry
    original: str
    unit: int  # index of the unit holding the message
    index: int  # position of the message in the unit


@dataclass(frozen=True)
class _Block:
    unit: int
    index: int
    seq: int
    at: tuple[int | str, ...]
    original: str  # the text as logged (an offloaded result's logged view; its footer names the first artifact)
    size: int  # raw tokens of the block as it is now in the view
    tool: str | None  # the tool's name, for a tool result
    pinned: bool


def _blocks(state: SessionState, units: Sequence[int], counter: TokenCounter) -> list[_Block]:
    out: list[_Block] = []
    for ui in units:
        u = state.units[ui]
        if u.folded:
            continue
        logged = state.span_messages(u.first_seq, u.last_seq)
        for k, (seq, orig) in enumerate(logged):
            if k >= len(u.messages):
                break
            cur = u.messages[k]
            for bi, b in enumerate(cur.content):
                ob = orig.content[bi] if bi < len(orig.content) else None
                if isinstance(b, Text) and isinstance(ob, Text):
                    out.append(_Block(ui, k, seq, (bi,), ob.text, counter.raw_text(b.text), None, u.pinned))
                elif isinstance(b, ToolResult) and isinstance(ob, ToolResult):
                    for j, item in enumerate(b.content):
                        oi = ob.content[j] if j < len(ob.content) else None
                        if isinstance(item, Text) and isinstance(oi, Text):
                            out.append(_Block(ui, k, seq, (bi, j), oi.text, counter.raw_text(item.text),
                                              b.name or state.call_names.get(b.call_id), u.pinned))
                elif isinstance(b, ToolCall) and isinstance(ob, ToolCall) and isinstance(b.arguments, dict) \
                        and isinstance(ob.arguments, dict):
                    # a tool call's long string argument (a file an agent writes through its editor): head + tail
                    for key, v in b.arguments.items():
                        ov = ob.arguments.get(key)
                        if isinstance(v, str) and isinstance(ov, str):
                            out.append(_Block(ui, k, seq, (bi, key), ov, counter.raw_text(v), None, u.pinned))
    return [b for b in out if b.size >= MIN_SHRINKABLE]


def water_level(sizes: Sequence[int], cut: int, floor: int) -> int:
    """The level L (>= ``floor``) such that cutting every size above L down to L removes at least ``cut``
    tokens, or ``floor`` if even that is not enough."""
    s = sorted(sizes, reverse=True)
    total = 0
    for i, v in enumerate(s):
        total += v
        nxt = s[i + 1] if i + 1 < len(s) else 0
        # cutting the i+1 largest down to level L removes total - (i+1)*L; find L in [nxt, v]
        level = (total - cut) / (i + 1)
        if level >= max(nxt, floor):
            return int(level)
    return floor


def plan_shrinks(state: SessionState, units: Sequence[int], cut: int, counter: TokenCounter, *,
                 spare_last: bool = False) -> list[Shrink]:
    """Views for the largest text blocks of ``units`` (indices into ``state.units``) that together remove
    at least ``cut`` raw tokens where possible (water level, floor :data:`MIN_VIEW`). ``spare_last``: the last
    message of the last unit is shrunk only if the others cannot remove ``cut`` (the pinned request's last
    message is the task itself, after instructions or a demonstration)."""
    if cut <= 0:
        return []
    blocks = _blocks(state, units, counter)
    if spare_last and blocks:
        last = (units[-1], len(state.units[units[-1]].messages) - 1)
        others = [b for b in blocks if (b.unit, b.index) != last]
        room = sum(max(0, b.size - MIN_VIEW) for b in others)
        if others and room >= cut:
            blocks = others
        elif others:  # the others down to their floor first, the task only by what is still missing
            out = _plan(others, room, counter)
            saved = sum(x.entry.tokens_before - x.entry.tokens_after for x in out)
            return out + _plan([b for b in blocks if (b.unit, b.index) == last], cut - saved, counter)
    return _plan(blocks, cut, counter)


def _plan(blocks: Sequence[_Block], cut: int, counter: TokenCounter) -> list[Shrink]:
    if not blocks or cut <= 0:
        return []
    level = water_level([b.size for b in blocks], cut, MIN_VIEW)
    out: list[Shrink] = []
    for b in blocks:
        if b.size <= level:
            continue
        budget = max(32, level - FOOTER_TOKENS)
        # a message (the pinned request, an observation sent as a user message) keeps its head, its tail and the
        # lines between that name what they do not (it still reads as itself); a tool result is compressed by its
        # kind (errors, outline, JSON shape)
        inner = max(32, budget - budget // INDEX_SHARE)
        if b.tool is None:
            kept = message_view(b.original, inner, counter.raw_text)
            kept_tokens = counter.raw_text(kept)
        else:
            c = compress(b.original, kind=None, budget_tokens=inner, count_tokens=counter.raw_text, tool_name=b.tool)
            kept, kept_tokens = c.text, c.tokens
        index = identifier_index(b.original, kept, budget - kept_tokens - 1, counter.raw_text)
        view = f"{kept}\n{index}" if index else kept
        data = b.original.encode("utf-8")
        sha = hashlib.sha256(data).hexdigest()
        text = f"{view}\n{shrink_footer(b.original.count(chr(10)) + 1, counter.raw_text(b.original), sha)}"
        after = counter.raw_text(text)
        if after >= b.size:
            continue
        out.append(Shrink(ShrinkEntry(b.seq, b.at, text, sha, b.size, after), b.original, b.unit, b.index))
    return out


@dataclass(frozen=True)
class PlannedStub:
    """One image of a message the history must keep, planned to become its stub (a mask record's image entry)."""

    entry: ImageStubEntry
    raw: bytes  # what its artifact holds (``refs.image_stub``)
    unit: int
    index: int  # position of the message in the unit
    saving: int  # raw tokens


def plan_image_stubs(state: SessionState, units: Sequence[int], cut: int, counter: TokenCounter, *,
                     exclude: Sequence[PlannedStub] = ()) -> list[PlannedStub]:
    """Stubs for the images of ``units`` (the messages the history must keep: the newest unit, the pinned request)
    that together remove at least ``cut`` raw tokens where possible: the oldest image first and the newest image of
    the last unit last, so the screenshot the next step looks at stays while any other can go. A text view cannot
    make an image smaller, and a request whose kept messages hold more images than the history's share would
    otherwise be refused. ``exclude``: stubs already planned (neither planned again nor counted)."""
    if cut <= 0:
        return []
    skip = {(x.entry.seq, x.entry.at) for x in exclude}
    found: list[PlannedStub] = []
    for i in units:
        for k, entry, raw in state.image_stubs(state.units[i]):
            saving = counter.overheads.image - counter.raw_text(entry.text)
            if saving > 0 and (entry.seq, entry.at) not in skip:
                found.append(PlannedStub(entry, raw, i, k, saving))
    # the pinned request's images after the other units' (it is every request's task); the newest image last
    order = [x for x in found if x.unit != 0 or len(units) == 1] + [x for x in found if x.unit == 0 and len(units) > 1]
    last = [x for x in found if x.unit == max(units)]
    if last:
        order.remove(last[-1])
        order.append(last[-1])
    out: list[PlannedStub] = []
    saved = 0
    for x in order:
        if saved >= cut:
            break
        out.append(x)
        saved += x.saving
    return out


def apply_shrinks(state: SessionState, unit: int, shrinks: Sequence[Shrink],
                  stubs: Sequence[PlannedStub] = ()) -> tuple[Message, ...]:
    """The messages of unit ``unit`` with the planned views (and image stubs) in place."""
    msgs = list(state.units[unit].messages)
    for planned, edit in ((shrinks, shrink_texts), (stubs, stub_images)):
        by_index: dict[int, dict[tuple[int | str, ...], str]] = {}
        for x in planned:
            if x.unit == unit:
                by_index.setdefault(x.index, {})[x.entry.at] = x.entry.text
        for k, texts in by_index.items():
            msgs[k] = edit(msgs[k], texts)
    return tuple(msgs)


__all__ = ["MIN_VIEW", "PlannedStub", "Shrink", "apply_shrinks", "plan_image_stubs", "plan_shrinks", "water_level"]
