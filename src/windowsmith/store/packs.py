"""Pack manifests stored as deltas, so a session's packs take space proportional to what changed.

A build's manifest repeats most of the previous one (its part digests grow by a few entries per turn).
A pack row holds either the full manifest (``base_ord`` NULL) or a delta against the session's previous
pack (``base_ord`` = that row's ``ord``; ``snap_ord`` = the ``ord`` of the full manifest the chain
starts from). A delta is ``{"put": {key: value}, "prefix": {key: n}, "sub": {key: delta}, "sets": {key: {"add":
[item], "del": [item]}}, "drop": [key]}``: keys whose value changed, keys whose string or list value keeps the base's
first ``n`` characters or items (then ``put`` holds the rest), dicts changed in some of their keys (a nested delta),
sorted lists of distinct strings changed by the items added and removed (the manifest's artifacts: a new sha lands
anywhere in the list, so its common prefix with the base is short), keys removed.
A chain is cut with a new full manifest when its deltas add up to more than ``CHAIN_RATIO`` times the
full manifest it starts from, so the full manifests take at most 1/``CHAIN_RATIO`` of the deltas' bytes
and reading any pack reads at most ``CHAIN_RATIO + 1`` full manifests' worth.

The backends keep the last pack they wrote per session (:class:`PackCache`); a writer that finds
another pack after it in the table (another process wrote one) starts a new chain.

A manifest may come as a :class:`Hinted` dict that says which of its strings start with the same characters
as a string of the previous manifest (the builder knows its part digests extend the last build's): when the
chain's base holds that very string, the delta compares only what follows, not the whole session's digests.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .codec import unpack_text

#: a common prefix shorter than this is not worth a ``prefix`` entry
MIN_PREFIX = 32
#: a chain's deltas may add up to this many times its full manifest before a new full one starts it
CHAIN_RATIO = 4


def _common_prefix(a: str | list[Any], b: str | list[Any]) -> int:
    """Length of the common prefix of two strings or two lists.

    Consecutive manifests share almost everything, so the search gallops back from the end of the
    shorter one (a few C-level compares of long slices) and then bisects a short window."""
    n = min(len(a), len(b))
    lo, hi, step = 0, n, 16
    while True:  # find lo with a[:lo] == b[:lo], as close to n as the galloping allows
        cand = max(0, n - step)
        if a[:cand] == b[:cand]:
            lo = cand
            break
        hi = cand
        step *= 8
    if a[lo:n] == b[lo:n]:
        return n
    while lo < hi:  # the answer is in [lo, hi]: a[:lo] == b[:lo]
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class Hinted(dict[str, Any]):
    """A manifest (a plain dict to everything else) with ``hints[key] = (earlier, n)``: the string
    ``self[key]`` starts with ``earlier[:n]``. When the base of the delta holds ``earlier`` itself (the same
    object), :func:`manifest_delta` trusts the first ``n`` characters and compares only the rest."""

    __slots__ = ("hints",)

    def __init__(self, manifest: Mapping[str, Any], hints: Mapping[str, tuple[str, int]]) -> None:
        super().__init__(manifest)
        self.hints = dict(hints)


#: characters just before a hinted prefix's end that are compared anyway (a cheap guard against a wrong hint)
_HINT_CHECK = 64


def _hinted_prefix(b: str, v: str, hint: tuple[str, int] | None) -> int | None:
    """``_common_prefix(b, v)`` from a hint that ``v`` starts with ``b[:n]`` (``b`` the hinted string itself),
    comparing only what follows ``n``; None when the hint does not apply."""
    if hint is None or hint[0] is not b or not isinstance(v, str):
        return None
    n = min(hint[1], len(b), len(v))
    lo = max(0, n - _HINT_CHECK)
    if b[lo:n] != v[lo:n]:
        return None  # a wrong hint: compare everything
    return n + _common_prefix(b[n:], v[n:])


def manifest_delta(base: Mapping[str, Any], new: Mapping[str, Any],
                   hints: Mapping[str, tuple[str, int]] | None = None) -> dict[str, Any]:
    """The delta that turns ``base`` into ``new`` (see the module doc); ``hints`` as :attr:`Hinted.hints`
    (the same delta, found without comparing the hinted strings' shared prefixes)."""
    put: dict[str, Any] = {}
    prefix: dict[str, int] = {}
    sub: dict[str, Any] = {}
    sets: dict[str, dict[str, list[str]]] = {}
    for k, v in new.items():
        if k in base:
            b = base[k]
            n = _hinted_prefix(b, v, hints.get(k)) if hints else None
            if n is not None:
                if n == len(b) == len(v):
                    continue  # equal
                if n >= MIN_PREFIX:
                    prefix[k] = n
                    put[k] = v[n:]
                else:
                    put[k] = v
                continue
            if type(b) is type(v) and b == v:
                continue
            if isinstance(v, dict) and isinstance(b, dict) and v and b:
                sub[k] = manifest_delta(b, v)  # nested: only the leaves that changed
                continue
            if isinstance(v, str | list) and type(b) is type(v):
                n = _common_prefix(b, v)
                change = _set_change(b, v) if isinstance(v, list) and isinstance(b, list) else None
                if change is not None and len(change["add"]) + len(change["del"]) < len(v) - n:
                    sets[k] = change
                    continue
                if n >= MIN_PREFIX:
                    prefix[k] = n
                    put[k] = v[n:]
                    continue
        put[k] = v
    out: dict[str, Any] = {"put": put}
    if prefix:
        out["prefix"] = prefix
    if sub:
        out["sub"] = sub
    if sets:
        out["sets"] = sets
    drop = sorted(k for k in base if k not in new)
    if drop:
        out["drop"] = drop
    return out


def apply_delta(base: Mapping[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest ``delta`` makes of ``base``."""
    drop = set(delta.get("drop", ()))
    out = {k: v for k, v in base.items() if k not in drop}
    prefix = delta.get("prefix", {})
    for k, v in delta.get("put", {}).items():
        n = prefix.get(k)
        out[k] = v if n is None else base[k][:n] + v
    for k, d in delta.get("sub", {}).items():
        out[k] = apply_delta(base[k], d)
    for k, c in delta.get("sets", {}).items():
        out[k] = sorted(set(base[k]).difference(c["del"]).union(c["add"]))
    return out


def _set_change(base: list[Any], new: list[Any]) -> dict[str, list[str]] | None:
    """``{"add": [...], "del": [...]}`` when ``base`` and ``new`` are both sorted lists of distinct strings (then
    ``sorted(set(base) - del | add) == new``), else None."""
    if not new or not base or not all(isinstance(x, str) for x in (new[0], new[-1], base[0], base[-1])):
        return None
    old, now = set(base), set(new)
    if len(old) != len(base) or len(now) != len(new) or new != sorted(new) or base != sorted(base) \
            or not all(isinstance(x, str) for x in now):
        return None
    return {"add": sorted(now - old), "del": sorted(old - now)}


@dataclass
class ChainHead:
    """The last pack a store wrote for a session, as the base of the next delta."""

    ord: int
    snap_ord: int
    pack_id: str
    seq: int
    manifest: dict[str, Any]
    chain_bytes: int  # bytes of the deltas since the full manifest
    snap_bytes: int  # bytes of that full manifest


class PackCache:
    """Per session, the head of the chain this store object is writing."""

    def __init__(self) -> None:
        self._heads: dict[str, ChainHead] = {}

    def get(self, session_id: str) -> ChainHead | None:
        return self._heads.get(session_id)

    def put(self, session_id: str, head: ChainHead) -> None:
        self._heads[session_id] = head

    def drop(self, session_id: str | None = None) -> None:
        if session_id is None:
            self._heads.clear()
        else:
            self._heads.pop(session_id, None)


def encode(head: ChainHead | None, manifest: Mapping[str, Any], full_json: Any) -> tuple[str, bool, int]:
    """(row text, is a delta, delta bytes). ``full_json()`` serializes the whole manifest (only called when a
    full row is written). A delta is written only when it keeps the chain within its full manifest's size."""
    from .base import to_json

    if head is not None:
        delta = manifest_delta(head.manifest, manifest, getattr(manifest, "hints", None))
        text = to_json(delta, "the manifest delta")
        if head.chain_bytes + len(text) <= CHAIN_RATIO * head.snap_bytes:
            return text, True, len(text)
    text = full_json()
    return text, False, len(text)


def next_head(head: ChainHead | None, delta: bool, ord_: int, pack_id: str, seq: int, manifest: Mapping[str, Any],
              n: int) -> ChainHead:
    """The chain head after writing ``manifest`` as row ``ord_`` (a delta of ``n`` bytes, or a full one)."""
    if delta and head is not None:
        return ChainHead(ord_, head.snap_ord, pack_id, seq, dict(manifest), head.chain_bytes + n, head.snap_bytes)
    return ChainHead(ord_, ord_, pack_id, seq, dict(manifest), 0, n)


def rebuild(rows: Iterable[tuple[int, int | None, str | bytes]], target: int) -> dict[str, Any]:
    """The full manifest of the row ``target`` from the rows of its chain ``(ord, base_ord, text)`` (others ignored)."""
    by_ord = {o: (b, t) for o, b, t in rows}
    chain: list[str | bytes] = []
    o: int | None = target
    while o is not None:
        if o not in by_ord:
            from ..errors import StoreError

            raise StoreError(f"pack row {target} names a base row {o} that is missing; the packs table was changed "
                             "outside windowsmith")
        b, t = by_ord[o]
        chain.append(t)
        o = b
    out: dict[str, Any] = json.loads(unpack_text(chain[-1]))
    for t in reversed(chain[:-1]):
        out = apply_delta(out, json.loads(unpack_text(t)))
    return out


def rebuild_all(rows: Iterable[tuple[int, int | None, str | bytes]]) -> list[dict[str, Any]]:
    """Every manifest of rows ``(ord, base_ord, text)`` in ``ord`` order (one session's packs)."""
    done: dict[int, dict[str, Any]] = {}
    out = []
    for o, b, t in rows:
        m = json.loads(unpack_text(t))
        if b is not None:
            base = done.get(b)
            if base is None:
                from ..errors import StoreError

                raise StoreError(f"pack row {o} names a base row {b} that is missing; the packs table was "
                                 "changed outside windowsmith")
            m = apply_delta(base, m)
        done[o] = m
        out.append(m)
    return out


def chain_rows(rows: Iterable[tuple[int, str]]) -> list[tuple[int, int | None, int, str]]:
    """Re-encode one session's full rows ``(ord, text)`` in ``ord`` order as delta chains (the m006
    migration): ``(ord, base_ord, snap_ord, text)``."""
    out: list[tuple[int, int | None, int, str]] = []
    head: ChainHead | None = None
    for o, text in rows:
        m = json.loads(text)
        enc, delta, n = encode(head, m, lambda text=text: text)
        out.append((o, head.ord, head.snap_ord, enc) if delta and head is not None else (o, None, o, enc))
        head = next_head(head, delta, o, "", 0, m, n)
    return out


__all__ = ["ChainHead", "Hinted", "PackCache", "apply_delta", "chain_rows", "encode", "manifest_delta", "next_head", "rebuild", "rebuild_all"]
