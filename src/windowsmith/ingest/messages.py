"""Redaction of what does not go through the tool-result pipeline: message text and tool-call arguments,
and tool definitions (description and schema strings). Secrets become typed ``[REDACTED:<type>]`` markers."""

from __future__ import annotations

from ..model import Block, Image, Message, Text, ToolCall, ToolSpec
from .pipeline import redact_image
from .redact import has_candidate, redact, redact_obj, redact_schema


def redact_spec(spec: ToolSpec) -> ToolSpec:
    """The tool definition with secrets in its description and schema strings replaced by typed markers."""
    desc = redact(spec.description).text if has_candidate(spec.description) else spec.description
    params, counts = redact_schema(dict(spec.parameters))
    if desc == spec.description and not counts:
        return spec
    return ToolSpec(spec.name, desc, params)


def redact_message(msg: Message) -> Message:
    """The message with secrets in its text and tool-call arguments replaced by typed markers."""
    changed = False
    blocks: list[Block] = []
    for b in msg.content:
        if isinstance(b, Text) and has_candidate(b.text):
            r = redact(b.text)
            if r.total:
                b = Text(r.text)
                changed = True
        elif isinstance(b, ToolCall):
            args, counts = redact_obj(dict(b.arguments))
            if counts:
                b = ToolCall(b.id, b.name, args)
                changed = True
        elif isinstance(b, Image):
            stub, counts = redact_image(b)
            if counts:
                b = stub
                changed = True
        blocks.append(b)
    return Message(msg.role, tuple(blocks)) if changed else msg


__all__ = ["redact_message", "redact_spec"]
