"""Anthropic Messages API: ``client.messages.create(**rendered.request)``.

* ``system`` is a list of text blocks: the system text, then the session context if any;
* a neutral ``tool`` message becomes a ``user`` message of ``tool_result`` blocks, and consecutive
  same-role messages are merged (tool results first), because Anthropic wants the results in the
  user turn right after the ``tool_use``;
* ``cache_control: {"type": "ephemeral"}`` goes on the last tool, the system block, the session
  block and the last (non-thinking) block of the planned message and of the history's stable head, as
  ``CachePlan`` says;
* thinking blocks produced by Anthropic are passed back unchanged; other providers' are dropped.

The other direction: :func:`read_history` reads a Messages body or message list into neutral messages (a loaded
history, a proxied request and a trace file's conversation alike), ``parse_response`` a response,
:func:`accumulate_stream` a streamed one's events, :func:`read_usage` its billed usage (:func:`usage_counts` the
counts as reported, for telemetry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import ProviderResponseError, UsageError
from ..model import Image, Message, Text, Thinking, ToolCall, ToolResult, ToolSpec, Usage
from ..request import NeutralRequest
from .base import WORKAROUND, ParsedResponse, as_int, expect, to_plain
from .reader import Builder, Ctx, History, tools_from, usage_from
from .units import UnitRenderer, tool_decl

EPHEMERAL = {"type": "ephemeral"}
TOOL_SEARCH = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
#: server-side tool search blocks of a response: kept (opaque) so the tools they loaded stay loaded
_SEARCH_BLOCKS = ("server_tool_use", "tool_search_tool_result")
_THINKING_TYPES = ("thinking", "redacted_thinking")
#: the beta that server-side context editing (``context_management``) needs: send the request with
#: ``client.beta.messages.create(**request)``, which turns ``betas`` into the ``anthropic-beta`` header
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"


def _plain(v: Any) -> Any:
    """A JSON value of mappings and sequences as dicts and lists."""
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def _image(image: Image) -> dict[str, Any]:
    if image.url is not None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    return {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.data}}


def _blocks(content: tuple[Text | Image, ...]) -> list[dict[str, Any]]:
    out = []
    for b in content:
        if isinstance(b, Text):
            if b.text or len(content) == 1:
                out.append({"type": "text", "text": b.text})
        else:
            out.append(_image(b))
    return out


def _marked(block: dict[str, Any], ttl: str = "5m") -> dict[str, Any]:
    """``block`` with a cache breakpoint; ``ttl`` other than the default 5 minutes is written out (``"1h"``)."""
    return {**block, "cache_control": dict(EPHEMERAL) if ttl == "5m" else {**EPHEMERAL, "ttl": ttl}}


class AnthropicRenderer(UnitRenderer):
    format = "anthropic"
    merge_same_role = True

    def render_tool(self, tool: ToolSpec) -> dict[str, Any]:
        return tool_decl(tool, "input_schema")

    def render_system(self, kind: str, text: str) -> dict[str, Any]:
        return {"type": "text", "text": text}

    def defer_tool(self, rendered: dict[str, Any]) -> dict[str, Any]:
        return {**rendered, "defer_loading": True}

    def search_tool(self) -> dict[str, Any]:
        return dict(TOOL_SEARCH)

    def render_tail(self, text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "text", "text": text}]}]

    def render_message(self, message: Message, extra: tuple[Any, ...]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        for b in message.content:
            if isinstance(b, Text):
                if b.text or len(message.content) == 1:
                    blocks.append({"type": "text", "text": b.text})
            elif isinstance(b, Image):
                blocks.append(_image(b))
            elif isinstance(b, ToolCall):
                blocks.append({"type": "tool_use", "id": b.id, "name": b.name, "input": dict(b.arguments)})
            elif isinstance(b, ToolResult):
                r: dict[str, Any] = {"type": "tool_result", "tool_use_id": b.call_id}
                content = _blocks(b.content)
                if content != [{"type": "text", "text": ""}]:  # an empty text block is refused; no content is not
                    r["content"] = content
                if b.is_error:
                    r["is_error"] = True
                blocks.append(r)
            elif isinstance(b, Thinking) and b.provider == "anthropic":
                blocks.append(dict(b.data))
        role = "assistant" if message.role == "assistant" else "user"
        return [{"role": role, "content": blocks}]

    def is_first_block(self, block: Any) -> bool:
        return block.get("type") == "tool_result"

    def mark_block_index(self, blocks: Any) -> int | None:
        for j in range(len(blocks) - 1, -1, -1):
            if blocks[j].get("type") not in _THINKING_TYPES:
                return j
        return None

    def build(self, req: NeutralRequest, tools: list[Any], system: list[Any], messages: list[dict[str, Any]], marks: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"model": req.model, "max_tokens": req.max_output_tokens}
        ttl = req.cache.stable_ttl  # the stable prefix's lifetime; the history's breakpoints stay at 5 minutes
        if tools:
            if marks["tools"]:
                tools = [*tools[:-1], _marked(tools[-1], ttl)]
            out["tools"] = tools
        if system:
            out["system"] = [_marked(s, ttl) if m else s for s, m in zip(system, marks["system"], strict=True)]
        for at in (marks.get("head"), marks.get("carry"), marks.get("fold"), marks.get("turn"), marks.get("anchor"),
                   marks["message"]):
            if at is None:
                continue
            k, j = at
            content = list(messages[k]["content"])
            content[j] = _marked(content[j])
            messages[k] = {**messages[k], "content": content}  # the list is this request's own (render's hook contract)
        out["messages"] = messages
        if req.context_management is not None:  # server-side context editing: a beta of the Messages API
            out["betas"] = [CONTEXT_MANAGEMENT_BETA]
            out["context_management"] = _plain(req.context_management)
        return out

    # -- responses --------------------------------------------------------------------------------

    def parse_response(self, response: Any) -> ParsedResponse:
        d = to_plain(response, what="an Anthropic Message")
        if d.get("type") == "error":
            raise ProviderResponseError(f"Anthropic returned an error, not a message: {d.get('error')!r}")
        content = expect(d, "content", list, "Anthropic response")
        blocks: list[Text | ToolCall | Thinking] = []
        for i, b in enumerate(content):
            where = f"Anthropic response content[{i}]"
            t = b.get("type") if isinstance(b, dict) else None
            if t == "text":
                blocks.append(Text(expect(b, "text", str, where)))
            elif t == "tool_use":
                blocks.append(ToolCall(id=expect(b, "id", str, where), name=expect(b, "name", str, where),
                                       arguments=dict(expect(b, "input", dict, where))))
            elif t == "thinking":
                data = {"type": "thinking", "thinking": expect(b, "thinking", str, where),
                        "signature": expect(b, "signature", str, where)}
                blocks.append(Thinking(provider="anthropic", data=data, text=data["thinking"]))
            elif t == "redacted_thinking":
                blocks.append(Thinking(provider="anthropic", data={"type": "redacted_thinking", "data": expect(b, "data", str, where)}))
            elif t in _SEARCH_BLOCKS and (t != "server_tool_use" or str(b.get("name", "")).startswith("tool_search")):
                blocks.append(Thinking(provider="anthropic", data=dict(b)))
            elif not isinstance(t, str):
                raise ProviderResponseError(f"{where} has no 'type'; is this an Anthropic Messages response?")
            # server-side tool blocks (web search etc.) are not part of the neutral model: skipped
        u = read_usage(expect(d, "usage", dict, "Anthropic response"))
        return ParsedResponse(Message("assistant", tuple(blocks)), u, d.get("stop_reason"), d.get("model"))


# -- usage ------------------------------------------------------------------------------------------


def read_usage(usage: Mapping[str, Any]) -> Usage:
    """A response's ``usage`` as billed usage (``input_tokens`` excludes the cache reads and writes)."""
    return Usage(
        input_tokens=as_int(usage.get("input_tokens")),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=as_int(usage.get("cache_read_input_tokens")),
        cache_write_tokens=as_int(usage.get("cache_creation_input_tokens")),
    )


