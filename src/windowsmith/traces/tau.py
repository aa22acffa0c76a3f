"""tau-bench and tau2-bench result files (sierra-research).

tau-bench: a list of runs ``{task_id, trial, reward, info, traj}``; ``traj`` is OpenAI chat messages
with the system policy first. Real quirk: the gpt-4o airline file reuses tool-call ids within a run
(49 of 200 runs); later duplicates are renamed ``<id>~2`` with a repair note.

tau2-bench: ``{info{agent_info, environment_info{policy, tool_defs}}, tasks, simulations}``; each
simulation's ``messages`` have roles ``assistant``/``user``/``tool``; tool calls are
``{id, name, arguments (dict), requestor}``, tool messages carry the call ``id``, a ``requestor`` and
an ``error`` flag. Assistant ``usage`` (prompt/completion tokens) is the billed usage of the call;
user messages carry the user *simulator's* usage, which is not ours and is kept out of ``billed``.
``tool_defs`` is null in the published files, so ``tools`` is empty and ``meta["tools_recorded"]``
says so. An Anthropic agent's ``raw_data.thinking_blocks`` are replayed as the assistant turn's
thinking blocks (``meta["thinking_blocks"]`` counts them): the provider billed the current tool
loop's (the model's ``thinking_kept`` rule), so the token count needs them.

Dual control (telecom): the simulated user runs tools on its own device. A user message with
``tool_calls`` goes to the user's environment, and a tool message whose ``requestor`` is ``user``
answers it; the agent never sees either (its next prompt holds only the user's plain messages), so
both are left out of the agent's trace, their text included, and ``meta["user_side_messages"]``
counts them. Checked against the billed ``prompt_tokens`` growth between consecutive agent calls:
keeping them (or only their text) overcounts the growth.
"""

from __future__ import annotations

from typing import Any

from ..formats.openai_chat import read_messages
from ..formats.reader import Builder, Ctx, as_dict, tools_from, usage_from
from ..model import Thinking, Usage
from .base import Trace, make_trace


