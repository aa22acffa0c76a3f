"""Google ADK: model callbacks that replace the ``LlmRequest`` contents with the pack (``windowsmith[adk]``).

    from google.adk.agents import LlmAgent
    from windowsmith.integrations.adk import WindowsmithCallbacks

    ws_cb = WindowsmithCallbacks(session)        # or a function of the CallbackContext returning a Session
    agent = LlmAgent(..., before_model_callback=ws_cb.before_model_callback,
                     after_model_callback=ws_cb.after_model_callback)

``before_model_callback`` appends the contents ADK built from its session events that the windowsmith log
does not have yet (``Session.load(..., "gemini")``: function calls and responses paired by id, thought
signatures kept), then replaces ``llm_request.contents`` and ``config.system_instruction`` with the
session's ``gemini`` pack (budgeted, compacted). ADK's tool declarations stay as they are (windowsmith counts
them). ``after_model_callback`` records the billed usage (``usage_metadata``) against that pack, and a
final answer without function calls as the assistant message (a function-call turn is appended by the next
``before_model_callback``, once ADK has given its calls their ids). Streaming partial responses are skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from ..formats import gemini
from ..model import Usage
from ..session import Session
from . import model_name, require

_types = require("google.genai.types", "adk", "windowsmith.integrations.adk")
require("google.adk", "adk", "windowsmith.integrations.adk")

FORMAT = "gemini"


def _tools(config: Any) -> list[dict[str, Any]]:
    out = []
    for tool in getattr(config, "tools", None) or []:
        for fd in getattr(tool, "function_declarations", None) or []:
            if fd.parameters_json_schema is not None:
                params = fd.parameters_json_schema
            elif fd.parameters is not None:
                params = gemini.json_schema(fd.parameters.model_dump(mode="json", exclude_none=True))
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


class WindowsmithCallbacks:
    """``before_model_callback`` / ``after_model_callback`` for an ADK ``LlmAgent``."""

    def __init__(self, session: Session | Callable[[Any], Session]) -> None:
        if not isinstance(session, Session) and not callable(session):
            raise UsageError("WindowsmithCallbacks(session) takes a windowsmith Session or a function returning one")
        self._session = session
        self.packs: list[Any] = []  # the packs sent, newest last

    def session_for(self, callback_context: Any) -> Session:
        s = self._session if isinstance(self._session, Session) else self._session(callback_context)
        if not isinstance(s, Session):
            raise UsageError(f"the session function returned {type(s).__name__}, not a windowsmith Session")
        return s

    async def before_model_callback(self, callback_context: Any, llm_request: Any) -> None:
        session = self.session_for(callback_context)
        config = llm_request.config
        tools = _tools(config)
        await session.aload(list(llm_request.contents), FORMAT, tools=tools or None,
                            system=_system_text(config.system_instruction))
        pack = await session.abuild(FORMAT, model=model_name(llm_request.model, "adk-gemini"))
        self.packs.append(pack)
        req = pack.request
        llm_request.contents = [_types.Content.model_validate(c) for c in req["contents"]]
        system = req["config"].get("system_instruction")
        config.system_instruction = _types.Content.model_validate(system) if system else None
        return None

    async def after_model_callback(self, callback_context: Any, llm_response: Any) -> None:
        if getattr(llm_response, "partial", False):
            return None
        session = self.session_for(callback_context)
        pack = self.packs[-1] if self.packs else None
        content = llm_response.content
        final = content is not None and content.parts and not any(p.function_call for p in content.parts)
        if final:
            await session.aload([content], FORMAT, overlap=True)
        usage = usage_of(llm_response.usage_metadata)
        if usage is not None:
            await session.arecord(usage=usage, pack=pack)
        return None


__all__ = ["WindowsmithCallbacks", "usage_of"]
