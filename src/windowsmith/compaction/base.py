"""Contracts for history compaction: summarizers and their output.

A summarizer turns a span of messages into a structured summary. It is pluggable: adapters over the
official Anthropic and OpenAI SDKs, an offline extractive summarizer that needs no model (the
default), and a public fake for tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..model import Message


@dataclass(frozen=True)
class Reference:
    """Something the summary points at that can be rebuilt in detail later."""

    kind: str  # "file" | "url" | "function" | "error" | "command" | "decision" | "artifact" | "id"
    value: str
    score: float = 0.0
    seq: int | None = None  # log seq where it was last seen
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "value": self.value, "score": round(self.score, 4)}
        if self.seq is not None:
            d["seq"] = self.seq
        if self.detail:
            d["detail"] = self.detail
        return d


@dataclass(frozen=True)
class Summary:
    """A structured summary of a span of history."""

    text: str  # rendered summary, as placed in the context
    refs: tuple[Reference, ...] = ()
    lessons: tuple[str, ...] = ()  # memory candidates: preferences, project facts, what failed and why
    summarizer: str = ""
    input_tokens: int = 0
    output_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "refs": [r.to_dict() for r in self.refs],
            "lessons": list(self.lessons),
            "summarizer": self.summarizer,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }


@runtime_checkable
class Summarizer(Protocol):
    """Summarize ``messages`` (the oldest span), absorbing ``previous`` (the last summary) if given."""

    name: str

    def summarize(
        self,
        messages: Sequence[Message],
        *,
        goal: str | None = None,
        previous: Summary | None = None,
        budget_tokens: int = 1024,
    ) -> Summary: ...
