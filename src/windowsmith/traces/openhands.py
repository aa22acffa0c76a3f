"""OpenHands evaluation output: JSONL, one instance per line, ``history`` = the event stream.

Events have ``source`` (agent/user/environment) and either ``action`` or ``observation``. The CodeAct
agent's model turns are recovered from ``tool_call_metadata``: ``model_response`` is the raw chat
completion (text + every tool call of that response, arguments as sent) and ``tool_call_id`` /
``function_name`` tie each action and its observation to one call. Several actions produced by one
response share that response and become one assistant message. The response ``usage`` is billed.

Mapping: ``system`` action → system prompt and tool schemas (``args.tools``); user ``message`` →
user text; agent action with metadata → assistant tool call; observation with metadata → tool
result (``run`` output rendered like ``CmdOutputObservation.to_agent_observation``: prefix, content,
suffix, working directory, exit code); an ``error`` observation without metadata (a tool call the
agent rejected) → user text ending in ``[Error occurred in processing last action]``, as OpenHands
sends it. ``recall`` actions/observations (workspace context, microagents) are not reproduced and are
counted in ``meta["skipped_events"]``; a ``finish`` call has no observation, so it gets the
synthetic no-result answer with a repair note.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..model import Image, Text
from .base import Builder, Ctx, Trace, as_dict, as_list, image_from_url, make_trace, tools_from, usage_from

_BOOKKEEPING = {
    "thought",
    "is_input",
    "blocking",
    "is_static",
    "cwd",
    "hidden",
    "confirmation_state",
    "security_risk",
    "impl_source",
}


def _render_observation(e: dict[str, Any]) -> str:
    content = e.get("content")
    text = content if isinstance(content, str) else ("" if content is None else str(content))
    extras = as_dict(e.get("extras"))
    md = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else None
    if e.get("observation") == "run" and md is not None:
        text = f"{md.get('prefix') or ''}{text}{md.get('suffix') or ''}"
        if md.get("working_dir"):
            text += f"\n[Current working directory: {md['working_dir']}]"
        if md.get("py_interpreter_path"):
            text += f"\n[Python interpreter: {md['py_interpreter_path']}]"
        if md.get("exit_code", -1) not in (-1, None):
            text += f"\n[Command finished with exit code {md['exit_code']}]"
    return text


def _instance(b: Builder, inst: dict[str, Any], ctx: Ctx) -> tuple[str, tuple[Any, ...], dict[str, Any], list[str]]:
    history = ctx.get(inst, "history", list)
    system = ""
    tools: tuple[Any, ...] = ()
    tool_repairs: list[str] = []
    skipped: Counter[str] = Counter()
    current_response: str | None = None
    version = None
    for i, e in enumerate(history):
        w = f"{ctx.where}.history[{i}]" if ctx.where else f"history[{i}]"
        e = ctx.obj(e, f"history[{i}]")
        action, obs, src = e.get("action"), e.get("observation"), e.get("source")
        args = as_dict(e.get("args"))
        tcm = e.get("tool_call_metadata") if isinstance(e.get("tool_call_metadata"), dict) else None
        if action == "system":
            system = b.text(args.get("content") or e.get("message") or "", w)
            tools = tools_from(args.get("tools"), ctx.sub(f"history[{i}].args.tools"), tool_repairs)
            version = args.get("openhands_version")
            continue
        if action is not None:
            if tcm is not None:
                resp = as_dict(tcm.get("model_response"))
                rid = resp.get("id") or f"event-{e.get('id', i)}"
                if rid == current_response:
                    continue  # another tool call of the response already emitted
                current_response = rid
                choices = as_list(resp.get("choices"))
                msg = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
                if isinstance(msg, dict):
                    calls = []
                    for tc in msg.get("tool_calls") or []:
                        if isinstance(tc, dict):
                            fn = as_dict(tc.get("function"))
                            calls.append((tc.get("id"), fn.get("name"), fn.get("arguments")))
                    b.assistant(msg.get("content") or "", calls, w, usage=usage_from(resp.get("usage")))
                else:  # no raw response kept: rebuild the call from the action itself
                    call_args = {k: v for k, v in args.items() if k not in _BOOKKEEPING}
                    b.assistant(
                        args.get("thought") or "", [(tcm.get("tool_call_id"), tcm.get("function_name"), call_args)], w
                    )
                continue
            current_response = None
            if action == "message":
                content: list[Text | Image] = [Text(b.text(args.get("content") or e.get("message") or "", w))]
                for url in args.get("image_urls") or []:
                    if isinstance(url, str) and url:
                        content.append(image_from_url(url))
                if src == "user":
                    b.user(content, w)
                else:
                    b.assistant([c for c in content if isinstance(c, Text)], (), w)
            elif action == "finish" and src == "agent":
                b.assistant(args.get("final_thought") or args.get("message") or e.get("message") or "", (), w)
            else:
                skipped[f"action:{action}"] += 1
            continue
        if obs is not None:
            if tcm is not None:
                b.tool_result(
                    tcm.get("tool_call_id"),
                    _render_observation(e),
                    w,
                    name=tcm.get("function_name"),
                    is_error=obs == "error",
                )
            elif obs == "error":
                current_response = None
                b.user(f"{_render_observation(e)}\n[Error occurred in processing last action]", w)
            elif obs == "user_rejected":
                current_response = None
                b.user(_render_observation(e), w)
            else:
                skipped[f"observation:{obs}"] += 1
            continue
        skipped["unknown"] += 1
    meta: dict[str, Any] = {"openhands_version": version}
    if skipped:
        meta["skipped_events"] = dict(skipped)
    return system, tools, meta, tool_repairs


def import_openhands(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    """One instance (``{instance_id, history, ...}``), a list of them, or a bare event list."""
    if isinstance(value, list) and value and isinstance(value[0], dict) and "history" not in value[0]:
        value = {"history": value}
    instances = value if isinstance(value, list) else [value]
    out: list[Trace] = []
    for k, inst in enumerate(instances):
        ictx = ctx.sub(f"[{k}]", source=f"{ctx.source}#{k}") if isinstance(value, list) else ctx
        inst = ictx.obj(inst)
        b = Builder()
        system, tools, meta, tool_repairs = _instance(b, inst, ictx)
        md = as_dict(inst.get("metadata"))
        llm = as_dict(md.get("llm_config"))
        metrics = as_dict(inst.get("metrics"))
        meta.update(
            {
                "instance_id": inst.get("instance_id"),
                "model": llm.get("model"),
                "agent_class": md.get("agent_class"),
                "accumulated_token_usage": metrics.get("accumulated_token_usage"),
                "accumulated_cost": metrics.get("accumulated_cost"),
                "error": inst.get("error"),
            }
        )
        tid = str(inst.get("instance_id") or (f"{trace_id}/{k}" if isinstance(value, list) else trace_id))
        out.append(
            make_trace(
                id=tid,
                format="openhands",
                source=ictx.source,
                system=system,
                tools=tools,
                builder=b,
                meta=meta,
                notes=notes,
                extra_repairs=tool_repairs,
            )
        )
    return out
