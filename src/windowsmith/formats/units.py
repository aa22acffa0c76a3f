"""The unit rendering shared by the four request renderers.

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

import sys
import sysconfig
import threading
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from ..errors import ConfigError
from ..hashing import canonical_json, sha256_hex
from ..model import Image, Message, ToolSpec
from ..request import Lineage, NeutralRequest, extends
from ..snapshot import Snapshot
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


class RenderedBody:
    """The rendered and merged body messages of the last request, extended in place when the next request's
    body extends it (so a turn renders, merges and stores its new messages only)."""

    __slots__ = ("flat_last", "lineage", "msg_end", "n", "n_flat", "origin", "out", "parts", "source", "token")

    def __init__(self, source: Sequence[Message], n: int, lineage: Lineage | None) -> None:
        self.source = source  # the messages tuple of the request the body was last taken from
        self.n = n  # the body is source[:n]
        self.lineage = lineage
        self.parts: list[str] = []  # part digest of each body message
        self.msg_end: list[int] = []  # flat index after each body message's provider items
        self.flat_last: list[dict[str, Any]] = []  # each body message's last provider item
        self.out: list[dict[str, Any]] = []  # the merged provider messages
        self.origin: list[list[tuple[int, int]]] = []  # (flat item, block) of each block of ``out``
        self.n_flat = 0
        self.token = object()  # the parts lineage: new whenever the body is rebuilt rather than extended


class _Spare:
    """A request's message list kept by the renderer, to be brought up to date in place for a later request
    once no one else holds it: ``items`` was ``[*lead, *out[:size - 1], ...]`` (``out`` the body's merged list
    when it had ``size`` messages) with the items at ``marked`` replaced by the build hook."""

    __slots__ = ("items", "lead", "marked", "out", "size")

    def __init__(self, items: list[dict[str, Any]], out: list[dict[str, Any]], lead: tuple[Any, ...],
                 marked: tuple[int, ...]) -> None:
        self.items, self.out, self.size, self.lead, self.marked = items, out, len(out), lead, marked


#: ``sys.getrefcount`` of a spare list that only its :class:`_Spare` refers to (its slot and the call's argument);
#: lists are recycled on CPython with the GIL only, where this count is exact
_FREE_REFS = 2
_RECYCLE = sys.implementation.name == "cpython" and not sysconfig.get_config_var("Py_GIL_DISABLED")
#: spare lists a renderer keeps: the last request's (its pack is usually still held) and the one before
_SPARES = 2
#: the breakpoints of a ``CachePlan`` besides the message breakpoint (``<name>_index``), in the order they are checked
_BREAKPOINTS = ("head", "carry", "fold", "turn", "anchor")


class UnitRenderer(Renderer):
    """A renderer built from per-unit hooks; subclasses supply the format's shapes."""

    #: Formats that must merge consecutive same-role messages (Anthropic, Gemini) set this.
    merge_same_role: bool = False
    #: Formats whose system items lead the message list (OpenAI) set this: the hook gets them there.
    system_in_messages: bool = False

    def __init__(self) -> None:
        super().__init__()
        #: the rendered body of the last request, extended in place by the next one that extends it (under ``lock``);
        #: ``body_snapshot.py`` installs one restored from the store
        self.body_cache: RenderedBody | None = None
        self._parts_line: tuple[object, tuple[str, ...]] | None = None  # (parts token, head parts) of the last render
        self._hashers = (PartsHasher(), PartsHasher())
        self.lock = threading.Lock()  # one render (or body install) at a time: the body and hash states are shared
        self._spares: list[_Spare] = []  # message lists of earlier requests (see _message_list)
        self.lists_reused = 0  # requests whose message list was an earlier request's, brought up to date in place
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
        """Assemble the request dict; ``marks`` says where breakpoints go (see ``render``). ``messages`` is a
        list this request owns (the system items first when ``system_in_messages``): the hook may put it in
        the request and replace the items that carry a message breakpoint (``marks["message"]`` and
        ``marks["head"]``: (message, block)) with marked copies, nothing else. Once no one holds the list any
        more, the renderer brings it up to date in place for a later request."""

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
        # the body cache and the hash states are extended in place and an engine's renderer is shared by its
        # sessions, which may build in different threads at once (the async API): one render at a time
        with self.lock:
            return self._render(req)

    def _render(self, req: NeutralRequest) -> Rendered:
        plan = req.cache
        n = len(req.messages)
        if plan.message_index is not None and not 0 <= plan.message_index < n:
            raise ConfigError(
                f"CachePlan.message_index={plan.message_index} is out of range for {n} messages; "
                "use an index into NeutralRequest.messages or None"
            )
        tools, system, system_marks, parts, prefix = self._head(req)
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
        head_parts = tuple(parts)
        body, extended = self._body(req, body_n, ctx)
        pre_body = len(parts)
        flat_extra, extra_parts = self._extra(req, mode, tail_unit, tail_digest, ctx)
        for name in _BREAKPOINTS:
            at_index = getattr(plan, f"{name}_index")
            if at_index is not None and not 0 <= at_index < body_n:
                raise ConfigError(f"CachePlan.{name}_index={at_index} is out of range for the {body_n} message(s) "
                                  "rendered before the tail; use an index before the message breakpoint or None")
        if plan.message_index is not None:
            if plan.message_index >= body_n:
                raise ConfigError("the message breakpoint cannot be on the message the tail is prepended to")
            prefix = pre_body + plan.message_index + 1
        # the request's message list: a copy of the body, or a list no one holds any more brought up to date
        lead = system if self.system_in_messages else []
        messages, at = self._messages(body, lead, flat_extra, mode, req)
        marks = {"tools": plan.tools and bool(tools), "system": system_marks, "message": at["message"],
                 **{name: at[name] for name in _BREAKPOINTS}}
        request = self.build(req, tools, system, messages, marks)
        if _RECYCLE:
            marked = tuple(k[0] for k in (at["message"], *(at[name] for name in _BREAKPOINTS)) if k is not None)
            self._spares.append(_Spare(messages, body.out, tuple(lead), marked))
            del self._spares[:-_SPARES]
        rest = {
            "format": self.format,
            "fields": {k: v for k, v in request.items() if k not in ("tools", "system", "messages", "input", "contents", "config")},
            "config": {k: v for k, v in request.get("config", {}).items() if k not in ("tools", "system_instruction")},
            "marks": {"tools": marks["tools"], "system": system_marks, "message": plan.message_index,
                      **{name: getattr(plan, f"{name}_index") for name in _BREAKPOINTS
                         if getattr(plan, f"{name}_index") is not None}},
            "tail_mode": mode,
        }
        if plan.stable_ttl != "5m":  # (only then: the default rendering's checksum stays what it was)
            rest["stable_ttl"] = plan.stable_ttl
        ptuple = Snapshot(head_parts, body.parts, 0, len(body.parts), tuple(extra_parts))  # no copy of the body's digests
        return self._rendered(request, ptuple, rest, body, extended, head_parts, pre_body, prefix)

    def _head(self, req: NeutralRequest) -> tuple[list[Any], list[Any], list[bool], list[str], int]:
        """The tool and system units: (tools, system items, their breakpoints, part digests, prefix parts so far)."""
        plan = req.cache
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
        return tools, system, system_marks, parts, prefix

    def _extra(self, req: NeutralRequest, mode: str, tail_unit: list[dict[str, Any]] | None, tail_digest: str,
               ctx: Any) -> tuple[list[dict[str, Any]], list[str]]:
        """The provider items after the body (the tail, and the final message it is prepended to) and their parts."""
        extra_parts: list[str] = []
        flat_extra: list[dict[str, Any]] = []
        if mode == "prepend":
            assert tail_unit is not None
            flat_extra.extend(tail_unit)
            extra_parts.append(tail_digest)
            last = req.messages[len(req.messages) - 1]
            extra = self.message_extra(last, req, ctx)
            value, digest = self.memo.get(("msg", last.digest, extra), partial(self.render_message, last, extra))
            flat_extra.extend(value)
            extra_parts.append(digest)
        elif mode in ("append", "new"):
            assert tail_unit is not None
            flat_extra.extend(tail_unit)
            extra_parts.append(tail_digest)
        return flat_extra, extra_parts

    def _messages(self, body: RenderedBody, lead: list[Any], flat_extra: list[dict[str, Any]], mode: str,
                  req: NeutralRequest) -> tuple[list[dict[str, Any]], dict[str, tuple[int, int] | None]]:
        """The request's message list (``lead`` first) and, per breakpoint of the plan, the (message, block) that
        carries it."""
        plan = req.cache
        total_flat = body.n_flat + len(flat_extra)
        # the extra items merge into the body's last message at most: merge them onto a copy of that one
        base = max(0, len(body.out) - 1)
        if flat_extra:
            last_out, last_origin = list(body.out[base:]), list(body.origin[base:])
            self.merge_from(last_out, last_origin, flat_extra, body.n_flat, total_flat, mode)
        else:
            last_out, last_origin = [], []
            base = len(body.out)
        messages = self._message_list(body, lead, base, last_out)

        def origin_at(k: int) -> list[tuple[int, int]]:
            return last_origin[k - base] if k >= base else body.origin[k]

        n_body = len(messages) - len(lead)
        at = {"message": _shift(self._mark(body, origin_at, n_body, plan.message_index, from_end=True), len(lead))}
        for name in _BREAKPOINTS:
            index = getattr(plan, f"{name}_index")
            at[name] = _shift(self._mark(body, origin_at, n_body, index, from_end=False), len(lead))
        return messages, at

    def _rendered(self, request: dict[str, Any], ptuple: Snapshot, rest: dict[str, Any], body: RenderedBody,
                  extended: bool, head_parts: tuple[str, ...], pre_body: int, prefix: int) -> Rendered:
        """The rendering with its checksum and prefix hash, taken from the kept hash states."""
        # the parts lineage: parts[:stable] are the same as every earlier request's with the same token
        line = self._parts_line
        if extended and line is not None and line[0] is body.token and line[1] == head_parts:
            token = body.token  # same head, body extended: the parts before the extras are the last ones + new
        else:
            token = body.token = object()  # a new head (tools, system) or a new body: nothing is proven
        self._parts_line = (token, head_parts)
        stable = (token, pre_body + len(body.parts))
        hashers = self._hashers
        checksum = hashers[0].checksum(ptuple, rest, stable)
        hashers[0].advance(ptuple, max(0, len(ptuple) - 3), stable)  # the last parts (tail, final message) change every turn
        prefix_digest = hashers[1].prefix(ptuple, prefix, stable)
        hashers[1].advance(ptuple, prefix, stable)
        return Rendered(request, ptuple, prefix, checksum, self.format, prefix_digest, stable)

    def _message_list(self, body: RenderedBody, lead: list[Any], base: int, last: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``[*lead, *body.out[:base], *last]``: the request's own list.

        Copying the body touches every message of the session (and freeing the list later does again). So
        the renderer keeps the lists of its last requests; one that only the renderer refers to any more
        (its request, and the pack holding it, are gone) and that was taken from this same body (extended
        since, never rebuilt) is brought up to date in place: the items the hook marked are put back, the
        end from the first message that may have changed since is cut and the new messages are appended."""
        n0 = len(lead)
        for i, sp in enumerate(self._spares):
            if sp.out is not body.out or sys.getrefcount(sp.items) != _FREE_REFS or len(sp.lead) != n0 or not all(
                    a is b for a, b in zip(sp.lead, lead, strict=True)):
                continue
            items = sp.items
            keep = max(0, min(sp.size - 1, base))  # the body's last message then may have been merged with new ones
            for p in sp.marked:
                if n0 <= p < n0 + keep:
                    items[p] = body.out[p - n0]
            del items[n0 + keep:]
            items += body.out[keep:base]
            items += last
            del self._spares[i]
            self.lists_reused += 1
            return items
        items = body.out[:base]
        if lead:
            items[:0] = lead
        items += last
        return items

    def _mark(self, body: RenderedBody, origin_at: Callable[[int], list[tuple[int, int]]], n: int, index: int | None, *,
              from_end: bool) -> tuple[int, int] | None:
        """(merged message, block) that carries the breakpoint of neutral message ``index``, or None
        (``origin_at(k)``: the flat items merged into message ``k`` of the ``n`` request messages).

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
        order = range(n - 1, -1, -1) if from_end else range(n)
        for k in order:
            orig = origin_at(k)
            if target in orig:
                return (k, orig.index(target))
            if orig and (max(o[0] for o in orig) < end - 1 if from_end else min(o[0] for o in orig) > end - 1):
                break
        return None

    def _body(self, req: NeutralRequest, body_n: int, ctx: Any) -> tuple[RenderedBody, bool]:
        """The body ``req.messages[:body_n]`` rendered and merged, and whether it extends the previous request's
        body (then the cached body was extended in place with the new messages only). The extension is proven by
        the request's lineage (O(1)), else checked by comparing the messages."""
        msgs = req.messages
        cached = self.body_cache
        k = cached.n if cached is not None else 0
        extended = cached is not None and body_n >= k and (
            extends(req, cached.lineage, k) or cached.source is msgs or msgs[:k] == cached.source[:k])
        if not extended or cached is None:
            cached = RenderedBody(msgs, 0, req.lineage)
            k = 0
        new_flat: list[dict[str, Any]] = []
        new_parts: list[str] = []
        new_last: list[dict[str, Any]] = []
        new_ends: list[int] = []
        n_flat = cached.n_flat
        # (MemoCache.get inlined: a resumed session's first build renders every message of the session here)
        memo = self.memo
        table, hints, render, extra_of, maxsize = memo._d, memo.hints, self.render_message, self.message_extra, memo.maxsize
        for message in msgs[k:body_n]:  # rendered before anything is changed (a hook may raise)
            extra = extra_of(message, req, ctx)
            key = ("msg", message.digest, extra)
            hit = table.get(key)
            if hit is not None:
                table.move_to_end(key)
                value, digest = hit
            else:
                value = render(message, extra)
                hint = hints.pop(key, "") if hints else ""
                digest = hint or sha256_hex(canonical_json(value))
                table[key] = (value, digest)
                if len(table) > maxsize:  # (one at a time: a long body would hold a second index of itself)
                    table.popitem(last=False)
            new_flat.extend(value)
            n_flat += len(value)
            new_parts.append(digest)
            new_ends.append(n_flat)
            new_last.append(value[-1] if value else {})
        self.merge_from(cached.out, cached.origin, new_flat, cached.n_flat, -1, "none")
        cached.parts.extend(new_parts)
        cached.msg_end.extend(new_ends)
        cached.flat_last.extend(new_last)
        cached.n_flat = n_flat
        cached.source, cached.n, cached.lineage = msgs, body_n, req.lineage
        self.body_cache = cached
        return cached, extended

    def merge_from(self, out: list[dict[str, Any]], origin: list[list[tuple[int, int]]], new: list[dict[str, Any]],
                    first_idx: int, total: int, mode: str) -> None:
        """Continue merging ``new`` flat items (global indices from ``first_idx``) onto ``out`` (in place).

        Formats that merge consecutive same-role messages do so; in ``prepend`` mode the final item
        (the user's message) merges into the tail before it. Tool results are moved to the front of a
        merged message (a stable partition, so re-applying it after further merges is exact). The
        messages already in ``out`` are replaced, never modified (earlier requests may hold them).
        """
        if not new:
            return
        key = self.content_key
        if not self.merge_same_role and mode != "prepend":  # nothing merges: each item is a message of its own
            for idx, msg in enumerate(new, first_idx):
                out.append(msg)
                blocks = msg.get(key)
                n_blocks = len(blocks) if isinstance(blocks, list) else 0
                origin.append([(idx, 0)] if n_blocks == 1 else [(idx, j) for j in range(n_blocks)])
            return
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

    def mark_block_index(self, blocks: Sequence[Mapping[str, Any]]) -> int | None:
        """Index of the block that carries a message breakpoint (the last one by default)."""
        return len(blocks) - 1 if blocks else None


# -------------------------------------------------------------------------------------------------
# helpers
# -------------------------------------------------------------------------------------------------


def _shift(at: tuple[int, int] | None, n: int) -> tuple[int, int] | None:
    return None if at is None else (at[0] + n, at[1])


def data_uri(image: Image) -> str:
    if image.url is not None:
        return image.url
    return f"data:{image.media_type};base64,{image.data}"


def tool_decl(tool: ToolSpec, schema_key: str, **extra: Any) -> dict[str, Any]:
    """A tool's declaration: ``name``, its parameters schema under ``schema_key``, then ``extra``, then the
    ``description`` when it has one (the key order is part of the rendered bytes)."""
    d: dict[str, Any] = {"name": tool.name, schema_key: dict(tool.parameters), **extra}
    if tool.description:
        d["description"] = tool.description
    return d


def tool_names(req: NeutralRequest) -> dict[str, str]:
    names: dict[str, str] = {}
    for m in req.messages:
        if m.role == "assistant":
            for c in m.tool_calls:
                names[c.id] = c.name
    return names
