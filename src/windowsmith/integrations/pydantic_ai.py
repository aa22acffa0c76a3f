"""pydantic-ai: a capability that lets windowsmith own the window (``windowsmith[pydantic-ai]``).

    from pydantic_ai import Agent
    from windowsmith.integrations.pydantic_ai import WindowsmithCapability

    agent = Agent(model, tools=[...], instructions="...", capabilities=[WindowsmithCapability(session)])
    agent.run_sync("...")            # or: await agent.run("...")

Capabilities are pydantic-ai's extension point for history in the installed version (2.x; a history
processor runs as the ``ProcessHistory`` capability). Before every model request
(``before_model_request``) the run's messages are mapped to windowsmith's and the new ones appended to
the session's log; the request then carries the session's pack, mapped back to pydantic-ai messages
(request-only: the run's own history is untouched): instructions become the pack's system prompt, thinking
parts are passed back, and each of the pack's message breakpoints becomes a ``CachePoint`` (after the
newest tool result too: a ``CachePoint`` alone in a user part marks the ``ToolReturnPart`` before it);
Anthropic models get ``anthropic_cache_instructions`` / ``anthropic_cache_tool_definitions`` when the pack
marks its system and tools, OpenAI models the session's ``openai_prompt_cache_key``. ``after_model_request``
records the ``ModelResponse`` and its usage: billed usage calibrates windowsmith's counts, usage a
``FunctionModel``/``TestModel`` made up is recorded as estimated and does not. The hooks are async;
``run_sync`` drives them the same way.

Stacking: put ``WindowsmithCapability`` last among the capabilities that rewrite history. A history that a
``ProcessHistory`` capability rewrote before it (a summary in place of older turns) is treated as a
replacement: the log keeps the full conversation, the new turns are appended and a repair in the manifest
says so; a rewritten history that shares no turn with the log is refused with what to do.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import telemetry
from ..errors import UsageError
from ..formats.reader import Builder, image_from_url
from ..model import Image, Message, Text, Thinking, Usage
from ..session import Session
from . import aload_history, check_engine_provider, provider_of, require

_caps = require("pydantic_ai.capabilities", "pydantic-ai", "windowsmith.integrations.pydantic_ai")
_m = require("pydantic_ai.messages", "pydantic-ai", "windowsmith.integrations.pydantic_ai")

FORMAT = "anthropic"  # the richest pack: thinking, images and breakpoints map onto pydantic-ai parts


def _user_content(content: Any) -> list[Text | Image]:
    items = [content] if isinstance(content, str) else list(content)
    out: list[Text | Image] = []
    for c in items:
        if isinstance(c, str):
            out.append(Text(c))
        elif isinstance(c, _m.ImageUrl):
            out.append(image_from_url(c.url))
        elif isinstance(c, _m.BinaryContent) and c.is_image:
            out.append(Image(data=base64.b64encode(c.data).decode(), media_type=c.media_type))
        elif isinstance(c, _m.CachePoint):
            continue  # windowsmith places its own breakpoints
        else:
            out.append(Text(json.dumps(getattr(c, "__dict__", str(c)), default=str)))
    return out


def _as_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)


def to_neutral(messages: Sequence[Any]) -> tuple[list[Message], str | None, list[str]]:
    """pydantic-ai ``ModelRequest``/``ModelResponse`` messages as neutral messages, the system prompt
    parts among them, and the repairs made. A call with no return yet stays open."""
    b = Builder(close_open=False)
    system: list[str] = []
    for i, msg in enumerate(messages):
        w = f"messages[{i}]"
        if isinstance(msg, _m.ModelResponse):
            texts: list[Text | Image] = []
            calls: list[tuple[Any, Any, Any]] = []
            thinking: list[Thinking] = []
            for p in msg.parts:
                if isinstance(p, _m.TextPart):
                    texts.append(Text(p.content))
                elif isinstance(p, _m.ToolCallPart):
                    calls.append((p.tool_call_id, p.tool_name, p.args))
                elif isinstance(p, _m.ThinkingPart):
                    if p.provider_name == "anthropic" and p.signature:
                        data = {"type": "thinking", "thinking": p.content, "signature": p.signature}
                        thinking.append(Thinking(provider="anthropic", data=data, text=p.content))
                    else:
                        thinking.append(Thinking(provider="pydantic-ai", data={"content": p.content}, text=p.content))
            b.assistant(texts, calls, w, thinking=thinking)
            continue
        for p in getattr(msg, "parts", ()):
            if isinstance(p, _m.SystemPromptPart):
                system.append(p.content)
            elif isinstance(p, _m.UserPromptPart):
                b.user(_user_content(p.content), w)
            elif isinstance(p, _m.ToolReturnPart):
                b.tool_result(p.tool_call_id, _as_text(p.content), w, name=p.tool_name,
                              is_error=p.outcome in ("failed", "denied"))
            elif isinstance(p, _m.RetryPromptPart):
                text = p.model_response()
                if p.tool_name:
                    b.tool_result(p.tool_call_id, text, w, name=p.tool_name, is_error=True)
                else:
                    b.user(text, w)
    msgs, _, repairs = b.finish()
    return list(msgs), "\n\n".join(s for s in system if s) or None, repairs


def _block_content(block: dict[str, Any]) -> Any:
    if block["type"] == "text":
        return block["text"]
    src = block["source"]
    if src["type"] == "url":
        return _m.ImageUrl(url=src["url"])
    return _m.BinaryContent(data=base64.b64decode(src["data"]), media_type=src["media_type"])


def from_pack(request: dict[str, Any]) -> list[Any]:
    """An Anthropic-format pack as pydantic-ai messages."""
    out: list[Any] = []
    system = [_m.SystemPromptPart(content=b["text"]) for b in request.get("system", [])]
    names: dict[str, str] = {}
    for m in request["messages"]:
        if m["role"] == "assistant":
            parts: list[Any] = []
            for b in m["content"]:
                if b["type"] == "thinking":
                    parts.append(_m.ThinkingPart(content=b["thinking"], signature=b["signature"], provider_name="anthropic"))
                elif b["type"] == "redacted_thinking":
                    parts.append(_m.ThinkingPart(content="", signature=b["data"], id="redacted_thinking",
                                                 provider_name="anthropic"))
                elif b["type"] == "text":
                    parts.append(_m.TextPart(content=b["text"]))
                elif b["type"] == "tool_use":
                    names[b["id"]] = b["name"]
                    parts.append(_m.ToolCallPart(tool_name=b["name"], args=b["input"], tool_call_id=b["id"]))
            out.append(_m.ModelResponse(parts=parts))
            continue
        req_parts: list[Any] = [*system]
        system = []
        user: list[Any] = []
        for b in m["content"]:
            if b["type"] == "tool_result":
                text = "\n".join(x.get("text", "") for x in b["content"] if x.get("type") == "text")
                req_parts.append(_m.ToolReturnPart(tool_name=names.get(b["tool_use_id"], "unknown"), content=text,
                                                   tool_call_id=b["tool_use_id"],
                                                   outcome="failed" if b.get("is_error") else "success"))
                if "cache_control" in b or any("cache_control" in x for x in b["content"]):
                    # a CachePoint alone in a user part lands on the block before it: this tool result
                    req_parts.append(_m.UserPromptPart(content=[_m.CachePoint()]))
            else:
                user.append(_block_content(b))
                if "cache_control" in b:
                    user.append(_m.CachePoint())
        if user:
            req_parts.append(_m.UserPromptPart(content=user))
        out.append(_m.ModelRequest(parts=req_parts))
    return out


def estimates_usage(model: Any) -> bool:
    """Whether ``model`` makes its usage up instead of reporting a provider's bill: pydantic-ai's
    ``FunctionModel`` and ``TestModel`` (also inside a wrapper model)."""
    for _ in range(8):
        if type(model).__module__.startswith(("pydantic_ai.models.function", "pydantic_ai.models.test")):
            return True
        inner = getattr(model, "wrapped", None)
        if inner is None or inner is model:
            return False
        model = inner
    return False


def _marks(blocks: Any) -> bool:
    return bool(blocks) and isinstance(blocks[-1], dict) and "cache_control" in blocks[-1]


def usage_of(usage: Any) -> Usage:
    """pydantic-ai ``RequestUsage`` (input tokens include cache reads and writes) as billed usage."""
    read, write = int(usage.cache_read_tokens or 0), int(usage.cache_write_tokens or 0)
    return Usage(input_tokens=max(0, int(usage.input_tokens or 0) - read - write),
                 output_tokens=int(usage.output_tokens or 0), cache_read_tokens=read, cache_write_tokens=write)


@dataclass
class WindowsmithCapability(_caps.AbstractCapability):  # type: ignore[misc, name-defined]
    """Let a windowsmith session own the context window of a pydantic-ai agent.

    ``session``: a :class:`~windowsmith.Session` (one conversation), an :class:`~windowsmith.Engine` (a session per
    pydantic-ai conversation: ``engine.session(ctx.conversation_id)``), or a function of the ``RunContext``
    returning a Session. Each run gets its own instance (``for_run``), so runs in flight at once never
    record against each other's packs; ``packs`` (every pack sent, newest last) is shared for inspection.
    """

    session: Any
    packs: list[Any] = field(default_factory=list)  # the packs sent, newest last
    run_session: Session | None = field(default=None, repr=False)  # this run's session (set by for_run)
    sent: Any = field(default=None, repr=False)  # the pack this run's model request was sent

    def __post_init__(self) -> None:
        s = self.session
        if not isinstance(s, Session) and not callable(s) and not hasattr(s, "session"):
            raise UsageError(f"WindowsmithCapability(session) takes a windowsmith Session, an Engine or a function "
                             f"returning a Session, got {type(s).__name__}")

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live session: not part of an agent spec

    async def for_run(self, ctx: Any) -> Any:
        """A fresh instance for this run, bound to its session."""
        s = self.session
        if not isinstance(s, Session):
            s = s.session(str(ctx.conversation_id or "default")) if hasattr(s, "session") else s(ctx)
            if not isinstance(s, Session):
                raise UsageError(f"the session function returned {type(s).__name__}, not a windowsmith Session")
        return dataclasses.replace(self, run_session=s, sent=None)

    def _session(self) -> Session:
        if self.run_session is not None:
            return self.run_session
        if isinstance(self.session, Session):
            return self.session
        raise UsageError("WindowsmithCapability: no session for this run (pydantic-ai calls for_run() first)")

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        params = request_context.model_request_parameters
        msgs, found, repairs = to_neutral(request_context.messages)
        instructions = "\n\n".join(p.content for p in params.instruction_parts or [])
        system = "\n\n".join(t for t in (instructions, found) if t) or None
        tools = [{"name": t.name, "description": t.description or "", "parameters": t.parameters_json_schema}
                 for t in params.function_tools]
        session = self._session()
        if self.sent is None and not session.state.usages:  # the run's first call of a fresh session
            check_engine_provider(session, provider_of(request_context.model), "WindowsmithCapability")
        await aload_history(session, msgs, what="WindowsmithCapability", tools=tools or None, system=system,
                            repairs=repairs)
        # the anthropic pack only carries the messages; pydantic-ai sends them with its own model
        pack = await session.abuild(FORMAT, model="pydantic-ai")
        self.packs.append(pack)
        self.sent = pack
        req = pack.request
        request_context.messages = from_pack(req)
        request_context.model_request_parameters = dataclasses.replace(params, instruction_parts=None)
        settings = dict(request_context.model_settings or {})
        provider = provider_of(request_context.model)
        if provider == "anthropic":  # the pack's system and tool breakpoints, as the pack planned them
            settings.pop("anthropic_cache_instructions", None)
            settings.pop("anthropic_cache_tool_definitions", None)
            if _marks(req.get("system")):
                settings["anthropic_cache_instructions"] = True
            if _marks(req.get("tools")):
                settings["anthropic_cache_tool_definitions"] = True
        elif provider == "openai":  # OpenAI caches the prefix by itself; the key routes the session's calls together
            settings.setdefault("openai_prompt_cache_key", pack.neutral.cache_key)
        request_context.model_settings = settings
        return request_context

    async def after_model_request(self, ctx: Any, *, request_context: Any, response: Any) -> Any:
        msgs, _, _ = to_neutral([response])
        message = msgs[0] if msgs else None
        reason = getattr(response, "finish_reason", None)
        session = self._session()
        telemetry.annotate(session.log, {"gen_ai.response.finish_reasons": [str(reason)] if reason else None})
        pack, self.sent = self.sent, None
        await session.arecord(message=message, usage=usage_of(response.usage), pack=pack,
                              estimated=estimates_usage(request_context.model))
        return response


__all__ = ["WindowsmithCapability", "estimates_usage", "from_pack", "to_neutral", "usage_of"]
