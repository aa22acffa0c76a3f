"""Provider-native message lists into neutral messages, for loading a conversation into a session.

    s = engine.load("chat-7", messages, format="openai-chat", tools=tools)   # a new or existing session
    s.load(messages_now, format="openai-chat")                              # appends only what is new

Formats: ``openai-chat`` (chat messages), ``openai-responses`` (Responses input/output items),
``anthropic`` (Messages API messages), ``gemini`` (``Content`` list), dicts or the SDKs' own objects;
``neutral``: windowsmith :class:`~windowsmith.model.Message` objects or their dicts (what the framework
adapters in ``windowsmith.integrations`` hand over after mapping their own message types).
The OpenAI and Anthropic shapes go through the trace importers (``traces/logs.py``), Gemini contents
through :func:`gemini_contents`; every repair (a result with no call, a call with no id, a non-JSON
argument string, …) is returned and recorded in the session's log, so manifests list it. A last
assistant turn whose calls have no result yet stays open: the framework runs them next.

Sync rule (:func:`new_messages`): the list handed over must continue the session's log. Messages are
matched by position, role and tool-call ids (text is not compared: the log holds it redacted); the
ones past the log's end are new. A history that disagrees with the log raises, naming the message.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError
from .formats.base import to_plain
from .model import Image, Message, Text, Thinking, ToolSpec
from .traces.base import Builder, Ctx, image_from_url, tools_from
from .traces.logs import import_anthropic_messages, import_openai_chat, import_openai_responses

LOAD_FORMATS: tuple[str, ...] = ("openai-chat", "openai-responses", "anthropic", "gemini", "neutral")


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
        items = [_hosted_as_text(it, i, pre) for i, it in enumerate(items)]
    ctx = Ctx(Path("<messages>"), "", "load")
    b = Builder(close_open=False)
    repairs: list[str] = []
    tool_list = tools_from(None if tools is None else [t.to_dict() if isinstance(t, ToolSpec) else t for t in tools],
                           ctx.sub("tools"), repairs)
    if format == "gemini":
        found = [gemini_contents(b, items, ctx)]
        msgs, _, more = b.finish()
    else:
        importer = {"openai-chat": import_openai_chat, "openai-responses": import_openai_responses,
                    "anthropic": import_anthropic_messages}[format]
        trace = importer(items, ctx, [], "load", builder=b)[0]
        found, msgs, more = [trace.system], trace.messages, list(trace.repairs)
    texts = [t for t in (system, *found) if t]
    return Loaded("\n\n".join(texts) or None, tool_list, tuple(msgs), (*repairs, *pre, *more))


_RESPONSES_ITEMS = frozenset({"message", "reasoning", "function_call", "custom_tool_call", "function_call_output",
                              "custom_tool_call_output", "item_reference"})


def _hosted_as_text(item: Any, i: int, repairs: list[str]) -> Any:
    """A Responses item the neutral model has no block for (a hosted tool's call and result: web or file
    search, code interpreter, …) becomes assistant text holding its JSON, so the model still sees it."""
    if not isinstance(item, Mapping) or item.get("type", "message" if "role" in item else None) in _RESPONSES_ITEMS:
        return item
    kind = item.get("type")
    repairs.append(f"[{i}]: {kind} item kept as assistant text (no neutral block for hosted tool items)")
    text = f"[{kind}] " + json.dumps({k: v for k, v in item.items() if k != "type"}, ensure_ascii=False, default=str)
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


# -- Gemini contents --------------------------------------------------------------------------------


def _g(d: Mapping[str, Any], snake: str) -> Any:
    """A field by its snake_case name or the camelCase alias (REST JSON)."""
    if snake in d:
        return d[snake]
    head, *rest = snake.split("_")
    return d.get(head + "".join(w.title() for w in rest))


def _gemini_image(part: Mapping[str, Any], b: Builder, where: str) -> Image | None:
    inline = _g(part, "inline_data")
    if isinstance(inline, Mapping):
        data = inline.get("data")
        if isinstance(data, bytes | bytearray):
            data = base64.b64encode(bytes(data)).decode()
        if isinstance(data, str) and data:
            return Image(data=data, media_type=_g(inline, "mime_type") or "application/octet-stream")
    fd = _g(part, "file_data")
    if isinstance(fd, Mapping) and isinstance(_g(fd, "file_uri"), str):
        img = image_from_url(_g(fd, "file_uri"))
        mime = _g(fd, "mime_type")
        return Image(url=img.url, media_type=mime) if img.url and mime else img
    b.repairs.append(f"{where}: image part without data dropped")
    return None


def gemini_contents(b: Builder, contents: list[Any], ctx: Ctx) -> str | None:
    """Feed Gemini ``Content`` dicts (``role`` user/model, ``parts``) to ``b``. Calls without an id get
    ``gemini_call_<n>``; a response without an id answers the oldest open call of its name."""
    system: list[str] = []
    open_by_name: dict[str, list[str]] = {}
    auto = 0
    for i, c in enumerate(contents):
        w = f"[{i}]"
        c = ctx.obj(c, w)
        role = c.get("role") or "user"
        parts = c.get("parts") or []
        if not isinstance(parts, list):
            raise ctx.err(f"{w}.parts", "expected a list of parts")
        if role == "system":
            system.append("\n".join(p.get("text", "") for p in parts if isinstance(p, Mapping)))
            continue
        if role == "model":
            texts: list[Text | Image] = []
            calls: list[tuple[Any, Any, Any]] = []
            thinking: list[Thinking] = []
            for k, p in enumerate(parts):
                wk = f"{w}.parts[{k}]"
                p = {key: v for key, v in dict(p).items() if v is not None}
                sig = _g(p, "thought_signature")
                fc = _g(p, "function_call")
                if p.get("thought"):
                    thinking.append(Thinking(provider="gemini", data=p, text=b.text(p.get("text", ""), wk)))
                elif isinstance(fc, Mapping):
                    if sig is not None:
                        thinking.append(Thinking(provider="gemini", data={"thought_signature": sig}))
                    cid = fc.get("id")
                    if not cid:
                        auto += 1
                        cid = f"gemini_call_{auto}"
                    open_by_name.setdefault(str(fc.get("name")), []).append(cid)
                    calls.append((cid, fc.get("name"), dict(fc.get("args") or {})))
                elif isinstance(p.get("text"), str):
                    if sig is not None:
                        thinking.append(Thinking(provider="gemini", data={"thought_signature": sig}))
                    if p["text"]:
                        texts.append(Text(b.text(p["text"], wk)))
                else:
                    b.repairs.append(f"{wk}: model part with keys {sorted(p)} dropped")
            b.assistant(texts, calls, w, thinking=thinking)
        elif role == "user":
            rest: list[Text | Image] = []
            for k, p in enumerate(parts):
                wk = f"{w}.parts[{k}]"
                fr = _g(p, "function_response")
                if isinstance(fr, Mapping):
                    name = fr.get("name")
                    cid = fr.get("id")
                    queue = open_by_name.get(str(name), [])
                    if not cid and queue:
                        cid = queue[0]
                    if cid in queue:
                        queue.remove(cid)
                    resp = fr.get("response")
                    is_error = isinstance(resp, Mapping) and "error" in resp and "output" not in resp
                    value = resp.get("error" if is_error else "output", resp) if isinstance(resp, Mapping) else resp
                    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
                    b.tool_result(cid, text, wk, name=name if isinstance(name, str) else None, is_error=is_error)
                elif isinstance(p.get("text"), str):
                    if p["text"]:
                        rest.append(Text(b.text(p["text"], wk)))
                elif _g(p, "inline_data") is not None or _g(p, "file_data") is not None:
                    img = _gemini_image(p, b, wk)
                    if img is not None:
                        rest.append(img)
                else:
                    b.repairs.append(f"{wk}: user part with keys {sorted(p)} dropped")
            if rest:
                b.user(rest, w)
        else:
            raise ctx.err(f"{w}.role", f"unknown role {role!r} (expected user or model)")
    return "\n\n".join(s for s in system if s) or None


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


__all__ = ["LOAD_FORMATS", "Loaded", "convert", "gemini_contents", "new_messages", "overlapping_new"]
