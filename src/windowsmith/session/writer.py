"""How a session's messages and responses enter its log: each call validates its input, redacts secrets, runs
tool results through the ingest pipeline (offload of large results to the artifact store, a compressed view
with a reference) and appends one atomic batch of events; a recorded response's billed usage calibrates the
token counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import telemetry
from ..build import Builder, Pack
from ..errors import InvalidMessageError, UnmatchedToolResultError, UsageError
from ..formats.stream import resolve
from ..guidance.repair import repair_message
from ..ingest.messages import redact_message
from ..ingest.pipeline import Ingested, ingest_result
from ..ingest.redact import has_candidate, redact
from ..jsonvalues import check_json_value
from ..layers.evidence import StepTracker
from ..log import SessionLog
from ..model import Block, Message, Text, ToolCall, ToolResult, Usage, block_from_dict, blocks_from_content
from ..ports import SessionEngine
from ..state import SessionState
from .inline import STORE_FAILURES, ingest_inline


def without_blank_text(msg: Message) -> Message:
    """``msg`` without empty or whitespace-only text blocks (providers reject them), or an
    InvalidMessageError when nothing else is left."""
    blocks = tuple(b for b in msg.content if not (isinstance(b, Text) and not b.text.strip()))
    if not blocks:
        raise InvalidMessageError(
            f"the {msg.role} message is empty or whitespace only, which providers reject; "
            "send non-blank text (or leave the message out)")
    return msg if len(blocks) == len(msg.content) else Message(msg.role, blocks)


def reused_call_id(calls: Sequence[ToolCall], known: Mapping[str, str], also: set[str] | None = None) -> str | None:
    """The first id of ``calls`` that ``known`` (the session's call ids), ``also`` (ids met earlier in a batch: ``calls``'
    ids are added to it) or an earlier call of ``calls`` already holds, or None. Looks up each new id only, so an
    add costs the same at any length of the session."""
    seen = set() if also is None else also
    for c in calls:
        if c.id in known or c.id in seen:
            return c.id
        seen.add(c.id)
    return None


class Writer:
    """Appends a session's messages, tool results and recorded responses (see the module docstring)."""

    def __init__(self, engine: SessionEngine, session_id: str, log: SessionLog, builder: Builder) -> None:
        self.engine = engine
        self.session_id = session_id
        self.log = log
        self.builder = builder
        self.steps = StepTracker()
        #: repair lines of results kept inline because the artifact store failed, by call id (see inline.py)
        self.inline: dict[str, str] = {}

    @property
    def state(self) -> SessionState:
        return self.log.state

    def redact_text(self, text: str) -> str:
        return redact(text).text if self.engine.ingest.redact and has_candidate(text) else text

    def add(self, msg: Message, ingested: Mapping[str, Ingested] | None = None) -> Message:
        """``Session.add``, with tool results already ingested (by ``tool_result``) passed in by call id."""
        if not msg.content:
            raise InvalidMessageError("a message needs at least one content block")
        extra: list[tuple[str, dict[str, Any]]] = []
        ingest_meta: list[dict[str, Any]] = []
        if msg.role == "tool":
            open_calls = self.state.open_calls
            for r in msg.tool_results:
                self.check_result(r.call_id, open_calls)
            results = []
            for r in msg.tool_results:
                name = r.name or self.state.call_names.get(r.call_id)
                ing = ingested[r.call_id] if ingested and r.call_id in ingested else \
                    self.ingest(r.content, name, r.call_id)
                results.append(ToolResult(r.call_id, ing.blocks, r.is_error, name))
                ingest_meta.append({"call_id": r.call_id, **ing.meta()})
                if r.call_id in self.inline:
                    extra.append(("meta", {"type": "repair", "what": self.inline.pop(r.call_id)}))
                if ing.artifact:
                    extra.append(("meta", {
                        "type": "note", "layer": "evidence", "text": f"{ing.summary} (artifact://{ing.artifact})",
                        "ref": f"artifact://{ing.artifact}", "source": f"tool:{name}:{r.call_id}",
                        "step": self.steps.key(self.state),
                    }))
            msg = Message("tool", tuple(results))
        else:
            msg = without_blank_text(msg)
            if msg.role == "assistant" and msg.tool_calls and self.engine.ingest.repair_arguments:
                msg, repairs = repair_message(msg, self.state.tools, self.redact_text)
                extra.extend(("meta", r) for r in repairs)
            if msg.role == "assistant":
                reused = reused_call_id(msg.tool_calls, self.state.call_names)
                if reused is not None:
                    raise InvalidMessageError(
                        f"tool call id {reused!r} was already used in this session; ids must be unique")
            msg = redact_message(msg) if self.engine.ingest.redact else msg
        data: dict[str, Any] = {"message": msg.to_dict()}
        if ingest_meta:
            data["ingest"] = ingest_meta
        self.log.append_many([("message", data), *extra])
        return msg

    def ingest(self, content: Any, tool_name: str | None, call_id: str) -> Ingested:
        args = None
        for u in reversed(self.state.units[-4:]):
            for m in u.messages:
                for c in m.tool_calls:
                    if c.id == call_id:
                        args = c.arguments
        eng = self.engine
        counter = self.builder.counter(self.builder.format())
        available = self.builder.budget().available
        last = self.builder.last_pack
        used = last.tokens if last is not None else 0
        # a replayed result with no blocks is an empty result (as None is), not the JSON text "[]"
        output = (list(content) or None) if isinstance(content, tuple) else content
        try:
            return ingest_result(
                output, artifacts=eng.artifacts, session_id=self.session_id, count_tokens=counter.text,
                remaining_tokens=max(0, available - used), available_tokens=available, tool_name=tool_name, arguments=args, config=eng.ingest,
            )
        except STORE_FAILURES as e:
            ing, what = ingest_inline(output, e, call_id=call_id, count_tokens=counter.text,
                                      remaining_tokens=max(0, available - used), available_tokens=available,
                                      tool_name=tool_name, arguments=args, config=eng.ingest)
            self.inline[call_id] = what
            return ing

    def user(self, content: str | bytes | Sequence[Block | Mapping[str, Any]]) -> Message:
        return self.add(Message("user", blocks_from_content(content, "user content")))

    def assistant(self, content: str | Sequence[Block | Mapping[str, Any]],
                  tool_calls: Sequence[ToolCall | Mapping[str, Any]]) -> Message:
        blocks = list(blocks_from_content(content, "assistant content")) if content else []
        for i, c in enumerate(tool_calls):
            blocks.append(c if isinstance(c, ToolCall) else block_from_dict({"type": "tool_call", **c}, f"tool_calls[{i}]"))
        return self.add(Message("assistant", tuple(blocks)))

    def check_result(self, call_id: str, open_calls: frozenset[str]) -> None:
        if call_id in open_calls:
            return
        if call_id in self.state.answered:
            raise UnmatchedToolResultError(f"tool call {call_id!r} already has a result; record each result once")
        hint = f"open calls: {sorted(open_calls)}" if open_calls else "no tool call is waiting for a result"
        raise UnmatchedToolResultError(
            f"no assistant tool call with id {call_id!r} is waiting for a result ({hint}); "
            "record the assistant message with its tool calls first (session.record(response))"
        )

    def tool_result(self, call_id: str, output: Any, is_error: bool) -> Message:
        self.check_result(call_id, self.state.open_calls)
        check_json_value(output, "tool output")
        name = self.state.call_names.get(call_id)
        ing = self.ingest(output, name, call_id)
        return self.add(Message("tool", (ToolResult(call_id, ing.blocks, bool(is_error), name),)), {call_id: ing})

    def record(self, response: Any, message: Message | None, usage: Usage | Mapping[str, int] | None,
               pack: Pack | None, estimated: bool = False) -> Message | None:
        """``Session.record``: the response parsed with the format of the pack it answers (default: the last).
        ``estimated`` usage (not billed by a provider) is logged as such and never calibrates."""
        pack = pack or self.builder.last_pack
        if response is not None:
            if pack is None:
                raise UsageError("record(response) needs the pack it answers; call build() first or pass pack=")
            response = resolve(pack.format, response)  # streams, final messages, event lists
            parsed = self.engine.renderer(pack.format).parse_response(response)
            message, usage = parsed.message, parsed.usage
            if telemetry.open_call(self.log):  # (no span to annotate: the response is not read again)
                telemetry.annotate(self.log, {"gen_ai.response.finish_reasons":
                                              telemetry.finish_reasons(pack.format, response) or None})
        msg = None
        if message is not None and message.content:
            msg = self.add(message)
        if usage is not None:
            u = usage if isinstance(usage, Usage) else Usage.from_dict(usage)
            event: dict[str, Any] = {"usage": u.to_dict(), "pack_id": pack.id if pack else None}
            if estimated:
                event["estimated"] = True
            self.log.append_event("usage", event)
            if estimated:
                telemetry.annotate(self.log, {"windowsmith.usage.estimated": True})
            telemetry.end_call(self.log, usage=u, response=response if isinstance(response, Mapping) else None)
            if pack is not None and u.prompt_tokens > 0 and not estimated:
                cal = self.builder.calibration(pack.format)
                counted = pack.manifest.tokens_counted
                cal.observe(pack.tokens if counted is None else counted, u.prompt_tokens)
                self.engine.store.set_kv("calibration", self.builder.calibration_key(pack.format), cal.to_dict())
        return msg


__all__ = ["Writer", "reused_call_id", "without_blank_text"]
