"""The OpenAI Responses API's stateful mode: ``store: true`` and ``previous_response_id``.

With ``store: true`` OpenAI keeps a response with the input it answered; a request naming it in
``previous_response_id`` continues from there and sends only the items that follow. :class:`ResponsesChain` turns
each full request windowsmith builds (``pack.request``, format ``openai-responses``) into that delta when it can:

    chain = ResponsesChain()
    resp = client.responses.create(**chain.request(pack.request))
    chain.observe(resp)        # the response's id and output, for the next request
    session.record(resp)

The delta is sent only when the server's copy is exactly what windowsmith would send: the previous request's
``input`` is the start of this one's, followed by the items of the response it got (its reasoning, messages and
function calls, in order). Otherwise the request goes out whole, with ``store: true``, and starts a new chain: after a
compaction (the history was rewritten), when the previous request carried a dynamic tail that this one renders
differently, when the response was not observed or had no id, or after :meth:`ResponsesChain.reset`. Reasoning items
A session with a dynamic tail (a task, memory notes) renders it after the newest message, where the next request has
the assistant's reply instead: the server's copy then holds an old tail, so every such request goes out whole (the
stateful mode pays where the tail is empty). Reasoning items
keep their ``encrypted_content`` in both modes: a full request carries them where the session recorded them (before the
output they preceded); a delta leaves them, like every earlier item, to the server, which holds them in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..hashing import canonical_json
from .base import to_plain

#: the output item types a recorded response renders back to (reasoning, messages, function calls, tool search)
_REPLY_TYPES = frozenset({"reasoning", "message", "function_call", "tool_search_call", "tool_search_output"})


def _key(item: Any) -> str:
    return canonical_json(to_plain(item, what="a Responses input item") if not isinstance(item, str) else item)


class ResponsesChain:
    """One conversation's chain of stored responses (see the module docstring). Not thread-safe: one per session."""

    def __init__(self) -> None:
        self._input: list[str] | None = None  # the canonical items the server holds as the last request's input
        self._reply: list[str] = []  # the types of the last response's output items windowsmith renders back
        self._id: str | None = None
        self.full_requests = 0
        self.delta_requests = 0

    def reset(self) -> None:
        """Forget the chain: the next request goes out whole."""
        self._input, self._reply, self._id = None, [], None

    @property
    def previous_response_id(self) -> str | None:
        return self._id

    def _delta(self, items: Sequence[Any]) -> list[Any] | None:
        """The items of ``items`` after the previous input and the response to it, or None when ``items`` does not
        continue the chain."""
        held = self._input
        if held is None or self._id is None or len(items) < len(held) + len(self._reply):
            return None
        if any(_key(items[i]) != held[i] for i in range(len(held))):
            return None
        reply = items[len(held): len(held) + len(self._reply)]
        for item, kind in zip(reply, self._reply, strict=True):
            if not isinstance(item, Mapping) or item.get("type") != kind:
                return None
            if kind == "message" and item.get("role") != "assistant":
                return None
        return list(items[len(held) + len(self._reply):])

    def request(self, full: Mapping[str, Any]) -> dict[str, Any]:
        """The request to send for ``full`` (a rendered ``openai-responses`` request): its delta after the stored
        response when the chain holds, else ``full`` itself; ``store: true`` either way."""
        items = list(full.get("input") or [])
        delta = self._delta(items)
        self._input = [_key(x) for x in items]
        self._reply = []
        if delta is None:
            self.full_requests += 1
            self._id = None
            return {**full, "store": True}
        self.delta_requests += 1
        return {**full, "input": delta, "previous_response_id": self._id, "store": True}

    def observe(self, response: Any) -> None:
        """The response to the last request: its id continues the chain, its output items are what the server
        holds after the input (a response without an id, or a failed one, breaks the chain)."""
        d = to_plain(response, what="an OpenAI Response")
        rid = d.get("id")
        if not isinstance(rid, str) or d.get("error") or d.get("status") == "failed" or self._input is None:
            self.reset()
            return
        self._id = rid
        self._reply = [str(it.get("type")) for it in d.get("output") or []
                       if isinstance(it, Mapping) and it.get("type") in _REPLY_TYPES]


__all__ = ["ResponsesChain"]
