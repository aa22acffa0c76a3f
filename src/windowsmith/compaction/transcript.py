"""The transcript of a span leaving the view, stored verbatim as an artifact and chained to the previous one."""

from __future__ import annotations

from collections.abc import Sequence

from ..model import Message
from .port import CompactionPort
from .summarizer import render_transcript


def store_transcript(port: CompactionPort, originals: Sequence[tuple[int, Message]], first_seq: int, last_seq: int) -> str:
    """Store the span about to leave the view, verbatim as it was sent, as an artifact; returns its sha.

    The first line points at the transcript of the previous compaction, so the context needs one
    reference for the whole compacted history: the agent reads back along the chain with
    ``read_result``/``search_result``, and ``Session.reconstruct`` can too."""
    prev = port.state.pending_transcript or port.state.transcript
    head = f"[windowsmith transcript of log seq {first_seq}-{last_seq}: the messages compacted out of the context]"
    if prev:
        head += f"\n[earlier history: artifact://{prev}]"
    body = render_transcript([m for _, m in originals], max_chars_per_block=1 << 30)
    return port.put_blob((head + "\n" + body + "\n").encode("utf-8"))


__all__ = ["store_transcript"]