def usage_counts(usage: Mapping[str, Any]) -> dict[str, Any]:
    """The counts of a response's ``usage`` as reported, unchecked (for telemetry): ``input_tokens`` is the whole
    prompt, cache reads and writes included."""
    parts = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    return {"input_tokens": sum(x for x in parts if isinstance(x, int)), "output_tokens": usage.get("output_tokens"),
            "cache_read_tokens": usage.get("cache_read_input_tokens"),
            "cache_write_tokens": usage.get("cache_creation_input_tokens")}


# -- history ---------------------------------------------------------------------------------------


def image_from_source(src: Mapping[str, Any]) -> Image | None:
    """An image block's ``source`` (base64 data or a URL) as an image, or None if it has neither."""
    if src.get("type") == "base64" and src.get("data"):
        return Image(data=src["data"], media_type=src.get("media_type") or "application/octet-stream")
    if src.get("type") == "url" and src.get("url"):
        return Image(url=src["url"])
    return None


def read_blocks(b: Builder, content: Any, where: str) -> list[Text | Image]:
    """A message's or tool result's ``content`` (a string or blocks) as text and image blocks; other blocks are
    kept as JSON text, with a repair note."""
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(b.text(content, where))]
    out: list[Text | Image] = []
    for i, blk in enumerate(content if isinstance(content, list) else [content]):
        w = f"{where}[{i}]"
        if isinstance(blk, str):
            out.append(Text(b.text(blk, w)))
        elif isinstance(blk, dict) and blk.get("type") == "text":
            out.append(Text(b.text(blk.get("text", ""), w)))
        elif isinstance(blk, dict) and blk.get("type") == "image":
            image = image_from_source(blk.get("source") or {})
            if image is not None:
                out.append(image)
            else:
                b.repairs.append(f"{w}: image block without usable source dropped")
        else:
            b.repairs.append(
                f"{w}: content block of type {blk.get('type') if isinstance(blk, dict) else type(blk).__name__!r} kept as JSON text"
            )
            out.append(Text(json.dumps(blk, ensure_ascii=False)))
    return out


