"""Exact token counting, offline, counted once per content.

The o200k_base and cl100k_base BPE rank files ship inside the package and are checked against the
sha256 that ``tiktoken_ext.openai_public`` expects, so no network is ever needed.

OpenAI families count exactly. Anthropic and Gemini have no public offline tokenizer; they use the
closest exact encoding times the model's ``token_factor`` from the registry, and every billed usage
passed to ``Calibration.observe`` refines a per-model correction that later counts use.

Each text is tokenized once per process: counts are cached by content digest (and whole messages by
their digest), so a long session tokenizes only its new content on each turn.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import tiktoken

from .bpe_cache import load_ranks
from .errors import TokenizerError
from .hashing import text_digest
from .model import Image, Message, Text, Thinking, ToolCall, ToolResult, ToolSpec

if TYPE_CHECKING:
    from .request import NeutralRequest

_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"

# The encoding specs, as in tiktoken_ext.openai_public (pat_str and special tokens), with the files
# shipped in windowsmith/data/tokenizers instead of downloaded ones.
_SPECS: dict[str, dict[str, Any]] = {
    "o200k_base": {
        "expected_hash": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "special_tokens": {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
        "pat_str": "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
    },
    "cl100k_base": {
        "expected_hash": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "special_tokens": {
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
        "pat_str": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    },
}

ENCODINGS: tuple[str, ...] = tuple(_SPECS)

_enc_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}


_DIGEST = attrgetter("digest")


def get_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name`` built from the BPE file shipped in the package."""
    enc = _encodings.get(name)
    if enc is not None:
        return enc
    spec = _SPECS.get(name)
    if spec is None:
        raise TokenizerError(f"unknown encoding {name!r}; windowsmith ships {', '.join(ENCODINGS)}")
    with _enc_lock:
        enc = _encodings.get(name)
        if enc is None:
            ref = resources.files("windowsmith") / "data" / "tokenizers" / f"{name}.tiktoken"
            try:
                with resources.as_file(ref) as path:
                    ranks = load_ranks(str(path), name, spec["expected_hash"])
            except FileNotFoundError:
                raise TokenizerError(
                    f"the tokenizer file {name}.tiktoken is missing from the windowsmith package; reinstall windowsmith"
                ) from None
            except ValueError as e:  # tiktoken raises ValueError on a hash mismatch
                raise TokenizerError(f"the shipped {name}.tiktoken is corrupt ({e}); reinstall windowsmith") from None
            enc = tiktoken.Encoding(
                name=name, pat_str=spec["pat_str"], mergeable_ranks=ranks, special_tokens=spec["special_tokens"]
            )
            _encodings[name] = enc
    return enc


