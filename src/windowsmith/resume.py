"""Resuming a session fast: replay its log from the store without validating what we validated when it was
written, and without the collector walking the growing state on every allocation burst.

A session's events were validated, redacted and serialized as canonical JSON by this package before they were
stored, and each carries its chain hash over that JSON. So a replay (:func:`replay`):

* reads the rows unparsed (:meth:`Store.event_rows`) and parses all their JSON in one call;
* builds each logged message directly (:func:`message_from_stored`) when its dict has exactly the shape
  ``Message.to_dict`` writes (anything else, say a log written by an older version, goes through
  ``Message.from_dict`` as before, with its checks): the message then equals the one ``from_dict`` returns,
  and its ``to_dict`` is the stored dict;
* takes the message's content digest (the key of every per-message cache) from the stored text itself: when the
  row's chain hash proves the text is the canonical JSON that was hashed, the message's canonical JSON is a
  slice of it, so the digest costs a hash of that slice instead of serializing the message again;
* pauses the cyclic garbage collector meanwhile (:func:`paused_gc`): a replay allocates hundreds of thousands
  of long-lived, acyclic objects, and each collection would walk all of them again.

The state is the same as ``SessionState.apply`` over ``Store.events`` builds (``tests/test_resume.py``).
"""

from __future__ import annotations

import base64
import binascii
import gc
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .hashing import HASH_SCHEME, canonical_json, sha256_hex
from .model import Event, Image, Message, Role, Text, Thinking, ToolCall, ToolResult

if TYPE_CHECKING:
    from .state import SessionState
    from .store import Store


#: a replay of at least this many events (and the first build after it) hands what it built straight to the
#: collector's oldest generation
FREEZE_EVENTS = 5_000


@contextmanager
def paused_gc(freeze: bool = False) -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (reference counting still frees what dies), and
    restore it as it was after, whatever happens in the block.

    ``freeze``: on leaving, move every object alive into the oldest generation (``gc.freeze`` then
    ``gc.unfreeze``, two list splices) instead of leaving the block's objects in the youngest: a 50,000-message
    session is millions of long-lived objects, and the young collections that would otherwise follow walk all of
    them (about 0.3 s) only to promote them there. The collector's behaviour is otherwise unchanged: nothing
    stays frozen, so cycles are still collected by the next full collection."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
            gc.unfreeze()
        if was:
            gc.enable()


def _new(cls: type, fields: dict[str, Any]) -> Any:
    """An instance of the frozen dataclass ``cls`` with ``fields`` set, without running its checks."""
    obj: Any = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def _text(d: dict[str, Any]) -> Text | None:
    text = d.get("text")
    if len(d) != 2 or type(text) is not str:
        return None
    return Text(text)  # (no checks to skip: the constructor is the cheaper and smaller way)


_IMAGE_KEYS = frozenset(("type", "url", "data", "media_type", "caption"))


def _image(d: dict[str, Any]) -> Image | None:
    if not _IMAGE_KEYS.issuperset(d) or any(type(v) is not str for v in d.values()):
        return None
    url, data, media = d.get("url"), d.get("data"), d.get("media_type")
    if (url is None) == (data is None) or (data is not None and not media):
        return None
    return Image(url=url, data=data, media_type=media, caption=d.get("caption"))


def _tool_call(d: dict[str, Any]) -> ToolCall | None:
    cid, name, args = d.get("id"), d.get("name"), d.get("arguments")
    if len(d) != 4 or type(cid) is not str or not cid or type(name) is not str or not name or type(args) is not dict:
        return None
    return _new(ToolCall, {"id": cid, "name": name, "arguments": args, "kind": "tool_call"})  # type: ignore[no-any-return]


def _tool_result(d: dict[str, Any]) -> ToolResult | None:
    cid, content, err = d.get("call_id"), d.get("content"), d.get("is_error")
    name = d.get("name")
    if len(d) != (5 if "name" in d else 4) or type(cid) is not str or not cid or type(content) is not list \
            or type(err) is not bool or ("name" in d and type(name) is not str):
        return None
    blocks: list[Text | Image] = []
    for b in content:
        if type(b) is not dict:
            return None
        t = b.get("type")
        x = _text(b) if t == "text" else _image(b) if t == "image" else None
        if x is None:
            return None
        blocks.append(x)
    return ToolResult(cid, tuple(blocks), err, name)