def read_messages(b: Builder, msgs: list[Any], mctx: Ctx, system: list[str]) -> None:
    """Feed Anthropic messages to ``b`` (the texts of ``system`` messages go to ``system``)."""
    for i, m in enumerate(msgs):
        w = f"{mctx.where}[{i}]" if mctx.where else f"[{i}]"
        m = mctx.obj(m, f"[{i}]")
        role = m.get("role")
        content = m.get("content")
        if role == "system":
            system.append("\n".join(t.text for t in read_blocks(b, content, w) if isinstance(t, Text)))
            continue
        if role == "user":
            blocks = content if isinstance(content, list) else [content] if content is not None else []
            rest: list[Any] = []
            for k, blk in enumerate(blocks):
                if isinstance(blk, dict) and blk.get("type") == "tool_result":
                    b.tool_result(
                        blk.get("tool_use_id"),
                        read_blocks(b, blk.get("content"), f"{w}.content[{k}].content"),
                        f"{w}.content[{k}]",
                        is_error=bool(blk.get("is_error", False)),
                    )
                else:
                    rest.append(blk)
            if rest or not blocks:
                b.user(read_blocks(b, rest, f"{w}.content"), w)
        elif role == "assistant":
            blocks = content if isinstance(content, list) else [content] if content is not None else []
            texts: list[Text | Image] = []
            calls: list[tuple[Any, Any, Any]] = []
            thinking: list[Thinking] = []
            for k, blk in enumerate(blocks):
                wk = f"{w}.content[{k}]"
                t = blk.get("type") if isinstance(blk, dict) else None
                if t in ("tool_use", "server_tool_use"):
                    calls.append((blk.get("id"), blk.get("name"), blk.get("input")))
                elif t in ("thinking", "redacted_thinking"):
                    thinking.append(Thinking(provider="anthropic", data=blk, text=b.text(blk.get("thinking", ""), wk)))
                else:
                    texts.extend(x for x in read_blocks(b, [blk], wk) if isinstance(x, Text))
            b.assistant(texts, calls, w, thinking=thinking, usage=usage_from(m.get("usage")))
        else:
            raise mctx.err(f"[{i}].role", f"unknown role {role!r} (expected user or assistant)")


