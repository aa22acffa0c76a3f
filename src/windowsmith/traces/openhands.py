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

import functools
import json
import re
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

from ..formats.reader import Builder, Ctx, as_dict, as_list, image_from_url, tools_from, usage_from
from ..model import Image, Text, Thinking, ToolSpec
from .base import Trace, make_trace

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
    """One instance (``{instance_id, history, ...}``), a list of them, a bare event list, or a V1 conversation's
    ``base_state.json`` (its events in ``events/`` beside it)."""
    if is_v1_base_state(value):
        return [_v1_conversation(value, ctx, notes)]
    if isinstance(value, list) and value and isinstance(value[0], dict) and "history" not in value[0]:
        value = {"history": value}
    instances = value if isinstance(value, list) else [value]
    out: list[Trace] = []
    for k, inst in enumerate(instances):
        ictx = ctx.sub(f"[{k}]", source=f"{ctx.source}#{k}") if isinstance(value, list) else ctx
        inst = ictx.obj(inst)
        b = Builder()
        history = inst.get("history")
        if isinstance(history, list) and any(is_v1_event(e) for e in history[:5]):
            metrics = as_dict(inst.get("metrics"))
            usages = {str(u["response_id"]): u for u in as_list(metrics.get("token_usages"))
                      if isinstance(u, dict) and u.get("response_id")}
            system, tools, meta = _v1_instance(b, history, ictx, usages)
            meta["model"] = next((u.get("model") for u in usages.values() if u.get("model")), None)
            tool_repairs: list[str] = []
        else:
            system, tools, meta, tool_repairs = _instance(b, inst, ictx)
        md = as_dict(inst.get("metadata"))
        llm = as_dict(md.get("llm_config"))
        metrics = as_dict(inst.get("metrics"))
        meta.update(
            {
                "instance_id": inst.get("instance_id"),
                "model": llm.get("model") or meta.get("model"),
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


# ---------------------------------------------------------------------------------------------------
# OpenHands V1 (the software-agent-sdk): typed events with a ``kind`` discriminator
# ---------------------------------------------------------------------------------------------------

#: the event kinds of the V1 SDK (``openhands/sdk/event``) the model sees, and the ones it never sees
V1_LLM_KINDS = frozenset({"SystemPromptEvent", "MessageEvent", "ActionEvent", "ObservationEvent", "AgentErrorEvent",
                          "UserRejectObservation"})
V1_KINDS = V1_LLM_KINDS | {"ConversationStateUpdateEvent", "Condensation", "CondensationRequest",
                           "CondensationSummaryEvent", "PauseEvent", "TokenEvent", "HookExecutionEvent",
                           "InterruptEvent", "StreamingDeltaEvent", "SystemPromptUpdateEvent"}
#: ``Observation.ERROR_MESSAGE_HEADER`` (``openhands/sdk/tool/schema.py``): what an error observation starts with
V1_ERROR_HEADER = "[An error occurred during execution.]\n"


#: where the parameters of the V1 default tools come from (``data/openhands_v1_tool_parameters.json``)
V1_TOOL_PARAMETERS_SOURCE = "openhands-tools 1.58.2"


@functools.cache
def _v1_default_parameters() -> dict[str, Any]:
    """The JSON-schema parameters of the V1 SDK's default tools (terminal, file_editor, task_tracker, finish,
    think) as openhands-tools 1.58.2 sends them: the event log records each tool's name and description, not
    its parameters, which are a third of the tools' tokens."""
    ref = resources.files("windowsmith").joinpath("data", "openhands_v1_tool_parameters.json")
    return dict(json.loads(ref.read_text(encoding="utf-8"))["tools"])


def is_v1_event(v: Any) -> bool:
    return isinstance(v, dict) and v.get("kind") in V1_KINDS and "source" in v


def _v1_parts(b: Builder, content: Any, where: str) -> list[Text | Image]:
    """SDK content blocks: ``TextContent`` (``{type: text, text}``) and ``ImageContent`` (``image_urls``)."""
    out: list[Text | Image] = []
    for i, c in enumerate(as_list(content)):
        if isinstance(c, dict) and isinstance(c.get("image_urls"), list):
            out.extend(image_from_url(u) for u in c["image_urls"] if isinstance(u, str) and u)
        elif isinstance(c, dict):
            out.append(Text(b.text(c.get("text", ""), f"{where}[{i}]")))
        elif isinstance(c, str):
            out.append(Text(b.text(c, f"{where}[{i}]")))
    return out


def _v1_observation(b: Builder, obs: dict[str, Any], where: str) -> list[Text | Image]:
    """What the model read for an observation (``to_llm_content``): the error header, the content, and for a
    terminal its metadata as ``TerminalObservation`` renders it (prefix, output, suffix, working directory,
    interpreter, exit code)."""
    parts = _v1_parts(b, obs.get("content"), f"{where}.content")
    md = obs.get("metadata")
    if isinstance(md, dict) and ("prefix" in md or "suffix" in md):
        text = "".join(p.text for p in parts if isinstance(p, Text))
        text = f"{md.get('prefix') or ''}{text}{md.get('suffix') or ''}"
        if md.get("working_dir"):
            text += f"\n[Current working directory: {md['working_dir']}]"
        if md.get("py_interpreter_path"):
            text += f"\n[Python interpreter: {md['py_interpreter_path']}]"
        if isinstance(md.get("exit_code"), int) and md["exit_code"] != -1:
            text += f"\n[Command finished with exit code {md['exit_code']}]"
        parts = [Text(text), *(p for p in parts if isinstance(p, Image))]
    if obs.get("is_error"):
        parts = [Text(V1_ERROR_HEADER), *parts]
    return parts


def _v1_instance(b: Builder, events: list[Any], ctx: Ctx, usages: dict[str, Any]
                 ) -> tuple[str, tuple[ToolSpec, ...], dict[str, Any]]:
    """Feed a V1 event stream to ``b`` as ``LLMConvertibleEvent.events_to_messages`` sends it: actions of one
    response (one ``llm_response_id``) are one assistant message; returns the system prompt, the tools and meta."""
    system: list[str] = []
    tools: list[ToolSpec] = []
    skipped: Counter[str] = Counter()
    batch: list[tuple[str, dict[str, Any]]] = []
    restored: list[str] = []

    def flush() -> None:
        if not batch:
            return
        w, first = batch[0]
        text = [p for p in _v1_parts(b, first.get("thought"), f"{w}.thought") if isinstance(p, Text)]
        thinking = [Thinking(provider="anthropic", data=tb, text=b.text(tb.get("thinking", ""), w))
                    for tb in as_list(first.get("thinking_blocks")) if isinstance(tb, dict)]
        calls = []
        for _w, e in batch:
            tc = as_dict(e.get("tool_call"))
            calls.append((tc.get("id") or e.get("tool_call_id"), tc.get("name") or e.get("tool_name"),
                          tc.get("arguments", "{}")))
        b.assistant(text, calls, w, thinking=thinking, usage=usage_from(usages.get(str(first.get("llm_response_id")))))
        batch.clear()

    for i, e in enumerate(events):
        w = f"{ctx.where}.history[{i}]" if ctx.where else f"history[{i}]"
        e = ctx.obj(e, f"history[{i}]")
        kind = e.get("kind")
        if kind == "ActionEvent":
            if batch and batch[0][1].get("llm_response_id") != e.get("llm_response_id"):
                flush()
            batch.append((w, e))
            continue
        flush()
        if kind == "SystemPromptEvent":
            for c in (e.get("system_prompt"), e.get("dynamic_context")):
                if isinstance(c, dict) and c.get("text"):
                    system.append(b.text(c["text"], w))
            shipped = _v1_default_parameters()
            for t in as_list(e.get("tools")):
                t = as_dict(t)
                name = t.get("title") or t.get("name") or as_dict(t.get("annotations")).get("title")
                if isinstance(name, str) and name:
                    params = shipped.get(name)
                    if params is not None:
                        restored.append(name)
                    tools.append(ToolSpec(name, str(t.get("description") or ""),
                                          params if params is not None else {"type": "object", "properties": {}}))
        elif kind == "MessageEvent":
            msg = as_dict(e.get("llm_message"))
            parts = _v1_parts(b, [*as_list(msg.get("content")), *as_list(e.get("extended_content"))], f"{w}.llm_message")
            if msg.get("role") == "assistant":  # a reply without a tool call: its response's usage too
                b.assistant([p for p in parts if isinstance(p, Text)], (), w,
                            usage=usage_from(usages.get(str(e.get("llm_response_id")))))
            elif msg.get("role") == "system":
                system.extend(p.text for p in parts if isinstance(p, Text))
            else:
                b.user(parts, w)
        elif kind == "ObservationEvent":
            b.tool_result(e.get("tool_call_id"), _v1_observation(b, as_dict(e.get("observation")), f"{w}.observation"),
                          w, name=e.get("tool_name"), is_error=bool(as_dict(e.get("observation")).get("is_error")))
        elif kind == "AgentErrorEvent":
            b.tool_result(e.get("tool_call_id"), [Text(b.text(e.get("error", ""), w))], w, name=e.get("tool_name"),
                          is_error=True)
        elif kind == "UserRejectObservation":
            b.tool_result(e.get("tool_call_id"), [Text(f"Action rejected: {e.get('rejection_reason', '')}")], w,
                          name=e.get("tool_name"), is_error=True)
        else:
            skipped[str(kind)] += 1
    flush()
    meta: dict[str, Any] = {"version": "1.x", "tool_schemas_recorded": False}
    if restored:  # the event log names the tools and describes them; their parameters are the SDK's defaults'
        meta["tool_parameters_restored"] = {"from": V1_TOOL_PARAMETERS_SOURCE, "tools": restored}
    if skipped:
        meta["skipped_events"] = dict(sorted(skipped.items()))
    return "\n\n".join(system), tuple(tools), meta


def is_v1_base_state(v: Any) -> bool:
    """A V1 SDK conversation's ``base_state.json`` (``~/.openhands/conversations/<id>/``)."""
    return isinstance(v, dict) and isinstance(v.get("agent"), dict) and "stats" in v and "execution_status" in v


#: the SDK's event file name (``event-<index>-<event id>.json``, ``conversation/event_store.py``)
_EVENT_FILE = re.compile(r"event-(\d+)-[^/]*\.json$")


def _event_index(p: Path) -> int:
    m = _EVENT_FILE.match(p.name)
    return int(m.group(1)) if m else -1


def _v1_conversation(state: dict[str, Any], ctx: Ctx, notes: list[str]) -> Trace:
    """A conversation the V1 SDK persisted: ``base_state.json`` (agent, stats) and one file per event under
    ``events/``, in index order; each call's usage from the stats' per-usage metrics by response id."""
    events_dir = ctx.path.parent / "events"
    files = sorted((f for f in events_dir.glob("event-*.json") if _event_index(f) >= 0), key=_event_index) \
        if events_dir.is_dir() else []
    if not files:
        raise ctx.err("events", f"an OpenHands conversation's base_state.json needs its events beside it "
                                f"({events_dir}/event-<index>-<id>.json); none found")
    events: list[Any] = []
    for f in files:
        try:
            events.append(json.loads(f.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ctx.err(f"events/{f.name}", f"unreadable event file ({type(e).__name__}: {e})") from None
    usages: dict[str, Any] = {}
    for m in as_dict(as_dict(state.get("stats")).get("usage_to_metrics")).values():
        for u in as_list(as_dict(m).get("token_usages")):
            if isinstance(u, dict) and u.get("response_id"):
                usages[str(u["response_id"])] = u
    b = Builder()
    system, tools, meta = _v1_instance(b, events, ctx.sub("events"), usages)
    meta.update({"model": as_dict(as_dict(state.get("agent")).get("llm")).get("model"),
                 "execution_status": state.get("execution_status"), "events": len(events)})
    return make_trace(id=str(state.get("id") or ctx.path.parent.name), format="openhands", source=str(ctx.path),
                      system=system, tools=tools, builder=b, meta=meta, notes=notes)
