"""Machinery shared by the four renderers (private).

Every renderer renders a request as a sequence of *units* in cache-prefix order:

    one unit per tool  →  system  →  session  →  one unit per neutral message  →  the tail

Each unit but the tail is memoized by content (``MemoCache``), so a long session renders only its
new messages each turn. A unit's part digest is taken over its rendering *without* cache markers
(Anthropic ``cache_control``): providers key their cache on content, not on where the markers sit,
so a breakpoint moving forward between turns does not change the earlier parts. Markers are added
to a shallow copy at assembly time and recorded in the checksum instead.

The tail is rendered fresh each time as its own unit, placed per ``NeutralRequest.tail_mode()``:
before the final user message (``prepend``) or after the last message (``append``/``new``); the
format's assembly step merges it into the neighbouring message where the format requires.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from ..errors import ConfigError, ProviderResponseError
from ..hashing import canonical_json, sha256_hex
from ..model import Image, Message, ToolSpec
from ..request import NeutralRequest
from .base import PartsHasher, Rendered, Renderer


class _Lazy:
    """A mapping computed on first use (the Gemini tool-name index is O(messages) to build)."""

    def __init__(self, make: Any) -> None:
        self._make = make
        self._value: Any = None

    def get(self, key: Any, default: Any = None) -> Any:
        if self._value is None:
            self._value = self._make()
        return self._value.get(key, default)


class _Body:
    """Rendered and merged body messages of the last request (for incremental rendering)."""

    __slots__ = ("flat_last", "messages", "msg_end", "n_flat", "origin", "out", "parts", "spare")

    def __init__(self, messages: tuple[Message, ...], parts: list[str], msg_end: list[int],
                 flat_last: list[dict[str, Any]], out: list[dict[str, Any]], origin: list[list[tuple[int, int]]],
                 spare: list[Any], n_flat: int) -> None:
        self.messages = messages
        self.parts = parts
        self.msg_end = msg_end
        self.flat_last = flat_last
        self.out = out
        self.origin = origin
        self.spare = spare
        self.n_flat = n_flat


class UnitRenderer(Renderer):
    """A renderer built from per-unit hooks; subclasses supply the format's shapes."""

    #: Formats that must merge consecutive same-role messages (Anthropic, Gemini) set this.
    merge_same_role: bool = False
    #: Key of the message field holding the block list ("content" or "parts").
    content_key: str = "content"

    # -- hooks ------------------------------------------------------------------------------------

    @abstractmethod
    def render_tool(self, tool: ToolSpec) -> Any: ...

    @abstractmethod
    def render_system(self, kind: str, text: str) -> Any:
        """``kind`` is ``"system"`` or ``"session"``."""

    @abstractmethod
    def render_message(self, message: Message, extra: tuple[Any, ...]) -> list[dict[str, Any]]:
        """Render one neutral message as a list of provider messages/items (no cache markers)."""

    @abstractmethod
    def render_tail(self, text: str) -> list[dict[str, Any]]: ...

    @abstractmethod
    def build(
        self,
        req: NeutralRequest,
        tools: list[Any],
        system: list[Any],
        messages: list[dict[str, Any]],
        marks: dict[str, Any],
    ) -> dict[str, Any]:
        """Assemble the request dict; ``marks`` says where breakpoints go (see ``render``)."""

    def defer_tool(self, rendered: Any) -> Any:
        """A tool definition marked for the provider's deferred loading (formats that have it override)."""
        raise ConfigError(f"the {self.format} format has no native deferred tool loading; use "
                          "ToolPolicy(native=False) (a tool_search function) for it")

    def search_tool(self) -> Any:
        """The provider's own tool-search tool, sent after the tools when some are deferred."""
        raise ConfigError(f"the {self.format} format has no native tool search")

    def _deferred_tool(self, tool: ToolSpec) -> Any:
        return self.defer_tool(self.render_tool(tool))

    def message_extra(self, message: Message, req: NeutralRequest, ctx: Any) -> tuple[Any, ...]:
        """Extra memo-key parts a message's rendering depends on (Gemini: tool names)."""
        return ()

    def context(self, req: NeutralRequest) -> Any:
        return None

    def is_first_block(self, block: Mapping[str, Any]) -> bool:
        """Blocks moved to the front of a merged message (tool results)."""
        return False

    # -- the algorithm ----------------------------------------------------------------------------

    def render(self, req: NeutralRequest) -> Rendered:
        plan = req.cache
        n = len(req.messages)
        if plan.message_index is not None and not 0 <= plan.message_index < n:
            raise ConfigError(
                f"CachePlan.message_index={plan.message_index} is out of range for {n} messages; "
                "use an index into NeutralRequest.messages or None"
            )
        parts: list[str] = []
        prefix = 0

        tools: list[Any] = []
        deferred = set(req.deferred)
        for tool in req.tools:
            if tool.name in deferred:
                value, digest = self.memo.get(("tool-deferred", tool.canonical), partial(self._deferred_tool, tool))
            else:
                value, digest = self.memo.get(("tool", tool.canonical), partial(self.render_tool, tool))
            tools.append(value)
            parts.append(digest)
        if deferred:
            value, digest = self.memo.get(("tool-search",), self.search_tool)
            tools.append(value)
            parts.append(digest)
        if plan.tools and tools:
            prefix = len(parts)

        system: list[Any] = []
        system_marks: list[bool] = []
        for kind, text, mark in (
            ("system", req.system_text, plan.system),
            ("session", req.session_text, plan.session),
        ):
            if not text:
                continue
            value, digest = self.memo.get((kind, text), partial(self.render_system, kind, text))
            system.append(value)
            system_marks.append(mark)
            parts.append(digest)
            if mark:
                prefix = len(parts)

        mode = req.tail_mode()
        tail_unit: list[dict[str, Any]] | None = None
        tail_digest = ""
        if mode != "none":
            assert req.tail is not None
            tail_unit = self.render_tail(req.tail)
            tail_digest = sha256_hex(canonical_json(tail_unit))

        # The body (every message but a tail-prepended final one) is rendered and merged
        # incrementally: when it extends the previous request's body, only new messages are done.
        body_n = n - 1 if mode == "prepend" else n
        ctx = _Lazy(lambda: self.context(req))
        body = self._body(req.messages[:body_n], req, ctx)
        pre_body = len(parts)
        parts.extend(body.parts)
        flat_extra: list[dict[str, Any]] = []
        if mode == "prepend":
            assert tail_unit is not None
            flat_extra.extend(tail_unit)
            parts.append(tail_digest)
            last = req.messages[n - 1]
            extra = self.message_extra(last, req, ctx)
            value, digest = self.memo.get(("msg", last.digest, extra), partial(self.render_message, last, extra))
            flat_extra.extend(value)
            parts.append(digest)
        elif mode in ("append", "new"):
            assert tail_unit is not None
            flat_extra.extend(tail_unit)
            parts.append(tail_digest)
        if plan.head_index is not None and not 0 <= plan.head_index < body_n:
            raise ConfigError(f"CachePlan.head_index={plan.head_index} is out of range for the {body_n} message(s) "
                              "rendered before the tail; use an index before the message breakpoint or None")
        if plan.message_index is not None:
            if plan.message_index >= body_n:
                raise ConfigError("the message breakpoint cannot be on the message the tail is prepended to")
            prefix = pre_body + plan.message_index + 1
        total_flat = body.n_flat + len(flat_extra)
        out, origin = self._merge_from(body.out, body.origin, flat_extra, body.n_flat, total_flat, mode)
        mark_at = self._mark(body, origin, plan.message_index, from_end=True)
        head_at = self._mark(body, origin, plan.head_index, from_end=False)
        messages = out

        marks = {"tools": plan.tools and bool(tools), "system": system_marks, "message": mark_at, "head": head_at}
        request = self.build(req, tools, system, messages, marks)
        rest = {
            "format": self.format,
            "fields": {k: v for k, v in request.items() if k not in ("tools", "system", "messages", "input", "contents", "config")},
            "config": {k: v for k, v in request.get("config", {}).items() if k not in ("tools", "system_instruction")},
            "marks": {"tools": marks["tools"], "system": system_marks, "message": plan.message_index,
                      **({"head": plan.head_index} if plan.head_index is not None else {})},
            "tail_mode": mode,
        }
        ptuple = tuple(parts)
        hashers: tuple[PartsHasher, PartsHasher] | None = getattr(self, "_hashers", None)
        if hashers is None:
            hashers = self._hashers = (PartsHasher(), PartsHasher())
        checksum = hashers[0].checksum(ptuple, rest)
        hashers[0].advance(ptuple, max(0, len(ptuple) - 3))  # the last parts (tail, final message) change every turn
        prefix_digest = hashers[1].prefix(ptuple, prefix)
        hashers[1].advance(ptuple, prefix)
        return Rendered(request, ptuple, prefix, checksum, self.format, prefix_digest)

    def _mark(self, body: _Body, origin: list[Any], index: int | None, *, from_end: bool) -> tuple[int, int] | None:
        """(merged message, block) that carries the breakpoint of neutral message ``index``, or None.

        ``from_end``: search from the newest merged message (the message breakpoint is near the end), else
        from the oldest (the head breakpoint is near the start)."""
        if index is None:
            return None
        end = body.msg_end[index]  # flat index after the marked message's items
        start = body.msg_end[index - 1] if index > 0 else 0
        if end <= start:
            return None
        src_blocks = body.flat_last[index].get(self.content_key)
        want = self.mark_block_index(src_blocks) if isinstance(src_blocks, list) else None
        if want is None:
            return None
        target = (end - 1, want)
        order = range(len(origin) - 1, -1, -1) if from_end else range(len(origin))
        for k in order:
            orig = origin[k]
            if target in orig:
                return (k, orig.index(target))
            if orig and (max(o[0] for o in orig) < end - 1 if from_end else min(o[0] for o in orig) > end - 1):
                break
        return None

    def _body(self, msgs: tuple[Message, ...], req: NeutralRequest, ctx: Any) -> _Body:
        """Render and merge ``msgs``, resuming from the cached body when ``msgs`` extends it."""
        cached: _Body | None = getattr(self, "_body_cache", None)
        k = len(cached.messages) if cached is not None else 0
        if cached is not None and len(msgs) >= k and msgs[:k] == cached.messages:
            if len(msgs) == k:
                return cached
            base = cached
        else:
            base = _Body((), [], [], [], [], [], [], 0)
            k = 0
        parts = list(base.parts)
        msg_end = list(base.msg_end)
        flat_last = list(base.flat_last)
        new_flat: list[dict[str, Any]] = []
        n_flat = base.n_flat
        for message in msgs[k:]:
            extra = self.message_extra(message, req, ctx)
            value, digest = self.memo.get(("msg", message.digest, extra), partial(self.render_message, message, extra))
            new_flat.extend(value)
            n_flat += len(value)
            parts.append(digest)
            msg_end.append(n_flat)
            flat_last.append(value[-1] if value else {})
        out, origin = self._merge_from(base.out, base.origin, new_flat, base.n_flat, -1, "none")
        body = _Body(msgs, parts, msg_end, flat_last, out, origin, [], n_flat)
        self._body_cache = body
        return body

    def _merge_from(self, out0: list[dict[str, Any]], origin0: list[list[tuple[int, int]]], new: list[dict[str, Any]],
                    first_idx: int, total: int, mode: str) -> tuple[list[dict[str, Any]], list[list[tuple[int, int]]]]:
        """Continue merging ``new`` flat items (global indices from ``first_idx``) onto ``out0``.

        Formats that merge consecutive same-role messages do so; in ``prepend`` mode the final item
        (the user's message) merges into the tail before it. Tool results are moved to the front of a
        merged message (a stable partition, so re-applying it after further merges is exact).
        Returns new lists; the inputs are not modified.
        """
        if not new:
            return out0, origin0
        key = self.content_key
        out = list(out0)
        origin = list(origin0)
        changed_from = len(out) - 1 if out else 0
        for off, msg in enumerate(new):
            idx = first_idx + off
            blocks = msg.get(key)
            n_blocks = len(blocks) if isinstance(blocks, list) else 0
            can_merge = (
                bool(out)
                and isinstance(blocks, list)
                and isinstance(out[-1].get(key), list)
                and (
                    (self.merge_same_role and out[-1].get("role") == msg.get("role"))
                    or (mode == "prepend" and idx == total - 1)
                )
            )
            if can_merge and isinstance(blocks, list):
                prev = out[-1]
                out[-1] = {**prev, key: list(prev[key]) + blocks}
                origin[-1] = origin[-1] + [(idx, j) for j in range(n_blocks)]
            else:
                out.append(msg)
                origin.append([(idx, j) for j in range(n_blocks)])
        if self.merge_same_role:
            for k in range(max(0, changed_from), len(out)):
                merged = out[k].get(key)
                if not isinstance(merged, list) or len(origin[k]) < 2:
                    continue
                first = [self.is_first_block(b) for b in merged]
                order = [j for j in range(len(merged)) if first[j]] + [j for j in range(len(merged)) if not first[j]]
                if order != list(range(len(merged))):
                    out[k] = {**out[k], key: [merged[j] for j in order]}
                    origin[k] = [origin[k][j] for j in order]
        return out, origin

    def mark_block_index(self, blocks: Sequence[Mapping[str, Any]]) -> int | None:
        """Index of the block that carries a message breakpoint (the last one by default)."""
        return len(blocks) - 1 if blocks else None


