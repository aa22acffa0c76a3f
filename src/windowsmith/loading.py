"""Provider-native message lists into neutral messages, for loading a conversation into a session.

    s = engine.load("chat-7", messages, format="openai-chat", tools=tools)   # a new or existing session
    s.load(messages_now, format="openai-chat")                              # appends only what is new

Formats: ``openai-chat`` (chat messages), ``openai-responses`` (Responses input/output items),
``anthropic`` (Messages API messages), ``gemini`` (``Content`` list), dicts or the SDKs' own objects;
``neutral``: windowsmith :class:`~windowsmith.model.Message` objects or their dicts (what the framework
adapters in ``windowsmith.integrations`` hand over after mapping their own message types).
Each shape is read by its format's history reader (``windowsmith.formats``: the same code that reads a
proxied request and a trace file's conversation); every repair (a result with no call, a call with no id, a non-JSON
argument string, …) is returned and recorded in the session's log, so manifests list it. A last
assistant turn whose calls have no result yet stays open: the framework runs them next.

Sync rule (:func:`new_messages`): the list handed over must continue the session's log. Messages are
matched by position, role and tool-call ids (text is not compared: the log holds it redacted); the
ones past the log's end are new. A history that disagrees with the log raises, naming the message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError
from .formats import anthropic, gemini, openai_chat, openai_responses
from .formats.base import to_plain
from .formats.reader import Builder, Ctx, History, tools_from
from .model import Image, Message, ToolSpec

LOAD_FORMATS: tuple[str, ...] = ("openai-chat", "openai-responses", "anthropic", "gemini", "neutral")

_READERS: dict[str, Callable[[Any, Ctx, Builder], History]] = {
    "openai-chat": openai_chat.read_history,
    "openai-responses": openai_responses.read_history,
    "anthropic": anthropic.read_history,
    "gemini": gemini.read_history,
}


@dataclass(frozen=True)
class Loaded:
    """A provider-native history in neutral form."""

    system: str | None
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    repairs: tuple[str, ...]


def _plain(v: Any, fmt: str) -> Any:
    if isinstance(v, Mapping | str):
        return dict(v) if isinstance(v, Mapping) else v
    dump = getattr(v, "model_dump", None)
    if callable(dump):  # every field that has a value, set at construction or later (not exclude_unset)
        try:
            out = dump(mode="json", by_alias=fmt != "gemini", exclude_none=True, warnings=False)
        except TypeError:
            out = None
        if isinstance(out, dict):
            return out
    return to_plain(v, what=f"a {fmt} message", by_alias=fmt != "gemini")


def convert(messages: Sequence[Any], format: str, *, tools: Sequence[Any] | None = None,
            system: str | None = None) -> Loaded:
    """Convert a provider-native message list (see the module docstring) into neutral messages."""
    if format not in LOAD_FORMATS:
        raise UsageError(f"unknown message format {format!r}; use one of {', '.join(LOAD_FORMATS)}")
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise UsageError(f"load() takes a list of {format} messages, got {type(messages).__name__}")
    if system is not None and not isinstance(system, str):
        raise UsageError(f"system must be a string, got {type(system).__name__}")
    if format == "neutral":
        msgs_n = tuple(m if isinstance(m, Message) else Message.from_dict(m) for m in messages)
        specs = tuple(t if isinstance(t, ToolSpec) else ToolSpec.from_dict(t) for t in tools or ())
        return Loaded(system, specs, msgs_n, ())
    items = [_plain(m, format) for m in messages]
    pre: list[str] = []
    if format == "openai-responses":
        items = [openai_responses.hosted_as_text(it, i, pre) for i, it in enumerate(items)]
    ctx = Ctx(Path("<messages>"), "", "load")
    b = Builder(close_open=False)
    repairs: list[str] = []
    tool_list = tools_from(None if tools is None else [t.to_dict() if isinstance(t, ToolSpec) else t for t in tools],
                           ctx.sub("tools"), repairs)
    history = _READERS[format](items, ctx, b)
    msgs, _, more = b.finish()
    texts = [t for t in (system, history.system) if t]
    return Loaded("\n\n".join(texts) or None, tool_list, tuple(msgs), (*repairs, *pre, *history.repairs, *more))


# -- sync with a session's log ----------------------------------------------------------------------


def _groups(msgs: Sequence[Message]) -> list[tuple[tuple[Any, ...], list[int]]]:
    """Messages as (key, indices): consecutive tool messages form one group keyed by their result ids."""
    out: list[tuple[tuple[Any, ...], list[int]]] = []
    for i, m in enumerate(msgs):
        if m.role == "tool":
            ids = frozenset(r.call_id for r in m.tool_results)
            if out and out[-1][0][0] == "tool":
                key, idx = out[-1]
                out[-1] = (("tool", key[1] | ids), [*idx, i])
                continue
            out.append((("tool", ids), [i]))
        elif m.role == "assistant":
            out.append((("assistant", tuple(c.id for c in m.tool_calls)), [i]))
        else:
            out.append(((m.role,), [i]))
    return out


def _describe(key: tuple[Any, ...]) -> str:
    if key[0] == "assistant":
        return f"an assistant message with tool calls {list(key[1])}" if key[1] else "an assistant message"
    if key[0] == "tool":
        return f"tool results for {sorted(key[1])}"
    return f"a {key[0]} message"


def new_messages(logged: Sequence[Message], incoming: Sequence[Message], format: str) -> list[Message]:
    """The messages of ``incoming`` past the end of ``logged`` (see the sync rule above)."""
    have, got = _groups(logged), _groups(incoming)
    for g, (key, _) in enumerate(have):
        if g >= len(got):
            return []  # the history handed over is behind the log: nothing new
        other = got[g][0]
        last_partial = key[0] == "tool" == other[0] and g == len(have) - 1 and key[1] <= other[1]
        if other != key and not last_partial:
            raise UsageError(
                f"the {format} history does not continue this session: its message {got[g][1][0]} is "
                f"{_describe(other)} where the session's log has {_describe(key)}. Load it into a new session "
                "(engine.load(new_id, messages, format=...)) or append only the new messages with session.add()"
            )
    out: list[Message] = []
    if have and have[-1][0][0] == "tool" and len(got) >= len(have):
        done = have[-1][0][1]
        for i in got[len(have) - 1][1]:
            rest = tuple(r for r in incoming[i].tool_results if r.call_id not in done)
            if rest:
                out.append(Message("tool", rest))
    for _, idx in got[len(have):]:
        out.extend(incoming[i] for i in idx)
    return out


def _text_key(m: Message) -> tuple[Any, ...]:
    images = sum(1 for b in m.content if isinstance(b, Image))
    return (m.role, tuple(c.id for c in m.tool_calls), m.text, images)


def overlapping_new(logged: Sequence[Message], incoming: Sequence[Message]) -> list[Message]:
    """The messages of ``incoming`` (a window of the conversation that may repeat the log's newest
    messages) that the log does not have: the longest run of the log's newest groups that ``incoming``
    starts with is skipped. User and assistant messages are compared by text too (pass ``incoming``
    redacted the way the log is), tool results by call id; results missing from the log's last tool
    group are kept."""
    def key(g: tuple[tuple[Any, ...], list[int]], msgs: Sequence[Message]) -> tuple[Any, ...]:
        return g[0] if g[0][0] == "tool" else _text_key(msgs[g[1][0]])

    have = [key(g, logged) for g in _groups(logged)]
    got_groups = _groups(incoming)
    got = [key(g, incoming) for g in got_groups]
    for j in range(min(len(have), len(got)), 0, -1):
        head, last = have[len(have) - j:], got[:j]
        if head[:-1] != last[:-1]:
            continue
        a, b = head[-1], last[-1]
        if a == b or (a[0] == "tool" == b[0] and a[1] <= b[1]):
            out: list[Message] = []
            if a != b:  # the log's last tool group is missing some results
                for i in got_groups[j - 1][1]:
                    rest = tuple(r for r in incoming[i].tool_results if r.call_id not in a[1])
                    if rest:
                        out.append(Message("tool", rest))
            return out + [incoming[i] for _, idx in got_groups[j:] for i in idx]
    return list(incoming)


__all__ = ["LOAD_FORMATS", "Loaded", "convert", "new_messages", "overlapping_new"]
