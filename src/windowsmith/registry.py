"""Model specs as data: window, max output, tokenizer, prices and cache rules.

The packaged ``data/models.json`` lists the models windowsmith knows, each number with the URL it was read
from and the date it was read. Users override or add models with a JSON or TOML file of the same shape::

    # my-models.toml: change one price of a known model, add a new one
    [models."claude-sonnet-4-5".prices]
    input = 2.5

    [models."my-finetune"]
    provider = "openai"
    default_format = "openai-chat"
    context_window = 128000
    max_output = 16384
    tokenizer = "o200k_base"
    prices = { input = 3.0, output = 12.0, cache_write = 3.0, cache_read = 1.5 }

and pass it as ``Engine(registry=...)`` or point ``WINDOWSMITH_MODELS`` at it (several files separated by
``os.pathsep``). ``models`` may also be a list of entries that each carry a ``name``.

Token accounting used by :meth:`ModelSpec.cost`: ``input_tokens`` are the uncached input tokens billed at the
full input price (Anthropic's ``input_tokens``; for OpenAI subtract ``cached_tokens`` from ``prompt_tokens``;
for Gemini subtract ``cachedContentTokenCount`` from ``promptTokenCount``). The prompt size that selects the
long-context tier is ``input + cache_read + cache_write``; above the threshold every token of the request,
output included, is billed at the long-context prices.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import date
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from windowsmith.errors import ConfigError, UnknownModelError, UsageError

__all__ = [
    "ENV_VAR",
    "ONE_HOUR_WRITE",
    "LongContextPrices",
    "ModelSpec",
    "Prices",
    "Registry",
    "Source",
    "load_registry",
]

ENV_VAR = "WINDOWSMITH_MODELS"
SCHEMA_VERSION = 1
_PER_MILLION = 1_000_000

Provider = Literal["anthropic", "openai", "gemini"]
Format = Literal["anthropic", "openai-chat", "openai-responses", "gemini"]
Tokenizer = Literal["o200k_base", "cl100k_base"]
ThinkingKept = Literal["all", "current_turn"]


# --------------------------------------------------------------------------------------------------------------
# Public, frozen specs (plain data the core works with)
# --------------------------------------------------------------------------------------------------------------


#: a 1-hour cache write's price as a multiple of the base input price (Anthropic, every model; prompt-caching docs)
ONE_HOUR_WRITE = 2.0


@dataclass(frozen=True, slots=True)
class LongContextPrices:
    """Prices (USD per million tokens) that apply to a whole request once its prompt exceeds ``threshold``."""

    threshold: int
    input: float
    output: float
    cache_write: float
    cache_read: float


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens. ``cache_write`` is Anthropic's 5-minute write price; equals ``input`` elsewhere.
    ``cache_write_1h``: the 1-hour write price (``cache_control.ttl = "1h"``); None: :data:`ONE_HOUR_WRITE` times
    ``input``, Anthropic's rule for every model (1.25x for 5 minutes, 2x for an hour, reads 0.1x)."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    long_context: LongContextPrices | None = None
    cache_write_1h: float | None = None
    #: explicit context-cache storage, USD per million tokens per hour (Gemini ``cachedContents``), if offered
    cache_storage_per_hour: float | None = None

    def write_1h(self) -> float:
        """The 1-hour cache write price."""
        return self.cache_write_1h if self.cache_write_1h is not None else self.input * ONE_HOUR_WRITE


@dataclass(frozen=True, slots=True)
class Source:
    """Where a group of numbers comes from and when it was read."""

    url: str
    read_on: str
    note: str | None = None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Everything windowsmith needs to know about one model."""

    name: str
    provider: Provider
    default_format: Format
    context_window: int
    max_output: int
    tokenizer: Tokenizer
    token_factor: float
    prices: Prices
    min_cacheable_prefix: int
    max_breakpoints: int
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, Source] = field(default_factory=lambda: MappingProxyType({}), compare=False)
    status: str | None = field(default=None, compare=False)
    #: which thinking blocks sent back the provider keeps and bills: "all", or "current_turn" (only those of
    #: the assistant turns since the last user message that is not a tool result; earlier ones are stripped)
    thinking_kept: ThinkingKept = "all"
    #: the provider's retirement date (the model stops answering), if announced
    retires: date | None = field(default=None, compare=False)
    #: the model the provider names as its replacement
    successor: str | None = field(default=None, compare=False)

    def retired(self, today: date | None = None) -> bool:
        """True when the provider's announced retirement date has passed."""
        return self.retires is not None and (today or date.today()) >= self.retires

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        *,
        cache_write_1h_tokens: int = 0,
    ) -> float:
        """USD cost of one request.

        ``input_tokens`` are uncached input tokens (see the module docstring for how to derive them from each
        provider's usage block). When ``input + cache_read + cache_write`` exceeds the long-context threshold,
        all tokens of the request are priced at the long-context rates. ``cache_write_1h_tokens``: the part of
        ``cache_write_tokens`` written with a 1-hour lifetime (priced at :meth:`Prices.write_1h`, 2x the input price,
        instead of the 5-minute ``cache_write``).
        """
        counts = (input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens)
        if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in counts):
            raise UsageError(
                f"cost() needs non-negative integer token counts, got input={input_tokens!r}, "
                f"output={output_tokens!r}, cache_read={cache_read_tokens!r}, cache_write={cache_write_tokens!r}."
            )
        p: Prices | LongContextPrices = self.prices
        lc = self.prices.long_context
        if lc is not None and input_tokens + cache_read_tokens + cache_write_tokens > lc.threshold:
            p = lc
        usd = (
            input_tokens * p.input
            + output_tokens * p.output
            + cache_read_tokens * p.cache_read
            + cache_write_tokens * p.cache_write
        ) / _PER_MILLION
        if cache_write_1h_tokens:
            one_hour = self.prices.write_1h() if p is self.prices else p.input * ONE_HOUR_WRITE
            usd += min(cache_write_1h_tokens, cache_write_tokens) * (one_hour - p.cache_write) / _PER_MILLION
        return usd


