"""A session's builds and model calls, synchronous and async: ``build``, ``compact`` and ``call``, and the
``a*`` methods, which run the synchronous ones in a worker thread, one operation of a session at a time, so an
event loop never blocks on store I/O, assembling or rendering. The helpers that tell a sync ``send`` from an
async one live here too (``call`` refuses an async client with a clear error).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from .. import telemetry
from ..build import Builder, ModelCall, Pack
from ..compaction.config import Breaker, CompactionResult
from ..errors import UsageError
from ..formats import is_context_overflow
from ..formats.stream import aresolve
from ..model import Message
from ..resume import FREEZE_EVENTS, paused_gc
from ..state import SessionState
from .writer import Writer

P = ParamSpec("P")
T = TypeVar("T")


class Calls:
    """Builds, compactions and model calls of one session, and the worker thread of its async methods."""

    def __init__(self, builder: Builder, writer: Writer) -> None:
        self.builder = builder
        self.writer = writer
        self._thread_lock = threading.RLock()  # one async operation of this session at a time
        self._alock: asyncio.Lock | None = None
        self._alock_loop: asyncio.AbstractEventLoop | None = None

    @property
    def state(self) -> SessionState:
        return self.builder.state

    # ------------------------------------------------------------------ synchronous

    def build(self, provider: str | None, model: str | None) -> Pack:
        builder = self.builder
        fmt = builder.format(provider)
        with builder.traced(fmt, model) as done:
            if builder.last_pack is None and len(self.state.messages) >= FREEZE_EVENTS:
                with paused_gc(freeze=True):  # the first build of a long session renders all of it
                    return done(builder.build(fmt, Breaker(), model))
            return done(builder.build(fmt, Breaker(), model))

    def compact(self, provider: str | None, reason: str | None, harder: bool) -> CompactionResult:
        return self.builder.compact(self.builder.format(provider), Breaker(), harder=harder,
                                    reason=reason or "compaction requested")

    def begin(self, provider: str | None, model: str | None) -> ModelCall:
        return ModelCall(self.builder, self.builder.format(provider), model)

    def call(self, send: Callable[[dict[str, Any]], Any], provider: str | None, record: bool,
             model: str | None) -> Any:
        if is_async_callable(send):
            raise UsageError(f"send {getattr(send, '__name__', send)!r} is async: use `await session.acall(send)`; "
                             "call() needs a synchronous send (e.g. a sync SDK client)")
        attempt = self.begin(provider, model)
        pack = attempt.build()
        try:
            response = check_sync(send(pack.request))
        except Exception as exc:
            if not is_context_overflow(exc):
                telemetry.end_call(self.builder.log, error=type(exc).__qualname__)
                raise
            attempt.compact_harder(overflow_reason(pack, exc))
            pack = attempt.build()
            response = check_sync(send(pack.request))
        if record:
            self.writer.record(response, None, None, pack)
        return response

    # ------------------------------------------------------------------ async

    def lock(self) -> asyncio.Lock:
        """The lock of this session's async operations (one per event loop)."""
        loop = asyncio.get_running_loop()
        if self._alock is None or self._alock_loop is not loop:
            self._alock = asyncio.Lock()
            self._alock_loop = loop
        return self._alock

    async def offload(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` (store I/O, assembling, rendering) in a worker thread, one at a time per session."""
        def run() -> T:
            with self._thread_lock:
                return fn(*args, **kwargs)
        return await asyncio.to_thread(run)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """:meth:`offload` under the session's async lock."""
        async with self.lock():
            return await self.offload(fn, *args, **kwargs)

    async def acall(self, send: Callable[[dict[str, Any]], Awaitable[Any] | Any], provider: str | None,
                    record: bool, model: str | None) -> Any:
        async with self.lock():
            attempt = self.begin(provider, model)
            pack = await self.offload(attempt.build)
            try:
                response = await _maybe_await(send(pack.request))
            except Exception as exc:
                if not is_context_overflow(exc):
                    telemetry.end_call(self.builder.log, error=type(exc).__qualname__)
                    raise
                await self.offload(attempt.compact_harder, overflow_reason(pack, exc))
                pack = await self.offload(attempt.build)
                response = await _maybe_await(send(pack.request))
            if record:
                await self._arecord(response, None, None, pack)
            return response

    async def arecord(self, response: Any, message: Message | None, usage: Any, pack: Pack | None,
                      estimated: bool = False) -> Message | None:
        async with self.lock():
            return await self._arecord(response, message, usage, pack, estimated)

    async def _arecord(self, response: Any, message: Message | None, usage: Any, pack: Pack | None,
                       estimated: bool = False) -> Message | None:
        if response is not None:
            answered = pack or self.builder.last_pack
            if answered is None:
                if inspect.iscoroutine(response):
                    response.close()
                raise UsageError("arecord(response) needs the pack it answers; call abuild() first or pass pack=")
            response = await aresolve(answered.format, response)
        return await self.offload(self.writer.record, response, message, usage, pack, estimated)


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


__all__ = ["Calls", "check_sync", "is_async_callable", "overflow_reason"]