def _thinking(d: dict[str, Any]) -> Thinking | None:
    provider, data, text = d.get("provider"), d.get("data"), d.get("text")
    if len(d) != 4 or type(provider) is not str or type(data) is not dict or type(text) is not str:
        return None
    return _new(Thinking, {"provider": provider, "data": data, "text": text, "kind": "thinking"})  # type: ignore[no-any-return]


_BLOCKS = {"text": _text, "image": _image, "tool_call": _tool_call, "tool_result": _tool_result, "thinking": _thinking}
#: the block types each role may hold (as Message checks)
_ALLOWED = {"user": frozenset(("text", "image")), "assistant": frozenset(("text", "image", "tool_call", "thinking")),
            "tool": frozenset(("tool_result",))}


def _trusted(d: Any) -> Message | None:
    """The message of a stored dict in exactly ``Message.to_dict``'s shape, built without its checks; else None."""
    if type(d) is not dict or len(d) != 2:
        return None
    role, content = d.get("role"), d.get("content")
    allowed = _ALLOWED.get(role) if type(role) is str else None
    if allowed is None or type(content) is not list:
        return None
    blocks = []
    for b in content:
        if type(b) is not dict:
            return None
        t = b.get("type")
        if t not in allowed:
            return None
        x = _BLOCKS[t](b)
        if x is None:
            return None
        blocks.append(x)
    return _new(Message, {"role": role, "content": tuple(blocks)})  # type: ignore[no-any-return]


def stored_blocks(d: Any) -> tuple[Any, ...]:
    """The blocks of a message dict whose shape a replay proved (:func:`tool_message`): a lazily replayed message's
    ``content``, built as the eager replay builds it."""
    msg = _trusted(d)
    return (msg if msg is not None else Message.from_dict(d)).content


def message_from_stored(data: Any, data_json: str | None = None, hash_: str | None = None,
                        parent: str | None = None) -> Message:
    """The message of a stored ``message`` event's ``data`` (as ``Message.from_dict(data["message"])`` builds
    it). Given the row's text, chain hash and parent, and when the hash proves the text canonical, the
    message's digest is taken from the text (see the module docstring)."""
    d = data.get("message") if isinstance(data, dict) else None
    msg = _trusted(d)
    if msg is None:
        return Message.from_dict(d)
    if data_json is not None and hash_ is not None and hash_.startswith(_TAG):
        sub = _message_json(data, data_json, msg.role)
        if sub is not None:
            h = _sha256((parent or "").encode("ascii"))
            h.update(b'\x00{"data":')
            h.update(data_json.encode("utf-8"))
            h.update(b',"kind":"message"}')
            if hash_[_TAG_LEN:] == h.hexdigest():
                msg.__dict__["digest"] = _blake2b(sub.encode("utf-8"), digest_size=16).hexdigest()
    return msg


_TAG = HASH_SCHEME + ":"
_TAG_LEN = len(_TAG)
_sha256, _blake2b = hashlib.sha256, hashlib.blake2b


def _message_json(data: dict[str, Any], data_json: str, role: str) -> str | None:
    """The slice of ``data_json`` (canonical JSON of ``data``) that is the canonical JSON of ``data["message"]``."""
    if not data_json.endswith("}"):
        return None
    if len(data) == 1:
        prefix = '{"message":'
    elif len(data) == 2 and "ingest" in data:
        if role == "tool":
            # A tool message of the trusted shape holds no "message" key, and a key's opening quote cannot be
            # inside a string (there it is escaped): the last `,"message":` is the top-level key's.
            k = data_json.rfind(',"message":{"content":[')
            return data_json[k + 11:-1] if k > 0 and data_json.startswith('{"ingest":') else None
        prefix = '{"ingest":' + canonical_json(data["ingest"]) + ',"message":'
    else:
        return None
    return data_json[len(prefix):-1] if data_json.startswith(prefix) else None