# --------------------------------------------------------------------------------------------------------------
# Validation schema (pydantic, used only at the edge: loading files)
# --------------------------------------------------------------------------------------------------------------


class _SourceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1)
    read_on: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    note: str | None = None


class _LongContextIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threshold: int = Field(gt=0)
    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    cache_read: float = Field(ge=0)


class _PricesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    cache_read: float = Field(ge=0)
    long_context: _LongContextIn | None = None
    cache_write_1h: float | None = Field(default=None, ge=0)
    cache_storage_per_hour: float | None = Field(default=None, ge=0)


class _ModelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    aliases: list[str] = Field(default_factory=list)
    provider: Provider
    default_format: Format
    context_window: int = Field(gt=0)
    max_output: int = Field(gt=0)
    tokenizer: Tokenizer
    token_factor: float = Field(default=1.0, gt=0)
    prices: _PricesIn
    min_cacheable_prefix: int = Field(default=0, ge=0)
    max_breakpoints: int = Field(default=0, ge=0)
    thinking_kept: ThinkingKept = "all"
    status: str | None = None
    retires: date | None = None
    successor: str | None = None
    sources: dict[str, _SourceIn] = Field(default_factory=dict)


def _describe(origin: str, name: str, err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(entry)"
        got = f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict) else ""
        parts.append(f"field '{loc}': {e['msg']}{got}")
    return f"{origin}: model '{name}': " + "; ".join(parts) + ". Fix the value in the registry file."


def _validate(raw: Mapping[str, Any], origin: str) -> ModelSpec:
    name = str(raw.get("name", "?"))
    try:
        m = _ModelIn.model_validate(dict(raw))
    except ValidationError as err:
        raise ConfigError(_describe(origin, name, err)) from None
    if m.context_window < m.max_output:
        raise ConfigError(
            f"{origin}: model '{name}': field 'context_window' ({m.context_window}) is smaller than "
            f"'max_output' ({m.max_output}); the window includes the output, so it must be at least as large."
        )
    lc = m.prices.long_context
    # threshold == context_window is allowed: the tier then applies only when the window is raised (e.g. an
    # opt-in 1M beta), which a user registry file does by overriding context_window.
    if lc is not None and lc.threshold > m.context_window:
        raise ConfigError(
            f"{origin}: model '{name}': field 'prices.long_context.threshold' ({lc.threshold}) exceeds "
            f"'context_window' ({m.context_window}); the long-context tier could never apply."
        )
    return ModelSpec(
        name=m.name,
        provider=m.provider,
        default_format=m.default_format,
        context_window=m.context_window,
        max_output=m.max_output,
        tokenizer=m.tokenizer,
        token_factor=m.token_factor,
        prices=Prices(
            input=m.prices.input,
            output=m.prices.output,
            cache_write=m.prices.cache_write,
            cache_read=m.prices.cache_read,
            long_context=None if lc is None else LongContextPrices(**lc.model_dump()),
            cache_write_1h=m.prices.cache_write_1h,
            cache_storage_per_hour=m.prices.cache_storage_per_hour,
        ),
        min_cacheable_prefix=m.min_cacheable_prefix,
        max_breakpoints=m.max_breakpoints,
        thinking_kept=m.thinking_kept,
        aliases=tuple(a.strip().lower() for a in m.aliases),
        sources=MappingProxyType({k: Source(**v.model_dump()) for k, v in m.sources.items()}),
        status=m.status,
        retires=m.retires,
        successor=m.successor,
    )


