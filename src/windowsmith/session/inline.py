"""A tool result kept inline when the artifact store fails: the result is never lost and never raises.

Offloading a large result writes it to the artifact store first; when that write fails (a full disk, a read-only
folder, a store that went away: ``OSError`` or a :class:`~windowsmith.errors.StoreError`), the session keeps the
result in the log instead, redacted as always and clipped to the size it would have been offloaded above (head
and tail, the cut marked), records a ``repair`` event (shown in every manifest's ``repairs``) and warns with an
:class:`~windowsmith.errors.ArtifactStoreWarning`.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ArtifactStoreWarning, StoreError
from ..ingest.pipeline import IngestConfig, Ingested, ingest_result
from ..model import Image, Text

#: the store failures a result survives inline (FileArtifacts wraps an OSError in a StoreError)
STORE_FAILURES: tuple[type[BaseException], ...] = (OSError, StoreError)
#: a blob's name in an error message: left out of the repair line, so no event names a blob that was never stored
SHA = re.compile(r"[0-9a-f]{64}")


class _Refusing:
    """An artifact store that stores nothing (binary output gets a stub that says so)."""

    def put(self, data: bytes, *, session_id: str) -> str:
        raise OSError("the artifact store is unavailable")


def clip(text: str, limit: int, count: Callable[[str], int]) -> str:
    """``text`` cut to about ``limit`` tokens: its head (two thirds) and tail, with a line that marks the cut."""
    total = count(text)
    if total <= limit:
        return text
    chars = max(64, int(len(text) * limit / total) - 120)
    head, tail = text[: chars * 2 // 3], text[len(text) - chars // 3:]
    return (f"{head}\n[... windowsmith: {total:,} tokens clipped to about {limit:,}; the whole result could not be "
            f"stored (the artifact store failed) ...]\n{tail}")


def ingest_inline(output: Any, error: BaseException, *, call_id: str, count_tokens: Callable[[str], int],
                  remaining_tokens: int, available_tokens: int, tool_name: str | None,
                  arguments: Mapping[str, Any] | None, config: IngestConfig) -> tuple[Ingested, str]:
    """The result inline (clipped to the offload threshold) and the repair line to record; warns once per result."""
    limit = config.threshold(remaining_tokens, available_tokens)
    never = dataclasses.replace(config, offload_tokens=1 << 40)
    try:
        ing = ingest_result(output, artifacts=_Refusing(), session_id="", count_tokens=count_tokens,  # type: ignore[arg-type]
                            remaining_tokens=remaining_tokens, available_tokens=available_tokens,
                            tool_name=tool_name, arguments=arguments, config=never)
        blocks: tuple[Text | Image, ...] = tuple(Text(clip(b.text, limit, count_tokens)) if isinstance(b, Text) else b
                                                 for b in ing.blocks)
    except OSError:  # binary output: nothing to show inline
        ing = Ingested((), kind="binary")
        blocks = (Text(f"[binary output of {tool_name or 'the tool'}: not shown, and not stored (the artifact store "
                       f"failed: {type(error).__name__})]"),)
    tokens = sum(count_tokens(b.text) for b in blocks if isinstance(b, Text))
    why = SHA.sub("<sha256>", str(error))[:200]
    what = (f"the artifact store failed ({type(error).__name__}: {why}): the result of tool call "
            f"{call_id!r} was kept inline, {tokens:,} tokens (clipped to the offload threshold of {limit:,})")
    warnings.warn(f"windowsmith: {what}; check the store's folder (disk space, permissions)",
                  ArtifactStoreWarning, stacklevel=4)
    inline = Ingested(blocks, ing.redactions, None, ing.kind, ing.original_tokens, tokens, "",
                      (*ing.notes, "inline: the artifact store failed"))
    return inline, what


__all__ = ["STORE_FAILURES", "clip", "ingest_inline"]