def replay(store: Store, session_id: str, state: SessionState, since_seq: int = 0,
           found: set[int] | None = None) -> int:
    """Fold the session's events from ``since_seq`` into ``state`` (a trusted replay, see the module
    docstring); returns how many. ``found`` gets the chunks whose stored digest rows were valid."""
    rows = store.event_rows(session_id, since_seq)
    if not rows:
        return 0
    with paused_gc(freeze=len(rows) >= FREEZE_EVENTS):
        known = persisted_digests(store, session_id, len(state.messages), rows, found)
        lazy = _lazy_rows(rows, known, len(state.messages)) if known else None
        texts = [r[2] for r, z in zip(rows, lazy, strict=True) if z is None] if lazy is not None else \
            [r[2] for r in rows]
        try:
            datas = json.loads("[" + ",".join(texts) + "]")
        except ValueError:  # name the bad row as the store's own reading would
            datas = [json.loads(t) for t in texts]
        decoded = iter(datas)
        messages = state.messages
        for i, (seq, kind, data_json, hash_, parent) in enumerate(rows):
            z = lazy[i] if lazy is not None else None
            if z is not None:
                if parent == state.head:
                    state.apply_message(z, seq, hash_, parent)
                    continue
                data = json.loads(data_json)
            else:
                data = next(decoded)
            if kind == "message" and parent == state.head:
                digest = known.get(len(messages)) if known else None
                if digest is None:
                    msg = message_from_stored(data, data_json, hash_, parent)
                else:
                    msg = message_from_stored(data)
                    msg.__dict__["digest"] = digest
                state.apply_message(msg, seq, hash_, parent)
            else:
                state.apply(Event(seq, kind, data, hash_, parent))
    return len(rows)


#: the canonical JSON of a ``message`` event's data holding only a user or assistant message of text blocks: the
#: message's JSON (group 1) and role (group 2). (A quote inside a JSON string is escaped, so the pattern cannot
#: match across a string's end; each string is matched by the unrolled, backtracking-free ``[^"\\]*(\\.[^"\\]*)*``.)
_TEXT_BLOCK = r'\{"text":"[^"\\]*(?:\\.[^"\\]*)*","type":"text"\}'
_PLAIN_MESSAGE = re.compile(r'\{"message":(\{"content":\[' + _TEXT_BLOCK + '(?:,' + _TEXT_BLOCK
                            + r')*\],"role":"(user|assistant)"\})\}')


def plain_message(data_json: str) -> tuple[Role, str] | None:
    """(role, the message's canonical JSON) if ``data_json`` (a ``message`` event's canonical JSON) holds only a
    user or assistant message of text blocks; else None."""
    m = _PLAIN_MESSAGE.fullmatch(data_json)
    return None if m is None else ("user" if m[2] == "user" else "assistant", m[1])


# The tool messages a replay leaves unbuilt, in canonical JSON (sorted keys): an assistant message of text blocks
# then tool calls whose arguments are flat (string, number, true, false or null values: no object or list inside),
# and a tool message (with or without its ingest record, a flat object or a list of them) of tool results holding
# text blocks only. Ids and names are non-empty (as a replay requires). Strings are matched as above; every
# repetition starts with a different literal, so no pattern backtracks.
_STR = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_ID = r'"(?:[^"\\]|\\.)[^"\\]*(?:\\.[^"\\]*)*"'  # a non-empty string
_SCALAR = _STR + r'|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null'
_FLAT = r'\{(?:' + _STR + ':(?:' + _SCALAR + ')(?:,' + _STR + ':(?:' + _SCALAR + r'))*)?\}'
_CALL = r'\{"arguments":' + _FLAT + ',"id":' + _ID + ',"name":' + _ID + r',"type":"tool_call"\}'
_RESULT = (r'\{"call_id":' + _ID + r',"content":\[(?:' + _TEXT_BLOCK + '(?:,' + _TEXT_BLOCK + r')*)?\],"is_error":'
           r'(?:true|false),(?:"name":' + _STR + r',)?"type":"tool_result"\}')
_CALL_MESSAGE = re.compile(r'\{"message":(\{"content":\[(?:' + _TEXT_BLOCK + ',)*' + _CALL + '(?:,' + _CALL
                           + r')*\],"role":"assistant"\})\}')
_TOOL_MESSAGE = re.compile(r'\{(?:"ingest":(?:' + _FLAT + r'|\[(?:' + _FLAT + '(?:,' + _FLAT + r')*)?\]),)?"message":'
                           r'(\{"content":\[' + _RESULT + '(?:,' + _RESULT + r')*\],"role":"tool"\})\}')
