"""The renderer interface shared by every provider format.

A renderer turns a :class:`~windowsmith.request.NeutralRequest` into the request dict for one
provider's official SDK, and parses that provider's response back into a neutral message + usage.

``Rendered.parts`` lists, in the provider's cache-prefix order (tools → system → messages), the
sha256 of the canonical JSON of each piece of the request; ``cache_prefix_parts`` says how many of
them the last cache breakpoint covers. The checksum is computed from the parts plus the remaining
top-level fields, so it costs O(number of parts) hash joins, not a re-serialization of the whole
request, while still changing whenever any byte of the request changes. Per-message renderings are
memoized by message digest so a long session renders only its new messages each turn.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..hashing import canonical_json, sha256_hex
from ..model import Message, Usage
from ..request import NeutralRequest


@dataclass(frozen=True)
class Rendered:
    request: dict[str, Any]
    parts: tuple[str, ...]
    cache_prefix_parts: int
    checksum: str
    format: str
    prefix_digest: str | None = field(default=None, compare=False, repr=False)  # prefix_hash, if computed already

    @property
    def prefix_hash(self) -> str:
        """Hash of the cacheable prefix (the parts covered by the last breakpoint)."""
        if self.prefix_digest is not None:
            return self.prefix_digest
        return hashlib.sha256("".join(self.parts[: self.cache_prefix_parts]).encode()).hexdigest()


@dataclass(frozen=True)
class ParsedResponse:
    message: Message
    usage: Usage
    stop_reason: str | None
    model: str | None


def checksum_of(parts: tuple[str, ...], rest: dict[str, Any]) -> str:
    return sha256_hex("".join(parts) + "|" + canonical_json(rest))


class PartsHasher:
    """sha256 over the concatenated part digests, resumed from the hash state of the previous request's
    stable prefix: a turn hashes its new parts only, and the digests equal :func:`checksum_of` and
    :attr:`Rendered.prefix_hash` computed from scratch."""

    def __init__(self) -> None:
        self._parts: tuple[str, ...] = ()
        self._h = hashlib.sha256()

    def _state(self, parts: tuple[str, ...], upto: int) -> Any:
        k = len(self._parts)
        if k and k <= upto and parts[:k] == self._parts:  # C-level compare: identical strings short-circuit
            h = self._h.copy()
        else:
            h, k = hashlib.sha256(), 0
        h.update("".join(parts[k:upto]).encode())
        return h

    def checksum(self, parts: tuple[str, ...], rest: dict[str, Any]) -> str:
        """``checksum_of(parts, rest)``."""
        h = self._state(parts, len(parts))
        h.update(("|" + canonical_json(rest)).encode())
        return str(h.hexdigest())

    def prefix(self, parts: tuple[str, ...], upto: int) -> str:
        """sha256 hex of ``"".join(parts[:upto])``."""
        return str(self._state(parts, upto).hexdigest())

    def advance(self, parts: tuple[str, ...], keep: int) -> None:
        """Keep the hash state over ``parts[:keep]`` for the next request."""
        if keep != len(self._parts) or parts[:keep] != self._parts:
            self._h = self._state(parts, keep)
            self._parts = parts[:keep]


class MemoCache:
    """A small bounded LRU for per-message renderings (key → rendered JSON-able value + digest)."""

    def __init__(self, maxsize: int = 20_000) -> None:
        self._d: OrderedDict[Any, tuple[Any, str]] = OrderedDict()
        self.maxsize = maxsize

    def get(self, key: Any, make: Callable[[], Any]) -> tuple[Any, str]:
        hit = self._d.get(key)
        if hit is not None:
            self._d.move_to_end(key)
            return hit
        value = make()
        entry = (value, sha256_hex(canonical_json(value)))
        self._d[key] = entry
        if len(self._d) > self.maxsize:
            self._d.popitem(last=False)
        return entry


class Renderer(ABC):
    """One provider request format."""

    #: "anthropic" | "openai-chat" | "openai-responses" | "gemini"
    format: str

    def __init__(self) -> None:
        self.memo = MemoCache()

    @abstractmethod
    def render(self, req: NeutralRequest) -> Rendered:
        """Build the SDK request dict for ``req``."""

    @abstractmethod
    def parse_response(self, response: Any) -> ParsedResponse:
        """Parse an SDK response object (or its dict form) into a neutral message and usage."""
