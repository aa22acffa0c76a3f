"""Checks on the JSON values and text a session takes: nesting depth and integer size
(:func:`check_json_value`), and text repaired to valid UTF-8 (:func:`clean_text`, :func:`clean_strings`).
Used by the message model (:mod:`windowsmith.model`), the engine's tool output and the trace readers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import InvalidMessageError, UsageError

#: The deepest nesting of lists and objects accepted in tool arguments, tool output and trace files.
#: Deeper values would overflow Python's recursion limit in JSON encoding and redaction; real tool
#: output (ASTs, API responses) stays far below it.
MAX_JSON_DEPTH = 200

#: Python refuses to turn an int of more digits than this into text (``sys.get_int_max_str_digits``).
MAX_INT_BITS = 14_000  # ~4,214 decimal digits, under the 4,300-digit default


def check_json_value(value: Any, where: str, *, max_depth: int = MAX_JSON_DEPTH,
                     error: type[UsageError] = InvalidMessageError) -> None:
    """Raise ``error`` (:class:`InvalidMessageError` by default) if ``value`` nests lists/dicts deeper than
    ``max_depth`` or holds an integer too long to write as JSON text. Iterative, so it cannot overflow the
    stack itself: the check every door runs before any code that recurses over the value."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, Mapping):
            children: Any = v.values()
        elif isinstance(v, list | tuple):
            children = v
        elif isinstance(v, int) and not isinstance(v, bool):
            if v.bit_length() > MAX_INT_BITS:
                raise error(
                    f"{where} holds an integer of about {int(v.bit_length() * 0.30103):,} digits, more than "
                    "JSON text can carry here (4,300); pass it as a string"
                )
            continue
        else:
            continue
        if depth > max_depth:
            raise error(
                f"{where} is nested more than {max_depth} levels deep (lists/objects inside each other); "
                "flatten it or pass it as text (json.dumps) instead"
            )
        stack.extend((c, depth + 1) for c in children)


def check_nesting(value: Any, where: str, *, envelope: int,
                  error: type[UsageError] = InvalidMessageError) -> None:
    """:func:`check_json_value` for a whole input (a message list, tool definitions) whose own structure adds
    up to ``envelope`` levels around the JSON values inside it (tool arguments, schemas): those get
    :data:`MAX_JSON_DEPTH` each, so a value the finer checks would take is never refused here."""
    check_json_value(value, where, max_depth=MAX_JSON_DEPTH + envelope, error=error)


#: levels a provider history or a trace file wraps around a message's JSON values (list, message,
#: content list, block, tool call, function); the values themselves get :data:`MAX_JSON_DEPTH`
LOAD_ENVELOPE = 16


def clean_text(value: Any, where: str) -> tuple[str, bool]:
    """Return ``value`` as valid UTF-8 text and whether it had to be repaired.

    Bytes are decoded as UTF-8 with invalid sequences replaced (U+FFFD); strings carrying lone
    surrogates are repaired the same way: bytes smuggled by ``surrogateescape`` decoding are decoded
    as UTF-8 with replacement, any other lone surrogate becomes U+FFFD. (One rule for every text the
    session takes: messages, tool output, JSON values.)
    """
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8"), False
        except UnicodeDecodeError:
            return raw.decode("utf-8", "replace"), True
    if not isinstance(value, str):
        raise InvalidMessageError(f"{where} must be a string, got {type(value).__name__}; pass text (str) or bytes")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        if _only_escapes(value):
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), True
        return _LONE_SURROGATE.sub("\ufffd", value), True
    return value, False


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_strings(value: Any) -> Any:
    """``value`` (a JSON value) with every string and key repaired by :func:`clean_text`."""
    if isinstance(value, str):
        return clean_text(value, "text")[0]
    if isinstance(value, Mapping):
        return {clean_strings(k): clean_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_strings(v) for v in value]
    return value


def _only_escapes(value: str) -> bool:
    return all(not (0xD800 <= ord(c) <= 0xDFFF) or 0xDC80 <= ord(c) <= 0xDCFF for c in value)


__all__ = ["LOAD_ENVELOPE", "MAX_INT_BITS", "MAX_JSON_DEPTH", "check_json_value", "check_nesting", "clean_strings",
           "clean_text"]