# Within a message matched above: each call's id and name (an object's close followed by the key "id" is only ever
# a call's arguments closing: no string holds `},"` unescaped, and the arguments hold no object), and each result's
# call id, error flag, the text blocks it holds and whether it has a name (`{"call_id":` opens only a result there).
_CALL_IDS = re.compile(r'\},"id":(' + _ID + '),"name":(' + _ID + r'),"type":"tool_call"\}')
_RESULT_IDS = re.compile(r'\{"call_id":(' + _ID + r'),"content":\[((?:' + _TEXT_BLOCK + '(?:,' + _TEXT_BLOCK
                         + r')*)?)\],"is_error":(true|false),("name":)?')
# the common cases, one call or one result, whose id (and name) the match gives at once; the ends of a plain
# message's row (the only shapes _PLAIN_MESSAGE matches end so; no other message does)
_ONE_CALL = re.compile(r'\{"message":(\{"content":\[(?:' + _TEXT_BLOCK + r',)*\{"arguments":' + _FLAT + ',"id":('
                       + _ID + '),"name":(' + _ID + r'),"type":"tool_call"\}\],"role":"assistant"\})\}')
_ONE_RESULT = re.compile(r'\{(?:"ingest":(?:' + _FLAT + r'|\[(?:' + _FLAT + '(?:,' + _FLAT + r')*)?\]),)?"message":'
                         r'(\{"content":\[\{"call_id":(' + _ID + r'),"content":\[(?:' + _TEXT_BLOCK + '(?:,' + _TEXT_BLOCK
                         + r')*)?\],"is_error":(?:true|false),(?:"name":' + _STR + r',)?"type":"tool_result"\}\],'
                         r'"role":"tool"\})\}')
_TEXT_END = ('"type":"text"}],"role":"user"}}', '"type":"text"}],"role":"assistant"}}')


def _string(s: str) -> str:
    """The value of a JSON string literal."""
    return s[1:-1] if "\\" not in s else json.loads(s)  # type: ignore[no-any-return]


def tool_message(data_json: str) -> tuple[Role, str, tuple[tuple[str, str], ...] | tuple[str, ...]] | None:
    """(role, the message's canonical JSON, the (id, name) of each call or the call id of each result) if
    ``data_json`` (a ``message`` event's canonical JSON) holds a tool message a replay may leave unbuilt (see
    above); else None."""
    if data_json.endswith('"type":"tool_call"}],"role":"assistant"}}'):
        m = _ONE_CALL.fullmatch(data_json)
        if m is not None:
            return "assistant", m[1], ((_string(m[2]), _string(m[3])),)
        m = _CALL_MESSAGE.fullmatch(data_json)  # several calls
        if m is not None:
            return "assistant", m[1], tuple((_string(c), _string(n)) for c, n in _CALL_IDS.findall(m[1]))
    elif data_json.endswith('"role":"tool"}}'):
        m = _ONE_RESULT.fullmatch(data_json)
        if m is not None:
            return "tool", m[1], (_string(m[2]),)
        m = _TOOL_MESSAGE.fullmatch(data_json)  # several results
        if m is not None:
            return "tool", m[1], tuple(_string(r[0]) for r in _RESULT_IDS.findall(m[1]))
    return None


def stored_shape(m: Message) -> tuple[Any, ...] | None:
    """``unit_counts.message_shape`` of a tool message replayed lazily, read from its stored JSON; None if it is
    not one (or was built since)."""
    d = m.__dict__
    stored, tools = d.get("_stored"), d.get("_tools")
    if stored is None or tools is None:
        return None
    if m.role == "assistant":
        return m.role, *(Text,) * (m.n_blocks - len(tools)), *(ToolCall,) * len(tools)
    return m.role, *(("tool_result", r[3] == "true", r[4] is None, ("text",) * r[2].count('"type":"text"}'))
                     for r in _RESULT_IDS.finditer(stored))


def _lazy_rows(rows: list[Any], known: Mapping[int, str], n_before: int) -> list[Message | None]:
    """For each row: the message, replayed without parsing it (``Message.stored_text`` / ``stored_tools``: its
    blocks are built if something reads them), if it is a message of text blocks only or a tool message of the
    shapes above whose digest is known; else None. The digest comes from a row whose chain hash proves the log's
    messages (persisted_digests)."""
    out: list[Message | None] = [None] * len(rows)
    n = n_before
    plain = _PLAIN_MESSAGE.fullmatch
    text, tools = Message.stored_text, Message.stored_tools
    for i, r in enumerate(rows):
        if r[1] == "message":
            d = known.get(n)
            n += 1
            if d is not None:
                data = r[2]
                if data.endswith(_TEXT_END):  # (one pattern per shape, chosen by the row's end: cheaper than one)
                    m = plain(data)
                    if m is not None:
                        out[i] = text("user" if m[2] == "user" else "assistant", m[1], d)
                    continue
                t = tool_message(data)
                if t is not None:
                    out[i] = tools(t[0], t[1], d, t[2], stored_blocks)
    return out


