"""How the stores keep large values: zlib where it pays, plain where it does not.

SQLite: an event's JSON, a pack's manifest (or delta) and an artifact's bytes are stored compressed when
they are at least :data:`MIN_BYTES` long (an event's: :data:`EVENT_MIN_BYTES`) and zlib saves at least an eighth
of them; else as they are. A
compressed JSON value is a BLOB in its TEXT column (SQLite keeps the storage class of each value, so a
reader tells them apart and older rows, all TEXT, read unchanged); a compressed artifact is shorter than
the ``size`` its row records, which no plain one is. PostgreSQL compresses artifacts the same way; its
event and manifest text stays plain (TOAST compresses rows over about 2 KB by itself).
"""

from __future__ import annotations

import sqlite3
import zlib

#: Values shorter than this are stored as they are (zlib's header and a row's overhead eat the gain).
MIN_BYTES = 128
#: An event's JSON shorter than this is stored as it is: a resume reads every row of the log, and inflating a
#: short row (about 3 µs a call, whatever its length) costs more than the few dozen bytes zlib saves on it
#: (``benchmarks/bench_scale.py --only resume``; ``--only store`` for the bytes).
EVENT_MIN_BYTES = 256
_LEVEL = 6


def _pays(raw: bytes) -> bytes | None:
    if len(raw) < MIN_BYTES:
        return None
    z = zlib.compress(raw, _LEVEL)
    return z if len(z) <= len(raw) - len(raw) // 8 else None


def pack_text(text: str, min_bytes: int = MIN_BYTES) -> str | bytes:
    """What to store for a JSON text: the text, or its UTF-8 bytes compressed (a BLOB) when it is at least
    ``min_bytes`` long and that pays."""
    if len(text) < max(min_bytes, MIN_BYTES):
        return text
    z = _pays(text.encode("utf-8"))
    return text if z is None else z


def unpack_text(value: str | bytes | memoryview) -> str:
    """The JSON text of a stored value (plain TEXT, or a compressed BLOB)."""
    if isinstance(value, str):
        return value
    try:
        return zlib.decompress(value).decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as e:
        from ..errors import StoreError

        raise StoreError(f"a stored value does not decompress ({e}); the row was changed outside windowsmith") from e


def pack_blob(raw: bytes) -> bytes:
    """What to store for an artifact of ``len(raw)`` bytes: compressed when it pays, else ``raw``."""
    z = _pays(raw)
    return raw if z is None else z


def unpack_blob(value: bytes | memoryview, size: int) -> bytes:
    """The artifact's bytes from its stored value and the size its row records."""
    data = bytes(value)
    if len(data) == size:
        return data
    try:
        return zlib.decompress(data)
    except zlib.error:
        return data  # changed outside windowsmith: the hash check that follows reports it


_EVENTS_TABLE = """CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    hash TEXT NOT NULL,
    parent TEXT,
    created_at TEXT NOT NULL,
    tenant TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (session_id, seq)
)"""


def compact_sqlite(conn: sqlite3.Connection) -> None:
    """The body of the SQLite store's ``m010_compact_rows``: rebuild ``events`` without the hash index,
    compressing each event's JSON where it pays, then compress pack manifests and artifacts in place."""
    conn.execute("ALTER TABLE events RENAME TO events_m009")
    conn.execute(_EVENTS_TABLE)
    cols = "session_id, seq, kind, data, hash, parent, created_at, tenant"
    rows = conn.execute(f"SELECT {cols} FROM events_m009 ORDER BY session_id, seq")
    while batch := rows.fetchmany(500):
        conn.executemany(f"INSERT INTO events ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         [(*r[:3], pack_text(unpack_text(r[3]), EVENT_MIN_BYTES), *r[4:]) for r in batch])
    conn.execute("DROP TABLE events_m009")
    packed = []
    for o, text in conn.execute("SELECT ord, manifest FROM packs WHERE typeof(manifest) = 'text'"):
        z = pack_text(text)
        if isinstance(z, bytes):
            packed.append((z, o))
    conn.executemany("UPDATE packs SET manifest = ? WHERE ord = ?", packed)
    blobs = []
    for tenant, sha, data in conn.execute("SELECT tenant, sha, data FROM blobs WHERE length(data) = size"):
        z = pack_blob(bytes(data))
        if len(z) < len(data):
            blobs.append((z, tenant, sha))
    conn.executemany("UPDATE blobs SET data = ? WHERE tenant = ? AND sha = ?", blobs)


__all__ = ["EVENT_MIN_BYTES", "MIN_BYTES", "compact_sqlite", "pack_blob", "pack_text", "unpack_blob", "unpack_text"]
