"""Contracts for history compaction: summarizers and their output.

A summarizer turns a span of messages into a structured summary. It is pluggable: adapters over the
official Anthropic and OpenAI SDKs, an offline extractive summarizer that needs no model (the
default), and a public fake for tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Reference:
        seq = d.get("seq")
        return cls(str(d["kind"]), str(d["value"]), float(d.get("score", 0.0)), None if seq is None else int(seq),
                   dict(d.get("detail", {}) or {}))


@dataclass(frozen=True)
class Summary:
    """A structured summary of a span of history."""

    text: str  # rendered summary, as placed in the context
    refs: tuple[Reference, ...] = ()
    lessons: tuple[str, ...] = ()  # memory candidates: preferences, project facts, what failed and why
    summarizer: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    #: the structured fields the text was rendered from (goal, decisions, state, open_questions,
    #: next_step), so a rolling summary can absorb the previous one field by field
    sections: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "text": self.text,
            "refs": [r.to_dict() for r in self.refs],
            "lessons": list(self.lessons),
            "summarizer": self.summarizer,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.sections:
            d["sections"] = self.sections
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Summary:
        return cls(
            text=str(d.get("text", "")),
            refs=tuple(Reference.from_dict(r) for r in d.get("refs", ())),
            lessons=tuple(str(x) for x in d.get("lessons", ())),
            summarizer=str(d.get("summarizer", "")),
            input_tokens=int(d.get("input_tokens", 0) or 0),
            output_tokens=int(d.get("output_tokens", 0) or 0),
            sections=dict(d.get("sections", {}) or {}),
        )


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
