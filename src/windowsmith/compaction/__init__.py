"""History compaction in layers, cheapest first, that keeps the cache warm and loses nothing.

    engine = Engine(model=..., compaction=CompactionConfig(keep_turns=8), summarizer=OfflineSummarizer())
    session.build()              # masks / summarizes / truncates when due, recorded in the log and manifest
    session.compact()            # on demand
    session.call(send)           # build → send → record, with one reactive retry on a context overflow
    session.compact_context()    # the handler of the COMPACT_CONTEXT_TOOL tool the agent can call

Summarizers: :class:`OfflineSummarizer` (extractive, no model, the default), :class:`FakeSummarizer`
(a public test double), ``AnthropicSummarizer`` and ``OpenAISummarizer`` (official SDKs, client passed in;
in :mod:`windowsmith.compaction.providers`; each imports its SDK when first used).
"""

from __future__ import annotations

from typing import Any

from ..refs import image_stub
from .base import Reference, Summarizer, Summary
from .config import STAGES, Breaker, CompactionConfig, CompactionResult
from .fold_lines import fold_line
from .pipeline import Compactor
from .providers import AnthropicSummarizer, OpenAISummarizer
from .reconstruct import Reconstruction, reconstruct
from .references import extract_refs, merge_refs, score_ref
from .summarizer import FakeSummarizer, OfflineSummarizer, check_summary, render_summary, render_transcript

#: The ``compact_context`` tool: declare it with ``session.tools([..., COMPACT_CONTEXT_TOOL])`` and answer
#: its calls with ``session.tool_result(call.id, session.compact_context(**call.arguments))``.
COMPACT_CONTEXT_TOOL: dict[str, Any] = {
    "name": "compact_context",
    "description": (
        "Compact the conversation history now: old tool results are folded into one-line references and the "
        "oldest turns are summarized (nothing is lost; folded results stay readable by reference). Call it when "
        "the context note says the window is nearly full, or before starting a long new subtask."
    ),
    "parameters": {
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "Why compact now (recorded in the log)."}},
    },
}


__all__ = [
    "COMPACT_CONTEXT_TOOL",
    "STAGES",
    "AnthropicSummarizer",
    "Breaker",
    "CompactionConfig",
    "CompactionResult",
    "Compactor",
    "FakeSummarizer",
    "OfflineSummarizer",
    "OpenAISummarizer",
    "Reconstruction",
    "Reference",
    "Summarizer",
    "Summary",
    "check_summary",
    "extract_refs",
    "fold_line",
    "image_stub",
    "merge_refs",
    "reconstruct",
    "render_summary",
    "render_transcript",
    "score_ref",
]
