"""Inspect AI ``.eval`` logs: a zip whose members are zstd-compressed JSON (``header.json``, ``samples/*.json``).

Python's ``zipfile`` lists such a zip but cannot inflate zstd members (method 93), so each member is read from
its local header and decompressed with ``zstandard`` (the ``inspect`` extra). The assembled value is the JSON log
format's (``header.json``'s fields and ``samples``), for :mod:`windowsmith.traces.inspect_ai`.
"""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError

ZSTD = 93  # the zip compression method id of zstd (APPNOTE 4.4.5)
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # signature .. extra field length (30 bytes)
_MAX_MEMBER = 1 << 31  # a member larger than this (2 GiB) is refused rather than decompressed


def _member(f: Any, info: zipfile.ZipInfo, path: Path) -> bytes:
    f.seek(info.header_offset)
    head = f.read(_LOCAL_HEADER.size)
    fields = _LOCAL_HEADER.unpack(head)
    if fields[0] != 0x04034B50:
        raise TraceFormatError(f"{path}: zip member {info.filename!r} has no local header; the file is damaged")
    if info.file_size > _MAX_MEMBER:
        raise TraceFormatError(f"{path}: zip member {info.filename!r} is {info.file_size:,} bytes; larger than 2 GiB")
    f.seek(info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10])
    data = f.read(info.compress_size)
    if info.compress_type == zipfile.ZIP_STORED:
        return data
    if info.compress_type == zipfile.ZIP_DEFLATED:
        try:
            return zlib.decompressobj(-15).decompress(data)
        except zlib.error as e:
            raise TraceFormatError(f"{path}: zip member {info.filename!r} cannot be decompressed: {e}") from None
    if info.compress_type == ZSTD:
        try:
            import zstandard
        except ImportError:
            raise TraceFormatError(
                f"{path}: an Inspect AI .eval log is zstd-compressed; install the extra that reads it: "
                "pip install 'windowsmith[inspect]' (or convert the log: inspect log convert FILE --to json "
                "--output-dir DIR)") from None
        try:
            return bytes(zstandard.ZstdDecompressor().decompress(data, max_output_size=info.file_size))
        except zstandard.ZstdError as e:
            raise TraceFormatError(f"{path}: zip member {info.filename!r} cannot be decompressed: {e}") from None
    raise TraceFormatError(f"{path}: zip member {info.filename!r} uses compression method {info.compress_type}, "
                           "which is not read here (stored, deflate and zstd are)")


def read_eval_log(path: Path) -> dict[str, Any]:
    """The log an Inspect AI ``.eval`` file holds, in the JSON log format's shape."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise TraceFormatError(f"{path}: not a readable .eval log (an Inspect AI zip): {e}") from None
    with zf, path.open("rb") as f:
        names = {i.filename: i for i in zf.infolist()}
        if "header.json" not in names:
            raise TraceFormatError(f"{path}: an .eval log without header.json (is the eval still running? Inspect "
                                   "writes it when the eval ends)")

        def load(name: str) -> Any:
            try:
                return json.loads(_member(f, names[name], path).decode("utf-8", "replace"))
            except json.JSONDecodeError as e:
                raise TraceFormatError(f"{path}: zip member {name!r} is not valid JSON: {e}") from None

        log = load("header.json")
        if not isinstance(log, dict):
            raise TraceFormatError(f"{path}: header.json is not a JSON object")
        sample_names = sorted(n for n in names if n.startswith("samples/") and n.endswith(".json"))
        log["samples"] = [load(n) for n in sample_names]
        return log
