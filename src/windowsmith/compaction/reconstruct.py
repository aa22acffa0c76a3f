"""Rebuild the detail behind a summary's references within a token budget.

    text = reconstruct(refs[:5], budget_tokens=2000, content_provider=read_file, store=store).text

File contents come through a caller-provided ``content_provider(path) -> str | None``, offloaded or folded
tool results through the artifact store (``artifact://<sha256>``), and the rest (errors, commands,
decisions) from the text the reference carries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..refs import ARTIFACT_RE
from ..text import elide
from ..tokens import count_text
from .base import Reference


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclass(frozen=True)
class Reconstruction:
    """Detail rebuilt for chosen references, within a token budget."""

    text: str
    tokens: int
    included: tuple[Reference, ...] = ()
    skipped: tuple[Reference, ...] = ()
    missing: tuple[Reference, ...] = field(default=())  # nothing could be fetched for these


def reconstruct(
    refs: Sequence[Reference],
    budget_tokens: int,
    content_provider: Callable[[str], str | None] | None = None,
    store: Any = None,
    *,
    encoding: str = "o200k_base",
) -> Reconstruction:
    """Rebuild the detail behind ``refs`` (best score first) within ``budget_tokens``.

    Files come from ``content_provider(path)``; artifacts (and commands/errors whose result was stored)
    from ``store`` (an :class:`~windowsmith.artifacts.ArtifactStore` or a session store's blobs). A
    section that does not fit whole is clipped head + tail if at least 64 tokens remain, else skipped. Nothing here raises for a missing file or blob: it is reported.
    """
    if budget_tokens < 0:
        raise UsageError(f"budget_tokens must be >= 0, got {budget_tokens}; pass the tokens the rebuilt detail may take "
                         "(0 rebuilds nothing)")
    parts: list[str] = []
    used = 0
    included: list[Reference] = []
    skipped: list[Reference] = []
    missing: list[Reference] = []
    for r in sorted(refs, key=lambda r: -r.score):
        body = _detail(r, content_provider, store)
        if body is None:
            missing.append(r)
            body = ""
        header = f"### {r.kind}: {_clip(r.value, 200)}" + (f" (log seq {r.seq})" if r.seq is not None else "")
        section = header + ("\n" + body if body else "")
        n = count_text(section, encoding) + 2
        left = budget_tokens - used
        if n > left:
            if left < 64:
                skipped.append(r)
                continue
            keep = max(64, int(len(section) * (left - 16) / n))
            section = elide(section, keep)
            n = count_text(section, encoding) + 2
            if n > left:
                skipped.append(r)
                continue
        parts.append(section)
        used += n
        included.append(r)
    return Reconstruction("\n\n".join(parts), used, tuple(included), tuple(skipped), tuple(missing))


def _detail(r: Reference, content_provider: Callable[[str], str | None] | None, store: Any) -> str | None:
    sha = r.detail.get("artifact") or r.detail.get("sha256")
    if r.kind == "artifact" and not sha:
        m = ARTIFACT_RE.search(r.value)
        sha = m.group(1) if m else None
    if r.kind == "file":
        if content_provider is None:
            return None
        try:
            return content_provider(r.value)
        except Exception as e:  # a provider failing must not break the build
            return f"[could not read {r.value}: {type(e).__name__}: {e}]"
    if sha:
        if store is None:
            return None
        raw = store.get_blob(sha) if hasattr(store, "get_blob") else store.get(sha)
        if raw is None:
            return None
        return bytes(raw).decode("utf-8", "replace")
    if r.kind in ("error", "command"):
        call = r.detail.get("call")
        return f"(from {call})" if call else ""
    return ""


__all__ = ["Reconstruction", "reconstruct"]
