"""LangChain v1: an ``AgentMiddleware`` that lets windowsmith own the window (``windowsmith[langchain]``).

    from langchain.agents import create_agent
    from windowsmith.integrations.langchain import WindowsmithMiddleware

    agent = create_agent(model, tools, system_prompt="...", middleware=[WindowsmithMiddleware(session)])

Before every model call (``wrap_model_call`` / ``awrap_model_call``) the agent's messages are mapped to
windowsmith's (tool calls paired with their results, thinking blocks, images) and the new ones appended
to the session's log; the request the model gets is the session's pack mapped back to LangChain messages:
Anthropic-format packs (a ``ChatAnthropic`` model) keep their ``cache_control`` breakpoints on the
system, tool and message blocks; other models get the OpenAI-chat pack and its ``prompt_cache_key``.
The model's ``AIMessage`` is recorded with its ``usage_metadata`` as billed usage. LangChain's own state
keeps the full history; the model sees the pack.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .. import telemetry
from ..errors import UsageError
from ..formats import anthropic
from ..formats.reader import Builder, image_from_url
from ..model import Image, Message, Text, Thinking, Usage
from ..session import Session
from . import aload_history, check_engine_provider, load_history, model_name, provider_of, require

_mw = require("langchain.agents.middleware", "langchain", "windowsmith.integrations.langchain")
_msgs = require("langchain_core.messages", "langchain", "windowsmith.integrations.langchain")
_fc = require("langchain_core.utils.function_calling", "langchain", "windowsmith.integrations.langchain")

AgentMiddleware = _mw.AgentMiddleware
AIMessage, HumanMessage, SystemMessage, ToolMessage = (
    _msgs.AIMessage, _msgs.HumanMessage, _msgs.SystemMessage, _msgs.ToolMessage)


# -- LangChain -> windowsmith -----------------------------------------------------------------------


def _image(blk: dict[str, Any]) -> Image | None:
    src = blk.get("source")
    if isinstance(src, dict):  # Anthropic-native block
        return anthropic.image_from_source(src)
    if blk.get("type") == "image_url":
        url = blk.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        return image_from_url(url) if isinstance(url, str) and url else None
    data = blk.get("base64") or (blk.get("data") if blk.get("source_type") == "base64" else None)
    if isinstance(data, str) and data:
        return Image(data=data, media_type=blk.get("mime_type") or "application/octet-stream")
    url = blk.get("url")
    return image_from_url(url) if isinstance(url, str) and url else None


def _content(content: Any, b: Builder, where: str) -> tuple[list[Text | Image], list[Thinking]]:
    """A LangChain ``content`` (a string or a list of blocks) as text/image blocks and thinking."""
    if isinstance(content, str):
        return ([Text(content)] if content else []), []
    parts: list[Text | Image] = []
    thinking: list[Thinking] = []
    for i, blk in enumerate(content or []):
        w = f"{where}.content[{i}]"
        if isinstance(blk, str):
            parts.append(Text(blk))
            continue
        t = blk.get("type") if isinstance(blk, dict) else None
        if t == "text":
            parts.append(Text(b.text(blk.get("text", ""), w)))
        elif t in ("image", "image_url"):
            img = _image(blk)
            if img is None:
                b.repairs.append(f"{w}: image block without data or URL dropped")
            else:
                parts.append(img)
        elif t == "thinking":
            data = {"type": "thinking", "thinking": blk.get("thinking", ""), "signature": blk.get("signature", "")}
            thinking.append(Thinking(provider="anthropic", data=data, text=data["thinking"]))
        elif t == "redacted_thinking":
            thinking.append(Thinking(provider="anthropic", data={"type": "redacted_thinking", "data": blk.get("data", "")}))
        elif t == "reasoning":
            thinking.append(Thinking(provider="langchain", data=dict(blk), text=str(blk.get("reasoning") or "")))
        elif t in ("tool_use", "tool_call", "function_call", "tool_call_chunk", "server_tool_call"):
            continue  # the message's tool_calls carry these
        else:
            b.repairs.append(f"{w}: content block of type {t!r} kept as JSON text")
            parts.append(Text(json.dumps(blk, ensure_ascii=False, default=str)))
    return parts, thinking


def to_neutral(messages: Sequence[Any]) -> tuple[list[Message], str | None, list[str]]:
    """LangChain messages as neutral messages, the system text found among them, and the repairs made.
    Consecutive ``ToolMessage``s answer the ``AIMessage`` before them; a call with no result yet stays open."""
    b = Builder(close_open=False)
    system: list[str] = []
    for i, m in enumerate(messages):
        w = f"messages[{i}]"
        if isinstance(m, SystemMessage):
            parts, _ = _content(m.content, b, w)
            system.append("\n".join(p.text for p in parts if isinstance(p, Text)))
        elif isinstance(m, AIMessage):
            parts, thinking = _content(m.content, b, w)
            calls = [(c.get("id"), c.get("name"), c.get("args")) for c in m.tool_calls]
            for bad in getattr(m, "invalid_tool_calls", None) or []:
                calls.append((bad.get("id"), bad.get("name"), bad.get("args")))
            b.assistant([p for p in parts if isinstance(p, Text)], calls, w, thinking=thinking)
        elif isinstance(m, ToolMessage):
            parts, _ = _content(m.content, b, w)
            b.tool_result(m.tool_call_id, parts or [Text("")], w, is_error=getattr(m, "status", "") == "error",
                          name=m.name)
        elif isinstance(m, HumanMessage) or getattr(m, "type", None) == "human":
            parts, _ = _content(m.content, b, w)
            b.user(parts, w)
        else:
            b.repairs.append(f"{w}: {type(m).__name__} is not a chat turn; dropped")
    msgs, _, repairs = b.finish()
    return list(msgs), "\n\n".join(s for s in system if s) or None, repairs


def from_ai_message(ai: Any) -> tuple[Message, Usage | None]:
    """A model's ``AIMessage`` as a neutral assistant message and its billed usage."""
    msgs, _, _ = to_neutral([ai])
    message = msgs[0] if msgs else Message("assistant", ())
    return message, usage_of(ai)


