"""The async half of :class:`~windowsmith.engine.Session`: ``abuild``, ``acall``, ``arecord``, ``aload``,
``aadd`` and ``atool_result`` run the synchronous methods in a worker thread, one operation of a session
at a time, so an event loop never blocks on store I/O, assembling or rendering.

:class:`AsyncSessionMixin` holds no state of its own: ``Session`` inherits it and provides the
synchronous methods and the locks it uses. The helpers that tell a sync ``send`` from an async one
live here too (``Session.call`` uses them to refuse an async client with a clear error).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .compaction.config import Breaker
from .errors import UsageError
from .formats import is_context_overflow
from .formats.stream import aresolve

if TYPE_CHECKING:
    from .build import Builder, Pack
    from .model import Message, Usage
    from .session_load import LoadResult


class AsyncSessionMixin:
    """The ``a*`` methods of :class:`~windowsmith.engine.Session` (see the module docstring)."""

    if TYPE_CHECKING:  # provided by Session
        _builder: Builder
        _thread_lock: threading.RLock
        _alock: asyncio.Lock | None

        @property
        def last_pack(self) -> Pack | None: ...

        def build(self, provider: str | None = None, *, model: str | None = None) -> Pack: ...

        def record(self, response: Any = None, *, message: Message | None = None,
                   usage: Usage | Mapping[str, int] | None = None, pack: Pack | None = None) -> Message | None: ...

        def load(self, messages: Sequence[Any], format: str, *, tools: Sequence[Any] | None = None,
                 system: str | None = None, overlap: bool = False, repairs: Sequence[str] = ()) -> LoadResult: ...

        def add(self, message: Message | Mapping[str, Any]) -> Message: ...

        def tool_result(self, call_id: str, output: Any, *, is_error: bool = False) -> Message: ...

    def _async_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._alock is None or self.__dict__.get("_alock_loop") is not loop:
            self._alock = asyncio.Lock()
            self.__dict__["_alock_loop"] = loop
        return self._alock

    async def _offload(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` (store I/O, assembling, rendering) in a worker thread, one at a time per session."""
        def run() -> Any:
            with self._thread_lock:
                return fn(*args, **kwargs)
        return await asyncio.to_thread(run)

    async def abuild(self, provider: str | None = None, *, model: str | None = None) -> Pack:
        """:meth:`build` without blocking the event loop (the work runs in a worker thread)."""
        async with self._async_lock():
            return await self._offload(self.build, provider, model=model)

    async def acall(self, send: Callable[[dict[str, Any]], Awaitable[Any] | Any], provider: str | None = None, *,
                    record: bool = True, model: str | None = None) -> Any:
        """:meth:`call` for async clients: ``send(request_kwargs)`` may return an awaitable (e.g.
        ``lambda req: client.messages.create(**req)`` on ``AsyncAnthropic``). Calls on one session run one
        after the other (build → send → record), so each builds on the previous one's recorded response."""
        async with self._async_lock():
            builder = self._builder
            fmt = builder.format(provider)
            breaker = Breaker()
            pack = await self._offload(builder.build, fmt, breaker, model)
            try:
                response = await _maybe_await(send(pack.request))
            except Exception as exc:
                if not is_context_overflow(exc):
                    raise
                await self._offload(builder.compact, fmt, breaker, harder=True, reason=overflow_reason(pack, exc))
                pack = await self._offload(builder.build, fmt, breaker, model)
                response = await _maybe_await(send(pack.request))
            if record:
                await self._arecord(response, pack=pack)
            return response

    async def arecord(self, response: Any = None, *, message: Message | None = None,
                      usage: Usage | Mapping[str, int] | None = None, pack: Pack | None = None) -> Message | None:
        """:meth:`record` for async SDKs: also takes an ``AsyncStream``, an async iterator of events, an
        async stream (its final message is awaited) or a coroutine returning a response."""
        async with self._async_lock():
            return await self._arecord(response, message=message, usage=usage, pack=pack)

    async def _arecord(self, response: Any, **kwargs: Any) -> Message | None:
        if response is not None:
            pack = kwargs.get("pack") or self.last_pack
            if pack is None:
                if inspect.iscoroutine(response):
                    response.close()
                raise UsageError("arecord(response) needs the pack it answers; call abuild() first or pass pack=")
            response = await aresolve(pack.format, response)
        return await self._offload(self.record, response, **kwargs)  # type: ignore[no-any-return]

    async def aload(self, messages: Sequence[Any], format: str, *, tools: Sequence[Any] | None = None,
                    system: str | None = None, overlap: bool = False, repairs: Sequence[str] = ()) -> LoadResult:
        """:meth:`load` without blocking the event loop."""
        async with self._async_lock():
            return await self._offload(self.load, messages, format, tools=tools, system=system,  # type: ignore[no-any-return]
                                       overlap=overlap, repairs=repairs)

    async def aadd(self, message: Message | Mapping[str, Any]) -> Message:
        """:meth:`add` without blocking the event loop."""
        async with self._async_lock():
            return await self._offload(self.add, message)  # type: ignore[no-any-return]

    async def atool_result(self, call_id: str, output: Any, *, is_error: bool = False) -> Message:
        """:meth:`tool_result` without blocking the event loop."""
        async with self._async_lock():
            return await self._offload(self.tool_result, call_id, output, is_error=is_error)  # type: ignore[no-any-return]


def is_async_callable(fn: Any) -> bool:
    """Whether calling ``fn`` returns a coroutine (an ``async def`` function or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


def check_sync(response: Any) -> Any:
    """``response``, or a UsageError when a ``send`` given to ``call()`` returned an awaitable."""
    if inspect.isawaitable(response):
        if inspect.iscoroutine(response):
            response.close()  # never awaited: close it so no warning fires later
        raise UsageError(f"send returned an awaitable ({type(response).__name__}), so the client is async: use "
                         "`await session.acall(send)`; call() needs a synchronous send")
    return response


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def overflow_reason(pack: Pack, exc: BaseException) -> str:
    """The compaction reason logged when the provider rejected ``pack`` as too long."""
    return f"the provider rejected {pack.tokens:,} tokens as too long ({type(exc).__name__})"
