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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProviderResponseError
from ..hashing import canonical_json, sha256_hex
from ..model import Message, Usage
from ..request import NeutralRequest


@dataclass(frozen=True)
class Rendered:
    request: dict[str, Any]
    parts: Sequence[str]  # a tuple, or a Snapshot (snapshot.py) of the renderer's digests: no copy of a long body
    cache_prefix_parts: int
    checksum: str
    format: str
    prefix_digest: str | None = field(default=None, compare=False, repr=False)  # prefix_hash, if computed already
    #: the parts' lineage ``(token, n)``: two renderings with the same token have the same ``parts[:n]`` (the
    #: smaller ``n``), proven without comparing them; None when unknown
    stable: tuple[object, int] | None = field(default=None, compare=False, repr=False)

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


def checksum_of(parts: Sequence[str], rest: dict[str, Any]) -> str:
    return sha256_hex("".join(parts) + "|" + canonical_json(rest))


class PartsHasher:
    """sha256 over the concatenated part digests, resumed from the hash state of the previous request's
    stable prefix: a turn hashes its new parts only, and the digests equal :func:`checksum_of` and
    :attr:`Rendered.prefix_hash` computed from scratch.

    That the new parts start with the hashed ones is proven by the parts' lineage (``stable``: see
    :attr:`Rendered.stable`) in O(1), else checked by comparing them."""

    def __init__(self) -> None:
        self._parts: Sequence[str] = ()  # the parts the state was taken from (its first _k are hashed)
        self._k = 0
        self._token: object = None  # the parts lineage token of _parts, if their first _k are under it
        self._h = hashlib.sha256()

    def _resumes(self, parts: Sequence[str], upto: int, stable: tuple[object, int] | None) -> bool:
        k = self._k
        if not k or k > upto:
            return False
        if stable is not None and stable[0] is self._token and stable[1] >= k:
            return True
        return len(parts) >= k and parts[:k] == self._parts[:k]  # C-level compare: identical strings short-circuit

    def _state(self, parts: Sequence[str], upto: int, stable: tuple[object, int] | None) -> Any:
        if self._resumes(parts, upto, stable):
            h, k = self._h.copy(), self._k
        else:
            h, k = hashlib.sha256(), 0
        h.update("".join(parts[k:upto]).encode())
        return h

    def checksum(self, parts: Sequence[str], rest: dict[str, Any], stable: tuple[object, int] | None = None) -> str:
        """``checksum_of(parts, rest)``."""
        h = self._state(parts, len(parts), stable)
        h.update(("|" + canonical_json(rest)).encode())
        return str(h.hexdigest())

    def prefix(self, parts: Sequence[str], upto: int, stable: tuple[object, int] | None = None) -> str:
        """sha256 hex of ``"".join(parts[:upto])``."""
        return str(self._state(parts, upto, stable).hexdigest())

    def advance(self, parts: Sequence[str], keep: int, stable: tuple[object, int] | None = None) -> None:
        """Keep the hash state over ``parts[:keep]`` for the next request."""
        if keep != self._k or not self._resumes(parts, keep, stable):
            self._h = self._state(parts, keep, stable)
            self._k = keep
        self._parts = parts
        self._token = stable[0] if stable is not None and stable[1] >= keep else None


#: the version of every renderer's per-message rendering: part digests persisted by an earlier process
#: (``unit_counts.py``) are used only under the same scheme. Bump it when a ``render_message`` changes its output.
RENDER_SCHEME = 1


class MemoCache:
    """A small bounded LRU for per-message renderings (key → rendered JSON-able value + digest)."""

    def __init__(self, maxsize: int = 20_000) -> None:
        self._d: OrderedDict[Any, tuple[Any, str]] = OrderedDict()
        self.maxsize = maxsize
        #: digests known before their value is made (key → digest; persisted by an earlier process, see
        #: ``unit_counts.py``): a miss on such a key renders the value but does not serialize and hash it
        self.hints: dict[Any, str] = {}

    def peek(self, key: Any) -> tuple[Any, str] | None:
        """The entry for ``key`` if there is one, without making it or moving it up the LRU order."""
        return self._d.get(key)

    def get(self, key: Any, make: Callable[[], Any]) -> tuple[Any, str]:
        hit = self._d.get(key)
        if hit is not None:
            self._d.move_to_end(key)
            return hit
        value = make()
        digest = self.hints.pop(key, None) if self.hints else None
        entry = (value, digest if digest is not None else sha256_hex(canonical_json(value)))
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


# -- reading responses ----------------------------------------------------------------------------

#: what to pass to ``record()`` instead of a stream it cannot read (every stream error ends with it)
WORKAROUND = (
    "pass the SDK's response object, its stream before you iterate it, the stream's final message "
    "(stream.get_final_message() / get_final_completion() / get_final_response()), or the list of the "
    "events/chunks you collected while iterating"
)


def to_plain(response: Any, *, what: str, by_alias: bool = True) -> dict[str, Any]:
    """An SDK response object (pydantic model) or a dict, as a plain JSON-like dict."""
    if isinstance(response, Mapping):
        return dict(response)
    dump = getattr(response, "model_dump", None)
    if callable(dump):
        try:
            out = dump(mode="json", by_alias=by_alias, exclude_unset=True, warnings=False)
        except TypeError:  # not a pydantic v2 model after all
            out = None
        if isinstance(out, dict):
            return out
    raise ProviderResponseError(
        f"cannot parse {type(response).__name__} as {what}: pass the SDK's response object or its dict form "
        "(response.model_dump())"
    )


def expect(d: Any, key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(d, Mapping):
        raise ProviderResponseError(f"{where} must be an object, got {type(d).__name__}")
    v = d.get(key)
    if not isinstance(v, typ):
        raise ProviderResponseError(f"{where}.{key} is missing or has the wrong type ({type(v).__name__})")
    return v


def as_int(v: Any) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProviderResponseError(f"token count must be an integer, got {v!r}")
    return v
