"""Bytes from a tool: text in some encoding, or binary; and redaction of binary bytes.

``decode_text(raw)`` returns the text of ``raw`` when it is text, else None:

* UTF-8 (a BOM is dropped); a few broken sequences in otherwise valid UTF-8 (a cut multi-byte
  character, one stray byte) are replaced with U+FFFD, so the rest of the output stays readable;
* UTF-16 with a BOM, or without one when the NUL bytes sit at every other position of ASCII text;
* a legacy encoding: bytes that are not UTF-8 and hold no valid multi-byte UTF-8 sequence go to
  charset-normalizer (when installed), whose guess is taken for the scripts a Western code page would turn to
  mojibake (Shift-JIS/CP932, EUC-JP, GB18030/GBK, Big5, EUC-KR, KOI8-R/U, Windows-1251, CP866, Greek,
  Hebrew, Arabic, Thai); anything else (Latin-1 / Windows-1252 logs, source files, terminal output: its
  guesses among the Latin code pages are unreliable on short text) is decoded as Windows-1252, with Latin-1
  for the five bytes Windows-1252 leaves undefined.

Binary means: a known binary signature (PNG, JPEG, GIF, PDF, ZIP, gzip, ELF), a NUL byte that is not
UTF-16 text, or more than 2% control bytes (other than tab, newline, carriage return, form feed,
backspace and escape) in the first 64 KB.

``redact_binary(raw)`` runs redaction over binary bytes too (``/proc/1/environ``, ``env -0``, a core
dump, a SQLite file): the bytes are decoded as UTF-8 with ``surrogateescape``, which maps every byte
that is not UTF-8 to a lone surrogate and back, so the result is the original bytes with each secret
replaced by its ASCII marker and nothing else changed; UTF-16 text inside binary data is checked the
same way. When nothing is redacted the original bytes are returned unchanged.
"""

from __future__ import annotations

import codecs
import re

from .redact import redact

__all__ = ["binary_kind", "decode_text", "redact_binary"]

_SNIFF = 65_536
_CONTROL = bytes([*range(0, 8), 11, *range(14, 27), *range(28, 32), 127])  # not \t \n \r \f \b \x1b
_CONTROL_LIMIT = 0.02
_ESCAPED = re.compile("[\udc80-\udcff]")
_MAGIC = (
    (b"\x89PNG", "PNG image"), (b"\xff\xd8\xff", "JPEG image"), (b"GIF8", "GIF image"), (b"%PDF", "PDF document"),
    (b"PK\x03\x04", "ZIP archive"), (b"\x1f\x8b", "gzip data"), (b"\x7fELF", "ELF binary"),
)


def binary_kind(raw: bytes) -> str:
    """A human name for binary ``raw`` from its signature (``PNG image``), else ``binary data``."""
    for sig, name in _MAGIC:
        if raw.startswith(sig):
            return name
    return "binary data"


def _utf16_order(head: bytes) -> str | None:
    """``utf-16-le``/``utf-16-be`` when ``head`` looks like mostly-ASCII UTF-16 text, else None."""
    if len(head) < 4:
        return None
    even, odd = head[0::2], head[1::2]
    n = min(len(even), len(odd))
    for zeros, other, name in ((odd, even, "utf-16-le"), (even, odd, "utf-16-be")):
        if zeros[:n].count(0) >= 0.9 * n and other[:n].count(0) <= 0.05 * n:
            return name
    return None


def _controls(b: bytes) -> int:
    return len(b) - len(b.translate(None, _CONTROL))


def _text_like(text: str) -> bool:
    head = text[:_SNIFF]
    bad = sum(head.count(chr(c)) for c in _CONTROL)
    return bad <= _CONTROL_LIMIT * max(1, len(head))


def _latin1_fallback(e: UnicodeError) -> tuple[str, int]:
    assert isinstance(e, UnicodeDecodeError)
    return e.object[e.start : e.end].decode("latin-1"), e.end


codecs.register_error("windowsmith.latin1", _latin1_fallback)


