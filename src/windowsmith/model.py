"""Provider-neutral messages, content blocks, tool definitions, usage and log events.

All types are frozen dataclasses with a ``to_dict``/``from_dict`` pair over plain JSON. ``from_dict``
validates and raises :class:`~windowsmith.errors.InvalidMessageError` naming the field and the fix.

Roles: ``user``, ``assistant`` and ``tool`` (a message that carries only tool results). System
instructions are not messages; they belong to the system layer.

Thinking/reasoning blocks are opaque: ``Thinking.data`` holds the provider's original block or item
(Anthropic ``thinking``/``redacted_thinking`` with its signature, OpenAI ``reasoning`` item with its
``encrypted_content``, Gemini thought signature) and is passed back unchanged to the same provider.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, Union

import jsonschema

from .errors import InvalidMessageError, InvalidToolSchemaError
from .hashing import canonical_json, content_digest
from .jsonvalues import check_json_value, clean_strings, clean_text

Role = Literal["user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("user", "assistant", "tool")


# ---------------------------------------------------------------------------------------------------
# Content blocks
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    text: str
    kind: Literal["text"] = field(default="text", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class Image:
    """An image by URL or inline base64 data (``media_type`` required for base64)."""

    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    caption: str | None = None
    kind: Literal["image"] = field(default="image", init=False)

    def __post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise InvalidMessageError("an image needs exactly one of url= or data= (base64)")
        if self.data is not None and not self.media_type:
            raise InvalidMessageError("a base64 image needs media_type=, e.g. 'image/png'")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": "image"}
        for k in ("url", "data", "media_type", "caption"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return d


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any]
    kind: Literal["tool_call"] = field(default="tool_call", init=False)

    def __post_init__(self) -> None:
        check_json_value(self.arguments, f"the arguments of tool call {self.id!r}")
        try:
            self.arguments_json.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: repaired as in clean_text, like every other text
            object.__setattr__(self, "arguments", clean_strings(self.arguments))
            self.__dict__.pop("arguments_json", None)

    @cached_property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False, sort_keys=False, separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        return {"type": "tool_call", "id": self.id, "name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: tuple[Text | Image, ...]
    is_error: bool = False
    name: str | None = None  # the tool's name (Gemini's functionResponse needs it)
    kind: Literal["tool_result"] = field(default="tool_result", init=False)

    @property
    def text(self) -> str:
        return "\n".join(b.text for b in self.content if isinstance(b, Text))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "type": "tool_result",
            "call_id": self.call_id,
            "content": [b.to_dict() for b in self.content],
            "is_error": self.is_error,
        }
        if self.name is not None:
            d["name"] = self.name
        return d


@dataclass(frozen=True)
class Thinking:
    """An opaque reasoning block, passed back unchanged to the provider that produced it."""

    provider: str  # "anthropic" | "openai" | "gemini"
    data: Mapping[str, Any]
    text: str = ""  # readable text when the provider gives it (for counting and display)
    kind: Literal["thinking"] = field(default="thinking", init=False)

    def __post_init__(self) -> None:
        check_json_value(self.data, f"the data of a thinking block ({self.provider or 'no provider'})")

    def to_dict(self) -> dict[str, Any]:
        return {"type": "thinking", "provider": self.provider, "data": dict(self.data), "text": self.text}


Block = Union[Text, Image, ToolCall, ToolResult, Thinking]  # noqa: UP007 (a runtime alias used in isinstance)


def block_from_dict(d: Any, where: str = "block") -> Block:
    if not isinstance(d, Mapping):
        raise InvalidMessageError(f"{where} must be an object with a 'type', got {type(d).__name__}")
    t = d.get("type")
    try:
        if t == "text":
            text, _ = clean_text(d["text"], f"{where}.text")
            return Text(text)
        if t == "image":
            return Image(url=d.get("url"), data=d.get("data"), media_type=d.get("media_type"), caption=d.get("caption"))
        if t == "tool_call":
            args = d.get("arguments", {})
            if isinstance(args, str):
                args = parse_arguments(args, where)
            if not isinstance(args, Mapping):
                raise InvalidMessageError(f"{where}.arguments must be a JSON object")
            _require_str(d, "id", where)
            _require_str(d, "name", where)
            return ToolCall(id=d["id"], name=d["name"], arguments=dict(args))
        if t == "tool_result":
            _require_str(d, "call_id", where)
            content = d.get("content", [])
            if isinstance(content, str | bytes):
                text, _ = clean_text(content, f"{where}.content")
                blocks: tuple[Text | Image, ...] = (Text(text),)
            else:
                parsed = [block_from_dict(b, f"{where}.content[{i}]") for i, b in enumerate(content)]
                for b in parsed:
                    if not isinstance(b, Text | Image):
                        raise InvalidMessageError(f"{where}.content may hold only text and image blocks")
                blocks = tuple(parsed)  # type: ignore[arg-type]
            return ToolResult(call_id=d["call_id"], content=blocks, is_error=bool(d.get("is_error", False)), name=d.get("name"))
        if t == "thinking":
            return Thinking(provider=str(d.get("provider", "")), data=dict(d.get("data", {})), text=str(d.get("text", "")))
    except KeyError as e:
        raise InvalidMessageError(f"{where} of type {t!r} is missing the field {e.args[0]!r}") from None
    raise InvalidMessageError(
        f"{where} has unknown type {t!r}; use one of 'text', 'image', 'tool_call', 'tool_result', 'thinking'"
    )


def _require_str(d: Mapping[str, Any], key: str, where: str) -> None:
    v = d.get(key)
    if not isinstance(v, str) or not v:
        raise InvalidMessageError(f"{where}.{key} must be a non-empty string")


def parse_arguments(raw: str, where: str = "tool call") -> dict[str, Any]:
    """Parse tool-call arguments given as a JSON string. Invalid JSON is kept under ``_raw``."""
    if raw.strip() == "":
        return {}
    try:
        v = json.loads(raw)
    except (ValueError, RecursionError):  # invalid JSON, an int too long to parse, nesting too deep
        return {"_raw": raw}
    if not isinstance(v, dict):
        return {"_raw": raw}
    try:
        check_json_value(v, where)
    except InvalidMessageError:
        return {"_raw": raw}
    return v


# ---------------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    role: Role
    content: tuple[Block, ...]

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidMessageError(
                f"unknown role {self.role!r}; use 'user', 'assistant' or 'tool' "
                "(system instructions go to session.system(...))"
            )
        if not isinstance(self.content, tuple):
            object.__setattr__(self, "content", tuple(self.content))
        for b in self.content:
            if not isinstance(b, Text | Image | ToolCall | ToolResult | Thinking):
                raise InvalidMessageError(f"message content must be blocks, got {type(b).__name__}")
        if self.role == "tool" and not all(isinstance(b, ToolResult) for b in self.content):
            raise InvalidMessageError("a 'tool' message may hold only tool results")
        if self.role != "assistant" and any(isinstance(b, ToolCall | Thinking) for b in self.content):
            raise InvalidMessageError("only assistant messages may hold tool calls or thinking blocks")
        if self.role == "assistant" and any(isinstance(b, ToolResult) for b in self.content):
            raise InvalidMessageError("tool results belong in a 'tool' message, not an assistant message")

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", (Text(text),))

    @classmethod
    def assistant(cls, text: str = "", tool_calls: Sequence[ToolCall] = ()) -> Message:
        blocks: list[Block] = [Text(text)] if text else []
        blocks.extend(tool_calls)
        return cls("assistant", tuple(blocks))

    @property
    def text(self) -> str:
        return "\n".join(b.text for b in self.content if isinstance(b, Text))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolCall))

    @property
    def plain(self) -> bool:
        """Whether every block is :class:`Text` (no image, tool call, tool result or thinking block): passes over
        a whole session ask this first, so a message replayed lazily (:meth:`stored_text`) is not built."""
        d = self.__dict__
        content = d.get("content")
        if content is None:  # made by stored_text (text blocks only) or stored_tools, not built yet
            return "_tools" not in d
        for b in content:  # noqa: SIM110  (a loop, not all() over a generator: this runs for most messages of a resume)
            if type(b) is not Text:
                return False
        return True

    @property
    def image_free(self) -> bool:
        """Whether the message surely holds no image, in its blocks or its tool results' (a message replayed
        lazily holds none: :meth:`stored_text` and :meth:`stored_tools` take only messages without images, and
        are not built to answer)."""
        content = self.__dict__.get("content")
        if content is None:
            return True
        for b in content:
            if type(b) is Image:
                return False
            if type(b) is ToolResult:
                for c in b.content:
                    if type(c) is Image:
                        return False
        return True

    @property
    def call_pairs(self) -> tuple[tuple[str, str], ...]:
        """(id, name) of each tool call, in order (a message replayed lazily is not built to answer)."""
        d = self.__dict__
        if "content" not in d and "_stored" in d:  # (text blocks only, or one of stored_tools)
            return d.get("_tools", ()) if self.role == "assistant" else ()  # type: ignore[no-any-return]
        return tuple((b.id, b.name) for b in self.content if isinstance(b, ToolCall))

    @property
    def result_ids(self) -> tuple[str, ...]:
        """The call id of each tool result, in order (a message replayed lazily is not built to answer)."""
        d = self.__dict__
        if "content" not in d and "_stored" in d:
            return d.get("_tools", ()) if self.role == "tool" else ()  # type: ignore[no-any-return]
        return tuple(b.call_id for b in self.content if isinstance(b, ToolResult))

    @property
    def n_blocks(self) -> int:
        """How many content blocks the message holds (a message replayed lazily is not built: in its canonical
        JSON a text block ends with ``"type":"text"}``, which no escaped string holds, and the text blocks of
        one of :meth:`stored_tools` come before its first tool call, whose JSON starts ``{"arguments":``)."""
        d = self.__dict__
        stored = d.get("_stored")
        if stored is not None and "content" not in d:
            tools = d.get("_tools")
            if tools is None:
                return stored.count('"type":"text"}')  # type: ignore[no-any-return]
            if self.role == "tool":
                return len(tools)
            return stored.count('"type":"text"}', 0, stored.find('{"arguments":')) + len(tools)  # type: ignore[no-any-return]
        return len(self.content)

    @classmethod
    def stored_text(cls, role: Role, message_json: str, digest: str) -> Message:
        """A ``user`` or ``assistant`` message of text blocks only, built when its ``content`` is first read from
        ``message_json``: its canonical JSON, whose shape the caller proved (``resume.py``; nothing is checked
        here). ``digest`` is its content digest."""
        m: Message = object.__new__(cls)
        d = m.__dict__  # (item by item: cheaper than update() with keywords, once per message of a resume)
        d["role"] = role
        d["digest"] = digest
        d["_stored"] = message_json
        return m

    @classmethod
    def stored_tools(cls, role: Role, message_json: str, digest: str,
                     tools: tuple[tuple[str, str], ...] | tuple[str, ...],
                     blocks: Callable[[Any], tuple[Block, ...]]) -> Message:
        """Like :meth:`stored_text`, for an ``assistant`` message of text blocks then tool calls (``tools``: the
        (id, name) of each call) or a ``tool`` message of tool results holding text blocks only (``tools``: the
        call id of each result), its shape proved by the caller. ``blocks`` builds its content from the parsed
        ``message_json`` when ``content`` is first read: the caller's builder of the shapes it proved
        (``resume.stored_blocks``), handed in so that the value type never imports the replay."""
        m = cls.stored_text(role, message_json, digest)
        d = m.__dict__
        d["_tools"] = tools
        d["_blocks"] = blocks
        return m

    if not TYPE_CHECKING:  # (hidden from the type checker: it would take any misspelt attribute for this one)
        def __getattr__(self, name: str) -> Any:
            # only for an attribute not set: the content of a message made by stored_text, built on first read
            d = self.__dict__
            if name == "content":
                stored = d.get("_stored")
                if stored is not None:  # (two threads may both build it: the same blocks)
                    if "_tools" in d:  # (built by the builder stored_tools was given)
                        d["content"] = d["_blocks"](json.loads(stored))
                    else:
                        d["content"] = tuple(Text(b["text"]) for b in json.loads(stored)["content"])
                    d.pop("_stored", None)
                if "content" in d:
                    return d["content"]
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolResult))

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": [b.to_dict() for b in self.content]}

    @cached_property
    def digest(self) -> str:
        """Content digest, computed once (used as the key of every per-message cache)."""
        return content_digest(self.to_dict())

    @classmethod
    def from_dict(cls, d: Any, where: str = "message") -> Message:
        if not isinstance(d, Mapping):
            raise InvalidMessageError(f"{where} must be an object with 'role' and 'content'")
        role = d.get("role")
        if role not in ROLES:
            raise InvalidMessageError(
                f"{where} has unknown role {role!r}; use 'user', 'assistant' or 'tool' "
                "(system instructions go to session.system(...))"
            )
        content = d.get("content")
        if isinstance(content, str | bytes):
            text, _ = clean_text(content, f"{where}.content")
            return cls(role, (Text(text),))
        if not isinstance(content, Sequence):
            raise InvalidMessageError(f"{where}.content must be a string or a list of blocks")
        return cls(role, tuple(block_from_dict(b, f"{where}.content[{i}]") for i, b in enumerate(content)))


# ---------------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSpec:
    """A tool definition: name, description and a JSON Schema for its parameters."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}

    @cached_property
    def canonical(self) -> str:
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, d: Any, where: str = "tool") -> ToolSpec:
        """Accept neutral ``{name, description, parameters}``, OpenAI ``{type: function, function: {...}}``,
        Anthropic ``{name, description, input_schema}`` or Gemini ``{name, description, parameters}``."""
        if not isinstance(d, Mapping):
            raise InvalidToolSchemaError(f"{where} must be an object with a 'name', got {type(d).__name__}")
        if d.get("type") == "function" and isinstance(d.get("function"), Mapping):
            d = d["function"]
        elif d.get("type") == "function" and "name" in d:  # OpenAI Responses flat form
            pass
        name = d.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidToolSchemaError(f"{where} needs a non-empty 'name'")
        if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,128}", name):
            raise InvalidToolSchemaError(
                f"{where} name {name!r} is not valid; use letters, digits, '_', '.', '-' (at most 128)"
            )
        schema = d.get("parameters", d.get("input_schema", {"type": "object", "properties": {}}))
        if schema is None:
            schema = {"type": "object", "properties": {}}
        validate_tool_schema(schema, f"{where} {name!r}")
        desc = d.get("description", "") or ""
        if not isinstance(desc, str):
            raise InvalidToolSchemaError(f"{where} {name!r} description must be a string")
        return cls(name=name, description=desc, parameters=_normalize(schema))


