"""References in text: the one ``artifact://`` pattern and its writer (``artifact_uri``), the offload footer and binary stub (writers and the
parser side by side), and the tracker of every reference and redaction marker in a request.

    offload_footer(lines, tokens, sha)  →  [windowsmith: the full result (N lines, T tokens) is stored as
                                            artifact://<sha>; read more with read_result(ref, offset, limit)
                                            or search_result(ref, pattern)]
    binary_stub(size, what, sha)        →  [binary output: N bytes of <what>, stored as artifact://<sha>;
                                            it cannot be shown as text]
    shrink_footer(lines, tokens, sha)   →  the same for a message shrunk to fit the history (``the full message``)
    offloaded_artifact(text)            →  the sha either of them names, or None
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import urllib.parse
from collections.abc import Sequence
from typing import NamedTuple

from .model import Image, Message, Text, ToolCall, ToolResult
from .request import Lineage, NeutralRequest, extends

#: A reference to an artifact, the one pattern every reader of references uses: group 1 is its sha256.
ARTIFACT_RE = re.compile(r"artifact://([0-9a-f]{64})")


def artifact_uri(sha: str) -> str:
    """The reference ``artifact://<sha>`` to the artifact stored under ``sha``."""
    return f"artifact://{sha}"


#: The notes ingest puts in place of (or under) a result it stored whole: the offload footer and the binary
#: stub. Group 1 or 2 is the sha of the artifact holding the full original.
OFFLOAD_RE = re.compile(
    r"\[windowsmith: the full (?:result|message) \([^\]\n]*\) is stored as artifact://([0-9a-f]{64}); read more with "
    r"[^\]\n]*\]"
    r"|\[binary output: [^\]\n]*, stored as artifact://([0-9a-f]{64}); it cannot be shown as text\]"
)
REDACTED_RE = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")


class ImageStub(NamedTuple):
    """The text that stands for an image once it has aged out of the context, and what it links."""

    text: str
    sha: str
    raw: bytes  # what the artifact holds: the decoded image, or the URL's text


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data)
    except (binascii.Error, ValueError):
        return data.encode("utf-8")  # not base64 after all: keep the text as given


def image_stub(image: Image) -> ImageStub:
    """``[image: <caption> (<media type>, <size>) (artifact://<sha>)]``, and the bytes behind it.

    Inline images (base64, or a ``data:`` URL) store their decoded bytes; a URL image stores the URL."""
    media = image.media_type
    if image.data is not None:
        raw, what = _b64(image.data), None
    elif image.url is not None and image.url.startswith("data:"):
        head, _, payload = image.url.partition(",")
        media = media or head[5:].split(";")[0] or None
        raw = _b64(payload) if head.endswith(";base64") else urllib.parse.unquote_to_bytes(payload)
        what = None
    else:
        url = image.url or ""
        raw, what = url.encode("utf-8"), f"at {url if len(url) <= 200 else url[:199] + '…'}"
    if what is None:
        what = f"{media or 'image'}, {len(raw):,} bytes"
    sha = hashlib.sha256(raw).hexdigest()
    caption = " ".join((image.caption or "").split())
    if len(caption) > 200:
        caption = caption[:199] + "…"
    desc = f"{caption} ({what})" if caption else what
    return ImageStub(f"[image: {desc} (artifact://{sha})]", sha, raw)


def offload_footer(n_lines: int, tokens: int, sha: str) -> str:
    """The line under a compressed view naming the artifact that holds the whole result."""
    return (f"[windowsmith: the full result ({n_lines:,} lines, {tokens:,} tokens) is stored as "
            f"{artifact_uri(sha)}; read more with read_result(ref, offset, limit) or search_result(ref, pattern)]")


def shrink_footer(n_lines: int, tokens: int, sha: str) -> str:
    """The line under a message the history shrank to fit (see ``layers/shrink.py``), naming its original."""
    return (f"[windowsmith: the full message ({n_lines:,} lines, {tokens:,} tokens) is stored as "
            f"{artifact_uri(sha)}; read more with read_result(ref, offset, limit) or search_result(ref, pattern)]")