def import_tau_bench(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    runs = value if isinstance(value, list) else [value]
    out: list[Trace] = []
    ids: set[str] = set()
    for i, run in enumerate(runs):
        rctx = ctx.sub(f"[{i}]", source=f"{ctx.source}#{i}")
        run = rctx.obj(run)
        traj = rctx.get(run, "traj", list)
        b = Builder()
        system = read_messages(b, traj, rctx.sub("traj"))
        info = as_dict(run.get("info"))
        meta: dict[str, Any] = {
            "task_id": run.get("task_id"),
            "trial": run.get("trial"),
            "reward": run.get("reward"),
            "index": i,
        }
        task = as_dict(info.get("task"))
        if task.get("instruction"):
            meta["instruction"] = task["instruction"]
        if "user_cost" in info:
            meta["user_cost"] = info["user_cost"]
        tid = f"{trace_id}/task-{run.get('task_id')}/trial-{run.get('trial')}"
        if tid in ids:
            tid = f"{tid}/#{i}"
        ids.add(tid)
        out.append(
            make_trace(
                id=tid,
                format="tau-bench",
                source=rctx.source,
                system="\n\n".join(system),
                tools=(),
                builder=b,
                meta=meta,
                notes=notes,
            )
        )
    return out


def _tau2_system(info: dict[str, Any]) -> str:
    env = as_dict(info.get("environment_info"))
    agent = as_dict(info.get("agent_info"))
    parts = []
    for key in ("system_prompt", "instructions", "agent_instruction"):
        if isinstance(agent.get(key), str) and agent[key].strip():
            parts.append(agent[key])
            break
    if isinstance(env.get("policy"), str) and env["policy"].strip():
        parts.append(env["policy"])
    return "\n\n".join(parts)


def _tau2_usage(m: dict[str, Any]) -> Usage | None:
    usage = usage_from(m.get("usage"))
    raw = m.get("raw_data")
    if usage is not None and isinstance(raw, dict):
        # Anthropic raw responses split cache reads/writes; keep that split when it sums to the same total
        finer = usage_from(raw.get("usage"))
        if (
            finer is not None
            and finer.prompt_tokens == usage.prompt_tokens
            and finer.output_tokens == usage.output_tokens
        ):
            usage = finer
    return usage


def _tau2_thinking(b: Builder, m: dict[str, Any], where: str) -> list[Thinking]:
    """An Anthropic assistant turn's thinking blocks (``raw_data.thinking_blocks``, as the API returned
    them, signature included): replayed as ``Thinking(provider="anthropic")``, which the Anthropic
    renderer sends back unchanged and the counter bills by the model's ``thinking_kept`` rule."""
    raw = as_dict(m.get("raw_data"))
    blocks = raw.get("thinking_blocks")
    if not isinstance(blocks, list):
        return []
    out = []
    for k, blk in enumerate(blocks):
        if isinstance(blk, dict) and blk.get("type") in ("thinking", "redacted_thinking"):
            text = b.text(blk.get("thinking", ""), f"{where}.raw_data.thinking_blocks[{k}]")
            out.append(Thinking(provider="anthropic", data=dict(blk), text=text))
    return out


def _tau2_messages(b: Builder, msgs: list[Any], sctx: Ctx) -> tuple[int, int]:
    """Feed one simulation's messages to ``b``: (thinking blocks kept, user-side messages left out)."""
    thinking_blocks = 0
    user_side = 0
    for i, m in enumerate(msgs):
        w = f"{sctx.where}.messages[{i}]"
        m = sctx.obj(m, f"messages[{i}]")
        role = m.get("role")
        calls = m.get("tool_calls") or []
        if not isinstance(calls, list):
            raise sctx.err(f"messages[{i}].tool_calls", "expected a JSON array")
        if role == "assistant":
            agent_calls = [
                c for c in calls if isinstance(c, dict) and c.get("requestor", "assistant") == "assistant"
            ]
            thinking = _tau2_thinking(b, m, w)
            thinking_blocks += len(thinking)
            b.assistant(
                m.get("content") or "",
                [(c.get("id"), c.get("name"), c.get("arguments")) for c in agent_calls],
                w,
                thinking=thinking,
                usage=_tau2_usage(m),
            )
        elif role == "user":
            if calls:  # the simulated user runs its own tools (dual control): the agent never sees it
                user_side += 1
                continue
            b.user(b.text(m.get("content") or "", w), w)
        elif role == "tool":
            content = m.get("content")
            if m.get("requestor", "assistant") != "assistant":
                user_side += 1  # the result of a user-side tool call: not in the agent's prompt
                continue
            else:
                b.tool_result(m.get("id"), content if content is not None else "", w, is_error=bool(m.get("error")))
        else:
            raise sctx.err(f"messages[{i}].role", f"unknown role {role!r} (expected assistant, user or tool)")
    return thinking_blocks, user_side


def import_tau2_bench(value: Any, ctx: Ctx, notes: list[str], trace_id: str) -> list[Trace]:
    doc = ctx.obj(value)
    info = ctx.get(doc, "info", dict, required=False) or {}
    sims = ctx.get(doc, "simulations", list)
    env = as_dict(info.get("environment_info"))
    system = _tau2_system(info)
    tool_repairs: list[str] = []
    tools = tools_from(env.get("tool_defs"), ctx.sub("info.environment_info.tool_defs"), tool_repairs)
    agent_info = as_dict(info.get("agent_info"))
    out: list[Trace] = []
    for si, sim in enumerate(sims):
        sctx = ctx.sub(f"simulations[{si}]", source=f"{ctx.source}#simulations[{si}]")
        sim = sctx.obj(sim)
        msgs = sctx.get(sim, "messages", list)
        b = Builder()
        thinking_blocks, user_side = _tau2_messages(b, msgs, sctx)
        reward_info = as_dict(sim.get("reward_info"))
        meta: dict[str, Any] = {
            "simulation_id": sim.get("id"),
            "task_id": sim.get("task_id"),
            "trial": sim.get("trial"),
            "reward": reward_info.get("reward"),
            "termination_reason": sim.get("termination_reason"),
            "agent_cost": sim.get("agent_cost"),
            "model": agent_info.get("llm"),
            "domain": env.get("domain_name"),
            "tools_recorded": env.get("tool_defs") is not None,
        }
        if thinking_blocks:
            meta["thinking_blocks"] = thinking_blocks
        if user_side:
            meta["user_side_messages"] = user_side
        sid = sim.get("id") or f"{si}"
        out.append(
            make_trace(
                id=f"{trace_id}/{sid}",
                format="tau2-bench",
                source=sctx.source,
                system=system,
                tools=tools,
                builder=b,
                meta=meta,
                notes=notes,
                extra_repairs=tool_repairs,
            )
        )
    return out