# -- message digests kept per chunk ----------------------------------------------------------------------------
#
# Each full chunk of COUNTS_CHUNK logged messages gets one key-value row ``digests|<chunk>`` in the scope
# ``counts:<session id>`` (see unit_counts.py): ``{"v": 2, "hash": <chain hash of the chunk's last message>,
# "digests": <base64 of the content digest of each message, 16 bytes each>, "check": <sha256 of the rest>}``
# (version 1 held a list of hex strings: twice the JSON, and a string to parse per message; its rows are
# ignored, and written again in this form by the next build), written by a build from the
# messages' own digests. The chain hash of the chunk's last message commits to every message of the chunk, as
# it does for the persisted token counts (which are taken by position on the same proof): a replay takes a
# message's digest from the row instead of hashing its row twice. A row whose hash is not the log's at that
# message, of another version, or that does not check, is ignored.

DIGESTS_VERSION = 2
#: bytes of a message's content digest (``Message.digest``, hex)
DIGEST_BYTES = 16


def digests_key(chunk: int) -> str:
    return f"digests|{chunk}"


def row_check(row: Mapping[str, Any]) -> str:
    """The checksum a persisted kv row (digests, counts, stored body) carries in ``check``: of the row without
    it, so a row edited by hand, or cut short, is ignored."""
    return sha256_hex(canonical_json({k: v for k, v in row.items() if k != "check"}))[:24]


def valid_digests(row: Any, chunk_hash: str) -> list[str] | None:
    """The digests of a stored row, if it is one for the chunk ending at ``chunk_hash``."""
    from .state import COUNTS_CHUNK

    if not isinstance(row, dict) or row.get("v") != DIGESTS_VERSION or row.get("hash") != chunk_hash:
        return None
    if row.get("check") != row_check(row):
        return None
    return unpack_digests(row.get("digests"), COUNTS_CHUNK, DIGEST_BYTES)


def pack_digests(hexes: Iterable[str]) -> str:
    """Hex digests as one base64 string of their bytes: a kv row (message digests, part digests, stored bodies)
    holds a third less JSON than a list of hex strings, and reading it parses one string, not one per digest."""
    return base64.b64encode(bytes.fromhex("".join(hexes))).decode("ascii")


def unpack_digests(text: Any, n: int, size: int) -> list[str] | None:
    """The ``n`` hex digests of ``size`` bytes each that :func:`pack_digests` packed into ``text``, or None if
    ``text`` is not that."""
    if type(text) is not str:
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != n * size:
        return None
    hexed, w = raw.hex(), 2 * size
    return [hexed[i:i + w] for i in range(0, n * w, w)]


def persisted_digests(store: Store, session_id: str, n_before: int, rows: list[Any],
                      found: set[int] | None = None) -> dict[int, str]:
    """Message index → digest, from the rows of the full chunks that ``rows`` (after ``n_before`` messages)
    complete. ``found`` gets the chunks whose rows were valid."""
    from .state import COUNTS_CHUNK

    if len(rows) < COUNTS_CHUNK:
        return {}
    out: dict[int, str] = {}
    n = n_before
    for r in rows:
        if r[1] == "message":
            n += 1
            k = n // COUNTS_CHUNK - 1
            if n % COUNTS_CHUNK == 0 and k * COUNTS_CHUNK >= n_before:
                try:
                    row = store.get_kv(f"counts:{session_id}", digests_key(k))
                except ValueError:  # not JSON: as if there were none
                    continue
                digests = valid_digests(row, r[3])
                if digests is not None:
                    out.update(zip(range(k * COUNTS_CHUNK, n), digests, strict=True))
                    if found is not None:
                        found.add(k)
    return out


__all__ = ["DIGESTS_VERSION", "DIGEST_BYTES", "FREEZE_EVENTS", "digests_key", "message_from_stored", "pack_digests",
           "paused_gc", "persisted_digests", "plain_message", "replay", "row_check", "stored_blocks", "stored_shape",
           "tool_message", "unpack_digests", "valid_digests"]
