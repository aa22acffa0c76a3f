"""The ingest pipeline: what happens to a tool result before anything is stored or sent.

    output ─► normalize (text, bytes, JSON value, blocks) ─► redact secrets ─► count tokens
           ─► over the offload threshold? ─► store the whole (redacted) result as an artifact
                                          ─► keep a compressed view for its content type
                                          ─► + a footer with the artifact:// reference and how to read more

The offload threshold adapts to the room left in the window: ``offload_fraction`` of the remaining
budget — the fuller the window, the lower the threshold — but never below ``floor_fraction`` of the
whole available budget, clamped to ``[min_offload_tokens, max_offload_tokens]``. The floor matters: the
newest result is the one the agent's next action most often quotes (ids, numbers, names), and history
compaction can make room for it by folding older exchanges, so a full window must not force every new
result out to the artifact store (measured: at an 8K window, offloading a 432-token user record lost
the reservation ids the next call used). A fixed ``offload_tokens`` overrides both. Bytes are decoded as text when they are text in UTF-8,
UTF-16 or a legacy single-byte encoding (``decode.decode_text``); binary output is stored whole and
replaced by a stub. The secret never reaches the store: redaction runs first, and the artifact holds
the redacted text, so reading it back gives exactly what the model could have seen. Binary bytes are
redacted too (``decode.redact_binary``): the artifact keeps the original bytes only when redaction
changed nothing, else the same bytes with each secret replaced by its marker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..artifacts import ArtifactStore
from ..errors import ConfigError, InvalidMessageError
from ..jsonvalues import clean_text
from ..model import Image, Text, block_from_dict
from ..refs import artifact_uri, binary_stub, offload_footer
from ..text import compact_json, identifier_index
from .compress import compress, detect_kind
from .decode import binary_kind, decode_text, redact_binary
from .redact import has_candidate, redact

CountTokens = Callable[[str], int]

#: above this many characters, a result is offloaded without counting it exactly first
_CHARS_PER_TOKEN_CEILING = 12


INDEX_SHARE = 5  # 1/INDEX_SHARE of an offloaded view is kept for the index of the identifiers the cut lost


@dataclass(frozen=True)
class IngestConfig:
    """How tool results are handled when they are recorded."""

    offload_tokens: int | None = None  # fixed threshold; None adapts to the remaining budget
    min_offload_tokens: int = 400
    max_offload_tokens: int = 6_000
    offload_fraction: float = 0.25
    floor_fraction: float = 0.10  # of the whole available budget: the threshold never goes lower
    redact: bool = True
    redact_pii: bool = False  # also e-mail addresses, phone and card numbers, national ids (redact.PII_TYPES)
    repair_arguments: bool = True  # repair tool-call arguments (JSON + the tool's schema), each repair logged
    compact_json: bool = False  # JSON text results go in without insignificant whitespace (guidance/variation.py)

    def __post_init__(self) -> None:
        if self.offload_tokens is not None and self.offload_tokens < 64:
            raise ConfigError(f"offload_tokens must be at least 64, got {self.offload_tokens}")
        if not 64 <= self.min_offload_tokens <= self.max_offload_tokens:
            raise ConfigError("need 64 <= min_offload_tokens <= max_offload_tokens")
        if not 0 < self.offload_fraction <= 1:
            raise ConfigError(f"offload_fraction must be in (0, 1], got {self.offload_fraction}")
        if not 0 <= self.floor_fraction <= 1:
            raise ConfigError(f"floor_fraction must be in [0, 1], got {self.floor_fraction}")

    def threshold(self, remaining_tokens: int, available_tokens: int | None = None) -> int:
        """Tokens above which a result is offloaded, given the room left (and the whole available budget)."""
        if self.offload_tokens is not None:
            return self.offload_tokens
        t = int(remaining_tokens * self.offload_fraction)
        if available_tokens is not None:
            t = max(t, int(available_tokens * self.floor_fraction))
        return max(self.min_offload_tokens, min(self.max_offload_tokens, t))


@dataclass(frozen=True)
class Ingested:
    """A tool result ready for the log."""

    blocks: tuple[Text | Image, ...]
    redactions: dict[str, int] = field(default_factory=dict)
    artifact: str | None = None  # sha256 of the stored whole result
    kind: str = "text"
    original_tokens: int = 0
    tokens: int = 0
    summary: str = ""
    notes: tuple[str, ...] = ()

    def meta(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "original_tokens": self.original_tokens, "tokens": self.tokens}
        if self.redactions:
            d["redactions"] = dict(sorted(self.redactions.items()))
        if self.artifact:
            d["artifact"] = artifact_uri(self.artifact)
            d["summary"] = self.summary
        if self.notes:
            d["notes"] = list(self.notes)
        return d


def redact_image(image: Image) -> tuple[Text | Image, dict[str, int]]:
    """The image, or a text stub in its place when its URL carries a secret, and the counts.

    A URL with a credential in it (``https://user:pw@host/x.png``, a key in the query string) would
    hand the secret to the provider, which fetches it; a redacted URL cannot be fetched, so the image
    is withheld and a stub with the redacted URL takes its place. Inline images (base64 ``data``, or a
    ``data:`` URL) are image bytes, not text, and are kept.
    """
    url = image.url
    if url is None or url.startswith("data:") or not has_candidate(url):
        return image, {}
    r = redact(url)
    if not r.total:
        return image, {}
    caption = f" {image.caption!r}" if image.caption else ""
    return Text(f"[image{caption} withheld: its URL carried a secret: {r.text}]"), dict(r.counts)


def _normalize(output: Any, where: str) -> tuple[list[Text | Image], bytes | None]:
    """Blocks of text/images, or the raw bytes when the output is binary."""
    if isinstance(output, Text | Image):
        return [output], None
    if isinstance(output, bytes | bytearray | memoryview):
        raw = bytes(output)
        decoded = decode_text(raw)
        if decoded is None:
            return [], raw
        text, _ = clean_text(decoded, where)
        return [Text(text)], None
    if isinstance(output, str):
        text, _ = clean_text(output, where)
        return [Text(text)], None
    if output is None:
        return [Text("")], None
    if isinstance(output, Sequence) and output and all(isinstance(b, Text | Image | Mapping) for b in output) \
            and all(not isinstance(b, Mapping) or b.get("type") in ("text", "image") for b in output):
        blocks: list[Text | Image] = []
        for i, b in enumerate(output):
            blk = b if isinstance(b, Text | Image) else block_from_dict(b, f"{where}[{i}]")
            assert isinstance(blk, Text | Image)
            blocks.append(blk)
        return blocks, None
    try:
        text, _ = clean_text(json.dumps(output, ensure_ascii=False, separators=(",", ":"), default=str), where)
        return [Text(text)], None
    except (TypeError, ValueError) as e:
        raise InvalidMessageError(f"{where} is not text, bytes, blocks or JSON-serializable: {e}") from None


def _short_args(arguments: Mapping[str, Any] | None, limit: int = 80) -> str:
    if not arguments:
        return ""
    s = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items() if k != "_raw")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def ingest_result(
    output: Any,
    *,
    artifacts: ArtifactStore,
    session_id: str,
    count_tokens: CountTokens,
    remaining_tokens: int,
    available_tokens: int | None = None,
    tool_name: str | None = None,
    arguments: Mapping[str, Any] | None = None,
    config: IngestConfig | None = None,
) -> Ingested:
    """Redact, offload and compress one tool result (see the module docstring)."""
    cfg = config or IngestConfig()
    blocks, raw = _normalize(output, "tool output")
    call = f"{tool_name or 'tool'}({_short_args(arguments)})"
    if raw is not None:
        what = binary_kind(raw)
        counts: dict[str, int] = {}
        if cfg.redact:  # secrets in binary bytes (env -0, /proc/*/environ) never reach the store either
            raw, counts = redact_binary(raw)
        sha = artifacts.put(raw, session_id=session_id)
        stub = binary_stub(len(raw), what, sha, secrets=sum(counts.values()))
        return Ingested((Text(stub),), counts, artifact=sha, kind="binary", original_tokens=0,
                        tokens=count_tokens(stub), summary=f"{call} → {what}, {len(raw):,} bytes")
    redactions: dict[str, int] = {}
    out: list[Text | Image] = []
    texts: list[str] = []
    for b in blocks:
        if isinstance(b, Text):
            text = b.text
            if cfg.redact:
                r = redact(text, pii=cfg.redact_pii)
                text = r.text
                for k, v in r.counts.items():
                    redactions[k] = redactions.get(k, 0) + v
            if cfg.compact_json:
                text = compact_json(text) or text
            texts.append(text)
            out.append(Text(text))
        elif cfg.redact:
            blk, counts = redact_image(b)
            for k, v in counts.items():
                redactions[k] = redactions.get(k, 0) + v
            if isinstance(blk, Text):
                texts.append(blk.text)
            out.append(blk)
        else:
            out.append(b)
    full = "\n".join(texts)
    threshold = cfg.threshold(remaining_tokens, available_tokens)
    if len(full) > threshold * _CHARS_PER_TOKEN_CEILING:
        original = -1  # certainly over; counted by the compressor (estimated for huge inputs)
    else:
        original = count_tokens(full)
        if original <= threshold:
            return Ingested(tuple(out), redactions, None, "text", original, original)
    sha = artifacts.put(full.encode("utf-8"), session_id=session_id)
    kind = detect_kind(full, tool_name, dict(arguments) if arguments else None)
    n_lines = full.count("\n") + 1
    footer_probe = offload_footer(n_lines, 999_999_999, sha)
    budget = max(64, threshold - count_tokens(footer_probe) - 2)
    # a fifth of the view names the identifiers the cut loses (paths, symbols, ids, numbers, error names)
    c = compress(full, kind=kind, budget_tokens=max(48, budget - budget // INDEX_SHARE), count_tokens=count_tokens,
                 tool_name=tool_name, arguments=dict(arguments) if arguments else None)
    original = c.original_tokens if original < 0 else original
    footer = offload_footer(n_lines, original, sha)
    index = identifier_index(full, c.text, budget - c.tokens - 1, count_tokens)
    view = f"{c.text}\n{index}\n{footer}" if index else f"{c.text}\n{footer}"
    first = next((ln.strip() for ln in c.text.splitlines() if ln.strip()), "")
    summary = f"{call} → {c.kind}, {n_lines:,} lines, {original:,} tokens: {first[:120]}"
    images = [b for b in out if isinstance(b, Image)]
    return Ingested((Text(view), *images), redactions, sha, c.kind, original, count_tokens(view), summary, c.notes)


__all__ = ["IngestConfig", "Ingested", "ingest_result", "redact_image"]