#: charset-normalizer's guesses that are taken: encodings whose text a Western code page turns to mojibake
_DETECTED = frozenset({
    "cp932", "shift_jis", "shift_jis_2004", "shift_jisx0213", "euc_jp", "euc_jis_2004", "iso2022_jp", "gb18030", "gbk",
    "gb2312", "hz", "big5", "big5hkscs", "cp950", "cp949", "euc_kr", "johab", "koi8_r", "koi8_u", "cp1251", "cp866",
    "iso8859_5", "mac_cyrillic", "cp1253", "iso8859_7", "cp1255", "iso8859_8", "cp1256", "iso8859_6", "tis_620",
    "cp874",
})
_MIN_DETECT = 8  # non-ASCII bytes below which a guess is not worth taking


def _detected(raw: bytes) -> str | None:
    """The encoding charset-normalizer finds for ``raw`` when it is one of :data:`_DETECTED`, else None."""
    head = raw[:_SNIFF]
    if len(head) - len(head.translate(None, bytes(range(128, 256)))) < _MIN_DETECT:
        return None
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # not installed: the Windows-1252 reading
        return None
    for match in from_bytes(head):  # best first; a Latin code page ranked first means Windows-1252
        if match.encoding.startswith("utf_") or (match.encoding in _DETECTED and _halfwidth_kana(str(match))):
            continue
        if match.encoding in _DETECTED and match.chaos <= 0.2:
            return str(match.encoding)
        return None
    return None


def _halfwidth_kana(text: str) -> bool:
    """Whether most non-ASCII characters of ``text`` are half-width katakana: what Cyrillic KOI8-R bytes read as
    Shift-JIS look like (real Japanese text uses full-width kana)."""
    wide = [c for c in text if c >= "\x80"]
    return sum(1 for c in wide if "\uff61" <= c <= "\uff9f") > 0.3 * max(1, len(wide))


def _legacy(raw: bytes) -> str:
    encoding = _detected(raw)
    if encoding is not None:
        return raw.decode(encoding, "replace")
    return raw.decode("cp1252", "windowsmith.latin1")


def decode_text(raw: bytes) -> str | None:
    """The text of ``raw`` if it is text in a known or legacy encoding, else None (binary)."""
    if not raw:
        return ""
    if raw.startswith(codecs.BOM_UTF8):
        return raw[3:].decode("utf-8", "replace")
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = raw.decode("utf-16", "replace")
        return text if _text_like(text) else None
    if any(raw.startswith(sig) for sig, _ in _MAGIC):
        return None
    head = raw[:_SNIFF]
    if b"\x00" in head:
        order = _utf16_order(head)
        if order is None:
            return None
        text = raw[: len(raw) - len(raw) % 2].decode(order, "replace")
        return text if _text_like(text) else None
    if _controls(head) > _CONTROL_LIMIT * len(head):
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    escaped = raw.decode("utf-8", "surrogateescape")
    multibyte = any(c >= "\x80" and not "\udc80" <= c <= "\udcff" for c in set(escaped))
    if multibyte and len(escaped) - len(_ESCAPED.sub("", escaped)) <= max(4, len(raw) // 100):
        return raw.decode("utf-8", "replace")  # UTF-8 with a few broken bytes
    return _legacy(raw)


def redact_binary(raw: bytes) -> tuple[bytes, dict[str, int]]:
    """``raw`` with every secret replaced by its marker, and the counts; ``raw`` itself when none."""
    text = raw.decode("utf-8", "surrogateescape")
    r = redact(text)
    out = r.text.encode("utf-8", "surrogateescape") if r.total else raw
    counts = dict(r.counts)
    # UTF-16 strings inside binary data (Windows registry hives, PE resources, UTF-16 dumps)
    for order in ("utf-16-le", "utf-16-be"):
        for shift in (0, 1):
            body = out[shift:]
            body = body[: len(body) - len(body) % 2]
            wide = body.decode(order, "surrogatepass")
            if not _has_wide_ascii(wide):
                continue
            w = redact(wide)
            if w.total:
                out = out[:shift] + w.text.encode(order, "surrogatepass") + out[shift + len(body):]
                for k, v in w.counts.items():
                    counts[k] = counts.get(k, 0) + v
    return out, dict(sorted(counts.items()))


_WIDE_ASCII = re.compile(r"[\x20-\x7e]{8}")


def _has_wide_ascii(text: str) -> bool:
    return _WIDE_ASCII.search(text) is not None