def read_history(value: Any, ctx: Ctx, b: Builder) -> History:
    """Feed an Anthropic Messages body (``{"system", "tools", "messages"}``) or a message list to ``b``."""
    meta: dict[str, Any] = {}
    system: list[str] = []
    tools_raw = None
    if isinstance(value, dict):
        sys_v = value.get("system")
        if isinstance(sys_v, str):
            system.append(sys_v)
        elif isinstance(sys_v, list):
            system.append("\n".join(x.get("text", "") for x in sys_v if isinstance(x, dict)))
        tools_raw = value.get("tools")
        if isinstance(value.get("model"), str):
            meta["model"] = value["model"]
        msgs = ctx.get(value, "messages", list)
        mctx = ctx.sub("messages")
    else:
        msgs = ctx.lst(value)
        mctx = ctx
    repairs: list[str] = []
    tools = tools_from(tools_raw, ctx.sub("tools"), repairs)
    read_messages(b, msgs, mctx, system)
    return History("\n\n".join(s for s in system if s), tools, meta, repairs)


# -- streams ----------------------------------------------------------------------------------------

#: the ``type`` of every streamed event
STREAM_EVENTS = frozenset({
    "message_start", "message_delta", "message_stop", "content_block_start", "content_block_delta",
    "content_block_stop", "ping", "error",
})


def is_stream_event(d: Mapping[str, Any]) -> bool:
    """Whether ``d`` is one streamed event rather than a whole message."""
    t = d.get("type")
    return isinstance(t, str) and t in STREAM_EVENTS


def accumulate_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold the plain events of a Messages stream into the message ``parse_response`` reads."""
    msg: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for ev in events:
        t = ev.get("type")
        if t == "error":
            raise ProviderResponseError(f"the Anthropic stream failed: {ev.get('error')!r}")
        if t == "message_start":
            msg = dict(ev["message"])
            msg["usage"] = dict(msg.get("usage") or {})
        elif t == "content_block_start":
            blocks[ev["index"]] = dict(ev["content_block"])
        elif t == "content_block_delta":
            b, d = blocks[ev["index"]], ev["delta"]
            dt = d.get("type")
            if dt == "text_delta":
                b["text"] = b.get("text", "") + d["text"]
            elif dt == "input_json_delta":
                partial[ev["index"]] = partial.get(ev["index"], "") + d.get("partial_json", "")
            elif dt == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + d["thinking"]
            elif dt == "signature_delta":
                b["signature"] = d["signature"]
        elif t == "message_delta" and msg is not None:
            for k, v in (ev.get("delta") or {}).items():
                msg[k] = v
            for k, v in (ev.get("usage") or {}).items():
                if v is not None:
                    msg["usage"][k] = v
    if msg is None:
        raise UsageError("the Anthropic stream has no message_start event; " + WORKAROUND)
    for i, raw in partial.items():
        blocks[i]["input"] = json.loads(raw) if raw.strip() else {}
    msg["content"] = [blocks[i] for i in sorted(blocks)]
    return msg


__all__ = [
    "AnthropicRenderer",
    "CONTEXT_MANAGEMENT_BETA",
    "STREAM_EVENTS",
    "accumulate_stream",
    "image_from_source",
    "is_stream_event",
    "read_blocks",
    "read_history",
    "read_messages",
    "read_usage",
    "usage_counts",
]
