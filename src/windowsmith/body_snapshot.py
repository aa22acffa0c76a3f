"""The rendered body of a long session, kept in the store, so a resumed session's first build does not render
(nor serialize and hash) every message of the session again.

A renderer keeps the body of its last request (every message but a final one the tail is prepended to, rendered
and merged; ``formats/units.py``) and extends it turn by turn. A fresh process has none: its first build renders
the whole view, one message at a time. So once a session's body holds :data:`MIN_MESSAGES` messages, each full
segment of :data:`SEGMENT` body messages is stored as one key-value row ``body|<format>|<segment>`` in the scope
``counts:<session id>`` (removed with the session; no schema of its own):

``{"v": 1, "render": RENDER_SCHEME, "format": ..., "hash": <chain hash>, "values": <base64 of the zlib'd JSON of
each message's rendering>, "parts": <base64 of each message's part digest, 32 bytes each>, "check": ...}``

The chain hash of segment ``j`` is the sha256 of segment ``j - 1``'s (for the first: of this module's version,
``RENDER_SCHEME``, the format, the renderer's class and the session id) and the content digests of the segment's
messages. So a row proves which messages it renders: a resumed session takes the rows, in order, whose chain its
own request's messages reproduce (a row of a view compaction has since rewritten, of another session, of another
render scheme or renderer, or edited by hand (``check``), is not taken, nor is any after it), checks one message
of each shape (among the first :data:`SAMPLE` of each segment) by rendering it, and hands the renderer the body
those rows make: the same renderings, merged by the renderer's own code, as a render from scratch
(``tests/test_body_snapshot.py`` compares the bytes).

Rows are written by a build once its body has a full segment not stored yet, under the view's lineage (a view a
compaction rewrote is stored again from its first changed segment, at most once per :data:`SEGMENT` logged
events; rows of a longer earlier view past the new one's are cleared to ``null``); only
for formats whose rendering of a message depends on the message alone (not Gemini's). Sessions shorter than
:data:`MIN_MESSAGES` resume fast without: their body is not stored (nor its bytes paid for).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from itertools import accumulate
from itertools import chain as concat
from typing import TYPE_CHECKING, Any

from .errors import StoreError
from .formats.base import RENDER_SCHEME, Renderer
from .formats.units import RenderedBody, UnitRenderer
from .hashing import canonical_json, sha256_hex
from .refs import message_refs
from .request import NeutralRequest, extends
from .resume import pack_digests, row_check, unpack_digests
from .state import COUNTS_CHUNK
from .unit_counts import PART_BYTES, message_shape, part_digester, scope

if TYPE_CHECKING:
    from .model import Message
    from .request import Lineage
    from .store import Store

VERSION = 1
#: body messages per stored row
SEGMENT = COUNTS_CHUNK
#: a body shorter than this is not stored
MIN_MESSAGES = 8 * SEGMENT
#: messages of each segment whose shapes a restore checks (see _sampled_ok)
SAMPLE = 64


def _key(fmt: str, j: int) -> str:
    return f"body|{fmt}|{j}"



def _seed(session_id: str, renderer: Renderer) -> str:
    cls = type(renderer)
    return sha256_hex(f"{VERSION}|{RENDER_SCHEME}|{renderer.format}|{cls.__module__}.{cls.__qualname__}|{session_id}")


def _chain(prev: str, msgs: Any) -> str:
    return hashlib.sha256((prev + "|" + "".join([m.digest for m in msgs])).encode("ascii")).hexdigest()


def _body_n(req: NeutralRequest) -> int:
    return len(req.messages) - (1 if req.tail_mode() == "prepend" else 0)


class BodySnapshots:
    """The stored body rows of one session (see the module docstring): :meth:`restore` hands a renderer the body
    they make for a request, :meth:`save` stores the full segments of a renderer's body not stored yet."""

    def __init__(self, store: Store, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        #: format → (the view's lineage, chain hash of each segment stored under it, logged seq of the view's first
        #: write, rows known to be in the store)
        self._stored: dict[str, tuple[Lineage | None, list[str], int, int]] = {}
        self._tried: set[str] = set()
        self.restored = 0  # body messages the last restore() handed to a renderer (for tests and the benchmark)
        #: the artifact references and redaction markers (with their counts) of the restored body's messages
        self.refs: tuple[dict[str, int], dict[str, int]] = ({}, {})

    def restore(self, renderer: Renderer, req: NeutralRequest) -> int:
        """Once per format: give ``renderer`` the body the stored rows make for ``req``, unless it holds a body
        that ``req`` extends already; returns how many body messages it got."""
        fmt = renderer.format
        if fmt in self._tried:
            return 0
        self._tried.add(fmt)
        if not isinstance(renderer, UnitRenderer) or part_digester(renderer) is None:
            return 0
        msgs = req.messages
        segments = _body_n(req) // SEGMENT
        with renderer.lock:
            cached = renderer.body_cache
            if segments == 0 or (cached is not None and (cached.source is msgs
                                                         or extends(req, cached.lineage, cached.n))):
                return 0
            chain = [_seed(self.session_id, renderer)]
            values: list[list[dict[str, Any]]] = []
            parts: list[str] = []
            refs: dict[str, int] = {}
            marks: dict[str, int] = {}
            j = 0
            while True:
                row = self._get(fmt, j)
                got = self._valid(row, chain[-1], msgs[j * SEGMENT:(j + 1) * SEGMENT]) if j < segments else None
                if got is None:
                    break
                chain.append(got[0])
                values += got[1]
                parts += got[2]
                for into, counts in ((refs, got[3]), (marks, got[4])):
                    for k, c in counts.items():
                        into[k] = into.get(k, 0) + c
                j += 1
            known = j
            while row is not None:  # rows of an older view after those taken: rewritten or cleared by save()
                known += 1
                row = self._get(fmt, known)
            n = len(values)
            self._stored[fmt] = (None, [], -1, known)
            if not n or not _sampled_ok(renderer, msgs, values, parts):
                return 0
            body = RenderedBody(msgs, n, req.lineage)
            flat = list(concat.from_iterable(values))
            body.msg_end = list(accumulate(map(len, values)))
            body.flat_last = [v[-1] if v else {} for v in values]
            if renderer.merge_same_role:
                renderer.merge_from(body.out, body.origin, flat, 0, -1, "none")  # the renderer's own merge
            else:  # what _merge_from does when nothing merges, in two comprehensions
                key = renderer.content_key
                sizes = [len(b) if isinstance(b, list) else 0 for b in [m.get(key) for m in flat]]
                body.out = flat
                body.origin = [[(i, 0)] if k == 1 else [] if not k else [(i, j) for j in range(k)]
                               for i, k in enumerate(sizes)]
            n_flat = len(flat)
            body.parts = parts
            body.n_flat = n_flat
            renderer.body_cache = body
        self._stored[fmt] = (req.lineage, chain[1:], -1, known)
        self.restored = n
        self.refs = (refs, marks)
        return n

    def _get(self, fmt: str, j: int) -> Any:
        try:
            return self.store.get_kv(scope(self.session_id), _key(fmt, j))
        except ValueError:  # not JSON: as if there were none
            return None

    def _valid(self, row: Any, prev: str, msgs: Any) -> tuple[str, list[Any], list[str], Any, Any] | None:
        """(chain hash, renderings, part digests, artifact references, redaction markers) of a stored row, if it
        is one for ``msgs`` after ``prev``."""
        if not isinstance(row, dict) or row.get("v") != VERSION or row.get("render") != RENDER_SCHEME \
                or row.get("check") != row_check(row) or type(row.get("values")) is not str \
                or type(row.get("parts")) is not str or not _counts(row.get("refs")) or not _counts(row.get("marks")):
            return None
        h = _chain(prev, msgs)
        if row.get("hash") != h:
            return None
        parts = unpack_digests(row["parts"], SEGMENT, PART_BYTES)
        try:
            values = json.loads(zlib.decompress(base64.b64decode(row["values"], validate=True)))
        except (ValueError, zlib.error, binascii.Error):
            return None
        if parts is None or not isinstance(values, list) or len(values) != SEGMENT \
                or not set(map(type, values)) <= {list}:
            return None
        return h, values, parts, row["refs"], row["marks"]

    def save(self, renderer: Renderer, req: NeutralRequest, seq: int) -> int:
        """Store the full segments of ``renderer``'s body (the one it rendered ``req`` with) not stored yet under
        ``req``'s view, and clear rows of an earlier view past them; returns how many rows were written."""
        fmt = renderer.format
        if not isinstance(renderer, UnitRenderer) or req.lineage is None:
            return 0
        body = renderer.body_cache
        if body is None or body.source is not req.messages:
            return 0
        lineage, chain, first_write, known = self._stored.get(fmt, (None, [], -1, 0))
        segments = body.n // SEGMENT if body.n >= MIN_MESSAGES else 0
        msgs = body.source
        seed = _seed(self.session_id, renderer)
        if lineage is not req.lineage:  # another view (or none stored by this process)
            if first_write >= 0 and seq < first_write + SEGMENT:
                return 0  # a view rewritten again soon after it was stored: wait
            if part_digester(renderer) is None:
                return 0
            # the stored segments this view starts with stay (a mask batch folds recent units: the last few change)
            kept: list[str] = []
            for j in range(min(len(chain), segments)):
                h = _chain(kept[-1] if kept else seed, msgs[j * SEGMENT:(j + 1) * SEGMENT])
                if h != chain[j]:
                    break
                kept.append(h)
            lineage, chain, first_write = req.lineage, kept, seq
        if len(chain) >= segments and known <= segments:
            self._stored[fmt] = (lineage, chain, first_write, known)
            return 0
        written = 0
        try:
            for j in range(len(chain), segments):
                lo, hi = j * SEGMENT, (j + 1) * SEGMENT
                h = _chain(chain[-1] if chain else seed, msgs[lo:hi])
                values = _values(renderer, body, msgs, lo, hi)
                refs: dict[str, int] = {}
                marks: dict[str, int] = {}
                for m in msgs[lo:hi]:
                    r, t = message_refs(m)  # (cached by digest: the build just scanned them)
                    for k in r:
                        refs[k] = refs.get(k, 0) + 1
                    for k in t:
                        marks[k] = marks.get(k, 0) + 1
                row: dict[str, Any] = {
                    "v": VERSION, "render": RENDER_SCHEME, "format": fmt, "hash": h, "refs": refs, "marks": marks,
                    "values": base64.b64encode(zlib.compress(values.encode("utf-8"), 6)).decode("ascii"),
                    "parts": pack_digests(body.parts[lo:hi]),
                }
                row["check"] = row_check(row)
                self.store.set_kv(scope(self.session_id), _key(fmt, j), row)
                chain.append(h)
                written += 1
            known = max(known, len(chain))
            for j in range(len(chain), known):  # an earlier view's rows past this body's: cleared (never taken)
                self.store.set_kv(scope(self.session_id), _key(fmt, j), None)
            known = len(chain)
        except StoreError:  # a read-only store, say: the rows are only a shortcut
            pass
        self._stored[fmt] = (lineage, chain, first_write, known)
        return written


def _counts(d: Any) -> bool:
    return isinstance(d, dict) and all(type(v) is int and v > 0 for v in d.values())


def _values(renderer: UnitRenderer, body: RenderedBody, msgs: Any, lo: int, hi: int) -> str:
    """The JSON list of the renderings of body messages ``lo:hi`` (each a list of provider items)."""
    if not renderer.merge_same_role:  # nothing merged: each message's items are its stretch of the body
        ends, out = body.msg_end, body.out
        start = ends[lo - 1] if lo else 0
        return json.dumps([out[start if i == lo else ends[i - 1]:ends[i]] for i in range(lo, hi)],
                          separators=(",", ":"))
    peek = renderer.memo.peek
    items = []
    for m in msgs[lo:hi]:  # from the memo, else rendered again (the same rendering), one message at a time
        hit = peek(("msg", m.digest, ()))
        items.append(json.dumps(hit[0] if hit is not None else renderer.render_message(m, ()), separators=(",", ":")))
    return "[" + ",".join(items) + "]"


def _sampled_ok(renderer: UnitRenderer, msgs: Any, values: list[Any], parts: list[str]) -> bool:
    """One message of each shape, once for the whole body (looked for among the first :data:`SAMPLE` messages of
    each segment), rendered now and compared with its stored rendering and part digest (a renderer changed without
    a new ``RENDER_SCHEME`` drops the rows)."""
    seen = set()
    m: Message
    for lo in range(0, len(values), SEGMENT):
        for i, m in enumerate(msgs[lo:lo + SAMPLE], lo):  # (a slice: one copy per segment, not a lookup per message)
            shape = message_shape(m)
            if shape in seen:
                continue
            seen.add(shape)
            if sha256_hex(canonical_json(renderer.render_message(m, ()))) != parts[i] \
                    or sha256_hex(canonical_json(values[i])) != parts[i]:
                return False
    return True


__all__ = ["MIN_MESSAGES", "SEGMENT", "VERSION", "BodySnapshots"]
