"""Google Gemini (google-genai): ``client.models.generate_content(**rendered.request)``.

The request is ``{model, contents, config: {system_instruction, tools, max_output_tokens}}`` in plain
dicts with the SDK's snake_case field names:

* ``system_instruction`` holds a text part for the system text, then one for the session context;
* assistant messages become ``model`` contents; ``tool`` messages become ``user`` contents of
  ``function_response`` parts (``{"output": ...}``, or ``{"error": ...}`` for failed calls) carrying
  the call id and the tool's name (``ToolResult.name`` or the matching earlier ``ToolCall``'s);
  consecutive same-role contents are merged with function responses first;
* images: ``inline_data`` (base64) or ``file_data`` (URL);
* Gemini thinking: a thought part is passed back unchanged; a thought *signature* attached to a
  function call or text part is kept as ``Thinking(provider="gemini", data={"thought_signature": ...})``
  just before that block and re-attached to it when rendering.

Gemini caches implicitly by prefix; ``cache_prefix_parts`` follows ``CachePlan`` as for the others.

The other direction: :func:`read_history` reads a ``Content`` list into neutral messages, ``parse_response`` a
response, :func:`accumulate_stream` a streamed one's chunks, :func:`read_usage` its billed usage;
:func:`json_schema` turns a google-genai ``Schema`` into JSON Schema.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from ..errors import ProviderResponseError, UnmatchedToolResultError
from ..hashing import content_digest
from ..model import Image, Message, Text, Thinking, ToolCall, ToolResult, ToolSpec, Usage
from ..request import NeutralRequest
from .base import ParsedResponse, as_int, expect, to_plain
from .reader import Builder, Ctx, History, image_from_url
from .units import UnitRenderer, tool_decl, tool_names

SIGNATURE = "thought_signature"


def _image(image: Image) -> dict[str, Any]:
    if image.url is not None:
        fd: dict[str, Any] = {"file_uri": image.url}
        if image.media_type:
            fd["mime_type"] = image.media_type
        return {"file_data": fd}
    return {"inline_data": {"mime_type": image.media_type, "data": image.data}}


def _part(b: Text | Image) -> dict[str, Any]:
    return {"text": b.text} if isinstance(b, Text) else _image(b)


class GeminiRenderer(UnitRenderer):
    format = "gemini"
    merge_same_role = True
    content_key = "parts"

    def render_tool(self, tool: ToolSpec) -> dict[str, Any]:
        return tool_decl(tool, "parameters_json_schema")

    def render_system(self, kind: str, text: str) -> dict[str, Any]:
        return {"text": text}

    def render_tail(self, text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "parts": [{"text": text}]}]

    def context(self, req: NeutralRequest) -> dict[str, str]:
        return tool_names(req)

    def message_extra(self, message: Message, req: NeutralRequest, ctx: Any) -> tuple[Any, ...]:
        names = []
        for r in message.tool_results:
            name = r.name or ctx.get(r.call_id)
            if not name:
                raise UnmatchedToolResultError(
                    f"tool result {r.call_id!r} names no tool and no earlier assistant message made that call; "
                    "Gemini needs the tool's name: set ToolResult.name or keep the matching ToolCall in the messages"
                )
            names.append(name)
        return tuple(names)

    def render_message(self, message: Message, extra: tuple[Any, ...]) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        if message.role == "assistant":
            pending: Any = None
            for b in message.content:
                if isinstance(b, Thinking):
                    if b.provider != "gemini":
                        continue
                    if set(b.data) == {SIGNATURE}:
                        pending = b.data[SIGNATURE]
                    else:
                        parts.append(dict(b.data))
                    continue
                if isinstance(b, ToolCall):
                    part: dict[str, Any] = {"function_call": {"id": b.id, "name": b.name, "args": dict(b.arguments)}}
                elif isinstance(b, Text | Image):
                    part = _part(b)
                else:  # pragma: no cover - Message forbids tool results here
                    continue
                if pending is not None:
                    part[SIGNATURE] = pending
                    pending = None
                parts.append(part)
            if pending is not None:
                parts.append({"text": "", SIGNATURE: pending})
            return [{"role": "model", "parts": parts}]
        names = iter(extra)
        images: list[dict[str, Any]] = []
        for b in message.content:
            if isinstance(b, ToolResult):
                key = "error" if b.is_error else "output"
                parts.append({"function_response": {"id": b.call_id, "name": next(names), "response": {key: b.text}}})
                images.extend(_image(i) for i in b.content if isinstance(i, Image))
            elif isinstance(b, Text | Image):
                images.append(_part(b))
        return [{"role": "user", "parts": parts + images}]

    def is_first_block(self, block: Any) -> bool:
        return "function_response" in block

    def build(self, req: NeutralRequest, tools: list[Any], system: list[Any], messages: list[dict[str, Any]], marks: dict[str, Any]) -> dict[str, Any]:
        config: dict[str, Any] = {}
        if system:
            config["system_instruction"] = {"parts": system}
        if tools:
            config["tools"] = [{"function_declarations": tools}]
            if req.allowed_tools is not None:
                config["tool_config"] = {"function_calling_config": {
                    "mode": "VALIDATED", "allowed_function_names": list(req.allowed_tools)}}
        config["max_output_tokens"] = req.max_output_tokens
        return {"model": req.model, "contents": messages, "config": config}

    # -- responses --------------------------------------------------------------------------------

    def parse_response(self, response: Any) -> ParsedResponse:
        d = to_plain(response, what="a Gemini GenerateContentResponse", by_alias=False)
        candidates = d.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            feedback = d.get("prompt_feedback")
            why = f" (prompt_feedback: {feedback!r})" if feedback else ""
            raise ProviderResponseError(f"Gemini response has no candidates{why}; nothing to parse")
        cand = candidates[0]
        if not isinstance(cand, dict):
            raise ProviderResponseError("Gemini response candidates[0] must be an object")
        content = cand.get("content") or {}
        raw_parts = content.get("parts") or []
        if not isinstance(raw_parts, list):
            raise ProviderResponseError("Gemini response candidates[0].content.parts must be a list")
        blocks: list[Text | ToolCall | Thinking] = []
        for i, p in enumerate(raw_parts):
            where = f"Gemini response parts[{i}]"
            if not isinstance(p, dict):
                raise ProviderResponseError(f"{where} must be an object")
            p = {k: v for k, v in p.items() if v is not None}
            sig = p.get(SIGNATURE)
            if p.get("thought"):
                blocks.append(Thinking(provider="gemini", data=p, text=str(p.get("text", ""))))
            elif "function_call" in p:
                fc = expect(p, "function_call", dict, where)
                if sig is not None:
                    blocks.append(Thinking(provider="gemini", data={SIGNATURE: sig}))
                call_id = fc.get("id") or _call_id(d, i, fc)
                blocks.append(ToolCall(id=call_id, name=expect(fc, "name", str, where), arguments=dict(fc.get("args") or {})))
            elif isinstance(p.get("text"), str):
                if p["text"] == "" and sig is not None:
                    blocks.append(Thinking(provider="gemini", data=p))
                elif p["text"]:
                    if sig is not None:
                        blocks.append(Thinking(provider="gemini", data={SIGNATURE: sig}))
                    blocks.append(Text(p["text"]))
            # other part kinds (executable code, inline data) are not part of the neutral model
        u = read_usage(d.get("usage_metadata") or {})
        return ParsedResponse(Message("assistant", tuple(blocks)), u, cand.get("finish_reason"), d.get("model_version"))


def _call_id(response: dict[str, Any], index: int, call: dict[str, Any]) -> str:
    """Gemini may omit call ids: derive a stable one from the response id (or content) and position."""
    rid = response.get("response_id")
    if isinstance(rid, str) and rid:
        return f"{rid}-{index}"
    return f"gemini-{content_digest([index, call, response.get('candidates')])[:16]}"


# -- usage ------------------------------------------------------------------------------------------


def read_usage(meta: Mapping[str, Any]) -> Usage:
    """A response's ``usage_metadata`` as billed usage (prompt tokens include the cached ones; thoughts are
    output)."""
    cached = as_int(meta.get("cached_content_token_count"))
    return Usage(
        input_tokens=max(0, as_int(meta.get("prompt_token_count")) - cached),
        output_tokens=as_int(meta.get("candidates_token_count")) + as_int(meta.get("thoughts_token_count")),
        cache_read_tokens=cached,
    )


# -- schemas ---------------------------------------------------------------------------------------


def json_schema(s: Any) -> Any:
    """A google-genai ``Schema`` dump (``type: OBJECT``) as JSON Schema (``type: object``)."""
    if isinstance(s, dict):
        out: dict[str, Any] = {}
        for k, v in s.items():
            if k == "type" and isinstance(v, str):
                out[k] = v.lower()
            elif k in ("properties", "defs", "$defs"):
                out[k] = {name: json_schema(x) for name, x in v.items()}
            else:
                out[k] = json_schema(v)
        return out
    if isinstance(s, list):
        return [json_schema(x) for x in s]
    return s


# -- history ---------------------------------------------------------------------------------------


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


def read_contents(b: Builder, contents: list[Any], ctx: Ctx) -> str | None:
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


def read_history(value: Any, ctx: Ctx, b: Builder) -> History:
    """Feed a list of Gemini ``Content`` dicts to ``b``."""
    return History(read_contents(b, value, ctx) or "")


# -- streams ----------------------------------------------------------------------------------------

def _mergeable(prev: dict[str, Any], part: dict[str, Any]) -> bool:
    if set(prev) - {"text", "thought", "thought_signature"} or set(part) - {"text", "thought", "thought_signature"}:
        return False
    return ("text" in prev and "text" in part and bool(prev.get("thought")) == bool(part.get("thought"))
            and prev.get("thought_signature") is None)


def is_stream_event(d: Mapping[str, Any]) -> bool:
    """Never: a streamed Gemini chunk has the shape of a whole response."""
    return False


def accumulate_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the plain chunks of ``generate_content_stream`` into the response ``parse_response`` reads."""
    parts: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    role = "model"
    finish = None
    for ch in events:
        for k in ("usage_metadata", "model_version", "response_id", "create_time"):
            if ch.get(k) is not None:
                out[k] = ch[k]
        for cand in (ch.get("candidates") or [])[:1]:
            content = cand.get("content") or {}
            role = content.get("role") or role
            for p in content.get("parts") or []:
                p = {k: v for k, v in p.items() if v is not None}
                if parts and _mergeable(parts[-1], p):
                    parts[-1]["text"] += p["text"]
                    if p.get("thought_signature") is not None:
                        parts[-1]["thought_signature"] = p["thought_signature"]
                else:
                    parts.append(dict(p))
            if cand.get("finish_reason"):
                finish = cand["finish_reason"]
    out["candidates"] = [{"content": {"role": role, "parts": parts}, "finish_reason": finish, "index": 0}]
    return out


__all__ = [
    "GeminiRenderer",
    "accumulate_stream",
    "is_stream_event",
    "json_schema",
    "read_contents",
    "read_history",
    "read_usage",
]
