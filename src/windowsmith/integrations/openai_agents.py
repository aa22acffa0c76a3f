"""OpenAI Agents SDK: a ``Session`` over a windowsmith session (``windowsmith[openai-agents]``).

    from agents import Agent, Runner
    from windowsmith.integrations.openai_agents import WindowsmithSession

    memory = WindowsmithSession(engine.session("chat-7"))
    result = await Runner.run(agent, "…", session=memory, run_config=memory.run_config())

* ``get_items`` returns the session's transcript as Responses input items (tool results as windowsmith
  stored them: large ones offloaded, with their ``artifact://`` reference); ``add_items`` appends the
  items the log does not have yet (``Session.load(..., overlap=True)``) and records the billed usage of
  each model call the run made since (the SDK hands a session that asks for it the run's context, whose
  ``usage.request_usage_entries`` has one entry per call), against the pack that call was sent: no
  ``hooks=`` to wire, and an app's own ``RunHooks`` are its own.
* ``run_config()`` is the SDK's only hook before a model call, ``call_model_input_filter``: it appends
  what the run produced since the last call (the new user input, tool outputs), builds the
  ``openai-responses`` pack and hands the model its ``input`` (system and session context as system
  messages, so ``instructions`` is cleared): budgeted, compacted. Its ``model_settings`` carry the pack's
  ``prompt_cache_key`` (``extra_args``, so the SDK does not generate its own), merged into any
  ``model_settings`` passed in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from ..errors import UsageError
from ..formats import openai_responses
from ..model import Usage
from ..session import Session
from . import check_engine_provider, model_name, provider_of, require

_agents = require("agents", "openai-agents", "windowsmith.integrations.openai_agents")
_run_config = require("agents.run_config", "openai-agents", "windowsmith.integrations.openai_agents")

ModelSettings = _agents.ModelSettings
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


class WindowsmithSession:
    """An Agents SDK ``Session`` whose history is a windowsmith session's log."""

    session_settings = None

    def __init__(self, session: Session) -> None:
        if not isinstance(session, Session):
            raise UsageError(f"WindowsmithSession(session) takes a windowsmith Session, got {type(session).__name__}")
        self.session = session
        self.session_id = session.id
        self.packs: list[Any] = []  # the packs sent, newest last
        self._unanswered: list[Any] = []  # packs sent whose usage is not recorded yet, oldest first
        self._usage_seen: dict[int, tuple[Any, int]] = {}  # id(run usage) -> (the usage, entries recorded)

    # -- the Session protocol (each method takes the run's context: the SDK passes it when all four do) ----

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[dict[str, Any]]:
        renderer = self.session.engine.renderer(FORMAT)
        items: list[dict[str, Any]] = []
        for m in self.session.messages:
            items.extend(json.loads(json.dumps(x)) for x in renderer.render_message(m, ()))  # type: ignore[attr-defined]
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        if items:
            await self.session.aload(items, FORMAT, overlap=True)
        usage = getattr(wrapper, "usage", None)
        if usage is not None:
            await self._record_usage(usage)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        raise UsageError("a windowsmith session's log is append-only: pop_item() cannot remove a message; "
                         "start a new session (engine.session(new_id)) to rewind")

    async def clear_session(self, *, wrapper: Any = None) -> None:
        raise UsageError("a windowsmith session's log is append-only: clear_session() cannot erase it; "
                         "use a new session id for a fresh conversation")

    async def _record_usage(self, usage: Any) -> None:
        """Record the entries of a run's usage not recorded yet, each against the oldest unanswered pack."""
        entries = list(getattr(usage, "request_usage_entries", None) or [])
        _, seen = self._usage_seen.get(id(usage), (usage, 0))
        for entry in entries[seen:]:
            pack = self._unanswered.pop(0) if self._unanswered else None
            await self.session.arecord(usage=usage_of(entry), pack=pack)
        # keyed by the object's id: keep the object alive with its count so the id is not reused
        self._usage_seen = {id(usage): (usage, len(entries))}

    # -- the model input -----------------------------------------------------------------------------

    async def call_model_input_filter(self, data: Any) -> Any:
        """``RunConfig.call_model_input_filter``: the model gets this session's pack."""
        model_data = data.model_data
        if not self.packs:
            check_engine_provider(self.session, provider_of(data.agent.model), "WindowsmithSession")
        tools = _tool_dicts(data.agent)
        await self.session.aload(list(model_data.input), FORMAT, tools=tools or None,
                                 system=model_data.instructions or None)
        pack = await self.session.abuild(FORMAT, model=model_name(data.agent.model, "openai-agents"))
        self.packs.append(pack)
        self._unanswered.append(pack)
        return _run_config.ModelInputData(input=list(pack.request["input"]), instructions=None)

    def run_config(self, **options: Any) -> Any:
        """A ``RunConfig`` with this session's ``call_model_input_filter`` and its ``prompt_cache_key`` in
        ``model_settings.extra_args`` (``options`` go to RunConfig; a ``model_settings`` given is merged)."""
        if "call_model_input_filter" in options:
            raise UsageError("run_config(): windowsmith's call_model_input_filter is the one the model input goes "
                             "through; filter the session's messages before they are added instead")
        key = self.session.last_pack.neutral.cache_key if self.session.last_pack else _cache_key(self.session.id)
        settings = options.pop("model_settings", None) or ModelSettings()
        extra = {**(settings.extra_args or {})}
        extra.setdefault("prompt_cache_key", key)
        settings = dataclasses.replace(settings, extra_args=extra)
        return _run_config.RunConfig(call_model_input_filter=self.call_model_input_filter,
                                     model_settings=settings, **options)


def _cache_key(session_id: str) -> str:
    """The ``prompt_cache_key`` windowsmith's packs carry for ``session_id`` (the same key, before any build)."""
    return "ws-" + hashlib.sha256(session_id.encode()).hexdigest()[:24]


__all__ = ["WindowsmithSession", "usage_of"]
