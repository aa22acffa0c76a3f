"""The toolkit every history reader uses: provider messages (a live request body, a loaded history, a
trace file's conversation) into neutral messages.

:class:`Builder` does the pairing and repairs for every format, so each reader only walks its provider's
message shapes and calls ``builder.user / assistant / tool_result``; it never repairs silently: each fix is a
repair note. :class:`Ctx` is where a reader is (file and key path), for errors that name the place;
:func:`tools_from` reads tool definitions in any provider shape, :func:`usage_from` billed usage.
A reader returns the :class:`History` it found beside the messages (system text, tools, metadata).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidMessageError, InvalidToolSchemaError, TraceFormatError
from ..jsonvalues import clean_text
from ..model import (
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    parse_arguments,
)

#: the trace file formats windowsmith reads (``windowsmith.traces``): every reader error names them
TRACE_FORMATS: tuple[str, ...] = (
    "tau-bench",
    "tau2-bench",
    "mini-swe-agent",
    "swe-agent",
    "openhands",
    "openai-chat",
    "openai-responses",
    "anthropic-messages",
    "claude-code",
    "codex",
    "gemini-cli",
    "inspect-ai",
    "langchain",
    "pydantic-ai",
)

NO_RESULT_TEXT = "[windowsmith: no result recorded in the trace]"
#: A tool output above this many UTF-8 bytes is kept whole and listed in ``meta["large_outputs"]``.
LARGE_OUTPUT_BYTES = 1_000_000


@dataclass
class History:
    """What a history reader found beside the messages it fed to its builder."""

    system: str  # the system texts, joined ("" if none)
    tools: tuple[ToolSpec, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. the request's model
    repairs: list[str] = field(default_factory=list)  # repairs to the tool definitions (the builder keeps its own)


def supported() -> str:
    return "supported formats: " + ", ".join(TRACE_FORMATS)


def fail(path: Path | str, where: str, problem: str) -> TraceFormatError:
    """Build the error every importer raises: file, position (line or key path), problem, formats."""
    loc = f" at {where}" if where else ""
    return TraceFormatError(f"{path}{loc}: {problem}; {supported()}")


# ---------------------------------------------------------------------------------------------------
# Small typed accessors that fail with a key path instead of KeyError/TypeError
# ---------------------------------------------------------------------------------------------------


class Ctx:
    """Where we are: the file and a key path prefix, for error messages and sources."""

    def __init__(self, path: Path, where: str = "", source: str = "") -> None:
        self.path = path
        self.where = where
        self.source = source or str(path)

    def err(self, key: str, problem: str) -> TraceFormatError:
        return fail(self.path, _join(self.where, key), problem)

    def sub(self, key: str, source: str | None = None) -> Ctx:
        return Ctx(self.path, _join(self.where, key), source or self.source)

    def obj(self, v: Any, key: str = "") -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.err(key, f"expected a JSON object, got {_tname(v)}")
        return v

    def lst(self, v: Any, key: str = "") -> list[Any]:
        if not isinstance(v, list):
            raise self.err(key, f"expected a JSON array, got {_tname(v)}")
        return v

    def get(self, d: Any, key: str, kind: type | tuple[type, ...] | None = None, *, required: bool = True) -> Any:
        d = self.obj(d)
        if key not in d or d[key] is None:
            if required:
                raise self.err(key, f"missing required key {key!r}")
            return None
        v = d[key]
        if kind is not None and not isinstance(v, kind):
            kinds = (kind,) if isinstance(kind, type) else kind
            names = " or ".join(_JSON_NAMES.get(k, k.__name__) for k in kinds)
            raise self.err(key, f"expected {names}, got {_tname(v)}")
        return v


def _join(where: str, key: str) -> str:
    if not key:
        return where
    if key.startswith("["):
        return f"{where}{key}"
    return f"{where}.{key}" if where else key


def as_dict(v: Any) -> dict[str, Any]:
    """``v`` if it is a JSON object, else an empty one (for optional metadata)."""
    return v if isinstance(v, dict) else {}


def as_list(v: Any) -> list[Any]:
    """``v`` if it is a JSON array, else an empty one (for optional metadata)."""
    return v if isinstance(v, list) else []


_JSON_NAMES: dict[type, str] = {dict: "object", list: "array", str: "string", type(None): "null", bool: "boolean"}


def _tname(v: Any) -> str:
    return _JSON_NAMES.get(type(v), type(v).__name__)


# ---------------------------------------------------------------------------------------------------
# Usage
# ---------------------------------------------------------------------------------------------------


def usage_including_cache(total: int, read: int, write: int, output: int) -> Usage:
    """Usage from an input count that includes its cache reads and writes (LangChain, Pydantic AI)."""
    read = min(max(0, read), total)
    write = min(max(0, write), total - read)
    return Usage(input_tokens=total - read - write, output_tokens=output, cache_read_tokens=read,
                 cache_write_tokens=write)


def usage_less_cache(total: int, read: int, write: int, output: int) -> Usage:
    """Usage from a provider response whose input count includes its cache reads and writes (OpenAI chat and
    Responses): the input is what is left, floored at 0, and the cache counts are kept as reported (unlike
    :func:`usage_including_cache`, which clamps them to the total)."""
    return Usage(input_tokens=max(0, total - read - write), output_tokens=output, cache_read_tokens=read,
                 cache_write_tokens=write)


def usage_from(d: Any) -> Usage | None:
    """Billed usage from an OpenAI chat, OpenAI Responses, Anthropic, OpenHands, Inspect AI or LangChain
    (``usage_metadata``) usage object. (Pydantic AI's usage has the key names of windowsmith's own ``Usage`` with
    the other meaning: its importer calls :func:`usage_including_cache`.)"""
    if not isinstance(d, Mapping):
        return None

    def num(v: Any) -> int:
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0

    if "prompt_tokens" in d:  # OpenAI chat / litellm / OpenHands: prompt_tokens includes cached tokens
        prompt = num(d.get("prompt_tokens"))
        details = d.get("prompt_tokens_details")
        cached = num(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
        cached = cached or num(d.get("cache_read_tokens")) or num(d.get("cache_read_input_tokens"))
        write = num(d.get("cache_write_tokens")) or num(d.get("cache_creation_input_tokens"))
        cached = min(cached, prompt)
        write = min(write, prompt - cached)
        return Usage(
            input_tokens=prompt - cached - write,
            output_tokens=num(d.get("completion_tokens")),
            cache_read_tokens=cached,
            cache_write_tokens=write,
        )
    if "input_tokens" in d:
        total = num(d.get("input_tokens"))
        if "input_tokens_details" in d:  # OpenAI Responses: input_tokens includes cached tokens
            details = d.get("input_tokens_details")
            cached = num(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
            cached = min(cached, total)
            return Usage(
                input_tokens=total - cached, output_tokens=num(d.get("output_tokens")), cache_read_tokens=cached
            )
        details = d.get("input_token_details")
        if isinstance(details, Mapping):  # LangChain's usage_metadata: input_tokens includes the cache reads and writes
            return usage_including_cache(total, num(details.get("cache_read")), num(details.get("cache_creation")),
                                         num(d.get("output_tokens")))
        return Usage(  # Anthropic, and Inspect AI's ModelUsage: input_tokens excludes cache reads and writes
            input_tokens=total,
            output_tokens=num(d.get("output_tokens")),
            cache_read_tokens=num(d.get("cache_read_input_tokens")) or num(d.get("input_tokens_cache_read")),
            cache_write_tokens=num(d.get("cache_creation_input_tokens")) or num(d.get("input_tokens_cache_write")),
        )
    return None


# ---------------------------------------------------------------------------------------------------
# Content conversion shared by the chat-like formats
# ---------------------------------------------------------------------------------------------------


def image_from_url(url: str) -> Image:
    if url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return Image(data=data, media_type=head or "application/octet-stream")
    return Image(url=url)


def tools_from(raw: Any, ctx: Ctx, repairs: list[str]) -> tuple[ToolSpec, ...]:
    """Tool definitions in any provider shape; an invalid one is skipped with a repair note."""
    if raw is None:
        return ()
    out: list[ToolSpec] = []
    seen: set[str] = set()
    if isinstance(raw, Mapping):  # a mapping tool name -> definition (tau2 tool_defs)
        raw = list(raw.values())
    for i, t in enumerate(ctx.lst(raw)):
        if (
            isinstance(t, Mapping)
            and t.get("type") not in (None, "function", "custom")
            and "function" not in t
            and "input_schema" not in t
        ):
            repairs.append(f"{_join(ctx.where, f'[{i}]')}: built-in tool of type {t.get('type')!r} skipped (no schema)")
            continue
        try:
            spec = ToolSpec.from_dict(t, f"{_join(ctx.where, f'[{i}]')}")
        except (InvalidToolSchemaError, InvalidMessageError) as e:
            repairs.append(f"tool definition skipped: {e}")
            continue
        if spec.name in seen:
            repairs.append(f"{_join(ctx.where, f'[{i}]')}: duplicate tool definition {spec.name!r} dropped")
            continue
        seen.add(spec.name)
        out.append(spec)
    return tuple(out)


# ---------------------------------------------------------------------------------------------------
# The builder: pairing, ordering and repairs
# ---------------------------------------------------------------------------------------------------


class Builder:
    """Collects one run's turns and emits neutral messages with every repair recorded.

    Invariant of the output: an assistant message with tool calls is immediately followed by one
    ``tool`` message holding exactly one result per call, in call order; call ids are unique.
    """

    def __init__(self, *, close_open: bool = True) -> None:
        self.close_open = close_open  # False: see finish()
        self.messages: list[Message] = []
        self.billed: dict[int, Usage] = {}
        self.repairs: list[str] = []
        self.large_outputs: list[dict[str, Any]] = []
        self._open: list[ToolCall] = []  # calls of the last assistant message awaiting results
        self._results: dict[str, ToolResult] = {}
        self._pending: dict[str, deque[str]] = {}  # id as written in the trace -> open neutral ids
        self._used_ids: set[str] = set()
        self._closed: dict[str, str] = {}  # trace id -> tool name of calls already closed
        self._deferred: list[Message] = []
        self._auto = 0

    # -- text ------------------------------------------------------------------------------------

    def text(self, value: Any, where: str) -> str:
        """Clean a string (lone surrogates, bytes) and note the repair; non-strings become JSON text."""
        if value is None:
            return ""
        if not isinstance(value, str | bytes):
            value = json.dumps(value, ensure_ascii=False)
        s, repaired = clean_text(value, where)
        if repaired:
            self.repairs.append(f"{where}: invalid UTF-8 / lone surrogates replaced with U+FFFD")
        return s

    # -- turns -----------------------------------------------------------------------------------

    def user(self, content: str | Sequence[Text | Image], where: str) -> None:
        self._flush()
        blocks = self._blocks(content, where)
        if not blocks:
            self.repairs.append(f"{where}: empty user turn dropped")
            return
        self._check_large(blocks, where, None)
        self.messages.append(Message("user", tuple(blocks)))

    def assistant(
        self,
        text: str | Sequence[Text | Image] | None,
        calls: Sequence[tuple[Any, Any, Any]] = (),
        where: str = "",
        *,
        thinking: Sequence[Thinking] = (),
        usage: Usage | None = None,
    ) -> None:
        """Add an assistant turn. ``calls`` are ``(id, name, arguments)`` with arguments a dict or a JSON string."""
        self._flush()
        blocks: list[Any] = list(thinking)
        blocks.extend(b for b in self._blocks(text or "", where) if isinstance(b, Text))
        tool_calls: list[ToolCall] = []
        for k, (cid, name, args) in enumerate(calls):
            tool_calls.append(self._call(cid, name, args, f"{where}.tool_calls[{k}]"))
        blocks.extend(tool_calls)
        if not blocks:
            note = f"{where}: empty assistant turn (no text, no tool calls) dropped"
            if usage is not None:
                note += " together with its billed usage"
            self.repairs.append(note)
            return
        if usage is not None:
            self.billed[len(self.messages)] = usage
        self.messages.append(Message("assistant", tuple(blocks)))
        self._open = tool_calls

    def tool_result(
        self,
        call_id: Any,
        content: str | Sequence[Text | Image],
        where: str,
        *,
        is_error: bool = False,
        name: str | None = None,
    ) -> None:
        blocks = tuple(self._blocks(content, where))
        cid = str(call_id) if call_id not in (None, "") else ""
        queue = self._pending.get(cid)
        if queue:
            nid = queue.popleft()
            call = next(c for c in self._open if c.id == nid)
            if name and name != call.name:
                self.repairs.append(
                    f"{where}: result names tool {name!r} but call {cid!r} is {call.name!r}; kept the call's name"
                )
            res = ToolResult(call_id=nid, content=blocks, is_error=is_error, name=call.name)
            self._check_large(blocks, where, nid)
            self._results[nid] = res
            return
        # no open call with that id: keep the text as a user message, noted
        label = name or self._closed.get(cid) or "unknown tool"
        if cid in self._closed:
            why = "arrived after its call was already answered or closed"
        elif cid:
            why = "has no matching tool call"
        else:
            why = "has no tool call id"
        self.repairs.append(
            f"{where}: tool result {cid or '(no id)'!r} ({label}) {why}; converted to a user text message"
        )
        header = f"[windowsmith: tool result for call {cid or '(no id)'} ({label}) with no matching tool call]"
        body = [Text(header), *blocks] if blocks else [Text(header)]
        msg = Message("user", tuple(body))
        if self._open:
            self._deferred.append(msg)
        else:
            self.messages.append(msg)

    def finish(self) -> tuple[tuple[Message, ...], dict[int, Usage], list[str]]:
        """The messages, billed usage by message index, and repairs. With ``close_open=False`` (a live
        conversation handed over mid-turn): the last assistant message's calls without a result stay
        open, and the results it has so far follow it in one ``tool`` message."""
        if not self.close_open and self._open:
            got = [self._results[c.id] for c in self._open if c.id in self._results]
            if got:
                self.messages.append(Message("tool", tuple(got)))
            self.messages.extend(self._deferred)
            self._open, self._results, self._deferred = [], {}, []
        self._flush()
        return tuple(self.messages), dict(self.billed), list(self.repairs)

    # -- internals -------------------------------------------------------------------------------

    def _call(self, cid: Any, name: Any, args: Any, where: str) -> ToolCall:
        if not isinstance(name, str) or not name:
            self.repairs.append(f"{where}: tool call without a name; named 'unknown'")
            name = "unknown"
        orig = str(cid) if cid not in (None, "") else ""
        if not orig:
            self._auto += 1
            nid = f"windowsmith_call_{self._auto}"
            self.repairs.append(f"{where}: tool call {name!r} without an id; assigned {nid!r}")
        else:
            nid = orig
            n = 1
            while nid in self._used_ids:
                n += 1
                nid = f"{orig}~{n}"
            if nid != orig:
                self.repairs.append(f"{where}: tool call id {orig!r} reused by an earlier call; renamed {nid!r}")
        self._used_ids.add(nid)
        if isinstance(args, str | bytes):
            raw = self.text(args, f"{where}.arguments")
            parsed = parse_arguments(raw, where)
            if "_raw" in parsed and len(parsed) == 1:
                self.repairs.append(f"{where}: arguments of {name!r} are not a JSON object; kept verbatim under '_raw'")
            args = parsed
        elif args is None:
            args = {}
        elif not isinstance(args, Mapping):
            self.repairs.append(f"{where}: arguments of {name!r} are {_tname(args)}, not an object; kept under '_raw'")
            args = {"_raw": json.dumps(args, ensure_ascii=False)}
        self._pending.setdefault(orig, deque()).append(nid)
        return ToolCall(id=nid, name=name, arguments=dict(args))

    def _flush(self) -> None:
        if self._open:
            results: list[ToolResult] = []
            for c in self._open:
                r = self._results.get(c.id)
                if r is None:
                    self.repairs.append(
                        f"message {len(self.messages) - 1}: tool call {c.id!r} ({c.name}) has no result in the trace; "
                        "inserted an error result"
                    )
                    r = ToolResult(call_id=c.id, content=(Text(NO_RESULT_TEXT),), is_error=True, name=c.name)
                results.append(r)
            self.messages.append(Message("tool", tuple(results)))
            for orig, q in self._pending.items():
                for nid in q:
                    self._closed[orig] = next((c.name for c in self._open if c.id == nid), "unknown tool")
            for c in self._open:
                self._closed.setdefault(c.id, c.name)
            self._pending.clear()
            self._results.clear()
            self._open = []
        if self._deferred:
            self.messages.extend(self._deferred)
            self._deferred = []

    def _blocks(self, content: str | Sequence[Text | Image], where: str) -> list[Text | Image]:
        if isinstance(content, str | bytes):
            s = self.text(content, where)
            return [Text(s)] if s.strip() else []
        out: list[Text | Image] = []
        for b in content:
            if isinstance(b, Text):
                s = self.text(b.text, where)
                if s.strip():
                    out.append(Text(s))
            else:
                out.append(b)
        return out

    def _check_large(self, blocks: Sequence[Any], where: str, call_id: str | None) -> None:
        size = sum(len(b.text.encode("utf-8")) for b in blocks if isinstance(b, Text))
        if size > LARGE_OUTPUT_BYTES:
            entry: dict[str, Any] = {"where": where, "bytes": size}
            if call_id:
                entry["call_id"] = call_id
            self.large_outputs.append(entry)
