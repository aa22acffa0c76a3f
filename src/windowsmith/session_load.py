"""Loading a provider-native history into a session: :meth:`~windowsmith.engine.Session.load` and
its :class:`LoadResult`. The conversion itself (formats, repairs, finding what is new) is
:mod:`windowsmith.loading`; this is the part that appends to the session's log.

:class:`LoadMixin` holds no state of its own: ``Session`` inherits it and provides the log and the
methods that append (``system``, ``tools``, ``add``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import InvalidMessageError, UsageError
from .ingest.messages import redact_message
from .loading import LOAD_FORMATS, convert, new_messages, overlapping_new
from .model import Message, ToolSpec

if TYPE_CHECKING:
    from .engine import Engine
    from .log import SessionLog
    from .state import SessionState


@dataclass(frozen=True)
class LoadResult:
    """What :meth:`Session.load` did: the messages it appended (as stored) and the conversion's repairs."""

    appended: tuple[Message, ...]
    repairs: tuple[str, ...]


class LoadMixin:
    """:meth:`~windowsmith.engine.Session.load` (see the module docstring)."""

    if TYPE_CHECKING:  # provided by Session
        engine: Engine
        log: SessionLog

        @property
        def state(self) -> SessionState: ...

        def system(self, text: str, *, name: str = "system") -> None: ...

        def tools(self, tools: Iterable[Mapping[str, Any] | ToolSpec]) -> None: ...

        def add(self, message: Message | Mapping[str, Any]) -> Message: ...

    def load(self, messages: Sequence[Any], format: str, *, tools: Sequence[Any] | None = None,
             system: str | None = None, overlap: bool = False, repairs: Sequence[str] = ()) -> LoadResult:
        """Load a provider-native history: ``format`` is ``openai-chat`` (chat messages), ``openai-responses``
        (Responses items), ``anthropic`` (Messages API messages) or ``gemini`` (contents); dicts or SDK objects.

        Appends only the messages past the log's end (matched by position, role and tool-call ids), so a
        framework can hand over its whole history before every call. System messages found in the list
        and ``system`` set the system prompt; ``tools`` (any provider's shape) declare the tools. Each
        message goes through :meth:`add` (redaction, offload of large tool results); each repair the
        conversion made is recorded once in the log (manifests list it). A history that does not continue
        the log raises :class:`UsageError` before anything is written.

        ``overlap=True``: ``messages`` is not the whole history but a window of it that may repeat the
        log's newest messages (a framework saving one turn's items): the longest run of the log's newest
        messages it starts with is skipped (user and assistant messages compared by their redacted text,
        tool results by call id) and the rest appended. ``repairs``: notes of a conversion the caller made
        before (a framework adapter mapping its own message types), recorded like the loader's own.
        """
        if format not in LOAD_FORMATS:
            raise UsageError(f"unknown message format {format!r}; use one of {', '.join(LOAD_FORMATS)}")
        loaded = convert(messages, format, tools=tools, system=system)
        if overlap:
            incoming = [redact_message(m) if self.engine.ingest.redact and m.role != "tool" else m
                        for m in loaded.messages]
            new = overlapping_new(self.state.messages, incoming)
        else:
            new = new_messages(self.state.messages, loaded.messages, format)
        seen = set(self.state.call_names)
        for m in new:
            for c in m.tool_calls:
                if c.id in seen:
                    raise InvalidMessageError(f"tool call id {c.id!r} of the {format} history was already used in this "
                                              "session; ids must be unique (load the history into a new session)")
                seen.add(c.id)
        if loaded.system:
            self.system(loaded.system)
        if loaded.tools:
            self.tools(loaded.tools)
        known = {r.what for r in self.state.repairs}
        fresh = [w for w in dict.fromkeys(f"load {format}: {r}" for r in (*repairs, *loaded.repairs)) if w not in known]
        if fresh:
            self.log.append_many([("meta", {"type": "repair", "what": w}) for w in fresh])
        added = tuple(self.add(m) for m in new)
        return LoadResult(added, (*repairs, *loaded.repairs))
