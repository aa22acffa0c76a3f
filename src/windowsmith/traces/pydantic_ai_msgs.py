"""Pydantic AI message histories saved as JSON (``result.all_messages_json()``, ``ModelMessagesTypeAdapter``).

A list of ``request`` and ``response`` messages, each with typed ``parts``: a request's ``system-prompt``,
``user-prompt`` (text, or a list of text and media), ``tool-return`` (the tool's ``content`` as JSON) and
``retry-prompt`` (a validation error sent back: as the tool's error result when it names a call, else as user
text), and its ``instructions`` (the agent's instructions, sent as system text); a response's ``text``,
``tool-call`` (``args`` an object or a JSON string), ``thinking`` (kept, with the provider that wrote it) and
its ``usage``: ``input_tokens`` includes the ``cache_read_tokens`` and ``cache_write_tokens``.
"""

from __future__ import annotations

import json
from typing import Any

from ..formats.reader import Builder, Ctx, as_dict, as_list, image_from_url, usage_including_cache
from ..model import Image, Text, Thinking, Usage
from .base import Trace, make_trace


def is_pydantic_ai_messages(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(
        isinstance(m, dict) and m.get("kind") in ("request", "response") and isinstance(m.get("parts"), list)
        and all(isinstance(p, dict) and "part_kind" in p for p in m["parts"]) for m in v[:20])


def _usage(u: Any) -> Usage | None:
    """A response's usage: Pydantic AI's ``input_tokens`` include its ``cache_read_tokens`` and
    ``cache_write_tokens`` (the key names of windowsmith's own Usage, the other meaning)."""
    u = as_dict(u)
    if "input_tokens" not in u:
        return None
    return usage_including_cache(int(u.get("input_tokens") or 0), int(u.get("cache_read_tokens") or 0),
                                 int(u.get("cache_write_tokens") or 0), int(u.get("output_tokens") or 0))


def _text(b: Builder, v: Any, where: str) -> str:
    return b.text(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False), where)


def _user_parts(b: Builder, content: Any, where: str) -> list[Text | Image]:
    if isinstance(content, str):
        return [Text(b.text(content, where))]
    out: list[Text | Image] = []
    for i, c in enumerate(as_list(content)):
        if isinstance(c, str):
            out.append(Text(b.text(c, f"{where}[{i}]")))
        elif isinstance(c, dict) and isinstance(c.get("url"), str) and str(c.get("kind", "")).startswith("image"):
            out.append(image_from_url(c["url"]))
        else:
            b.repairs.append(f"{where}[{i}]: user content of kind {as_dict(c).get('kind')!r} kept as a placeholder")
            out.append(Text(f"[{as_dict(c).get('kind', 'media')} content]"))
    return out


def import_pydantic_ai_messages(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    b = Builder()
    system: list[str] = []
    for i, m in enumerate(ctx.lst(value)):
        w = f"[{i}]"
        m = ctx.obj(m, w)
        if m.get("kind") == "request":
            if isinstance(m.get("instructions"), str) and m["instructions"] and m["instructions"] not in system:
                system.append(m["instructions"])
            for k, p in enumerate(as_list(m.get("parts"))):
                pw = f"{w}.parts[{k}]"
                p = ctx.obj(p, pw)
                kind = p.get("part_kind")
                if kind == "system-prompt":
                    system.append(_text(b, p.get("content"), pw))
                elif kind == "user-prompt":
                    b.user(_user_parts(b, p.get("content"), pw), pw)
                elif kind == "tool-return":
                    b.tool_result(p.get("tool_call_id"), [Text(_text(b, p.get("content"), pw))], pw,
                                  name=p.get("tool_name"), is_error=p.get("outcome") not in (None, "success"))
                elif kind == "retry-prompt":
                    retry = _text(b, p.get("content"), pw)
                    if p.get("tool_name") and p.get("tool_call_id"):
                        b.tool_result(p["tool_call_id"], [Text(retry)], pw, name=p["tool_name"], is_error=True)
                    else:
                        b.user([Text(retry)], pw)
                else:
                    raise ctx.err(f"{pw}.part_kind", f"unknown request part {kind!r} (expected system-prompt, "
                                                     "user-prompt, tool-return or retry-prompt)")
        elif m.get("kind") == "response":
            text: list[Text | Image] = []
            calls: list[tuple[Any, Any, Any]] = []
            thinking: list[Thinking] = []
            for k, p in enumerate(as_list(m.get("parts"))):
                pw = f"{w}.parts[{k}]"
                p = ctx.obj(p, pw)
                kind = p.get("part_kind")
                if kind == "text":
                    text.append(Text(_text(b, p.get("content"), pw)))
                elif kind == "tool-call":
                    calls.append((p.get("tool_call_id"), p.get("tool_name"), p.get("args") or {}))
                elif kind == "thinking":
                    provider = str(p.get("provider_name") or "pydantic-ai")
                    data = {"type": "thinking", "thinking": p.get("content", ""), "signature": p.get("signature")} \
                        if provider == "anthropic" else dict(p)
                    thinking.append(Thinking(provider=provider, data=data, text=_text(b, p.get("content", ""), pw)))
                else:
                    b.repairs.append(f"{pw}: response part {kind!r} left out (run by the provider, not sent back)")
            b.assistant(text, calls, w, thinking=thinking, usage=_usage(m.get("usage")))
        else:
            raise ctx.err(f"{w}.kind", f"unknown message kind {m.get('kind')!r} (expected request or response)")
    return [make_trace(id=trace_id, format="pydantic-ai", source=ctx.source, system="\n\n".join(x for x in system if x),
                       tools=(), builder=b, meta={}, notes=notes)]