class _CountCache:
    """Process-wide text → token count cache, keyed by (encoding, content digest)."""

    def __init__(self, maxsize: int = 500_000) -> None:
        self._d: dict[tuple[str, str], int] = {}
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0

    def count(self, enc_name: str, text: str) -> int:
        if not text:
            return 0
        if len(text) < 64:  # hashing short strings costs about as much as encoding them
            key: tuple[str, str] = (enc_name, text)
        else:
            key = (enc_name, text_digest(text))
        n = self._d.get(key)
        if n is not None:
            self.hits += 1
            return n
        self.misses += 1
        n = len(get_encoding(enc_name).encode_ordinary(text))
        if len(self._d) >= self.maxsize:
            # drop the oldest half (dicts keep insertion order)
            for k in list(self._d)[: self.maxsize // 2]:
                del self._d[k]
        self._d[key] = n
        return n


COUNT_CACHE = _CountCache()


def count_text(text: str, encoding: str = "o200k_base") -> int:
    """Exact number of tokens of ``text`` in ``encoding`` (cached by content)."""
    return COUNT_CACHE.count(encoding, text)


# Per-format structural overheads (tokens). OpenAI's are documented in the cookbook ("How to count
# tokens with tiktoken"): 3 per message, 3 to prime the reply, about 8 per function definition plus
# the definitions themselves. Anthropic adds a tool-use system prompt when tools are present (346
# tokens for Claude 4.x with tool_choice auto, per its tool-use pricing table). The rest is measured
# by calibration against billed usage.
@dataclass(frozen=True)
class Overheads:
    per_message: int
    per_request: int
    per_tool: int
    tools_base: int
    per_tool_call: int
    per_tool_result: int
    image: int


OVERHEADS: dict[str, Overheads] = {
    "openai-chat": Overheads(per_message=3, per_request=3, per_tool=8, tools_base=12, per_tool_call=7, per_tool_result=4, image=765),
    "openai-responses": Overheads(per_message=4, per_request=3, per_tool=8, tools_base=12, per_tool_call=7, per_tool_result=5, image=765),
    "anthropic": Overheads(per_message=4, per_request=3, per_tool=6, tools_base=346, per_tool_call=10, per_tool_result=6, image=1600),
    "gemini": Overheads(per_message=3, per_request=2, per_tool=6, tools_base=8, per_tool_call=6, per_tool_result=6, image=258),
}


#: the provider whose thinking blocks each format sends back (Chat Completions sends none)
_THINKING_PROVIDER: dict[str, str] = {"anthropic": "anthropic", "openai-responses": "openai", "gemini": "gemini"}

#: ``thinking_kept`` values: which thinking blocks sent back the provider bills (see TokenCounter)
THINKING_KEPT: tuple[str, ...] = ("all", "current_turn")


@dataclass
class Calibration:
    """Per-model correction learnt from billed usage: ``billed ≈ offset + slope x counted``.

    ``counted`` is windowsmith's count of a request before calibration (the tokenizer times the
    registry's ``token_factor``: ``Manifest.tokens_counted``); ``billed`` the prompt tokens the provider
    billed for it. The offset stands for what the count cannot see and is the same on every call (a
    provider's hidden system prompt, tool definitions the agent sent but the log lacks); the slope for a
    tokenizer that is not the provider's (o200k x factor for Claude, Gemini, Llama).

    The fit uses the last ``window`` observations of this session:

    * the slope: the Theil-Sen estimate, the median of the slopes between pairs of observations at least
      ``min_span`` counted tokens apart, with ``prior`` counted ``prior_weight`` times among them (a
      median, so one odd pair cannot wreck it, and the first pairs of a session cannot swing it far from
      what earlier sessions of the model learnt); clamped to ``[low, high]``: on the shared traces the
      slopes of o200k x factor against Claude, Gemini 3 and Llama 4 billing run 0.85-1.37, so a fit
      outside the clamp is bad billed data, not a tokenizer. With one observation, or no pair that far
      apart, the slope is the prior;
    * the offset: the line goes through the newest observation. An agent's consecutive requests share
      almost all their content, so the newest billed count is the best anchor, and only what changed
      since is estimated with the slope.

    How far one bad run can skew what persists: only billed usage is observed (``Session.record`` skips
    usage marked ``estimated``); a session's slope joins the stored ``history`` only when its last fit fell
    inside ``[low, high]`` before clamping (a fit at the clamp is used in that session and then dropped);
    and the prior is the median of up to ``history_size`` sessions' slopes, so one session moves it by at
    most one rank of that median, and never outside the band.

    The prior is what the engine's earlier sessions of this model learnt: the calibration is stored
    per model and format (``Session.record``) and a new session starts from it (:meth:`from_dict`):
    ``history`` holds the slopes the last ``history_size`` sessions fitted from their own calls, and
    ``prior`` is their median (1.0, the registry's factor as is, on a fresh store). A session's second
    call is therefore counted with the model's learnt slope, not only its first call's offset. Sessions
    of one model running at once each store their own state; the last to record wins (a prior, not a
    ledger: one session's slope may be left out).

    ``window``, ``min_span``, the anchor and ``prior_weight`` were chosen on the dev half of the shared
    traces; the token-count section of ``windowsmith bench --split validation`` reports the validation
    half.

    :meth:`apply` turns a count into the calibrated count, never below ``floor`` x the count (so never
    negative, whatever the offset).
    """

    slope: float = 1.0
    offset: float = 0.0
    observations: int = 0
    window: int = 12
    min_span: int = 200
    low: float = 0.75
    high: float = 1.5
    floor: float = 0.5
    last_error: float | None = field(default=None)
    points: list[tuple[int, int]] = field(default_factory=list)
    prior: float = 1.0
    prior_weight: int = 1
    history: list[float] = field(default_factory=list)
    history_size: int = 25
    fitted: bool = False  # whether this session's slope came from its own pairs (then it joins the history)
    head_offset: float | None = None  # the offset this session's first billed call gave

    @property
    def ratio(self) -> float:
        """The slope (the multiplicative part; per-item counts are scaled by it)."""
        return self.slope

    @property
    def offset_tokens(self) -> int:
        """The offset, in whole tokens (added once per request)."""
        return round(self.offset)

    def apply(self, counted: float) -> int:
        """The calibrated count of a request counted ``counted`` tokens before calibration."""
        if counted <= 0:
            return 0
        return max(math.ceil(self.offset + self.slope * counted), math.ceil(self.floor * counted))

    def observe(self, counted: int, billed: int) -> float:
        """Record that a request counted ``counted`` tokens before calibration was billed ``billed``
        prompt tokens, and refit. Returns the slope. Non-positive values are ignored."""
        if counted <= 0 or billed <= 0:
            return self.slope
        self.last_error = (self.apply(counted) - billed) / billed
        self.points.append((int(counted), int(billed)))
        del self.points[: -self.window]
        self.observations += 1
        self._fit()
        if len(self.points) == 1 and self.head_offset is None:
            self.head_offset = self.offset
        return self.slope

    def _fit(self) -> None:
        pts = self.points
        slopes = [(b2 - b1) / (c2 - c1) for i, (c1, b1) in enumerate(pts) for c2, b2 in pts[i + 1 :]
                  if abs(c2 - c1) >= self.min_span]
        if slopes:
            slopes += [self.prior] * self.prior_weight
            raw = statistics.median(slopes)
            self.slope = min(self.high, max(self.low, raw))
            # a fit outside the band is bad billed data: it is used clamped in this session, never persisted
            self.fitted = self.low <= raw <= self.high
        c, b = pts[-1]
        self.offset = b - self.slope * c

    def to_dict(self) -> dict[str, Any]:
        # a session that fitted no slope of its own (or a rejected one) stores the prior it started from
        return {"slope": self.slope if self.fitted else self.prior, "offset": self.offset, "observations": self.observations,
                "last_error": self.last_error, "fitted": self.fitted, "history": list(self.history),
                "head_offset": self.head_offset}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Calibration:
        """The calibration a new session starts from, given what the last one stored: the offset its
        first billed call gave (a session's first request is mostly its fixed head, system prompt, tools
        and task, like the new session's; the offset of a long session's newest call is the intercept of a
        line fitted far from there), and its slope as the prior when it fitted one from its own calls
        (then it joins ``history``, and the prior is the median of the history); the observations behind
        them stay with the session that made them. Reads the earlier forms (``{"slope", "offset"}``
        without a history, ``{"ratio": r}``): their slope is the prior, their offset the offset."""
        if not d:
            return cls()
        slope = min(cls.high, max(cls.low, float(d.get("slope", d.get("ratio", 1.0)))))
        history = [float(x) for x in d.get("history") or []]
        if d.get("fitted", "history" not in d):  # an earlier form: its slope was fitted
            history.append(slope)
        history = history[-cls.history_size:]
        prior = statistics.median(history) if history else slope
        head = d.get("head_offset")
        offset = float(d.get("offset", 0.0) if head is None else head)
        return cls(slope=prior, offset=offset, observations=int(d.get("observations", 0)),
                   last_error=d.get("last_error"), prior=prior, history=history)


class TokenCounter:
    """Counts tokens of messages, tools and requests for one model in one provider format.

    ``factor`` is the registry's ``token_factor`` (1.0 for OpenAI models); ``calibration`` is the
    correction learnt from billed usage: its slope scales every count (:attr:`scale`), its offset is
    added once per request (:meth:`request`, :meth:`calibrated`). ``thinking`` is the registry's
    ``thinking_kept``: ``"all"`` when the provider bills every thinking block sent back,
    ``"current_turn"`` when it drops (and does not bill) the thinking of assistant turns before the
    last user message that is not a tool result (Anthropic up to Claude Sonnet 4.5). A thinking block
    counts only in the format that sends it (Anthropic's in ``anthropic``, OpenAI reasoning items in
    ``openai-responses``, Gemini's in ``gemini``; Chat Completions sends none). Message counts are
    cached by message digest.
    """

    def __init__(self, encoding: str = "o200k_base", fmt: str = "openai-chat", factor: float = 1.0,
                 calibration: Calibration | None = None, thinking: str = "all") -> None:
        if fmt not in OVERHEADS:
            raise TokenizerError(f"unknown request format {fmt!r}; use one of {', '.join(OVERHEADS)}")
        if thinking not in THINKING_KEPT:
            raise TokenizerError(f"unknown thinking rule {thinking!r}; use one of {', '.join(THINKING_KEPT)}")
        if encoding not in _SPECS:  # fail early on a bad encoding; the file itself loads on the first count
            raise TokenizerError(f"unknown encoding {encoding!r}; windowsmith ships {', '.join(ENCODINGS)}")
        self.encoding = encoding
        self.format = fmt
        self.factor = factor
        self.calibration = calibration or Calibration()
        self.thinking = thinking
        self.overheads = OVERHEADS[fmt]
        self._thinking_provider = _THINKING_PROVIDER.get(fmt)
        self._messages: dict[str, int] = {}
        self._thought: dict[str, int] = {}
        self._saw_thinking = False  # set when a thinking block this format sends is first counted

    @property
    def scale(self) -> float:
        """Tokens per raw token: the tokenizer factor times the calibration's slope."""
        return self.factor * self.calibration.slope

    @property
    def offset(self) -> int:
        """The calibration's offset: tokens a request is billed beyond what its parts count."""
        return self.calibration.offset_tokens

    def scaled(self, raw: int) -> int:
        """Raw tokens times the tokenizer factor and the calibration's slope, rounded up."""
        s = self.scale
        return raw if s == 1.0 else math.ceil(raw * s)

    def counted(self, raw: int) -> int:
        """Raw tokens of a request times the tokenizer factor (before calibration), rounded up."""
        return raw if self.factor == 1.0 else math.ceil(raw * self.factor)

    def calibrated(self, raw: int) -> int:
        """A whole request of ``raw`` raw tokens as the calibration expects it billed."""
        return self.calibration.apply(raw * self.factor)

    def raw_text(self, text: str) -> int:
        return COUNT_CACHE.count(self.encoding, text)

    def text(self, text: str) -> int:
        """Tokens of a bare text (no structural overhead)."""
        return self.scaled(self.raw_text(text))

    def _raw_block(self, b: Any) -> int:
        o = self.overheads
        if isinstance(b, Text):
            return self.raw_text(b.text)
        if isinstance(b, ToolCall):
            return o.per_tool_call + self.raw_text(b.name) + self.raw_text(b.arguments_json)
        if isinstance(b, ToolResult):
            return o.per_tool_result + sum(self._raw_block(c) for c in b.content)
        if isinstance(b, Image):
            return o.image
        if isinstance(b, Thinking):
            if b.provider != self._thinking_provider:
                return 0
            self._saw_thinking = True
            return self.raw_text(b.text) + 8
        return 0

    def raw_message(self, m: Message) -> int:
        key = m.digest
        n = self._messages.get(key)
        if n is None:
            n = self.overheads.per_message + sum(self._raw_block(b) for b in m.content)
            if len(self._messages) > 200_000:
                self._messages.clear()
            self._messages[key] = n
        return n

    def message(self, m: Message) -> int:
        return self.scaled(self.raw_message(m))

    @property
    def scheme(self) -> str:
        """What a raw message count depends on besides the message: the encoding, the format's overheads and
        which thinking blocks it sends (persisted counts are kept per scheme; see ``unit_counts.py``)."""
        o = self.overheads
        return (f"{self.encoding}|{self.format}|{o.per_message}.{o.per_tool_call}.{o.per_tool_result}.{o.image}"
                f"|{self._thinking_provider or '-'}")

    def seed(self, messages: Iterable[Message], counts: Iterable[int], *, thinking: bool = False) -> None:
        """Take the raw counts of ``messages`` counted before (by a counter of the same :attr:`scheme`), so they are
        not tokenized again. ``thinking``: whether any of them holds a thinking block this format sends."""
        self._messages.update(zip(map(_DIGEST, messages), counts, strict=True))
        if thinking:
            self._saw_thinking = True

    def sends_thinking(self, m: Message) -> bool:
        """Whether ``m`` holds a thinking block this format sends (and counts); nothing is cached."""
        return self._thinking_provider is not None and m.role == "assistant" and any(
            isinstance(b, Thinking) and b.provider == self._thinking_provider for b in m.content)

    @property
    def saw_thinking(self) -> bool:
        """Whether a thinking block this format sends was counted (or seeded) yet."""
        return self._saw_thinking

    @property
    def may_send_thinking(self) -> bool:
        """Whether :meth:`raw_thinking` can be other than 0 (this format sends some provider's thinking)."""
        return self._thinking_provider is not None

    def raw_thinking(self, m: Message) -> int:
        """Raw tokens of the thinking blocks of ``m`` that this format sends (0 for most messages)."""
        if m.role != "assistant" or self._thinking_provider is None:
            return 0
        key = m.digest
        n = self._thought.get(key)
        if n is None:
            n = sum(self._raw_block(b) for b in m.content if isinstance(b, Thinking))
            if len(self._thought) > 200_000:
                self._thought.clear()
            self._thought[key] = n
        return n

    def raw_unbilled(self, messages: Sequence[Message]) -> int:
        """Raw tokens of ``messages`` that are sent but not billed: under the ``"current_turn"`` rule,
        the thinking of the assistant messages before the last user message that is not a tool result
        (the provider strips it). Part of :meth:`raw_message`'s counts, so subtract it from their sum."""
        upto = self.stripped_before(messages)
        return sum(self.raw_thinking(m) for m in messages[:upto]) if upto else 0

    def stripped_before(self, messages: Sequence[Message]) -> int:
        """How many leading ``messages`` have their thinking stripped by the provider (and not billed): under
        the ``"current_turn"`` rule, those before the last user message that is not a tool result; else 0."""
        if self.thinking != "current_turn" or self._thinking_provider is None:
            return 0
        if not self._saw_thinking:  # every message of a request was counted by raw_message first: none has any
            return 0
        for i in range(len(messages) - 1, 0, -1):
            m = messages[i]
            if m.role == "user" and not m.tool_results:
                return i
        return 0

    def raw_tools(self, tools: tuple[ToolSpec, ...] | list[ToolSpec]) -> int:
        if not tools:
            return 0
        o = self.overheads
        return o.tools_base + sum(o.per_tool + self.raw_text(t.canonical) for t in tools)

    def tools(self, tools: tuple[ToolSpec, ...] | list[ToolSpec]) -> int:
        return self.scaled(self.raw_tools(tools))

    def raw_segment(self, text: str) -> int:
        return (self.overheads.per_message + self.raw_text(text)) if text else 0

    def segment(self, text: str) -> int:
        """A system or context segment rendered as its own block/message."""
        return self.scaled(self.raw_segment(text))

    def request(self, req: NeutralRequest) -> int:
        """Tokens of a whole neutral request as the provider bills it: this format's rendering, less
        what the provider strips (:meth:`raw_unbilled`), calibrated (slope and offset)."""
        raw = self.overheads.per_request + self.raw_tools(req.tools)
        raw += self.raw_segment(req.system_text) + self.raw_segment(req.session_text)
        raw += sum(self.raw_message(m) for m in req.messages)
        if req.tail:
            raw += self.raw_text(req.tail) + (self.overheads.per_message if req.tail_mode() == "new" else 2)
        return self.calibrated(raw - self.raw_unbilled(req.messages))


__all__ = [
    "COUNT_CACHE",
    "ENCODINGS",
    "OVERHEADS",
    "THINKING_KEPT",
    "Calibration",
    "TokenCounter",
    "count_text",
    "get_encoding",
]
