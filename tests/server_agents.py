"""Simulated agents for the proxy tests and the load benchmark: real SDK clients, real observations.

Each agent runs the task of a real mini-swe-agent trace: it sends the trace's system prompt and task,
and answers every tool call the (fake) model makes with the trace's next observation, as agents do,
sending its whole conversation each turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from windowsmith.traces import load_traces

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
TRACE = DATA / "mini-swe-agent" / "astropy__astropy-14182.traj.json"

OPENAI_TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run one shell command in the repository and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
ANTHROPIC_TOOLS = [{"name": "bash", "description": "Run one shell command in the repository and return its output.",
                    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


def task_and_observations(path: Path = TRACE) -> tuple[str, str, list[str]]:
    t = load_traces(path)[0]
    users = [m.text for m in t.messages if m.role == "user"]
    return t.system or "", users[0], users[1:]


def _openai_text(chunks: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    text, calls = "", {}
    for ch in chunks:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        if d.content:
            text += d.content
        for tc in d.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            if tc.id:
                slot["id"] = tc.id
            if tc.function and tc.function.name:
                slot["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                slot["arguments"] += tc.function.arguments
    return text, [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                  for _, c in sorted(calls.items())]


def run_openai_agent(client: Any, model: str, turns: int, *, stream_every: int = 2, observations: list[str] | None = None,
                     headers: dict[str, str] | None = None) -> list[Any]:
    """Run ``turns`` calls; return what the SDK returned (responses, or the chunk lists of streams)."""
    system, task, obs = task_and_observations()
    obs = observations or obs
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    out = []
    for i in range(turns):
        stream = stream_every > 0 and i % stream_every == stream_every - 1
        kw: dict[str, Any] = {"model": model, "messages": msgs, "tools": OPENAI_TOOLS, "max_tokens": 1024}
        if headers:
            kw["extra_headers"] = headers
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kw))
            out.append(chunks)
            text, calls = _openai_text(chunks)
        else:
            r = client.chat.completions.create(**kw)
            out.append(r)
            m = r.choices[0].message
            text, calls = m.content or "", [c.model_dump() for c in m.tool_calls or []]
        msg: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            msg["tool_calls"] = calls
        msgs.append(msg)
        for c in calls:
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": obs[i % len(obs)]})
        if not calls:
            msgs.append({"role": "user", "content": obs[i % len(obs)]})
    return out


def run_anthropic_agent(client: Any, model: str, turns: int, *, stream_every: int = 2, headers: dict[str, str] | None = None) -> list[Any]:
    system, task, obs = task_and_observations()
    msgs: list[dict[str, Any]] = [{"role": "user", "content": task}]
    out = []
    for i in range(turns):
        kw: dict[str, Any] = {"model": model, "system": system, "messages": msgs, "tools": ANTHROPIC_TOOLS, "max_tokens": 1024}
        if headers:
            kw["extra_headers"] = headers
        if stream_every > 0 and i % stream_every == stream_every - 1:
            with client.messages.stream(**kw) as s:
                r = s.get_final_message()
        else:
            r = client.messages.create(**kw)
        out.append(r)
        content = [{"type": "text", "text": b.text} if b.type == "text" else
                   {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input} for b in r.content]
        msgs.append({"role": "assistant", "content": content})
        results = [{"type": "tool_result", "tool_use_id": b["id"], "content": obs[i % len(obs)]}
                   for b in content if b["type"] == "tool_use"]
        msgs.append({"role": "user", "content": results or obs[i % len(obs)]})
    return out