def usage_of(ai: Any) -> Usage | None:
    """``AIMessage.usage_metadata`` (input tokens include cache reads and writes) as billed usage."""
    um = getattr(ai, "usage_metadata", None)
    if not um:
        return None
    details = um.get("input_token_details") or {}
    read = int(details.get("cache_read") or 0)
    write = int(details.get("cache_creation") or 0)
    return Usage(input_tokens=max(0, int(um.get("input_tokens") or 0) - read - write),
                 output_tokens=int(um.get("output_tokens") or 0), cache_read_tokens=read, cache_write_tokens=write)


# -- windowsmith pack -> LangChain --------------------------------------------------------------------


def _from_anthropic(req: dict[str, Any]) -> tuple[Any, list[Any]]:
    system = SystemMessage(content=[dict(b) for b in req["system"]]) if req.get("system") else None
    out: list[Any] = []
    for m in req["messages"]:
        blocks = m["content"]
        if m["role"] == "assistant":
            calls = [{"type": "tool_call", "id": b["id"], "name": b["name"], "args": b["input"]}
                     for b in blocks if b.get("type") == "tool_use"]
            out.append(AIMessage(content=[dict(b) for b in blocks], tool_calls=calls))
            continue
        rest: list[dict[str, Any]] = []
        for b in blocks:
            if b.get("type") != "tool_result":
                rest.append(dict(b))
                continue
            inner = [dict(x) for x in b.get("content") or [{"type": "text", "text": ""}]]
            if "cache_control" in b:  # langchain-anthropic hoists a content block's marker onto the tool_result
                inner[-1]["cache_control"] = b["cache_control"]
            out.append(ToolMessage(content=inner, tool_call_id=b["tool_use_id"],
                                   status="error" if b.get("is_error") else "success"))
        if rest:
            out.append(HumanMessage(content=rest))
    return system, out


