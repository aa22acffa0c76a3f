"""What a fold says: one line per exchange (each tool call with its result) or text-protocol observation, naming
the artifact that holds each output whole (``[turn 12] run_tests(path=tests/) → 3 failed: … (artifact://<sha256>)``).
The mask stage (``mask.py``) folds units into these lines; an emergency cut's work log writes them too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..model import Image, Message, Text, ToolCall, ToolResult
from ..refs import image_stub, offloaded_artifact
from .references import KEY_SCAN, format_args, outline_keys, result_keys

if TYPE_CHECKING:
    from ..units import Unit


_PREVIEW_WORDS = ("Error", "FAILED", "failed", "error:", "Exception", "Traceback")


def _preview(text: str, n: int) -> str:
    """The result's first line holding an error word, else its first line (stripped, clipped to ``n``),
    and how many more non-blank lines it has."""
    lines = text.splitlines()
    count = sum(1 for ln in lines if ln and not ln.isspace())
    if not count:
        return "(empty)"
    head = None
    if any(w in text for w in _PREVIEW_WORDS):  # else no line holds one: skip the per-line test
        head = next((ln for ln in lines if any(w in ln for w in _PREVIEW_WORDS)), None)
    if head is None:
        head = next(ln for ln in lines if ln and not ln.isspace())
    more = count - 1
    out = " ".join(head.split())
    if len(out) > n:
        out = out[: n - 1] + "…"
    return out + (f" … (+{more} lines)" if more > 0 else "")


class Folded(NamedTuple):
    """A fold line and what it points at."""

    text: str
    blobs: list[tuple[str, bytes]]  # (sha, bytes) to store before the record is written
    calls: dict[str, str]  # tool-call id → sha of the artifact holding that call's full result
    artifacts: list[str]  # every artifact the line links, in order, once each


#: the version of what :func:`fold_line` writes: persisted fold counts (``unit_counts.py``) of another are ignored.
#: Bump it with any change to the fold line's text.
FOLD_SCHEME = 2  # 2: a file read's fold names its outline (outline_keys) before the other keys


def fold_line(turn: int, unit: Unit, *, chars: int, keys: int,
              originals: Mapping[str, ToolResult] | None = None) -> Folded:
    """One line per tool call of an exchange unit, call and result together, with the result's artifact: a
    ``chars`` preview and up to ``keys`` identifiers (the caller's: ``fold_chars``/``fold_keys`` for a fold, the
    work log's own for an emergency cut's line; no default to drift from either).

    A result offloaded at ingest already has its artifact (named by its footer); any other result's text is
    stored now. ``originals``: the results as logged, by call id, in case the view's copy was rewritten."""
    calls: list[ToolCall] = []
    said = ""
    results: dict[str, ToolResult] = {}
    for m in unit.messages:
        for b in m.content:
            if isinstance(b, ToolCall):
                calls.append(b)
            elif isinstance(b, ToolResult):
                results[b.call_id] = b
            elif isinstance(b, Text) and m.role == "assistant" and b.text.strip():
                said = b.text
    if originals:
        results.update((k, v) for k, v in originals.items() if k in results)
    blobs: list[tuple[str, bytes]] = []
    mapping: dict[str, str] = {}
    links: list[str] = []
    parts = []
    for c in calls:
        r = results.get(c.id)
        if r is None:
            parts.append(f"{c.name}({format_args(c.arguments)}) → (no result)")
            continue
        status = "error: " if r.is_error else ""
        shown, sha, images = _folded_output(r.text, r.content, chars, keys, blobs)
        mapping[c.id] = sha
        links.append(sha)
        links.extend(images)
        parts.append(f"{c.name}({format_args(c.arguments)}) → {status}{shown}")
    prefix = f"[turn {turn}] "
    if said:
        s = " ".join(said.split())
        prefix += f"«{s if len(s) <= 100 else s[:99] + '…'}» "
    return Folded(prefix + "; ".join(parts), blobs, mapping, list(dict.fromkeys(links)))


def _folded_output(text: str, content: Sequence[object], chars: int, keys: int,
                   blobs: list[tuple[str, bytes]]) -> tuple[str, str, list[str]]:
    """What a fold line says of one output (a tool result, or an observation's text and images): a ``chars``
    preview, up to ``keys`` identifiers and the output's artifact (``artifact://`` at the end); with that artifact's
    sha and its images' artifacts. Images are named by their stubs, never inlined. What has to be stored is appended
    to ``blobs`` (an output offloaded at ingest already has its artifact, named by its footer)."""
    images = [image_stub(b) for b in content if isinstance(b, Image)]
    blobs.extend((im.sha, im.raw) for im in images)
    shown = " ".join(im.text for im in images)
    shas = [im.sha for im in images]
    if images and not text.strip():
        return shown, shas[0], shas
    sha = offloaded_artifact(text)  # offloaded at ingest: the artifact holds the full original
    if sha is None:
        raw = text.encode("utf-8")
        sha = hashlib.sha256(raw).hexdigest()
        blobs.append((sha, raw))
    preview = _preview(text, chars)
    # a file read's outline first (each definition's name and lines), then the output's other identifiers
    extra = outline_keys(text, keys) if keys else []
    extra += [k for k in result_keys(text, max(keys, KEY_SCAN)) if k not in preview][: keys - len(extra)] if keys else []
    more = f" [keys: {', '.join(extra)}]" if extra else ""
    more += f" {shown}" if shown else ""
    return f"{preview}{more} (artifact://{sha})", sha, shas


def observation_line(turn: int, unit: Unit, *, chars: int, keys: int,
                     original: Message | None = None) -> Folded:
    """The fold of a text-protocol agent's observation (a user message answering an assistant message without tool
    calls: the command's output): ``[turn N] output → preview [keys: …] (artifact://sha)``, the same preview, keys
    and artifact as an exchange's fold line (``chars``/``keys``: the caller's). The reply that ran the command stays
    in the view as it was. ``original``: the message as logged, in case the view's copy was shrunk."""
    m = original if original is not None else unit.messages[0]
    blobs: list[tuple[str, bytes]] = []
    shown, sha, images = _folded_output(m.text, m.content, chars, keys, blobs)
    return Folded(f"[turn {turn}] output → {shown}", blobs, {}, list(dict.fromkeys([sha, *images])))


__all__ = ["FOLD_SCHEME", "Folded", "fold_line", "observation_line"]
