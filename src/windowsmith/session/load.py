"""Loading a provider-native history into a session (``Session.load``) and its :class:`LoadResult`. The
conversion itself (formats, repairs, finding what is new) is :mod:`windowsmith.loading`; this is the part that
appends to the session's log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidMessageError, InvalidToolSchemaError, UsageError
from ..ingest.messages import redact_message
from ..jsonvalues import LOAD_ENVELOPE, check_nesting
from ..loading import LOAD_FORMATS, convert, new_messages, overlapping_new
from ..log import SessionLog
from ..model import Message
from ..ports import SessionEngine
from ..state import SessionState
from .inputs import Inputs
from .writer import Writer, reused_call_id


@dataclass(frozen=True)
class LoadResult:
    """What :meth:`Session.load` did: the messages it appended (as stored) and the conversion's repairs."""

    appended: tuple[Message, ...]
    repairs: tuple[str, ...]


class Loader:
    """Appends a provider-native history to a session: its system prompt and tools through :class:`Inputs`,
    its messages through :class:`Writer`, the conversion's repairs once each."""

    def __init__(self, engine: SessionEngine, log: SessionLog, inputs: Inputs, writer: Writer) -> None:
        self.engine = engine
        self.log = log
        self.inputs = inputs
        self.writer = writer

    @property
    def state(self) -> SessionState:
        return self.log.state

    def load(self, messages: Sequence[Any], format: str, *, tools: Sequence[Any] | None = None,
             system: str | None = None, overlap: bool = False, repairs: Sequence[str] = ()) -> LoadResult:
        if format not in LOAD_FORMATS:
            raise UsageError(f"unknown message format {format!r}; use one of {', '.join(LOAD_FORMATS)}")
        check_nesting(messages, f"the {format} history", envelope=LOAD_ENVELOPE)  # before anything recurses
        if tools is not None:
            check_nesting(tools, "the tool list", envelope=LOAD_ENVELOPE, error=InvalidToolSchemaError)
        loaded = convert(messages, format, tools=tools, system=system)
        if overlap:
            incoming = [redact_message(m) if self.engine.ingest.redact and m.role != "tool" else m
                        for m in loaded.messages]
            new = overlapping_new(self.state.messages, incoming)
        else:
            new = new_messages(self.state.messages, loaded.messages, format)
        seen: set[str] = set()
        for m in new:
            reused = reused_call_id(m.tool_calls, self.state.call_names, seen)
            if reused is not None:
                raise InvalidMessageError(f"tool call id {reused!r} of the {format} history was already used in this "
                                          "session; ids must be unique (load the history into a new session)")
        if loaded.system:
            self.inputs.system(loaded.system)
        if loaded.tools:
            self.inputs.tools(loaded.tools)
        known = {r.what for r in self.state.repairs}
        fresh = [w for w in dict.fromkeys(f"load {format}: {r}" for r in (*repairs, *loaded.repairs)) if w not in known]
        if fresh:
            self.log.append_many([("meta", {"type": "repair", "what": w}) for w in fresh])
        added = tuple(self.writer.add(m) for m in new)
        return LoadResult(added, (*repairs, *loaded.repairs))


__all__ = ["LoadResult", "Loader"]