def _from_openai_chat(req: dict[str, Any], failed: frozenset[str] = frozenset()) -> tuple[Any, list[Any]]:
    system: list[str] = []
    out: list[Any] = []
    for m in req["messages"]:
        role = m["role"]
        if role == "system":
            system.append(m["content"])
        elif role == "user":
            out.append(HumanMessage(content=m["content"]))
        elif role == "assistant":
            calls = [{"type": "tool_call", "id": c["id"], "name": c["function"]["name"],
                      "args": json.loads(c["function"]["arguments"] or "{}")} for c in m.get("tool_calls") or []]
            out.append(AIMessage(content=m.get("content") or "", tool_calls=calls))
        elif role == "tool":
            status = "error" if m["tool_call_id"] in failed else "success"
            out.append(ToolMessage(content=m["content"], tool_call_id=m["tool_call_id"], status=status))
    return (SystemMessage(content="\n\n".join(system)) if system else None), out


def _tool_spec(tool: Any) -> dict[str, Any]:
    return dict(_fc.convert_to_openai_tool(tool))


def _ai_of(response: Any) -> Any:
    if isinstance(response, AIMessage):
        return response
    inner = getattr(response, "model_response", None)
    result = getattr(inner if inner is not None else response, "result", None) or []
    return next((m for m in result if isinstance(m, AIMessage)), None)


def _failed_calls(messages: Sequence[Any]) -> frozenset[str]:
    """The call ids whose ``ToolMessage`` says ``status="error"``."""
    return frozenset(m.tool_call_id for m in messages if isinstance(m, ToolMessage) and m.status == "error")


def _finish_reasons(ai: Any) -> list[str] | None:
    meta = getattr(ai, "response_metadata", None) or {}
    reason = meta.get("stop_reason") or meta.get("finish_reason")
    return [str(reason)] if reason else None


def _thread_id() -> str | None:
    """The LangGraph thread of the run in progress (``config["configurable"]["thread_id"]``), or None."""
    try:
        from langgraph.config import get_config

        value = (get_config().get("configurable") or {}).get("thread_id")
    except (ImportError, RuntimeError):
        return None
    return None if value is None else str(value)


def estimates_usage(model: Any) -> bool:
    """Whether ``model`` makes its usage up instead of reporting a provider's bill (LangChain's fake chat models)."""
    return "fake" in type(model).__module__.lower() or type(model).__name__.lower().startswith("fake")


