"""Token counts that survive the process: a resumed session does not tokenize its log again, nor write every
fold line again to plan the mask stage.

The logged messages are cut into chunks of :data:`CHUNK` messages. Once a chunk is full, a build stores, per
counter scheme (encoding, format overheads, the thinking blocks the format sends: ``TokenCounter.scheme``),
one key-value row in the scope ``counts:<session id>`` (no schema of its own: the store's ``kv`` table):

``{"v": 2, "scheme": ..., "seq": <seq of the chunk's last message>, "hash": <that event's chain hash>,
"counts": [raw count of each message], "thinking": <any thinking block this format counts>,
"folds": null | {"lo": <first visible unit>, "compactions": <records>, "fold": FOLD_SCHEME,
"config": [fold_chars, fold_keys], "raw": [[unit first seq, raw count of its fold message], ...]},
"parts": null | {"render": RENDER_SCHEME, "digests": <base64 of the rendered part digest of each message, 32 bytes each>},
"check": <sha256 of the rest>}`` (version 1 held the part digests as a list of hex strings: 2.3 MB more JSON to
parse at 50,000 messages; its rows are ignored, never misread, and the next build writes them again).

The chain hash of the chunk's last message commits to the whole log before it, so a row whose hash is not the
one the log has at that seq (a session deleted and made again under the same id, another tenant's or a tampered
row) is ignored, as is a row of another scheme or version, or one that does not parse. Fold counts depend on the
view besides the log: they are used only when the view starts at the same unit after the same number of
compaction records (else the planner writes those lines again, and the rows are rewritten once it has). A fold
count is kept in the chunk of its unit's last message, so the hash covers every message of the unit.

Part digests (the sha256 of each message's canonical rendering, as the renderer's memo computes it) let the
first build of a resumed session render its messages without serializing and hashing each rendering again. They
are kept for formats whose rendering of a message depends on the message alone (not Gemini's), under
``RENDER_SCHEME``; before any is used, one message of each shape (role and block kinds) in each chunk is rendered
and hashed, and a mismatch drops them all (a renderer changed without a new scheme).

Seeded counts are exactly what the counter would count (``tests/test_resume.py`` builds every request with and
without them and compares the bytes).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Set
from typing import TYPE_CHECKING, Any

from .compaction.fold_lines import FOLD_SCHEME
from .compaction.mask import MaskPlanner
from .errors import StoreError
from .formats.base import RENDER_SCHEME, Renderer
from .hashing import canonical_json, sha256_hex
from .model import Message, Text
from .resume import (
    DIGESTS_VERSION,
    digests_key,
    pack_digests,
    row_check,
    stored_shape,
    unpack_digests,
    valid_digests,
)
from .state import COUNTS_CHUNK as CHUNK
from .state import SessionState
from .store.base import session_kv_scopes

if TYPE_CHECKING:
    from .store import Store
    from .tokens import TokenCounter

VERSION = 2
#: bytes of a rendered part digest (sha256)
PART_BYTES = 32


def scope(session_id: str) -> str:
    return session_kv_scopes(session_id)[0]  # removed with the session (delete_session)


class PersistedCounts:
    """The persisted counts of one session (see the module docstring): :meth:`seed` a new counter and the
    mask planner from them, :meth:`save` the chunks that filled (or whose fold counts are out of date)."""

    def __init__(self, store: Store, session_id: str, digest_rows: Set[int] = frozenset()) -> None:
        """``digest_rows``: the chunks whose message digest rows are known to be stored and valid (a replay's)."""
        self.store = store
        self.session_id = session_id
        self._digest_rows = digest_rows
        self._saved: dict[tuple[str, int], Any] = {}  # (scheme, chunk) → (lo, records) of its fold counts, or None
        self.seeded = 0  # messages whose counts the last seed() took (for tests and the benchmark)
        self.hinted = 0  # part digests handed to a renderer (for tests)
        self._fold_seeds: dict[str, tuple[tuple[int, int, tuple[int, ...]], dict[int, int]]] = {}
        # scheme → (chunk, its part digests as stored) not handed yet: unpacked only if handed (most chunks of a long
        # session are covered by its stored body, body_snapshot.py)
        self._parts: dict[str, list[tuple[int, str]]] = {}
        self._no_parts: set[tuple[str, int]] = set()  # stored rows without part digests
        self._digests_done = 0  # chunks whose message digests are known to be stored

    def _key(self, scheme: str, chunk: int) -> str:
        return f"{scheme}|{chunk}"

    def seed(self, state: SessionState, counter: TokenCounter, planner: MaskPlanner | None) -> int:
        """Seed ``counter`` (and ``planner``) from the stored chunks that match ``state``'s log; returns how
        many message counts were taken."""
        scheme = counter.scheme
        folds: dict[int, int] = {}
        fold_key: tuple[int, int, tuple[int, ...]] | None = None
        taken = 0
        for k in range(len(state.chunk_hashes)):
            row = _read(self.store, scope(self.session_id), self._key(scheme, k))
            if row is None or row.get("v") != VERSION or row.get("scheme") != scheme:
                continue
            lo_i, hi_i = k * CHUNK, (k + 1) * CHUNK
            counts = row.get("counts")
            if row.get("hash") != state.chunk_hashes[k] or row.get("check") != row_check(row) or row.get("seq") != state.message_seqs[hi_i - 1] \
                    or not isinstance(counts, list) or len(counts) != CHUNK \
                    or set(map(type, counts)) != {int} or min(counts) < 0:  # (C-level passes, not a generator)
                continue
            counter.seed(state.messages[lo_i:hi_i], counts, thinking=row.get("thinking") is True)
            taken += CHUNK
            p = row.get("parts")
            digests = p.get("digests") if isinstance(p, Mapping) and p.get("render") == RENDER_SCHEME else None
            if type(digests) is str:  # (unpacked and checked if handed to a renderer)
                self._parts.setdefault(scheme, []).append((k, digests))
            else:
                self._no_parts.add((scheme, k))
            f = row.get("folds")
            key = None
            if isinstance(f, Mapping) and f.get("fold") == FOLD_SCHEME and isinstance(f.get("config"), list) \
                    and type(f.get("lo")) is int and type(f.get("compactions")) is int \
                    and isinstance(f.get("raw"), list):
                key = (f["lo"], f["compactions"], tuple(f["config"]))
                if fold_key in (None, key):
                    fold_key = key
                    folds.update((int(s), int(n)) for s, n in f["raw"])
            self._saved[(scheme, k)] = key[:2] if key is not None else None
        if fold_key is not None:
            self._fold_seeds[scheme] = (fold_key, folds)
            if planner is not None:
                self.seed_planner(planner)
        self.seeded = taken
        return taken

    def seed_planner(self, planner: MaskPlanner) -> None:
        """Seed ``planner`` with the fold counts taken (those written by a planner of the same fold config)."""
        config = tuple(_fold_config(planner) or ())
        for scheme, ((lo, ncomp, conf), folds) in self._fold_seeds.items():
            if conf == config:
                planner.seed(scheme, lo, ncomp, folds)

    def hint_renderer(self, state: SessionState, scheme: str, renderer: Renderer, after: int = 0) -> int:
        """Hand the part digests taken for ``scheme`` to ``renderer``'s memo (once), after checking a sample of
        them (see the module docstring); returns how many. ``after``: messages the renderer has a body for
        already (``body_snapshot.py``); the chunks they cover are skipped."""
        chunks = [c for c in self._parts.pop(scheme, ()) if (c[0] + 1) * CHUNK > after]
        digest = part_digester(renderer)
        if not chunks or digest is None:
            return 0
        hints: dict[Any, str] = {}
        for k, packed in chunks:
            digests = unpack_digests(packed, CHUNK, PART_BYTES)
            if digests is None:
                return 0
            msgs = state.messages[k * CHUNK:(k + 1) * CHUNK]
            shapes = set()
            for m, d in zip(msgs, digests, strict=True):
                shape = message_shape(m)
                if shape not in shapes:
                    shapes.add(shape)
                    if digest(m) != d:
                        return 0
                hints[("msg", m.digest, ())] = d
        renderer.memo.hints.update(hints)
        self.hinted += len(hints)
        return len(hints)

    def _save_digests(self, state: SessionState) -> int:
        """Store the message digests of each full chunk whose row is missing or out of date (read once per
        process); returns how many rows were written."""
        written = 0
        for k in range(self._digests_done, len(state.chunk_hashes)):
            msgs = state.messages[k * CHUNK:(k + 1) * CHUNK]
            if k not in self._digest_rows and valid_digests(_read(self.store, scope(self.session_id), digests_key(k)),
                                                            state.chunk_hashes[k]) is None:
                value: dict[str, Any] = {"v": DIGESTS_VERSION, "hash": state.chunk_hashes[k],
                                         "digests": pack_digests(m.digest for m in msgs)}
                value["check"] = row_check(value)
                try:
                    self.store.set_kv(scope(self.session_id), digests_key(k), value)
                except StoreError:  # a read-only store, say: the digests are only a shortcut
                    return written
                written += 1
            self._digests_done = k + 1
        return written

    def save(self, state: SessionState, counter: TokenCounter, planner: MaskPlanner | None,
             renderer: Renderer | None = None) -> int:
        """Store the full chunks not stored yet for ``counter``'s scheme, and those whose fold counts the
        planner now knows for a newer view; returns how many rows were written. ``renderer`` (of the counter's
        format): the part digests are stored too."""
        scheme = counter.scheme
        part = part_digester(renderer) if renderer is not None else None
        plan = planner.fold_counts(counter) if planner is not None else None
        now = None
        upto_seq = -1
        if plan is not None:
            lo, ncomp, _, upto = plan
            now = (lo, ncomp)
            upto_seq = state.units[upto].first_seq if upto < len(state.units) else state.seq + 1
        written = self._save_digests(state)
        buckets: dict[int, list[list[int]]] | None = None  # fold counts by chunk, made once a row needs them
        for k in range(len(state.chunk_hashes)):
            last = state.message_seqs[(k + 1) * CHUNK - 1]
            ready = now is not None and upto_seq > last  # every unit ending in the chunk was planned
            have = self._saved.get((scheme, k), False)
            if have is not False and (have == now or not ready) and not (
                    part is not None and (scheme, k) in self._no_parts and (have is None or ready)):
                continue
            msgs = state.messages[k * CHUNK:(k + 1) * CHUNK]
            value: dict[str, Any] = {
                "v": VERSION, "scheme": scheme, "seq": last, "hash": state.chunk_hashes[k],
                "counts": [counter.raw_message(m) for m in msgs],
                "thinking": any(counter.sends_thinking(m) for m in msgs),
                "folds": None,
                "parts": None if part is None else {"render": RENDER_SCHEME, "digests": pack_digests(map(part, msgs))},
            }
            if ready and plan is not None and now is not None:
                if buckets is None:
                    buckets = _by_chunk(state, plan[2])
                value["folds"] = {"lo": now[0], "compactions": now[1], "fold": FOLD_SCHEME,
                                  "config": _fold_config(planner), "raw": sorted(buckets.get(k, []))}
            value["check"] = row_check(value)
            try:
                self.store.set_kv(scope(self.session_id), self._key(scheme, k), value)
            except StoreError:  # a read-only store, say: the counts are only a shortcut
                return written
            self._saved[(scheme, k)] = now if ready else None
            if part is not None:
                self._no_parts.discard((scheme, k))
            written += 1
        return written


def part_digester(renderer: Renderer | None) -> Callable[[Message], str] | None:
    """The part digest of a message as ``renderer`` renders it (through its memo), or None for a renderer whose
    rendering of a message depends on more than the message (Gemini's: the tool names)."""
    from .formats.units import UnitRenderer

    if not isinstance(renderer, UnitRenderer) or type(renderer).message_extra is not UnitRenderer.message_extra:
        return None
    r = renderer
    peek = r.memo.peek

    def digest(m: Message) -> str:
        # from the memo if it holds the message; else rendered and hashed without being kept (a full memo would
        # drop what the session's recent messages share with the body, and keep a second copy of old ones)
        hit = peek(("msg", m.digest, ()))
        return hit[1] if hit is not None else sha256_hex(canonical_json(r.render_message(m, ())))

    return digest


def message_shape(m: Message) -> tuple[Any, ...]:
    """What a sampled check of a chunk's part digests covers once: the role and the kinds of blocks (and of a
    tool result's blocks, and whether it is an error)."""
    if m.plain:  # (a message replayed lazily is not built for it)
        return m.role, *(Text,) * m.n_blocks
    lazy = stored_shape(m)
    if lazy is not None:
        return lazy
    if m.role != "tool":  # (the block types, a C-level pass: this runs for every message of a resumed session)
        return m.role, *map(type, m.content)
    return m.role, *map(_block_shape, m.content)


def _block_shape(b: Any) -> Any:
    if b.kind == "tool_result":
        return b.kind, b.is_error, b.name is None, tuple(_block_shape(c) for c in b.content)
    if b.kind == "image":
        return b.kind, b.url is None, b.caption is None
    return b.kind



def _by_chunk(state: SessionState, fold_raw: Mapping[int, int]) -> dict[int, list[list[int]]]:
    """Fold counts (by unit first seq) grouped by the chunk holding the unit's last message."""
    out: dict[int, list[list[int]]] = {}
    for s, n in fold_raw.items():
        i = state.unit_index(s)
        if i is None:
            continue
        k = bisect.bisect_left(state.message_seqs, state.units[i].last_seq) // CHUNK
        out.setdefault(k, []).append([s, n])
    return out


def _fold_config(planner: MaskPlanner | None) -> list[int] | None:
    if planner is None:
        return None
    return [planner.config.fold_chars, planner.config.fold_keys]


def _read(store: Store, scope_: str, key: str) -> dict[str, Any] | None:
    try:
        row = store.get_kv(scope_, key)
    except ValueError:  # a row that is not JSON: as if there were none
        return None
    return row if isinstance(row, dict) else None


__all__ = ["CHUNK", "PART_BYTES", "VERSION", "PersistedCounts", "message_shape", "scope"]
