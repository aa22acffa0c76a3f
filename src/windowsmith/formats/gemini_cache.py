"""Gemini explicit context caching (``cachedContents``) for a request's large stable prefix, through google-genai.

Gemini 2.5 caches prefixes implicitly (no saving guaranteed); an explicit cache holds the system instruction and
the tool declarations server-side for a TTL, every request naming it reads them at the cached price, and the
storage is billed per token-hour. :class:`GeminiContextCache` manages one such cache for a session's requests
(``pack.request``, format ``gemini``):

    cache = GeminiContextCache(client, engine.spec)
    resp = client.models.generate_content(**cache.request(pack.request, prefix_tokens=...))
    ...
    cache.close()              # delete it (else it expires at its TTL)

It creates the cache only when the cost model says it pays over the TTL: the reads the call rate promises save
``input - cache_read`` per token each, against ``cache_storage_per_hour`` x TTL (``Prices``) and the first call's read,
and only for a prefix of at least :data:`MIN_TOKENS` (2,048, Gemini's minimum; the model's own if larger). It reuses
the cache while the prefix is the same and the cache alive, replaces it when the prefix changes (the old one is
deleted), lets it go when it expired, and deletes it when the call rate no longer pays for its storage. The call
rate is measured from the requests seen in the last TTL (``calls_per_hour`` overrides it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigError
from ..hashing import canonical_json, sha256_hex
from ..registry import ModelSpec

#: Gemini's smallest explicit cache, in tokens
MIN_TOKENS = 2048
#: the fields of a rendered request's ``config`` that move into the cache
CACHED_FIELDS = ("system_instruction", "tools", "tool_config")


class GeminiContextCache:
    """One session's explicit Gemini cache (see the module docstring). ``ttl``: seconds a cache lives;
    ``calls_per_hour``: the expected call rate, else measured; ``clock``: seconds since the epoch (tests)."""

    def __init__(self, client: Any, spec: ModelSpec, *, ttl: int = 3600, calls_per_hour: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if spec.prices.cache_storage_per_hour is None:
            raise ConfigError(f"model {spec.name!r} has no cache_storage_per_hour price; add it to its prices in a "
                              "registry file (Engine(registry=...)) to use explicit Gemini caching")
        if ttl <= 0:
            raise ConfigError(f"GeminiContextCache(ttl={ttl!r}) must be a positive number of seconds")
        self.client = client
        self.spec = spec
        self.ttl = ttl
        self.calls_per_hour = calls_per_hour
        self.clock = clock
        self.name: str | None = None
        self._key: str | None = None
        self._expires = 0.0
        self._calls: list[float] = []
        self.created = self.deleted = self.reused = 0

    # -- the cost model ---------------------------------------------------------------------------

    def rate(self, now: float) -> float:
        """Calls per hour: the given rate, else the requests seen in the last TTL (0 until two were)."""
        if self.calls_per_hour is not None:
            return self.calls_per_hour
        recent = [t for t in self._calls if now - t <= self.ttl]
        if len(recent) < 2 or recent[-1] <= recent[0]:
            return 0.0
        return (len(recent) - 1) * 3600 / (recent[-1] - recent[0])

    def pays(self, tokens: int, rate: float) -> bool:
        """Whether a cache of ``tokens`` pays over one TTL at ``rate`` calls per hour (see the module docstring)."""
        if tokens < max(MIN_TOKENS, self.spec.min_cacheable_prefix):
            return False
        p = self.spec.prices
        hours = self.ttl / 3600
        saved = rate * hours * (p.input - p.cache_read)
        cost = (p.cache_storage_per_hour or 0.0) * hours + p.cache_read
        return saved > cost

    # -- the lifecycle ----------------------------------------------------------------------------

    def request(self, full: Mapping[str, Any], *, prefix_tokens: int) -> dict[str, Any]:
        """The request to send for ``full`` (a rendered ``gemini`` request whose system instruction and tools count
        ``prefix_tokens``): naming a live cache of its prefix (created now if it pays), else ``full`` as it is."""
        now = self.clock()
        self._calls = [t for t in self._calls if now - t <= self.ttl] + [now]
        config = dict(full.get("config") or {})
        prefix = {k: config[k] for k in CACHED_FIELDS if k in config}
        key = sha256_hex(canonical_json({"model": full.get("model"), **prefix}))
        if self.name is not None and now >= self._expires:
            self.name = self._key = None  # the server let it go
        if self.name is not None and key != self._key:
            self.delete()
        pays = bool(prefix) and self.pays(prefix_tokens, self.rate(now))
        if self.name is not None and not pays:
            self.delete()  # its storage no longer pays: stop it now rather than at its TTL
        if not pays:
            return dict(full)
        if self.name is None:
            cached = self.client.caches.create(model=full["model"], config={**prefix, "ttl": f"{self.ttl}s"})
            self.name, self._key, self._expires = cached.name, key, now + self.ttl
            self.created += 1
        else:
            self.reused += 1
        rest = {k: v for k, v in config.items() if k not in CACHED_FIELDS}
        return {**full, "config": {**rest, "cached_content": self.name}}

    def delete(self) -> None:
        """Delete the live cache, if any."""
        if self.name is not None:
            self.client.caches.delete(name=self.name)
            self.deleted += 1
        self.name = self._key = None

    def close(self) -> None:
        self.delete()


__all__ = ["CACHED_FIELDS", "MIN_TOKENS", "GeminiContextCache"]