def _normalize(value: Any) -> Any:
    """Deep-copy into plain dicts/lists with sorted keys so equal schemas serialize to equal bytes."""
    if isinstance(value, Mapping):
        return {k: _normalize(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    return value


def validate_tool_schema(schema: Any, where: str) -> None:
    """Check that ``schema`` is a valid JSON Schema describing an object of parameters."""
    if not isinstance(schema, Mapping):
        raise InvalidToolSchemaError(f"{where} parameters must be a JSON Schema object, got {type(schema).__name__}")
    try:
        canonical_json(schema)
    except (TypeError, ValueError) as e:
        raise InvalidToolSchemaError(f"{where} parameters are not JSON-serializable: {e}") from None
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        path = "/".join(str(p) for p in e.absolute_path) or "(root)"
        raise InvalidToolSchemaError(
            f"{where} parameters are not a valid JSON Schema at {path}: {e.message}"
        ) from None
    if schema.get("type", "object") != "object":
        raise InvalidToolSchemaError(f"{where} parameters must have \"type\": \"object\" (got {schema.get('type')!r})")


# ---------------------------------------------------------------------------------------------------
# Usage and events
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Tokens billed for one call. ``input_tokens`` excludes cache reads and writes (Anthropic's
    convention); ``prompt_tokens`` is their sum, the size of the request as the provider counted it."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Usage:
        return cls(**{k: int(d.get(k, 0) or 0) for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")})


EventKind = Literal["system", "tools", "task", "message", "usage", "compaction", "meta"]
EVENT_KINDS: tuple[str, ...] = ("system", "tools", "task", "message", "usage", "compaction", "meta")


@dataclass(frozen=True)
class Event:
    """One entry of a session's append-only log.

    ``hash`` is ``chain_hash(parent, canonical_json({"kind": kind, "data": data}))``; ``seq`` counts from 0.
    """

    seq: int
    kind: str
    data: Mapping[str, Any]
    hash: str
    parent: str | None

    def payload_json(self) -> str:
        return canonical_json({"kind": self.kind, "data": self.data})


def blocks_from_content(content: Any, where: str) -> tuple[Block, ...]:
    """Content given as text, bytes, one block or a list of blocks (or their dict forms), as blocks."""
    if isinstance(content, str | bytes):
        text, _ = clean_text(content, where)
        return (Text(text),)
    if isinstance(content, Block.__args__):  # type: ignore[attr-defined]
        return (content,)
    if not isinstance(content, Sequence):
        raise InvalidMessageError(f"{where} must be text or a list of blocks, got {type(content).__name__}")
    return tuple(b if isinstance(b, Block.__args__) else block_from_dict(b, f"{where}[{i}]")  # type: ignore[attr-defined]
                 for i, b in enumerate(content))


__all__ = [
    "Block",
    "Event",
    "Image",
    "Message",
    "Role",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "block_from_dict",
    "blocks_from_content",
    "parse_arguments",
    "validate_tool_schema",
]
