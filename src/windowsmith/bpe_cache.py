"""The parsed BPE ranks of a shipped tokenizer file, kept across processes in the user's cache folder.

Parsing a ``.tiktoken`` file (200,000 base64 lines) takes a fresh process about 0.2 s of CPU, most of a small
session's resume. The first process to parse it writes the ranks in a flat binary form (one length byte per token,
then the tokens' bytes) to ``<user cache>/windowsmith/tokenizers/<name>-<sha256 of the file>.bpe``; later
processes read that instead. Nothing is trusted unchecked: the shipped file is hashed and checked against the
sha256 the encoding expects on every load (a cache entry is keyed by that hash), and the cache file carries the
sha256 of its own contents, checked before it is read. A cache folder that cannot be written is skipped.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
import tempfile
from pathlib import Path

from tiktoken.load import load_tiktoken_bpe

MAGIC = b"windowsmith-bpe 1\n"


def cache_dir() -> Path:
    """The user's cache folder for windowsmith's tokenizers (``$XDG_CACHE_HOME``, ``~/Library/Caches`` on macOS,
    ``%LOCALAPPDATA%`` on Windows, else ``~/.cache``)."""
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        base = Path(os.environ["LOCALAPPDATA"])
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "windowsmith" / "tokenizers"


def load_ranks(path: str, name: str, expected_hash: str, folder: Path | None = None) -> dict[bytes, int]:
    """The BPE ranks of the file at ``path`` (as ``tiktoken.load.load_tiktoken_bpe`` returns them), from the cache
    in ``folder`` (default :func:`cache_dir`) when it holds them for this file. Raises ValueError (as tiktoken does)
    when the file's sha256 is not ``expected_hash``."""
    data = Path(path).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected_hash:
        raise ValueError(f"hash mismatch for {name}: expected {expected_hash}, got {digest}")
    try:
        entry: Path | None = (folder or cache_dir()) / f"{name}-{digest}.bpe"
    except (RuntimeError, KeyError, OSError):  # no home folder to find the cache in: parse the file
        entry = None
    ranks = _read(entry) if entry is not None else None
    if ranks is None:
        ranks = load_tiktoken_bpe(path, expected_hash=expected_hash)
        if entry is not None:
            _write(entry, ranks)
    return ranks


def _read(entry: Path) -> dict[bytes, int] | None:
    try:
        raw = entry.read_bytes()
    except OSError:
        return None
    head = len(MAGIC) + 32 + 4
    if len(raw) < head or not raw.startswith(MAGIC):
        return None
    if hashlib.sha256(memoryview(raw)[len(MAGIC) + 32:]).digest() != raw[len(MAGIC):len(MAGIC) + 32]:
        return None  # torn or changed: parse the file again (and rewrite the entry)
    n = int.from_bytes(raw[len(MAGIC) + 32:head], "little")
    lengths = raw[head:head + n]
    blob = raw[head + n:]
    ends = list(itertools.accumulate(lengths))
    if len(lengths) != n or (ends[-1] if ends else 0) != len(blob):
        return None
    ranks = dict(zip([blob[e - k:e] for e, k in zip(ends, lengths, strict=True)], range(n), strict=True))
    return ranks if len(ranks) == n else None


def _write(entry: Path, ranks: dict[bytes, int]) -> None:
    """Write the cache entry (atomically), when the ranks are 0..n-1 in order and no token is over 255 bytes (true
    of every encoding windowsmith ships); a folder that cannot be written is skipped."""
    tokens = list(ranks)
    if any(r != i for i, r in enumerate(ranks.values())) or any(len(t) > 255 for t in tokens):
        return
    body = bytes(len(t) for t in tokens) + b"".join(tokens)
    n = len(tokens).to_bytes(4, "little")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=entry.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(n + body).digest() + n + body)
            os.replace(tmp, entry)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return


__all__ = ["MAGIC", "cache_dir", "load_ranks"]