def _spec_to_raw(spec: ModelSpec) -> dict[str, Any]:
    # Built by hand: asdict() cannot deep-copy the MappingProxyType that holds the sources.
    return {
        "name": spec.name,
        "aliases": list(spec.aliases),
        "provider": spec.provider,
        "default_format": spec.default_format,
        "context_window": spec.context_window,
        "max_output": spec.max_output,
        "tokenizer": spec.tokenizer,
        "token_factor": spec.token_factor,
        "prices": {
            "input": spec.prices.input,
            "output": spec.prices.output,
            "cache_write": spec.prices.cache_write,
            "cache_read": spec.prices.cache_read,
            "long_context": None if spec.prices.long_context is None else asdict(spec.prices.long_context),
        },
        "min_cacheable_prefix": spec.min_cacheable_prefix,
        "max_breakpoints": spec.max_breakpoints,
        "thinking_kept": spec.thinking_kept,
        "status": spec.status,
        "retires": None if spec.retires is None else spec.retires.isoformat(),
        "successor": spec.successor,
        "sources": {k: asdict(v) for k, v in spec.sources.items()},
    }


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


# --------------------------------------------------------------------------------------------------------------
# File reading
# --------------------------------------------------------------------------------------------------------------


def _read_document(path: Path) -> dict[str, Any]:
    try:
        text = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"Cannot read model registry file {str(path)!r}: {err}.") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            doc = tomllib.loads(text.decode("utf-8"))
        elif suffix == ".json":
            doc = json.loads(text)
        else:
            raise ConfigError(
                f"Model registry file {str(path)!r} must end in .json or .toml (got {suffix or 'no suffix'!r})."
            )
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"Model registry file {str(path)!r} is not valid {suffix[1:].upper()}: {err}.") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"Model registry file {str(path)!r} must hold an object with a 'models' key.")
    return doc


def _entries(doc: Mapping[str, Any], origin: str) -> list[dict[str, Any]]:
    version = doc.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"{origin}: field 'schema_version' is {version!r}; this windowsmith reads schema_version {SCHEMA_VERSION}."
        )
    models = doc.get("models")
    if models is None:
        raise ConfigError(f"{origin}: no 'models' key; list entries under 'models' (a list or a table by name).")
    if isinstance(models, Mapping):
        out = []
        for name, entry in models.items():
            if not isinstance(entry, Mapping):
                raise ConfigError(f"{origin}: model '{name}': entry must be a table/object of fields.")
            out.append({"name": name, **entry})
        return out
    if isinstance(models, list):
        for i, entry in enumerate(models):
            if not isinstance(entry, Mapping) or not entry.get("name"):
                raise ConfigError(f"{origin}: models[{i}]: each entry must be an object with a 'name' field.")
        return [dict(e) for e in models]
    raise ConfigError(f"{origin}: field 'models' must be a list of entries or a table keyed by model name.")


# --------------------------------------------------------------------------------------------------------------
# Name resolution
# --------------------------------------------------------------------------------------------------------------

# A dated or versioned snapshot suffix: -20250929, -2025-08-07, @20250929, -001, -latest, -v1:0 (Bedrock).
_SNAPSHOT_SUFFIX = re.compile(r"^(?:[-@](?:\d{8}|\d{4}-\d{2}-\d{2}|\d{3}|latest|v\d+(?::\d+)?))+$")
# Bedrock-style "anthropic.claude-..." and cross-region "us.anthropic.claude-...".
_BEDROCK_PREFIX = re.compile(r"^(?:[a-z]{2,6}\.)?anthropic\.")


def _normalize(name: str) -> str:
    n = name.strip().lower()
    if "/" in n:  # anthropic/claude-..., models/gemini-..., openrouter/openai/gpt-4o
        n = n.rsplit("/", 1)[1]
    return _BEDROCK_PREFIX.sub("", n)


_HOW_TO_ADD = (
    "To add it, write a registry file (JSON or TOML) with an entry under 'models' (name, provider, "
    "default_format, context_window, max_output, tokenizer, prices) and pass it as Engine(registry=...) "
    f"or point the {ENV_VAR} environment variable at it."
)


# --------------------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _default_specs() -> tuple[ModelSpec, ...]:
    ref = resources.files("windowsmith").joinpath("data", "models.json")
    origin = "windowsmith/data/models.json"
    doc = json.loads(ref.read_text(encoding="utf-8"))
    return tuple(_validate(e, origin) for e in _entries(doc, origin))


