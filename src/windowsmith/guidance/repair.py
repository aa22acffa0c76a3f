"""JSON repair of tool-call arguments, validated against the tool's schema.

Models sometimes emit arguments that are not JSON (a missing brace, single quotes, a trailing comma) or
JSON that does not match the tool's schema (``"5"`` for an integer). The response parsers keep invalid
JSON under ``{"_raw": text}`` (:func:`windowsmith.model.parse_arguments`); :func:`repair_arguments` turns
it into an object with the ``json-repair`` library, guided by the tool's JSON Schema where it can be (type
coercion), and then validates the result with ``jsonschema``. ``Session.add`` applies it to every tool
call of an assistant message and logs a ``repair`` meta event for each call it changed or could not
validate, so no repair is silent: the manifest lists them with the other repairs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from json_repair import repair_json

from ..errors import InvalidMessageError
from ..model import ToolSpec

#: The key under which the response parsers keep arguments that were not valid JSON.
RAW_KEY = "_raw"


@dataclass(frozen=True)
class ArgumentRepair:
    """What :func:`repair_arguments` did to one call's arguments."""

    arguments: dict[str, Any]
    changed: bool  # the arguments differ from what the model sent
    changes: tuple[str, ...] = ()  # what json-repair did (its log), e.g. "Coerced string to integer at $.n"
    errors: tuple[str, ...] = ()  # schema violations left after repair (empty: valid)
    raw: str | None = None  # the text the model sent, when it was not a JSON object

    @property
    def valid(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"changed": self.changed, "changes": list(self.changes), "valid": self.valid,
                             "errors": list(self.errors)}
        if self.raw is not None:
            d["raw"] = self.raw
        return d


def _log_lines(log: Any) -> tuple[str, ...]:
    out = []
    for entry in log or ():
        if isinstance(entry, Mapping):
            text = str(entry.get("text", "")).strip()
            ctx = str(entry.get("context", "")).strip()
            out.append(f"{text} at {ctx}" if ctx else text)
        else:
            out.append(str(entry))
    # json-repair may log the same fix once per pass: keep each line once, in order
    return tuple(dict.fromkeys(x for x in out if x))


def schema_errors(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> tuple[str, ...]:
    """Every violation of ``schema`` by ``arguments``, as ``path: message`` (at most 10)."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    return tuple(f"{'/'.join(str(p) for p in e.absolute_path) or '$'}: {e.message}" for e in errors[:10])


def _repair(text: str, schema: Mapping[str, Any] | None) -> tuple[Any, tuple[str, ...]]:
    if schema is not None:
        try:
            value, log = repair_json(text, return_objects=True, logging=True, schema=dict(schema))
            return value, _log_lines(log)
        except (ValueError, TypeError):
            pass  # the schema cannot be satisfied (a required property is missing): repair the syntax only
    value, log = repair_json(text, return_objects=True, logging=True)
    return value, _log_lines(log)


def repair_arguments(arguments: str | Mapping[str, Any], spec: ToolSpec | None = None) -> ArgumentRepair:
    """Repair one tool call's arguments (a JSON string, or a parsed object possibly holding ``_raw``).

    Invalid JSON is repaired; an object that violates the tool's schema is coerced where the schema says
    how (json-repair's schema mode); what still violates it is reported in ``errors``, never hidden.
    Without ``spec`` only the syntax is repaired. Returns the arguments unchanged when they were fine.
    """
    raw: str | None = None
    if isinstance(arguments, str):
        raw = arguments
    elif isinstance(arguments, Mapping):
        if set(arguments) == {RAW_KEY} and isinstance(arguments[RAW_KEY], str):
            raw = arguments[RAW_KEY]
    else:
        raise InvalidMessageError(f"tool-call arguments must be a JSON string or an object (a mapping), got "
                                  f"{type(arguments).__name__}; pass them as the model sent them")
    schema = spec.parameters if spec is not None else None
    if raw is not None:
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and (schema is None or not schema_errors(parsed, schema)):
            return ArgumentRepair(parsed, changed=False)
        value, changes = _repair(raw, schema)
        if parsed is None:
            changes = ("invalid JSON repaired", *changes)
        elif not isinstance(parsed, dict):
            changes = (f"a JSON {type(parsed).__name__}, not an object", *changes)
        if not isinstance(value, dict):
            value, changes = {}, (*changes, f"not a JSON object ({type(value).__name__}): arguments left empty")
        errors = schema_errors(value, schema) if schema is not None else ()
        return ArgumentRepair(value, changed=True, changes=changes, errors=errors,
                              raw=raw)
    assert isinstance(arguments, Mapping)
    args = dict(arguments)
    if schema is None:
        return ArgumentRepair(args, changed=False)
    errors = schema_errors(args, schema)
    if not errors:
        return ArgumentRepair(args, changed=False)
    value, changes = _repair(json.dumps(args, ensure_ascii=False), schema)
    if isinstance(value, dict) and value != args:
        return ArgumentRepair(value, changed=True, changes=changes, errors=schema_errors(value, schema))
    return ArgumentRepair(args, changed=False, errors=errors)


__all__ = ["RAW_KEY", "ArgumentRepair", "repair_arguments", "schema_errors"]


def repair_message(message: Any, tools: Any, redact: Any = None) -> tuple[Any, list[dict[str, Any]]]:
    """``message`` with each tool call's arguments repaired against its tool's schema (``tools``: the
    session's ``ToolSpec`` s), and one ``repair`` meta event per call that was changed or is still invalid.
    ``redact`` (text → text) cleans the raw text kept in the event (the repaired arguments are in the
    message itself, redacted with it)."""
    from dataclasses import replace

    from ..model import Message, ToolCall

    assert isinstance(message, Message)
    specs = {t.name: t for t in tools}
    blocks = list(message.content)
    events: list[dict[str, Any]] = []
    for i, b in enumerate(blocks):
        if not isinstance(b, ToolCall):
            continue
        spec = specs.get(b.name)
        fix = repair_arguments(b.arguments, spec)
        if not fix.changed and fix.valid:
            continue
        if fix.changed:
            blocks[i] = replace(b, arguments=fix.arguments)
        what = (f"tool call {b.id!r} ({b.name}): arguments repaired ({'; '.join(fix.changes) or 'rewritten'})"
                if fix.changed else f"tool call {b.id!r} ({b.name}): arguments do not match the tool's schema")
        if fix.errors:
            what += f"; still invalid: {'; '.join(fix.errors)}"
        data = {"type": "repair", "what": what, "call_id": b.id, "tool": b.name, **fix.to_dict()}
        if redact is not None:
            data["what"] = redact(data["what"])
            if "raw" in data:
                data["raw"] = redact(data["raw"])
        events.append(data)
    return (Message(message.role, tuple(blocks)) if events else message), events


__all__ += ["repair_message"]