# -------------------------------------------------------------------------------------------------
# helpers
# -------------------------------------------------------------------------------------------------


def data_uri(image: Image) -> str:
    if image.url is not None:
        return image.url
    return f"data:{image.media_type};base64,{image.data}"


def tool_names(req: NeutralRequest) -> dict[str, str]:
    names: dict[str, str] = {}
    for m in req.messages:
        if m.role == "assistant":
            for c in m.tool_calls:
                names[c.id] = c.name
    return names


def to_plain(response: Any, *, what: str, by_alias: bool = True) -> dict[str, Any]:
    """An SDK response object (pydantic model) or a dict, as a plain JSON-like dict."""
    if isinstance(response, Mapping):
        return dict(response)
    dump = getattr(response, "model_dump", None)
    if callable(dump):
        try:
            out = dump(mode="json", by_alias=by_alias, exclude_unset=True, warnings=False)
        except TypeError:  # not a pydantic v2 model after all
            out = None
        if isinstance(out, dict):
            return out
    raise ProviderResponseError(
        f"cannot parse {type(response).__name__} as {what}: pass the SDK's response object or its dict form "
        "(response.model_dump())"
    )


def expect(d: Any, key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(d, Mapping):
        raise ProviderResponseError(f"{where} must be an object, got {type(d).__name__}")
    v = d.get(key)
    if not isinstance(v, typ):
        raise ProviderResponseError(f"{where}.{key} is missing or has the wrong type ({type(v).__name__})")
    return v


def as_int(v: Any) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProviderResponseError(f"token count must be an integer, got {v!r}")
    return v