class Registry:
    """A set of :class:`ModelSpec` looked up by name, alias or dated snapshot."""

    def __init__(self, specs: Iterable[ModelSpec] = ()) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._aliases: dict[str, str] = {}
        for spec in specs:
            self.register(spec)

    # -- construction -----------------------------------------------------------------------------------------

    @classmethod
    def default(cls) -> Registry:
        """The packaged registry (parsed once, a fresh mutable copy each call)."""
        return cls(_default_specs())

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Registry:
        """A registry holding only the (complete) entries of a JSON or TOML file."""
        p = Path(path)
        origin = str(p)
        return cls(_validate(e, origin) for e in _entries(_read_document(p), origin))

    def merged(self, other: Registry | str | os.PathLike[str]) -> Registry:
        """A new registry: this one with ``other``'s entries overriding or added.

        From a file, an entry naming a known model (or one of its aliases) may be partial: only the fields it
        gives change, nested tables (``prices``, ``sources``) merge key by key. A new model must be complete.
        """
        out = Registry(self._specs.values())
        if isinstance(other, Registry):
            for spec in other._specs.values():
                out._replace(spec)
            return out
        p = Path(other)
        origin = str(p)
        for entry in _entries(_read_document(p), origin):
            key = _normalize(str(entry["name"]))
            base_name = key if key in out._specs else out._aliases.get(key)
            if base_name is not None:
                raw = _deep_merge(_spec_to_raw(out._specs[base_name]), {**entry, "name": base_name})
            else:
                raw = entry
            out._replace(_validate(raw, origin))
        return out

    # -- mutation ---------------------------------------------------------------------------------------------

    def register(self, spec: ModelSpec) -> None:
        """Add ``spec`` or replace the model of the same name."""
        if not isinstance(spec, ModelSpec):
            raise UsageError(f"register() takes a ModelSpec, got {type(spec).__name__}.")
        self._replace(spec)

    def _replace(self, spec: ModelSpec) -> None:
        name = spec.name.strip().lower()
        for alias in spec.aliases:
            owner = self._aliases.get(alias)
            if (alias in self._specs and alias != name) or (owner is not None and owner != name):
                raise ConfigError(
                    f"model '{spec.name}': field 'aliases': {alias!r} already names model "
                    f"'{owner or alias}'; remove it from one of the two entries."
                )
        if name in self._aliases and self._aliases[name] != name:
            raise ConfigError(
                f"model '{spec.name}': field 'name' is already an alias of model '{self._aliases[name]}'; "
                "override that model by its name instead."
            )
        old = self._specs.get(name)
        if old is not None:
            for alias in old.aliases:
                self._aliases.pop(alias, None)
        self._specs[name] = spec
        for alias in spec.aliases:
            self._aliases[alias] = name

    # -- lookup -----------------------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Canonical model names, sorted."""
        return sorted(self._specs)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except UnknownModelError:
            return False
        return True

    def __len__(self) -> int:
        return len(self._specs)

    def get(self, name: str) -> ModelSpec:
        """Resolve an exact name, an alias, a provider-prefixed name or a dated snapshot; else raise."""
        if not isinstance(name, str) or not name.strip():
            raise UnknownModelError(f"Model name must be a non-empty string, got {name!r}. {_HOW_TO_ADD}")
        for key in dict.fromkeys((name.strip().lower(), _normalize(name))):
            hit = self._lookup(key)
            if hit is not None:
                return hit
        raise UnknownModelError(self._unknown_message(name))

    def find(self, name: str) -> ModelSpec | None:
        """Like :meth:`get`, but None for a model the registry does not know (one lookup, not two)."""
        try:
            return self.get(name)
        except UnknownModelError:
            return None

    def _lookup(self, key: str) -> ModelSpec | None:
        if key in self._specs:
            return self._specs[key]
        if key in self._aliases:
            return self._specs[self._aliases[key]]
        best: str | None = None
        for known in (*self._specs, *self._aliases):
            matches = key.startswith(known) and _SNAPSHOT_SUFFIX.match(key[len(known) :])
            if matches and (best is None or len(known) > len(best)):
                best = known
        if best is None:
            return None
        return self._specs.get(best) or self._specs[self._aliases[best]]

    def _unknown_message(self, name: str) -> str:
        candidates = [*self._specs, *self._aliases]
        close = difflib.get_close_matches(_normalize(name), candidates, n=5, cutoff=0.5)
        hint = f" Close matches: {', '.join(close)}." if close else " Known models: " + ", ".join(self.names()) + "."
        return f"Unknown model {name!r}.{hint} {_HOW_TO_ADD}"


def load_registry(extra: str | os.PathLike[str] | Registry | None = None) -> Registry:
    """The packaged registry, then the files named by ``WINDOWSMITH_MODELS``, then ``extra`` merged on top."""
    reg = Registry.default()
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        for part in env.split(os.pathsep):
            if part.strip():
                reg = reg.merged(part.strip())
    if extra is not None:
        reg = reg.merged(extra)
    return reg
