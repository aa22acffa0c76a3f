"""OpenAI Agents SDK: a ``Session`` over a windowsmith session, a ``call_model_input_filter`` and run
hooks (``windowsmith[openai-agents]``).

    from agents import Agent, Runner
    from windowsmith.integrations.openai_agents import WindowsmithSession

    memory = WindowsmithSession(engine.session("chat-7"))
    result = await Runner.run(agent, "…", session=memory, run_config=memory.run_config(), hooks=memory.hooks)

* ``get_items`` returns the session's transcript as Responses input items (tool results as windowsmith
  stored them: large ones offloaded, with their ``artifact://`` reference); ``add_items`` appends the
  items the log does not have yet (``Session.load(..., overlap=True)``).
* ``call_model_input_filter`` appends what the run produced since the last call (the new user input,
  tool outputs), builds the ``openai-responses`` pack and hands the model its ``input`` (system and
  session context as system messages, so ``instructions`` is cleared): budgeted, compacted, with the
  session's ``prompt_cache_key`` in the pack's manifest.
* ``hooks.on_llm_end`` records the model's output items and billed usage against that pack.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..formats import openai_responses
from ..model import Usage
from ..session import Session
from . import model_name, require

_agents = require("agents", "openai-agents", "windowsmith.integrations.openai_agents")
_run_config = require("agents.run_config", "openai-agents", "windowsmith.integrations.openai_agents")

RunHooks = _agents.RunHooks
FORMAT = "openai-responses"


def _tool_dicts(agent: Any) -> list[dict[str, Any]]:
    out = []
    for t in getattr(agent, "tools", None) or []:
        schema = getattr(t, "params_json_schema", None)
        if isinstance(schema, dict) and getattr(t, "name", None):
            out.append({"name": t.name, "description": getattr(t, "description", "") or "", "parameters": schema})
    return out


def usage_of(usage: Any) -> Usage:
    """The Agents SDK ``Usage`` (input tokens include cached ones) as billed usage."""
    details = getattr(usage, "input_tokens_details", None)
    return openai_responses.read_usage({"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                                        "input_tokens_details": {"cached_tokens": getattr(details, "cached_tokens", 0)}})


class _Hooks(RunHooks):  # type: ignore[misc, valid-type]
    def __init__(self, owner: WindowsmithSession) -> None:
        self.owner = owner

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        await self.owner.record(response)


class WindowsmithSession:
    """An Agents SDK ``Session`` whose history is a windowsmith session's log."""

    session_settings = None

    def __init__(self, session: Session) -> None:
        if not isinstance(session, Session):
            raise UsageError(f"WindowsmithSession(session) takes a windowsmith Session, got {type(session).__name__}")
        self.session = session
        self.session_id = session.id
        self.hooks = _Hooks(self)
        self.packs: list[Any] = []  # the packs sent, newest last

    # -- the Session protocol ---------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        renderer = self.session.engine.renderer(FORMAT)
        items: list[dict[str, Any]] = []
        for m in self.session.messages:
            items.extend(json.loads(json.dumps(x)) for x in renderer.render_message(m, ()))  # type: ignore[attr-defined]
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        if items:
            await self.session.aload(items, FORMAT, overlap=True)

    async def pop_item(self) -> Any:
        raise UsageError("a windowsmith session's log is append-only: pop_item() cannot remove a message; "
                         "start a new session (engine.session(new_id)) to rewind")

    async def clear_session(self) -> None:
        raise UsageError("a windowsmith session's log is append-only: clear_session() cannot erase it; "
                         "use a new session id for a fresh conversation")

    # -- the model input -----------------------------------------------------------------------------

    async def call_model_input_filter(self, data: Any) -> Any:
        """``RunConfig.call_model_input_filter``: the model gets this session's pack."""
        model_data = data.model_data
        tools = _tool_dicts(data.agent)
        await self.session.aload(list(model_data.input), FORMAT, tools=tools or None,
                                 system=model_data.instructions or None)
        pack = await self.session.abuild(FORMAT, model=model_name(data.agent.model, "openai-agents"))
        self.packs.append(pack)
        return _run_config.ModelInputData(input=list(pack.request["input"]), instructions=None)

    def run_config(self, **options: Any) -> Any:
        """A ``RunConfig`` with this session's ``call_model_input_filter`` (``options`` go to RunConfig)."""
        return _run_config.RunConfig(call_model_input_filter=self.call_model_input_filter, **options)

    async def record(self, response: Any) -> None:
        """Record a ``ModelResponse``: its output items and billed usage, against the last pack."""
        pack = self.packs[-1] if self.packs else None
        output: Sequence[Any] = response.output or []
        if output:
            await self.session.aload(list(output), FORMAT, overlap=True)
        await self.session.arecord(usage=usage_of(response.usage), pack=pack)


__all__ = ["WindowsmithSession", "usage_of"]
