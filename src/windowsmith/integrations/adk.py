"""Google ADK: a Runner plugin that replaces each ``LlmRequest``'s contents with the pack (``windowsmith[adk]``).

    from google.adk.apps import App
    from google.adk.runners import Runner
    from windowsmith.integrations.adk import WindowsmithPlugin

    app = App(name="app", root_agent=root_agent, plugins=[WindowsmithPlugin(lambda ctx: engine.session(ctx.session.id))])
    runner = Runner(app=app, session_service=service)

A plugin runs for every agent of the Runner, sub-agents included. ``before_model_callback`` appends the
contents ADK built from its session events that the windowsmith log does not have yet
(``Session.load(..., "gemini")``: function calls and responses paired by id, thought signatures kept), then
replaces ``llm_request.contents`` and ``config.system_instruction`` with the session's ``gemini`` pack
(budgeted, compacted, its stable prefix first so Gemini's implicit cache holds). ADK's tool declarations stay
as they are (windowsmith counts them; a ``Schema`` is converted by google-genai's own ``Schema.json_schema``).
``after_model_callback`` records the billed usage (``usage_metadata``) against the pack that call was sent,
and a final answer without function calls as the assistant message (a function-call turn is appended by the
next ``before_model_callback``, once ADK has given its calls their ids). Streaming partial responses are
skipped.

``session``: a windowsmith Session (one conversation), or a function of the ``CallbackContext`` returning
one (e.g. by ``ctx.session.id``, or ``f"{ctx.session.id}/{ctx.agent_name}"`` for a log per sub-agent); the
plugin calls it once per invocation and agent, not per model call. The pack a call was sent is kept per (ADK session, invocation, agent), so
sessions in flight at once never record against each other's packs. ``WindowsmithCallbacks`` is the same
object under its earlier name, for wiring one agent's ``before_model_callback``/``after_model_callback``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import telemetry
from ..errors import UsageError
from ..formats import gemini
from ..model import Usage
from ..session import Session
from . import check_engine_provider, model_name, provider_of, require

_types = require("google.genai.types", "adk", "windowsmith.integrations.adk")
_plugins = require("google.adk.plugins.base_plugin", "adk", "windowsmith.integrations.adk")

FORMAT = "gemini"


def _tools(config: Any) -> list[dict[str, Any]]:
    out = []
    for tool in getattr(config, "tools", None) or []:
        for fd in getattr(tool, "function_declarations", None) or []:
            if fd.parameters_json_schema is not None:
                params = fd.parameters_json_schema
            elif fd.parameters is not None:  # google-genai's own conversion (nullable becomes a "null" type)
                params = fd.parameters.json_schema.model_dump(mode="json", exclude_none=True)
            else:
                params = {"type": "object", "properties": {}}
            out.append({"name": fd.name, "description": fd.description or "", "parameters": params})
    return out


def _system_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    parts = getattr(value, "parts", None) or []
    return "\n".join(p.text for p in parts if getattr(p, "text", None)) or None


def usage_of(meta: Any) -> Usage | None:
    """Gemini ``usage_metadata`` (prompt tokens include cached ones; thoughts are output) as billed usage."""
    if meta is None:
        return None
    return gemini.read_usage({k: getattr(meta, k) for k in (
        "prompt_token_count", "cached_content_token_count", "candidates_token_count", "thoughts_token_count")})


def _key(callback_context: Any) -> tuple[str, str, str]:
    session = getattr(callback_context, "session", None)
    return (str(getattr(session, "id", "")), str(getattr(callback_context, "invocation_id", "")),
            str(getattr(callback_context, "agent_name", "")))


class WindowsmithPlugin(_plugins.BasePlugin):  # type: ignore[misc, name-defined]
    """An ADK ``BasePlugin`` that lets windowsmith own every model call's window (see the module docstring)."""

    def __init__(self, session: Session | Callable[[Any], Session], *, name: str = "windowsmith") -> None:
        if not isinstance(session, Session) and not callable(session):
            raise UsageError(f"{type(self).__name__}(session) takes a windowsmith Session or a function returning one")
        super().__init__(name)
        self._session = session
        self._open: dict[tuple[str, str, str], Session] = {}  # (ADK session, invocation, agent) -> its session
        self._sent: dict[tuple[str, str, str], Any] = {}  # (ADK session, invocation, agent) -> the pack sent
        self.packs: list[Any] = []  # every pack sent, newest last (for inspection)
        self._checked: set[int] = set()  # the sessions whose engine model was checked against the agent's

    def session_for(self, callback_context: Any) -> Session:
        if isinstance(self._session, Session):
            return self._session
        key = _key(callback_context)
        s = self._open.get(key)
        if s is None:
            s = self._session(callback_context)
            if not isinstance(s, Session):
                raise UsageError(f"the session function returned {type(s).__name__}, not a windowsmith Session")
            self._open[key] = s
        return s

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> None:
        session = self.session_for(callback_context)
        if id(session) not in self._checked:
            check_engine_provider(session, provider_of(llm_request.model), "WindowsmithPlugin")
            self._checked.add(id(session))
        config = llm_request.config
        tools = _tools(config)
        await session.aload(list(llm_request.contents), FORMAT, tools=tools or None,
                            system=_system_text(config.system_instruction))
        pack = await session.abuild(FORMAT, model=model_name(llm_request.model, "adk-gemini"))
        self._sent[_key(callback_context)] = pack
        self.packs.append(pack)
        req = pack.request
        llm_request.contents = [_types.Content.model_validate(c) for c in req["contents"]]
        system = req["config"].get("system_instruction")
        config.system_instruction = _types.Content.model_validate(system) if system else None
        if req["config"].get("tool_config"):  # the step's tool scope (Session.scope_tools)
            config.tool_config = _types.ToolConfig.model_validate(req["config"]["tool_config"])
        return None

    async def after_model_callback(self, *, callback_context: Any, llm_response: Any) -> None:
        if getattr(llm_response, "partial", False):
            return None
        session = self.session_for(callback_context)
        pack = self._sent.pop(_key(callback_context), None)
        content = llm_response.content
        final = content is not None and content.parts and not any(p.function_call for p in content.parts)
        if final:
            await session.aload([content], FORMAT, overlap=True)
        usage = usage_of(llm_response.usage_metadata)
        reason = getattr(llm_response, "finish_reason", None)
        telemetry.annotate(session.log, {"gen_ai.response.finish_reasons":
                                         [str(getattr(reason, "value", reason))] if reason else None})
        if usage is not None:
            await session.arecord(usage=usage, pack=pack)
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        """Forget the invocation's open sessions and unanswered packs."""
        sid, inv = str(getattr(invocation_context.session, "id", "")), str(invocation_context.invocation_id)
        for held in (self._open, self._sent):
            for k in [k for k in held if k[:2] == (sid, inv)]:
                del held[k]


#: the plugin under its earlier name, for one agent's ``before_model_callback`` / ``after_model_callback``
WindowsmithCallbacks = WindowsmithPlugin

__all__ = ["WindowsmithCallbacks", "WindowsmithPlugin", "usage_of"]
