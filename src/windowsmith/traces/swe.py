"""SWE-bench agents: mini-swe-agent and SWE-agent trajectories.

mini-swe-agent (``*.traj.json``, ``trajectory_format: mini-swe-agent-1``): ``messages`` with roles
``system``/``user``/``assistant``; actions are bash blocks in assistant text and observations come
back as user messages, so there are no native tool calls: they stay text. The raw API response of
each assistant turn is under ``extra.response``; its ``usage`` is the billed usage of that call.
Reasoning (Gemini ``reasoning_details``) was never sent back by the agent and is only counted in meta.
mini-swe-agent 2.x (``trajectory_format: mini-swe-agent-1.1``) keeps each model's own message shape: with a
tool-calling chat model (its default) assistant ``tool_calls`` to its one ``bash`` tool answered by ``role: tool``
messages; with a Responses API model the response object itself (``object: response``; its ``output`` items:
reasoning, messages, ``function_call``) answered by ``function_call_output`` items; text-based models as in 1.x.
A run ends with a ``role: exit`` message (exit status, submission), which was never sent and is left out.

SWE-agent (``*.traj``): ``history`` with roles ``system``/``user``/``assistant``/``tool``; 1.x
function-calling runs have OpenAI ``tool_calls`` on assistant entries and ``tool_call_ids`` on tool
entries; 0.x runs have text actions and user observations. Demonstrations (``is_demo``) were part of
the prompt and are kept. A file with only ``trajectory`` is rebuilt from the last step's ``messages``
when present, else from each step's ``response`` and ``observation``.
"""

from __future__ import annotations

from typing import Any

from ..formats.openai_chat import chat_parts
from ..formats.openai_responses import read_items
from ..formats.reader import Builder, Ctx, as_dict, as_list, tools_from, usage_from
from .base import Trace, make_trace

#: the one tool mini-swe-agent 2.x declares to a tool-calling model (``minisweagent/models/utils/actions_toolcall.py``,
#: ``BASH_TOOL``; the Responses form has the same name, description and parameters): the chat form's trajectory
#: does not record the definitions it sent, so they are restored from the agent's source
MINI_BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
            "required": ["command"],
        },
    },
}


