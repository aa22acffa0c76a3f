"""Units of the history view, and the edits compaction records make to the blocks of their messages.

A unit is the messages kept or dropped together: a user message, an assistant message without tool calls, or an
*exchange* (an assistant message with tool calls plus the tool messages answering them), so a tool call is never
separated from its result. A ``mask`` record's ``images`` replace aged images by stubs naming their artifacts
(:func:`stub_images`), a ``shrink`` record's entries replace oversized texts by views (:func:`shrink_texts`); both
are applied to the units by :func:`edit_units` (the session state, ``state.py``, folds the records).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .model import Image, Message, Text, ToolCall, ToolResult
from .records import ImageStubEntry, ShrinkEntry


@dataclass(frozen=True)
class Unit:
    """Messages kept or dropped together. ``first_seq`` is the log seq of its first message."""

    messages: tuple[Message, ...]
    first_seq: int
    last_seq: int
    open_calls: frozenset[str] = frozenset()
    pinned: bool = False
    folded: bool = False  # replaced by a one-line fold (a mask record); never folded again

    @property
    def is_open(self) -> bool:
        return bool(self.open_calls)


#: the open calls of a unit that has none
NO_CALLS: frozenset[str] = frozenset()


def new_unit(messages: tuple[Message, ...], first_seq: int, last_seq: int, open_calls: frozenset[str],
             pinned: bool) -> Unit:
    """``Unit(messages, first_seq, last_seq, open_calls, pinned)`` without the frozen dataclass's per-field
    ``object.__setattr__`` (a replay makes one or two per message)."""
    u: Unit = object.__new__(Unit)
    d = u.__dict__  # (item by item: cheaper than update() with keywords)
    d["messages"] = messages
    d["first_seq"] = first_seq
    d["last_seq"] = last_seq
    d["open_calls"] = open_calls
    d["pinned"] = pinned
    d["folded"] = False
    return u


def message_images(m: Message) -> Iterator[tuple[tuple[int, ...], Image]]:
    """Each image block of a message with its path: ``(block,)``, or ``(block, item)`` inside a tool result."""
    for i, b in enumerate(m.content):
        if isinstance(b, Image):
            yield (i,), b
        elif isinstance(b, ToolResult):
            for j, c in enumerate(b.content):
                if isinstance(c, Image):
                    yield (i, j), c


def stub_images(m: Message, stubs: Mapping[tuple[int | str, ...], str]) -> Message:
    """``m`` with the image at each path replaced by a text block (a path that holds no image is skipped)."""
    return _replace_blocks(m, stubs, Image)


def shrink_texts(m: Message, views: Mapping[tuple[int | str, ...], str]) -> Message:
    """``m`` with the text block at each path replaced by ``views[path]`` (a path that holds no text is skipped);
    a ``(block, key)`` path names the string argument ``key`` of a tool call."""
    return _replace_blocks(m, views, Text)


def _replace_blocks(m: Message, texts: Mapping[tuple[int | str, ...], str], kind: type[Image] | type[Text]) -> Message:
    """``m`` with the ``kind`` block at each path (a block's index, or a tool result's index and the index of
    a block inside it; for text, also a tool call's index and the key of a string argument) replaced by text; a
    path that holds no ``kind`` block is skipped."""
    blocks = list(m.content)
    changed = False
    for path, text in texts.items():
        first = path[0] if path else None
        if not 1 <= len(path) <= 2 or not isinstance(first, int) or not 0 <= first < len(blocks):
            continue
        b = blocks[first]
        second = path[1] if len(path) == 2 else None
        if len(path) == 1 and isinstance(b, kind):
            blocks[first] = Text(text)
            changed = True
        elif isinstance(second, int) and isinstance(b, ToolResult) and 0 <= second < len(b.content) \
                and isinstance(b.content[second], kind):
            items = list(b.content)
            items[second] = Text(text)
            blocks[first] = dataclasses.replace(b, content=tuple(items))
            changed = True
        elif isinstance(second, str) and kind is Text and isinstance(b, ToolCall) and isinstance(b.arguments, dict) \
                and isinstance(b.arguments.get(second), str):
            blocks[first] = dataclasses.replace(b, arguments={**b.arguments, second: text})
            changed = True
    return Message(m.role, tuple(blocks)) if changed else m


def edit_units(units: list[Unit], message_seqs: Sequence[int], edits: Iterable[ImageStubEntry | ShrinkEntry],
               edit: Callable[[Message, Mapping[tuple[int | str, ...], str]], Message]) -> list[int]:
    """Replace blocks of logged messages by text in ``units`` (in place): aged images by their stubs (a mask
    record's ``images``, ``edit`` :func:`stub_images`), oversized texts by their views (a shrink record's
    ``entries``, ``edit`` :func:`shrink_texts`). ``message_seqs``: the log seq of every logged message, in order.
    An entry for a seq that is no message of a unit, or of a folded unit, is skipped. Returns the units changed."""
    by_unit: dict[int, dict[int, dict[tuple[int | str, ...], str]]] = {}
    for im in edits:
        seq = im.seq
        i = bisect.bisect_right(units, seq, key=lambda u: u.first_seq) - 1
        if i < 0 or not units[i].first_seq <= seq <= units[i].last_seq or units[i].folded:
            continue  # not a message of a unit, or covered by a fold
        by_unit.setdefault(i, {}).setdefault(seq, {})[im.at] = im.text
    changed = []
    for i, per_seq in sorted(by_unit.items()):
        u = units[i]
        # the unit's messages are its logged messages in order (a repair may follow them)
        seqs = list(message_seqs[bisect.bisect_left(message_seqs, u.first_seq):
                                 bisect.bisect_right(message_seqs, u.last_seq)])
        msgs = list(u.messages)
        for seq, stubs in per_seq.items():
            k = seqs.index(seq) if seq in seqs else -1
            if 0 <= k < len(msgs):
                msgs[k] = edit(msgs[k], stubs)
        if any(a is not b for a, b in zip(msgs, u.messages, strict=True)):
            units[i] = dataclasses.replace(u, messages=tuple(msgs))
            changed.append(i)
    return changed


__all__ = ["NO_CALLS", "Unit", "edit_units", "message_images", "new_unit", "shrink_texts", "stub_images"]