def binary_stub(size: int, what: str, sha: str, secrets: int = 0) -> str:
    """What the model sees in place of binary tool output stored whole (``secrets``: how many were redacted
    in the stored bytes)."""
    note = f" ({secrets} secret(s) redacted)" if secrets else ""
    return (f"[binary output: {size:,} bytes of {what}{note}, stored as {artifact_uri(sha)}; "
            "it cannot be shown as text]")


def offloaded_artifact(text: str) -> str | None:
    """The sha of the artifact an offload footer or binary stub in ``text`` names, or None."""
    found = OFFLOAD_RE.search(text)
    return (found.group(1) or found.group(2)) if found else None


_refs_cache: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
_NO_REFS: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())




def message_refs(m: Message) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(artifact references, redaction marker types) in a message, cached by digest."""
    key = m.digest
    hit = _refs_cache.get(key)
    if hit is None:
        refs: set[str] = set()
        marks: list[str] = []
        for b in m.content:
            if isinstance(b, (Text, ToolResult)):  # (a tuple: cheaper than a union; this runs per message)
                t = b.text
            elif isinstance(b, ToolCall):
                t = b.arguments_json
            else:
                continue
            if "artifact://" in t:
                refs.update(artifact_uri(s) for s in ARTIFACT_RE.findall(t))
            if "[REDACTED:" in t:
                marks.extend(REDACTED_RE.findall(t))
        if not refs and not marks:
            return _NO_REFS  # the common case: nothing to remember (a long session keeps no entry per message)
        hit = (tuple(sorted(refs)), tuple(marks))
        if len(_refs_cache) > 200_000:
            _refs_cache.clear()
        _refs_cache[key] = hit
    return hit


class RefTracker:
    """Every artifact reference in a request, found incrementally.

    When this request's messages start with the previous request's (the usual append-only turn: proven by
    the request's lineage, else checked with a C-level tuple comparison that short-circuits on identical
    objects), only the new messages are scanned; otherwise everything is rescanned (per-message results are
    cached by digest).
    """

    def __init__(self) -> None:
        self._messages: Sequence[Message] = ()
        self._lineage: Lineage | None = None
        self._counts: dict[str, int] = {}
        self._redactions: dict[str, int] = {}

    def _scan(self, req: NeutralRequest) -> None:
        msgs = req.messages
        k = len(self._messages)
        if k and len(msgs) >= k and (extends(req, self._lineage, k) or msgs[:k] == self._messages):
            new = msgs[k:]  # a slice of the new messages only
        else:
            self._counts = {}
            self._redactions = {}
            new = msgs
        for m in new:
            refs, marks = message_refs(m)
            for r in refs:
                self._counts[r] = self._counts.get(r, 0) + 1
            for t in marks:
                self._redactions[t] = self._redactions.get(t, 0) + 1
        self._messages = msgs
        self._lineage = req.lineage

    def seed(self, req: NeutralRequest, n: int, refs: dict[str, int], redactions: dict[str, int]) -> None:
        """Take the references and markers of ``req.messages[:n]`` as found by an earlier process (a stored body,
        ``body_snapshot.py``): the next scan of ``req`` reads its later messages only."""
        self._messages = req.messages[:n]
        self._lineage = req.lineage
        self._counts = dict(refs)
        self._redactions = dict(redactions)

    def refs(self, req: NeutralRequest) -> set[str]:
        self._scan(req)
        return set(self._counts) | {artifact_uri(s) for s in ARTIFACT_RE.findall(req.tail or "")}

    def redactions(self, req: NeutralRequest) -> dict[str, int]:
        """Secret markers per type in the whole request: tool definitions, system and session text,
        messages and the dynamic tail (task, notes). Call after :meth:`refs` for the same request."""
        out = dict(self._redactions)
        texts = [req.tail or ""]
        texts.extend(seg.text for seg in (*req.system, *req.session))
        texts.extend(t.canonical for t in req.tools)
        for text in texts:
            if "[REDACTED:" in text:
                for t in REDACTED_RE.findall(text):
                    out[t] = out.get(t, 0) + 1
        return dict(sorted(out.items()))


__all__ = ["ARTIFACT_RE", "OFFLOAD_RE", "REDACTED_RE", "ImageStub", "RefTracker", "artifact_uri", "binary_stub", "image_stub", "message_refs",
           "offload_footer", "offloaded_artifact", "shrink_footer"]