def import_mini_swe_agent(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    doc = ctx.obj(value)
    msgs = ctx.get(doc, "messages", list)
    info = as_dict(doc.get("info"))
    b = Builder()
    system: list[str] = []
    reasoning = 0
    model = None
    native = False  # 2.x with a tool-calling model: tool calls and their results, not bash blocks in text
    tools_raw: Any = None
    exits: list[dict[str, Any]] = []
    for i, m in enumerate(msgs):
        w = f"messages[{i}]"
        m = ctx.obj(m, w)
        role = m.get("role")
        kind = m.get("type")
        if m.get("object") == "response":  # 2.x, a Responses API model: the response object is the turn
            model = m.get("model") or model
            tools_raw = m.get("tools") or tools_raw
            native = True
            _response_turn(b, ctx, m, w)
        elif kind in ("function_call_output", "custom_tool_call_output"):  # 2.x Responses: a command's output
            b.tool_result(m.get("call_id"), chat_parts(b, m.get("output"), w), w)
        elif role == "system" or (kind == "message" and role in ("system", "developer")):
            system.append("\n".join(p.text for p in chat_parts(b, m.get("content"), w) if hasattr(p, "text")))
        elif role == "user":  # the task, a format error, or (1.x, text-based 2.x) a command's output
            b.user(chat_parts(b, m.get("content"), w), w)
        elif role == "assistant":
            named, blocks, called = _mini_assistant(b, ctx, m, w)
            model = named or model
            reasoning += blocks
            native = native or called
        elif role == "tool":  # 2.x, a chat model's tool call answered
            b.tool_result(m.get("tool_call_id"), chat_parts(b, m.get("content"), w), w,
                          is_error=bool(m.get("is_error", False)))
        elif role == "exit":  # 2.x: how the run ended (exit status, submission); never sent to the model
            exits.append(as_dict(m.get("extra")))
        else:
            raise ctx.err(f"{w}.role", f"unknown role {role!r} (expected system, user, assistant, tool or exit; "
                                       "or a Responses API response object or function_call_output item)")
    cfg = as_dict(info.get("config"))
    model_cfg = as_dict(cfg.get("model"))
    repairs: list[str] = []
    tools = tools_from(tools_raw if tools_raw is not None else [MINI_BASH_TOOL] if native else None,
                       ctx.sub("tools"), repairs)
    last_exit = exits[-1] if exits else {}
    meta: dict[str, Any] = {
        "instance_id": doc.get("instance_id"),
        "exit_status": info.get("exit_status") or last_exit.get("exit_status"),
        "model": model_cfg.get("model_name") or model,
        "model_stats": info.get("model_stats"),
        "mini_version": info.get("mini_version"),
        "submission": info.get("submission") if "submission" in info else last_exit.get("submission"),
    }
    if doc.get("trajectory_format"):
        meta["trajectory_format"] = doc["trajectory_format"]
    if exits:
        notes = [*notes, f"{len(exits)} exit message(s) (how the run ended, never sent to the model) left out"]
    if reasoning:
        meta["reasoning_blocks_not_replayed"] = reasoning
    return [
        make_trace(
            id=str(doc.get("instance_id") or trace_id),
            format="mini-swe-agent",
            source=ctx.source,
            system="\n\n".join(system),
            tools=tools,
            builder=b,
            meta=meta,
            notes=notes,
            extra_repairs=repairs,
        )
    ]


def _mini_assistant(b: Builder, ctx: Ctx, m: dict[str, Any], w: str) -> tuple[Any, int, bool]:
    """Feed a mini-swe-agent assistant message to ``b``: (the model its response names, if any, how many
    reasoning blocks it had, whether it made tool calls)."""
    extra = as_dict(m.get("extra"))
    resp = as_dict(extra.get("response"))
    reasoning = 0
    choices = as_list(resp.get("choices"))
    if choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
        details = choices[0]["message"].get("reasoning_details")
        if isinstance(details, list):
            reasoning = len(details)
    calls = []
    tcs = m.get("tool_calls")
    if tcs is not None and not isinstance(tcs, list):
        raise ctx.err(f"{w}.tool_calls", "expected a JSON array or null")
    for k, tc in enumerate(tcs or ()):
        tc = ctx.obj(tc, f"{w}.tool_calls[{k}]")
        fn = as_dict(tc.get("function")) or tc
        calls.append((tc.get("id"), fn.get("name"), fn.get("arguments")))
    b.assistant(chat_parts(b, m.get("content"), w), calls, w,
                usage=usage_from(resp.get("usage")) or usage_from(m.get("usage")))
    return resp.get("model"), reasoning, bool(calls)


def _response_turn(b: Builder, ctx: Ctx, resp: dict[str, Any], where: str) -> None:
    """One assistant turn from a Responses API response object: mini-swe-agent 2.x sends its ``output`` items back
    as the next request's input, as a Responses log holds them."""
    read_items(b, as_list(resp.get("output")), ctx.sub(f"{where}.output"), [], usage=usage_from(resp.get("usage")))


def _history_entries(b: Builder, entries: list[Any], ctx: Ctx, key: str) -> list[str]:
    system: list[str] = []
    for i, m in enumerate(entries):
        w = f"{ctx.where}.{key}[{i}]" if ctx.where else f"{key}[{i}]"
        m = ctx.obj(m, f"{key}[{i}]")
        role = m.get("role")
        parts = chat_parts(b, m.get("content"), w)
        if role == "system":
            system.append("\n".join(p.text for p in parts if hasattr(p, "text")))
        elif role == "user":
            b.user(parts, w)
        elif role == "assistant":
            calls = []
            for k, tc in enumerate(m.get("tool_calls") or []):
                tc = ctx.obj(tc, f"{key}[{i}].tool_calls[{k}]")
                fn = as_dict(tc.get("function")) or tc
                calls.append((tc.get("id"), fn.get("name"), fn.get("arguments")))
            b.assistant(parts, calls, w)
        elif role == "tool":
            ids = m.get("tool_call_ids") or ([m["tool_call_id"]] if m.get("tool_call_id") else [None])
            if len(ids) > 1:
                b.repairs.append(f"{w}: one observation for {len(ids)} tool calls; given to the first call")
            b.tool_result(ids[0], parts, w)
        else:
            raise ctx.err(f"{key}[{i}].role", f"unknown role {role!r} (expected system, user, assistant or tool)")
    return system


def import_swe_agent(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    doc = ctx.obj(value)
    b = Builder()
    history = doc.get("history")
    traj = doc.get("trajectory")
    meta: dict[str, Any] = {}
    if isinstance(history, list) and history:
        system = _history_entries(b, history, ctx, "history")
        meta["rebuilt_from"] = "history"
        agents = sorted({str(m.get("agent")) for m in history if isinstance(m, dict) and m.get("agent")})
        if agents:
            meta["agents"] = agents
        meta["demonstration_messages"] = sum(1 for m in history if isinstance(m, dict) and m.get("is_demo"))
        meta["version"] = "1.x" if any(isinstance(m, dict) and m.get("role") == "tool" for m in history) else "0.x"
    elif isinstance(traj, list) and traj:
        last = ctx.obj(traj[-1], f"trajectory[{len(traj) - 1}]")
        if isinstance(last.get("messages"), list):
            system = _history_entries(b, last["messages"], ctx.sub(f"trajectory[{len(traj) - 1}]"), "messages")
            b.assistant(last.get("response") or "", (), f"trajectory[{len(traj) - 1}].response")
            b.user(last.get("observation") or "", f"trajectory[{len(traj) - 1}].observation")
        else:
            system = []
            for i, step in enumerate(traj):
                step = ctx.obj(step, f"trajectory[{i}]")
                text = step.get("response") or "\n".join(str(step.get(k) or "") for k in ("thought", "action")).strip()
                b.assistant(text, (), f"trajectory[{i}].response")
                b.user(step.get("observation") or "", f"trajectory[{i}].observation")
        meta["rebuilt_from"] = "trajectory"
    else:
        raise ctx.err("history", "a SWE-agent trajectory needs a non-empty 'history' or 'trajectory' array")
    info = as_dict(doc.get("info"))
    meta.update(
        {
            "exit_status": info.get("exit_status"),
            "model_stats": info.get("model_stats"),
            "environment": doc.get("environment"),
        }
    )
    replay = doc.get("replay_config")
    if isinstance(replay, dict):
        ps = as_dict(replay.get("problem_statement"))
        if ps.get("id"):
            meta["instance_id"] = ps["id"]
        agent = as_dict(replay.get("agent"))
        model = as_dict(agent.get("model"))
        if model.get("name"):
            meta["model"] = model["name"]
    return [
        make_trace(
            id=trace_id,
            format="swe-agent",
            source=ctx.source,
            system="\n\n".join(system),
            tools=(),
            builder=b,
            meta=meta,
            notes=notes,
        )
    ]