class WindowsmithMiddleware(AgentMiddleware):  # type: ignore[misc, valid-type]
    """Let a windowsmith session own the context window of a LangChain v1 agent.

    ``session``: an :class:`~windowsmith.Engine` (one session per LangGraph thread: ``engine.session(thread_id)``,
    or ``default_session`` when the run has no thread), a :class:`~windowsmith.Session` (one conversation), or a
    function of the ``ModelRequest`` returning a Session. Sessions are kept per thread (the newest
    ``max_threads``), so a thread's session is opened once, not on every model call. ``format``: the pack
    format; default ``anthropic`` for Anthropic chat models (cache breakpoints as ``cache_control`` blocks),
    else ``openai-chat`` (with its ``prompt_cache_key``).

    An engine model of another provider than the chat model is refused on the first call (its budget and
    tokenizer would be wrong). Stacking: put this middleware after LangChain's own context middleware
    (``SummarizationMiddleware``): a history it rewrote (a summary in place of older turns) is treated as a
    replacement, the log keeping the full conversation and a repair in the manifest saying so.
    """

    def __init__(self, session: Any, *, format: str | None = None, default_session: str = "default",
                 max_threads: int = 256) -> None:
        super().__init__()
        if not isinstance(session, Session) and not callable(session) and not hasattr(session, "session"):
            raise UsageError("WindowsmithMiddleware(session) takes a windowsmith Engine, a Session or a function "
                             "returning one")
        if format not in (None, "anthropic", "openai-chat"):
            raise UsageError(f"WindowsmithMiddleware supports the 'anthropic' and 'openai-chat' formats, not {format!r}")
        self._session = session
        self.format = format
        self.default_session = default_session
        self.max_threads = max_threads
        self._threads: dict[str, Session] = {}  # thread id -> its session, newest use last
        self._checked: set[str] = set()  # the sessions whose engine model was checked against the chat model
        self.packs: list[Any] = []  # the packs sent, newest last (for inspection)

    def session_for(self, request: Any) -> Session:
        if isinstance(self._session, Session):
            return self._session
        thread = _thread_id() or self.default_session
        s = self._threads.pop(thread, None)
        if s is None:
            s = self._session.session(thread) if hasattr(self._session, "session") else self._session(request)
            if not isinstance(s, Session):
                raise UsageError(f"the session function returned {type(s).__name__}, not a windowsmith Session")
        self._threads[thread] = s
        while len(self._threads) > self.max_threads:
            del self._threads[next(iter(self._threads))]
        return s

    def format_for(self, request: Any) -> str:
        if self.format:
            return self.format
        return "anthropic" if provider_of(request.model) == "anthropic" else "openai-chat"

    def _prepare(self, request: Any) -> tuple[Session, str, list[Message], dict[str, Any]]:
        session = self.session_for(request)
        if session.id not in self._checked:
            check_engine_provider(session, provider_of(request.model), "WindowsmithMiddleware")
            self._checked.add(session.id)
        fmt = self.format_for(request)
        msgs, found, repairs = to_neutral(request.messages)
        system = request.system_message
        texts = [found] if found else []
        if system is not None:
            parts, _ = _content(system.content, Builder(), "system_message")
            texts.insert(0, "\n".join(p.text for p in parts if isinstance(p, Text)))
        tools = [_tool_spec(t) for t in request.tools]
        load = {"tools": tools or None, "system": "\n\n".join(t for t in texts if t) or None, "repairs": repairs}
        return session, fmt, msgs, load

    def _override(self, request: Any, pack: Any) -> Any:
        req = pack.request
        if pack.format == "anthropic":
            system, messages = _from_anthropic(req)
        else:
            system, messages = _from_openai_chat(req, _failed_calls(request.messages))
        overrides: dict[str, Any] = {"messages": messages, "system_message": system,
                                     "tools": [dict(t) for t in req.get("tools", [])]}
        if req.get("prompt_cache_key"):
            overrides["model_settings"] = {**request.model_settings, "prompt_cache_key": req["prompt_cache_key"]}
        self.packs.append(pack)
        return request.override(**overrides)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        session, fmt, msgs, load = self._prepare(request)
        load_history(session, msgs, what="WindowsmithMiddleware", **load)
        pack = session.build(fmt, model=model_name(request.model, f"langchain-{fmt}"))
        response = handler(self._override(request, pack))
        ai = _ai_of(response)
        if ai is not None:
            message, usage = from_ai_message(ai)
            telemetry.annotate(session.log, {"gen_ai.response.finish_reasons": _finish_reasons(ai)})
            session.record(message=message, usage=usage, pack=pack, estimated=estimates_usage(request.model))
        return response

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        session, fmt, msgs, load = self._prepare(request)
        await aload_history(session, msgs, what="WindowsmithMiddleware", **load)
        pack = await session.abuild(fmt, model=model_name(request.model, f"langchain-{fmt}"))
        response = await handler(self._override(request, pack))
        ai = _ai_of(response)
        if ai is not None:
            message, usage = from_ai_message(ai)
            telemetry.annotate(session.log, {"gen_ai.response.finish_reasons": _finish_reasons(ai)})
            await session.arecord(message=message, usage=usage, pack=pack, estimated=estimates_usage(request.model))
        return response


__all__ = ["WindowsmithMiddleware", "estimates_usage", "from_ai_message", "to_neutral", "usage_of"]
