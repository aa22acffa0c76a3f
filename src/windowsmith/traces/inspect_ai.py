"""Inspect AI evaluation logs (``inspect eval ... --log-format json``): one trace per sample and epoch.

A log is ``{version, status, eval, plan, results, stats, samples}``; each sample's ``messages`` is the
conversation as the solver left it: ``system``, ``user``, ``assistant`` (``tool_calls`` with ``function`` and
``arguments`` as an object) and ``tool`` messages (``tool_call_id``, ``function``, and an ``error`` when the call
failed), each ``content`` a string or a list of typed parts (``text``, ``image``, ``reasoning``); a text Inspect
stored once as an attachment is an ``attachment://<hash>`` reference, resolved from the sample's ``attachments``. What each model
call was billed is on the sample's ``model`` events (``output.usage``), matched to the message it produced by id
(in call order where messages carry none); the tools the model was
offered are on those events too (``tools``: name, description, parameters). Reasoning parts become thinking
blocks of provider ``inspect`` (their text counted where the model keeps thinking; never passed back to a
provider, whose signature format Inspect does not record); other parts (audio, video, documents) are named by a
placeholder and noted.
"""

from __future__ import annotations

import json
from typing import Any

from ..formats.reader import Builder, Ctx, as_dict, as_list, image_from_url, tools_from, usage_from
from ..model import Image, Text, Thinking
from .base import Trace, make_trace

_ATTACHMENT = "attachment://"


def _resolve(v: Any, attachments: dict[str, Any]) -> Any:
    """``v`` with every ``attachment://<hash>`` string (and the older ``tc://`` flavour) swapped for the text the
    sample's ``attachments`` hold under that hash, as Inspect reads its logs; unknown refs stay as they are."""
    if isinstance(v, str):
        ref = v.replace("tc://", _ATTACHMENT, 1) if v.startswith("tc://") else v
        if ref.startswith(_ATTACHMENT):
            got = attachments.get(ref[len(_ATTACHMENT):])
            return got if isinstance(got, str) else v
        return v
    if isinstance(v, list):
        return [_resolve(x, attachments) for x in v]
    if isinstance(v, dict):
        return {k: _resolve(x, attachments) for k, x in v.items()}
    return v


def is_inspect_log(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("eval"), dict) and isinstance(v.get("samples"), list) \
        and "version" in v


def _parts(b: Builder, content: Any, where: str) -> tuple[list[Text | Image], list[Thinking]]:
    if content is None:
        return [], []
    if isinstance(content, str):
        return [Text(b.text(content, where))], []
    out: list[Text | Image] = []
    thinking: list[Thinking] = []
    for i, c in enumerate(as_list(content)):
        w = f"{where}[{i}]"
        if isinstance(c, str):
            out.append(Text(b.text(c, w)))
            continue
        c = as_dict(c)
        t = c.get("type")
        if t == "text":
            out.append(Text(b.text(c.get("text", ""), w)))
        elif t == "image" and isinstance(c.get("image"), str):
            out.append(image_from_url(c["image"]))
        elif t == "reasoning":
            thinking.append(Thinking(provider="inspect", data=c, text=b.text(c.get("reasoning") or c.get("summary") or "", w)))
        else:
            b.repairs.append(f"{w}: content part of type {t!r} kept as a placeholder")
            out.append(Text(f"[{t} content]"))
    return out, thinking


def _model_events(sample: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The sample's model calls: each one's billed usage and offered tools by the id of the message it produced
    (a scorer's or a sub-agent's calls produce no message of the conversation, so they match nothing), and the
    usages in call order (for logs whose messages carry no ids)."""
    by_id: dict[str, Any] = {}
    ordered: list[Any] = []
    for e in as_list(sample.get("events")):
        if isinstance(e, dict) and e.get("event") == "model":
            out = as_dict(e.get("output"))
            choices = as_list(out.get("choices"))
            msg = as_dict(as_dict(choices[0]).get("message")) if choices else {}
            call = (out.get("usage"), e.get("tools"))
            ordered.append(call)
            if isinstance(msg.get("id"), str):
                by_id[msg["id"]] = call
    return by_id, ordered


def import_inspect_log(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    log = ctx.obj(value)
    ev = as_dict(log.get("eval"))
    task = str(ev.get("task") or trace_id)
    out: list[Trace] = []
    for k, s in enumerate(ctx.get(log, "samples", list)):
        sctx = ctx.sub(f"samples[{k}]")
        s = sctx.obj(s)
        b = Builder()
        system: list[str] = []
        by_id, ordered = _model_events(s)
        tools_raw: Any = None
        attachments = as_dict(s.get("attachments"))
        generated = 0
        for i, m in enumerate(sctx.get(s, "messages", list)):
            w = f"{sctx.where}.messages[{i}]"
            m = _resolve(sctx.obj(m, f"messages[{i}]"), attachments)
            role = m.get("role")
            parts, thinking = _parts(b, m.get("content"), w)
            if role == "system":
                system.append("\n".join(p.text for p in parts if isinstance(p, Text)))
            elif role == "user":
                b.user(parts, w)
            elif role == "assistant":
                calls = []
                for j, tc in enumerate(as_list(m.get("tool_calls"))):
                    tc = sctx.obj(tc, f"messages[{i}].tool_calls[{j}]")
                    args = tc.get("arguments")
                    calls.append((tc.get("id"), tc.get("function"), args if isinstance(args, (dict, str)) else json.dumps(args)))
                call = None
                if isinstance(m.get("id"), str) and by_id:
                    call = by_id.get(m["id"])
                elif m.get("source") == "generate" or "source" not in m:
                    call = ordered[generated] if generated < len(ordered) else None
                    generated += 1
                if call is not None and tools_raw is None and isinstance(call[1], list):
                    tools_raw = call[1]  # the tools the agent's first call offered
                b.assistant(parts, calls, w, thinking=thinking, usage=usage_from(call[0]) if call else None)
            elif role == "tool":
                err = m.get("error")
                if isinstance(err, dict) and err.get("message"):
                    parts = [*parts, Text(b.text(f"{err.get('type', 'error')}: {err['message']}", w))]
                b.tool_result(m.get("tool_call_id"), parts, w, name=m.get("function"), is_error=bool(err))
            else:
                raise sctx.err(f"messages[{i}].role", f"unknown role {role!r} (expected system, user, assistant or tool)")
        repairs: list[str] = []
        tools = tools_from(tools_raw or None, sctx.sub("events.tools"), repairs)
        meta = {"task": task, "model": ev.get("model"), "sample_id": s.get("id"), "epoch": s.get("epoch"),
                "status": log.get("status"), "inspect_version": log.get("version"),
                "model_usage": s.get("model_usage")}
        out.append(make_trace(id=f"{task}/{s.get('id')}/epoch{s.get('epoch', 1)}", format="inspect-ai",
                              source=f"{ctx.source}#samples[{k}]", system="\n\n".join(x for x in system if x),
                              tools=tools, builder=b, meta=meta, notes=notes, extra_repairs=repairs))
    return out
