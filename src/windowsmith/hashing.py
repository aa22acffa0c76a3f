"""Canonical JSON and content hashes.

Everything that is hashed (log events, messages, tool definitions, rendered requests) goes through
``canonical_json`` so the same content always yields the same bytes: sorted keys, no insignificant
whitespace, UTF-8 kept as is (no ``\\u`` escapes), and no NaN/Infinity.
"""

from __future__ import annotations

import hashlib
import json
from json.encoder import c_make_encoder as _c_make_encoder  # type: ignore[attr-defined]
from json.encoder import encode_basestring as _c_encode_basestring  # type: ignore[attr-defined]
from typing import Any

#: Tag prefixed to event hashes so a change of hashing scheme is detectable.
HASH_SCHEME = "b1"


#: one encoder for every call (``json.dumps`` with options makes a new encoder per call)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
#: its C scanner made once (``JSONEncoder.encode`` makes one per call, a third of the cost of a small value).
#: No circular-reference markers: a cycle raises RecursionError instead of ValueError, and an error half-way
#: leaves no marker behind for the next call.
_C_ENCODE = None if _c_make_encoder is None else _c_make_encoder(
    None, _CANONICAL.default, _c_encode_basestring, None, ":", ",", True, False, False)


def canonical_json(value: Any) -> str:
    """Serialize ``value`` deterministically (sorted keys, compact separators, UTF-8)."""
    if _C_ENCODE is None:
        return _CANONICAL.encode(value)
    return "".join(_C_ENCODE(value, 0))


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def content_digest(value: Any) -> str:
    """Short-ish stable digest of a JSON-able value (used for caches and dedupe)."""
    return hashlib.blake2b(canonical_json(value).encode("utf-8"), digest_size=16).hexdigest()


def text_digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def chain_hash(parent: str | None, payload_json: str) -> str:
    """Hash of an event: its canonical payload linked to its parent's hash."""
    h = hashlib.sha256()
    h.update((parent or "").encode("ascii"))
    h.update(b"\x00")
    h.update(payload_json.encode("utf-8"))
    return f"{HASH_SCHEME}:{h.hexdigest()}"
