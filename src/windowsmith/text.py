"""Cutting text to fit, in one place with one marker: head + tail of a text (``head_tail`` by tokens,
``elide`` by characters), the largest tool results of a message list (``clip_messages``), and the JSON
sniffing the compressors share. Every cut says exactly how much was cut:
``[… 1,234 lines / 56,789 chars elided …]``.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .model import Message, Text, ToolCall, ToolResult

if TYPE_CHECKING:
    from .tokens import TokenCounter

CountTokens = Callable[[str], int]

EXACT_COUNT_LIMIT = 2_000_000  # chars; above this the original token count is estimated from samples
SAMPLE_CHARS = 65_536  # chars per sample when a count is estimated


NOT_JSON = object()
JSON_PARSE_LIMIT = 64_000_000


def try_json(text: str) -> Any:
    if len(text) > JSON_PARSE_LIMIT:
        return NOT_JSON
    s = text.strip()
    if not s or s[0] not in "{[" or s[-1] not in "}]":
        return NOT_JSON
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        return NOT_JSON


# ---------------------------------------------------------------------------------------------------
# Head + tail, the fallback every compressor ends in
# ---------------------------------------------------------------------------------------------------


def elision_marker(lines: int, chars: int) -> str:
    """``[… 1,234 lines / 56,789 chars elided …]``: ``lines`` counts newline characters cut."""
    return f"[… {lines:,} lines / {chars:,} chars elided …]"


def _join(text: str, h: int, t: int) -> str:
    head, tail = text[:h], text[t:]
    sep = "" if not head or head.endswith("\n") else "\n"
    return f"{head}{sep}{elision_marker(text.count(chr(10), h, t), t - h)}\n{tail}"


def _cuts(text: str, n: int, head_fraction: float) -> tuple[int, int]:
    size = len(text)
    hn = int(n * head_fraction)
    tn = n - hn
    h, t = hn, size - tn
    if hn > 0:
        k = text.rfind("\n", max(0, h - hn // 4 - 1), h)
        if k >= 0:
            h = k + 1
    if tn > 0:
        k = text.find("\n", t, min(size, t + tn // 4 + 1))
        if k >= 0 and k + 1 < size:
            t = k + 1
    return h, max(h, t)


def chars_per_token(text: str, count_tokens: CountTokens) -> float:
    sample = text if len(text) <= 2 * SAMPLE_CHARS else text[:SAMPLE_CHARS] + text[-SAMPLE_CHARS:]
    return max(0.05, len(sample) / max(1, count_tokens(sample)))


def fits_cheaply(text: str, budget_tokens: int) -> bool:
    """True when ``text`` surely fits: a token covers at least one UTF-8 byte."""
    return len(text) <= budget_tokens and (text.isascii() or len(text.encode("utf-8", "replace")) <= budget_tokens)


def head_tail(text: str, budget_tokens: int, count_tokens: CountTokens, *, head_fraction: float = 0.5) -> str:
    """Keep the head and the tail of ``text`` within ``budget_tokens``, cut at line ends where possible,
    with a marker in between that states exactly how many newlines and characters were cut."""
    if budget_tokens <= 0:
        return ""
    if fits_cheaply(text, budget_tokens):
        return text
    size = len(text)
    if size <= EXACT_COUNT_LIMIT and count_tokens(text) <= budget_tokens:
        return text
    cpt = chars_per_token(text, count_tokens)
    if size > EXACT_COUNT_LIMIT and size / cpt < budget_tokens * 0.8 and count_tokens(text) <= budget_tokens:
        return text
    best = _join(text, 0, size)
    marker_tokens = count_tokens(best)
    if marker_tokens > budget_tokens:
        short = f"[… {size:,} chars elided …]"
        return short if count_tokens(short) <= budget_tokens else ""
    room = budget_tokens - marker_tokens
    lo, hi = 0, size  # lo fits, hi does not (the whole text does not fit)
    n = min(size - 1, int(room * cpt * 0.97))
    for _ in range(14):
        if n <= lo or n >= hi:
            n = (lo + hi) // 2
        if n <= lo:
            break
        cand = _join(text, *_cuts(text, n, head_fraction))
        used = count_tokens(cand)
        if used <= budget_tokens:
            best, lo = cand, n
            if used >= budget_tokens - max(2, budget_tokens // 100):
                break
        else:
            hi = n
        if hi - lo <= max(8, lo // 200):
            break
        # Interpolate on the tokens the kept text actually used.
        kept_tokens = max(1, used - marker_tokens)
        n = int(n * room / kept_tokens * (0.99 if used <= budget_tokens else 0.97))
    return best


# ---------------------------------------------------------------------------------------------------
# The identifiers a cut must not lose
# ---------------------------------------------------------------------------------------------------

#: Identifiers an agent's next action reuses: paths and file names, error names and codes, dotted /
#: snake_case (not a JSON object's field name: ``"first_name": …`` is the schema, not data) / UPPER_CASE /
#: _private / camelCase / acronym-led (``HTTPServer``) symbols, words with a digit
#: (``float64``), ids (capitals + digits, ``#123``, e-mail addresses, UUIDs, hex digests), ISO dates, numbers
#: of 3+ digits. Every alternative starts at a boundary and its repetitions are delimited, so a scan is
#: linear in the text.
_IDENT_RE = re.compile(
    r"(?P<path>(?<![\w.~/-])(?:[\w.~-]+)?(?:/[\w.-]+)+)"  # paths: src/a/b.py, /etc/hosts
    r"|(?P<error>\b[A-Z]\w*(?:Error|Exception|Warning)\b)"  # error names
    r"|(?P<email>(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+)"  # e-mail addresses
    r"|(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"  # UUIDs
    r"|(?P<date>(?<![\w-])\d{4}-\d{2}-\d{2}(?=T\d|(?!\w)))"  # ISO dates: 2024-05-23 (also a timestamp's date)
    r"|(?P<dotted>\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b)"  # dotted: models.py, os.path.join
    r"|(?P<snake>\b(?=\w{4})(?:[A-Za-z][A-Za-z0-9]*_\w*|_+[A-Za-z0-9]\w*)\b(?![\"']\s*:))"  # snake_case, UPPER_CASE, dir_, _private (not a JSON object's key)
    r"|(?P<camel>\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b|\b[A-Z]{2,}[a-z]\w*\b)"  # camelCase, CamelCase, HTTPServer
    r"|(?P<id>#[\w-]*\d[\w-]*"  # #W2378156
    r"|(?<!\d-)\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,12}\b"  # HAT170
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b)"  # digests
    r"|(?P<code>\b[A-Z]{1,3}\d{3,4}\b)"  # linter / error codes: E501, W0611
    r"|(?P<digit>\b(?=\w{4})[A-Za-z]+\d\w*\b)"  # words with a digit, 4+ characters: float64, sha256, number1
    r"|(?P<number>(?<![\w.])\d{3,}(?:\.\d+)?(?![\w]|\.\d))"  # numbers (a sentence's full stop may follow)
)
#: how much an identifier of each kind matters when an index cannot hold them all
_KIND_WEIGHT = {"error": 5, "code": 4, "path": 3, "dotted": 3, "camel": 2, "id": 2, "email": 2, "uuid": 2, "date": 2,
                "snake": 1, "digit": 1, "number": 0}
#: lines that report a failure: their identifiers rank first
_FAIL_LINE_RE = re.compile(r"(?im)^[^\n]*?(?:error|exception|traceback|fail|fatal|panic|denied|not found)[^\n]*")
IDENT_SCAN_CHARS = 400_000  # an index is built from at most this much of a text


def identifier_mentions(text: str) -> Iterator[tuple[str, str, bool, int]]:
    """Every mention of an identifier in ``text`` (its first ``IDENT_SCAN_CHARS``), in order: the identifier, its
    kind (a group name of ``_IDENT_RE``: ``path``, ``error``, ``number``, ...), whether the mention is on a line
    that reports a failure, and where it starts."""
    fails = [(m.start(), m.end()) for m in _FAIL_LINE_RE.finditer(text, 0, IDENT_SCAN_CHARS)]
    starts = [a for a, _ in fails]
    for m in _IDENT_RE.finditer(text, 0, IDENT_SCAN_CHARS):
        k = m.group(0).rstrip(".-")
        if not 3 <= len(k) <= 80 or "artifact://" in k:
            continue
        on_fail = False
        if fails:
            i = bisect.bisect_right(starts, m.start()) - 1
            on_fail = i >= 0 and m.start() < fails[i][1]
        yield k, m.lastgroup or "", on_fail, m.start()


def identifier_kinds(text: str) -> dict[str, tuple[str, bool]]:
    """Each identifier of ``text`` (once, in order of first appearance) with its kind (a group name of
    ``_IDENT_RE``: ``path``, ``error``, ``number``, ...) and whether one of its mentions is on a line that
    reports a failure."""
    out: dict[str, tuple[str, bool]] = {}
    for k, kind, on_fail, _ in identifier_mentions(text):
        prev = out.get(k)
        if prev is None or (on_fail and not prev[1]):
            out[k] = (prev[0] if prev else kind, on_fail)
    return out


def kind_weight(kind: str, on_fail: bool = False) -> int:
    """How much an identifier of ``kind`` matters when a cut cannot keep them all (``error`` 5 ... ``number`` 0),
    4 more when a mention of it is on a line that reports a failure."""
    return _KIND_WEIGHT.get(kind, 0) + (4 if on_fail else 0)


def identifiers(text: str, *, ranked: bool = False) -> list[str]:
    """The identifiers of ``text`` (see ``_IDENT_RE``), once each, in order of first appearance; ``ranked``:
    by importance instead (on a failure line first, then by kind: error names, paths, symbols, ids, numbers)."""
    if not ranked:
        return list(dict.fromkeys(k for m in _IDENT_RE.finditer(text, 0, IDENT_SCAN_CHARS)
                                  if 3 <= len(k := m.group(0).rstrip(".-")) <= 80 and "artifact://" not in k))
    kinds = identifier_kinds(text)
    order = {k: i for i, k in enumerate(kinds)}
    return sorted(kinds, key=lambda k: (-kind_weight(*kinds[k]), order[k]))


#: a numbered listing's line: its number, then a tab (``cat -n``), an arrow (Claude Code's Read), ``| `` (an editor's
#: view) or a colon (SWE-agent's viewer: ``1457:`` then the line as it is, so a blank line is a bare ``1553:`` and a
#: top-level definition follows the colon directly)
NUMBERED_LINE = re.compile(r"(?m)^ *(\d+)(?:\t|→|\| |:)")


def gutter_only(text: str) -> set[str]:
    """The line numbers of a numbered listing (``cat -n``, ``1457:`` views) in ``text`` that occur nowhere but in
    its gutter."""
    if "\t" not in text and ":" not in text and "→" not in text and "| " not in text:
        return set()
    gutter = set(NUMBERED_LINE.findall(text))
    if len(gutter) < 2:
        return set()
    return gutter - set(identifiers(NUMBERED_LINE.sub("", text)))


def line_ranges(numbers: Sequence[str]) -> str:
    """``lines 100-160, 162-583``: sorted numbers as runs of consecutive ones (a single number as itself)."""
    ns = sorted({int(n) for n in numbers})
    runs: list[str] = []
    i = 0
    while i < len(ns):
        j = i
        while j + 1 < len(ns) and ns[j + 1] == ns[j] + 1:
            j += 1
        runs.append(f"{ns[i]}-{ns[j]}" if j > i else str(ns[i]))
        i = j + 1
    return "lines " + ", ".join(runs)


_JSON_KEY_RE = re.compile(r'"([^"\\\n]{1,80})"\s*:')
_JSON_START_RE = re.compile(r"\s*[{\[]")


def json_keys_only(text: str, names: Sequence[str]) -> set[str]:
    """Those of ``names`` that ``text`` (JSON, by its first character) holds only as object keys (``"zip": …``)."""
    if not _JSON_START_RE.match(text):  # (not ``lstrip()``: a copy of a megabyte result to read one character)
        return set()
    seen: dict[str, int] = {}
    for m in _JSON_KEY_RE.finditer(text, 0, IDENT_SCAN_CHARS):
        seen[m.group(1)] = seen.get(m.group(1), 0) + 1
    return {k for k in names if k in seen and text.count(k, 0, IDENT_SCAN_CHARS) == seen[k]}


def identifier_index(full: str, view: str, budget_tokens: int, count_tokens: CountTokens) -> str:
    """A line naming the identifiers of ``full`` that its cut ``view`` lost, within ``budget_tokens``
    (``""`` if none were lost or none fit): ``[also in the full text: a/b.py, KeyError, 1458, …]``.

    The line numbers of a numbered listing (``cat -n``) that the text holds nowhere else are one entry of
    ranges, first (``lines 100-583``): a bare number per line told the agent nothing the ranges do not, at
    about two tokens each, and crowded the names out."""
    if budget_tokens < 16:
        return ""
    kept = set(identifiers(view))
    lost = [k for k in identifiers(full, ranked=True) if k not in kept]
    keys = json_keys_only(full, lost)
    if keys:  # a JSON record's keys are its shape, not names the next step passes (``address1``, ``zip``)
        lost = [k for k in lost if k not in keys]
    if not lost:
        return ""
    gutter = gutter_only(full)
    if gutter:
        lines = [k for k in lost if k in gutter]
        if len(lines) > 1:
            lost = [line_ranges(lines), *(k for k in lost if k not in gutter)]
    head = "[also in the full text: "

    def line(out: Sequence[str]) -> str:
        more = len(lost) - len(out)
        return head + ", ".join(out) + (f" … {more:,} more" if more else "") + "]"

    out = fit_entries(lost, budget_tokens, count_tokens, head,
                      lambda out: len(out) == len(lost) or count_tokens(line(out)) <= budget_tokens)
    return line(out) if out else ""


def fit_entries(entries: Sequence[str], budget_tokens: int, count_tokens: CountTokens, head: str,
                fits: Callable[[Sequence[str]], bool]) -> list[str]:
    """The longest head of ``entries`` for a ``head + ", ".join(...) + "]"`` line within ``budget_tokens``: a
    greedy sum of each entry's count, then shortened while ``fits`` (the exact check of the rendered line)
    says no. Shared by the offload index (:func:`identifier_index`) and the emergency index."""
    out: list[str] = []
    used = count_tokens(head + "]")
    for k in entries:
        t = count_tokens(k + ", ")
        if used + t > budget_tokens:
            break
        out.append(k)
        used += t
    while out and not fits(out):
        out.pop()
    return out


def named_text(m: Message, *, results: bool = False) -> str:
    """What a message names: its text blocks and its tool calls' argument values (not the schema's keys);
    with ``results``, its tool results' text too."""
    parts: list[str] = []
    for b in m.content:
        if isinstance(b, Text):
            parts.append(b.text)
        elif isinstance(b, ToolCall):
            parts.extend(leaf_values(dict(b.arguments)))
        elif results and isinstance(b, ToolResult):
            parts.append(b.text)
    return "\n".join(parts)


def elide(text: str, keep_chars: int) -> str:
    """Head + tail of ``text`` with a marker that says exactly how much was cut."""
    if len(text) <= keep_chars:
        return text
    head = keep_chars * 2 // 3
    tail = keep_chars - head
    cut = text[head: len(text) - tail]
    marker = f"\n[… windowsmith elided {cut.count(chr(10)) + 1} lines / {len(cut):,} chars …]\n"
    return text[:head] + marker + text[len(text) - tail:]


def _with_text(m: Message, bi: int, text: str) -> Message:
    """``m`` with block ``bi`` (a tool result or a text block) holding ``text`` instead."""
    block = m.content[bi]
    assert isinstance(block, ToolResult | Text)
    new: Text | ToolResult = (ToolResult(block.call_id, (Text(text),), block.is_error, block.name)
                              if isinstance(block, ToolResult) else Text(text))
    return Message(m.role, (*m.content[:bi], new, *m.content[bi + 1:]))


def clip_messages(messages: tuple[Message, ...], cap: int, counter: TokenCounter, *,
                  texts: bool = False, floor_chars: int = 128, min_tokens: int = 64, index: bool = False,
                  ) -> tuple[tuple[Message, ...], int, list[str]]:
    """Cut the largest tool results (``texts``: or any text block) head + tail until the messages fit ``cap``
    (scaled) tokens: none below ``floor_chars`` characters (the marker aside), none of fewer than ``min_tokens``.
    ``index``: a cut keeps half its room for head and tail and gives the rest to a line naming the identifiers
    they lost (:func:`identifier_index`: ids, paths, names in the middle of a record), each cut taken from the
    block's text as given; the room the cuts leave under ``cap`` then names what the others lost. Returns the
    messages, their raw tokens and the call ids of the results cut."""
    msgs = list(messages)
    clipped: list[str] = []
    originals: dict[tuple[int, int], tuple[str, int]] = {}  # (index): each cut block's text as given, its size
    named: set[tuple[int, int]] = set()  # (index): the cut blocks whose text names what they lost
    done: set[tuple[int, int]] = set()  # (index): blocks no further cut makes smaller
    raw = sum(counter.raw_message(m) for m in msgs)

    def put(mi: int, bi: int, text: str) -> None:
        nonlocal raw
        before = msgs[mi]
        msgs[mi] = _with_text(before, bi, text)
        raw += counter.raw_message(msgs[mi]) - counter.raw_message(before)

    for _ in range(64 + sum(len(m.content) for m in msgs)):
        if raw * counter.scale <= cap:
            break
        # find the largest text that may be cut
        best: tuple[int, int, int] | None = None
        for mi, m in enumerate(msgs):
            for bi, b in enumerate(m.content):
                if (isinstance(b, ToolResult) or (texts and isinstance(b, Text) and b.text)) and (mi, bi) not in done:
                    size = counter.raw_text(b.text)
                    if best is None or size > best[0]:
                        best = (size, mi, bi)
        if best is None or best[0] < min_tokens:
            break
        size, mi, bi = best
        over = raw - cap / counter.scale
        keep_tokens = max(min_tokens // 2, int(size - over - 64))
        block = msgs[mi].content[bi]
        assert isinstance(block, ToolResult | Text)
        text = block.text
        if index:
            text, full = originals.setdefault((mi, bi), (text, size))
            keep_chars = max(floor_chars, int(len(text) * keep_tokens / max(1, full)))
            kept = elide(text, max(floor_chars, keep_chars // 2))
            names = identifier_index(text, kept, keep_tokens - counter.raw_text(kept) - 1, counter.raw_text)
            new_text = f"{kept}\n{names}" if names else elide(text, keep_chars)
            if counter.raw_text(new_text) >= size:
                done.add((mi, bi))
                continue
            if names:
                named.add((mi, bi))
            else:
                named.discard((mi, bi))
        else:
            keep_chars = max(floor_chars, int(len(text) * keep_tokens / max(1, size)))
            new_text = elide(text, keep_chars)
        put(mi, bi, new_text)
        if isinstance(block, ToolResult) and block.call_id not in clipped:
            clipped.append(block.call_id)
    # the room the cuts left under ``cap`` (a floor keeps more than the overflow asked) names what they lost
    for (mi, bi), (text, _) in originals.items():
        left = int(cap / counter.scale) - raw - 2
        if left < 16:
            break
        current = msgs[mi].content[bi]
        assert isinstance(current, ToolResult | Text)
        names = identifier_index(text, current.text, left - 1, counter.raw_text) if (mi, bi) not in named else ""
        if names:
            before, was = msgs[mi], raw
            put(mi, bi, f"{current.text}\n{names}")
            if raw * counter.scale > cap:
                msgs[mi], raw = before, was
    return tuple(msgs), raw, clipped


__all__ = ["ACTION_RE", "EXACT_COUNT_LIMIT", "JSON_PARSE_LIMIT", "NOT_JSON", "NUMBERED_LINE", "SAMPLE_CHARS", "CountTokens", "acts",
           "chars_per_token", "clip_messages",
           "compact_json",
           "elide", "elision_marker", "fits_cheaply", "head_tail", "identifier_index", "identifier_kinds",
           "identifier_mentions", "identifiers", "kind_weight", "try_json"]


#: what marks an assistant reply without tool calls as acting in its text: a fenced command block, a ReAct
#: ``Action:`` line, or an action tag (``<execute_bash>``, ``<function=…>``, ``<tool_call>``, ``<invoke …>``)
ACTION_RE = re.compile(r"```|^[ \t]*Action[ \t]*:|<(?:execute_\w+|function=|tool_call\b|invoke\b)", re.M)


def acts(reply: Message) -> bool:
    """Whether an assistant reply without tool calls acts in its text (:data:`ACTION_RE`): the user message that
    answers it is then the action's output, an observation, not the user speaking."""
    return ACTION_RE.search(reply.text) is not None


#: a fenced block: a language tag (on the fence's own line), then the body up to the closing fence or the text's end
FENCED_RE = re.compile(r"```(?:[\w+-]*[ \t]*\n)?(.*?)(?:```|\Z)", re.S)
#: characters an acting reply's line (:func:`action_line`) keeps for its reasoning's head at least
ACTION_HEAD_CHARS = 24


def action_line(reply: Message, chars: int) -> str | None:
    """One line of at most ``chars`` characters for an assistant reply that acts in its text (:func:`acts`) and is
    longer than that: the head of its reasoning, then its action (the last fenced block, ``Action:`` line or action
    tag, fences and language tag left out), which a head alone cuts off: the command a text-protocol agent ran is at
    the end of its reply (mini-swe-agent's ``THOUGHT: …`` then a ```` ```bash ```` block). None for any other message."""
    text = reply.text
    if reply.role != "assistant" or not acts(reply) or len(" ".join(text.split())) <= chars:
        return None
    fences = list(FENCED_RE.finditer(text))
    tags = [m for m in ACTION_RE.finditer(text) if not text.startswith("```", m.start())]
    if fences and (not tags or fences[-1].start() > tags[-1].start()):
        at, action = fences[-1].start(), fences[-1].group(1)  # the last block, fences and language tag left out
    else:
        at = tags[-1].start()
        action = text[at:]
    action = " ".join(action.split())
    head = " ".join(text[:at].split())
    keep = max(chars - ACTION_HEAD_CHARS, chars // 2)
    action = action if len(action) <= keep else action[:keep - 1] + "…"
    room = chars - len(action) - 3
    head = head if len(head) <= room else (head[:room - 1] + "…" if room > 1 else "")
    return f"{head} ⟶ {action}" if head else action


def compact_json(text: str) -> str | None:
    """``text`` re-serialized without insignificant whitespace when it is a JSON object or array and that
    is shorter; else None. Key order, values and non-ASCII characters are kept as they are."""
    s = text.strip()
    if not s or s[0] not in "[{" or s[-1] not in "]}":
        return None
    try:
        value = json.loads(s)
    except ValueError:
        return None
    out = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return out if len(out) < len(text) else None


def leaf_values(v: Any) -> Iterator[str]:
    """The leaf values of a JSON-like value (tool-call arguments), as text: strings, and numbers written out;
    not the mappings' keys, booleans or nulls."""
    if isinstance(v, str):
        yield v
    elif isinstance(v, bool) or v is None:
        return
    elif isinstance(v, int | float):
        yield str(v)
    elif isinstance(v, Mapping):
        for x in v.values():
            yield from leaf_values(x)
    elif isinstance(v, list | tuple):
        for x in v:
            yield from leaf_values(x)
