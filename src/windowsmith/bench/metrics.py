"""Preparing a trace for the benchmark, and the per-call metrics.

* :func:`prepare` makes a trace safe to replay under every strategy (the same repaired messages for
  all of them), lists its model calls and, for each call, the *target identifiers*: the identifiers
  of the agent's next action (its assistant message: text and tool-call argument values) whose first
  appearance in the run was in an observation (a ``user`` or ``tool`` message) before the call. An
  identifier first seen in the system prompt, the tool definitions or an earlier assistant message is
  not a target: it did not come from the environment.
* :func:`recall` tells which targets a request holds: *strict* — the identifier is in the text of a
  message of the request (same extraction rules, :mod:`windowsmith.bench.identifiers`); *recoverable* —
  strict, or the identifier is in the content behind an ``artifact://`` reference in the request
  (followed transitively: a reference inside a referenced artifact is reachable too, as the agent
  can read it with ``read_result``; at most :data:`MAX_HOPS` artifacts per call), or in the value of
  a summary reference (``Built.recoverable``).

Recall of a strategy is the mean, over the calls that have at least one target, of the share of
targets held.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..hashing import sha256_hex
from ..model import Message, Text, ToolCall, ToolResult
from ..refs import ARTIFACT_RE as REF_RE
from ..refs import artifact_uri
from ..request import NeutralRequest
from .identifiers import action_identifiers, extract_identifiers, message_identifiers, message_text

MISSING_RESULT = "[bench: no result recorded in the trace]"


@dataclass
class PreparedRun:
    id: str
    source: str
    system: str | None
    tools: tuple[Any, ...]
    messages: tuple[Message, ...]
    calls: tuple[int, ...]  # indices of the assistant messages that are model calls
    targets: dict[int, frozenset[str]]
    native_tools: bool
    repairs: list[str] = field(default_factory=list)
    family: str = ""


def family_of(trace: Any) -> str:
    """The trace family a run is reported under: its format, with SWE-agent's version (0.x keeps
    actions in message text, 1.x uses native tool calls)."""
    fmt = getattr(trace, "format", "") or "unknown"
    if fmt == "swe-agent":
        version = (getattr(trace, "meta", None) or {}).get("version")
        if version is None:
            version = "1.x" if any(m.role == "tool" for m in trace.messages) else "0.x"
        return f"swe-agent-{version}"
    return fmt


def split_of(run_id: str) -> str:
    """``dev`` or ``validation``: a deterministic half of the runs, by a hash of the run id (tune on
    dev, report validation)."""
    import hashlib

    return "dev" if hashlib.sha256(run_id.encode("utf-8")).digest()[0] % 2 == 0 else "validation"


def sanitize(messages: Sequence[Message]) -> tuple[tuple[Message, ...], list[str]]:
    """Messages every strategy and the engine accept: no empty message, every tool call answered
    once, no result without a call, unique call ids. Each fix is listed."""
    out: list[Message] = []
    notes: list[str] = []
    open_calls: dict[str, str] = {}
    used: set[str] = set()
    rename: dict[str, str] = {}

    def close_open(where: int) -> None:
        if open_calls:
            out.append(Message("tool", tuple(ToolResult(cid, (Text(MISSING_RESULT),), True, name)
                                             for cid, name in open_calls.items())))
            notes.append(f"message {where}: {len(open_calls)} tool call(s) without a result answered with a placeholder")
            open_calls.clear()

    for i, m in enumerate(messages):
        if not m.content:
            notes.append(f"message {i}: empty {m.role} message dropped")
            continue
        if m.role == "tool":
            keep = []
            for r in m.tool_results:
                cid = rename.get(r.call_id, r.call_id)
                if cid in open_calls:
                    open_calls.pop(cid)
                    keep.append(r if cid == r.call_id else ToolResult(cid, r.content, r.is_error, r.name))
                else:
                    notes.append(f"message {i}: tool result for unknown or answered call {r.call_id!r} dropped")
            if keep:
                out.append(Message("tool", tuple(keep)))
            continue
        close_open(i)
        if m.role == "assistant" and m.tool_calls:
            blocks = []
            for b in m.content:
                if isinstance(b, ToolCall):
                    cid = b.id
                    if cid in used:
                        new = f"{cid}~{i}"
                        rename[cid] = new
                        notes.append(f"message {i}: duplicate tool call id {cid!r} renamed {new!r}")
                        b = ToolCall(new, b.name, b.arguments)
                    used.add(b.id)
                    open_calls[b.id] = b.name
                blocks.append(b)
            m = Message("assistant", tuple(blocks)) if rename else m
        out.append(m)
    return tuple(out), notes


def prepare(trace: Any) -> PreparedRun:
    msgs, notes = sanitize(trace.messages)
    native = any(m.tool_calls for m in msgs)
    calls = tuple(i for i, m in enumerate(msgs) if m.role == "assistant" and i > 0)
    callset = set(calls)
    first: dict[str, bool] = {}  # identifier -> first seen in an observation?
    for text in (trace.system or "", *(t.canonical for t in trace.tools)):
        for x in extract_identifiers(text):
            first.setdefault(x, False)
    targets: dict[int, frozenset[str]] = {}
    for i, m in enumerate(msgs):
        if i in callset:
            targets[i] = frozenset(x for x in action_identifiers(m) if first.get(x))
        obs = m.role in ("user", "tool")
        for x in message_identifiers(m):
            first.setdefault(x, obs)
    return PreparedRun(trace.id, getattr(trace, "source", ""), trace.system, tuple(trace.tools), msgs, calls,
                       targets, native, [*getattr(trace, "repairs", ()), *notes], family_of(trace))




def _artifact_refs(text: str) -> set[str]:
    """The ``artifact://`` references in ``text`` (the one pattern of :mod:`windowsmith.artifacts`)."""
    return {artifact_uri(s) for s in REF_RE.findall(text)} if "artifact://" in text else set()
_refs: dict[str, tuple[str, ...]] = {}
_blob_ids: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}  # ref -> (identifiers, references inside)
#: artifacts followed per call when looking for recoverable identifiers (references inside artifacts included)
MAX_HOPS = 2000
_text_ids: dict[str, frozenset[str]] = {}


def _message_refs(m: Message) -> tuple[str, ...]:
    got = _refs.get(m.digest)
    if got is None:
        t = message_text(m)
        got = tuple(sorted(_artifact_refs(t)))
        if len(_refs) > 100_000:
            _refs.clear()
        _refs[m.digest] = got
    return got


def _ids_of_text(text: str) -> frozenset[str]:
    got = _text_ids.get(text)
    if got is None:
        got = frozenset(extract_identifiers(text))
        if len(_text_ids) > 10_000:
            _text_ids.clear()
        _text_ids[text] = got
    return got


def recall(req: NeutralRequest, targets: frozenset[str], *, recoverable: frozenset[str] = frozenset(),
           resolve: Callable[[str], bytes | None] | None = None) -> tuple[int, int]:
    """``(strict, recoverable)``: how many of ``targets`` the request holds, by the module's rules."""
    s, r, _ = recall_reads(req, targets, recoverable=recoverable, resolve=resolve)
    return s, r


def recall_reads(req: NeutralRequest, targets: frozenset[str], *, recoverable: frozenset[str] = frozenset(),
                 resolve: Callable[[str], bytes | None] | None = None,
                 read: list[str] | None = None, missed: set[str] | None = None,
                 lost: set[str] | None = None) -> tuple[int, int, int]:
    """``(strict, recoverable, reads)``: as :func:`recall`, and how many referenced artifacts the agent
    would have to read (``read_result`` calls) to reach the targets that recoverable recall counts
    beyond strict: each artifact that holds a target not found before it, in the order followed (their
    references are appended to ``read`` when it is given, for :func:`~windowsmith.bench.run.reads_cost`).
    ``missed`` and ``lost``, when given, receive the targets strict recall missed and those recoverable recall
    missed too (``bench --misses``)."""
    if not targets:
        return 0, 0, 0
    remaining = set(targets)
    for m in reversed(req.messages):
        ids = message_identifiers(m)
        if not remaining.isdisjoint(ids):
            remaining -= ids
            if not remaining:
                return len(targets), len(targets), 0
    for text in (req.system_text, req.session_text, req.tail or ""):
        if text and remaining:
            remaining -= _ids_of_text(text)
    strict = len(targets) - len(remaining)
    if missed is not None:
        missed.update(remaining)
    reads = 0
    if remaining and recoverable:
        remaining -= recoverable
    if remaining and resolve is not None:
        refs: set[str] = set()
        for m in req.messages:
            refs.update(_message_refs(m))
        if req.tail and "artifact://" in req.tail:
            refs.update(_artifact_refs(req.tail))
        queue = deque(sorted(refs))
        seen = set(queue)
        while queue and remaining and len(seen) <= MAX_HOPS:
            ref = queue.popleft()
            cached = _blob_ids.get(ref)
            if cached is None:
                raw = resolve(ref)
                text = raw.decode("utf-8", "replace") if raw else ""
                cached = (frozenset(extract_identifiers(text)),
                          tuple(sorted(_artifact_refs(text))))
                _blob_ids[ref] = cached
            ids, nested = cached
            if not remaining.isdisjoint(ids):
                reads += 1
                if read is not None:
                    read.append(ref)
            remaining -= ids
            for r in nested:
                if r not in seen:
                    seen.add(r)
                    queue.append(r)
    if lost is not None:
        lost.update(remaining)
    return strict, len(targets) - len(remaining), reads


def is_blind(req: NeutralRequest, newest: Message | None, had_history: bool, before: Message | None = None) -> bool:
    """A *blind* call: the request lacks the newest user or tool message before the call (a tool
    message counts as present when one of its results is, by call id, however compressed; a user
    message when the request's last user message is the same message, or follows the same assistant
    message as in the trace (``before``), or its first 600 characters are at least 60% alike
    (compressed, redacted or offloaded by the strategy), or it names the ``artifact://`` of one of the message's
    text blocks (a strategy's view of it that keeps some of its lines, whatever they start with)),
    or its message list is empty while the trace had messages before the call."""
    if had_history and not req.messages:
        return True
    if newest is None:
        return False
    if newest.role == "tool":
        ids = {r.call_id for r in newest.tool_results}
        return not any(r.call_id in ids for m in req.messages if m.role == "tool" for r in m.tool_results)
    k = next((k for k in range(len(req.messages) - 1, -1, -1) if req.messages[k].role == "user"), None)
    if k is None:
        return True
    last_user = req.messages[k]
    if last_user.digest == newest.digest:
        return False
    if before is not None and k > 0 and req.messages[k - 1].digest == before.digest:
        return False
    a, b = message_text(last_user).strip(), message_text(newest).strip()
    if not (a or b) or (a[:64] == b[:64] != "" and len(a) >= len(b) and a.startswith(b[:200])):
        return False
    if "artifact://" in a:
        # a view of the message that names the artifact holding one of its text blocks byte for byte: shrunk, not
        # dropped (its kept lines need not start where the message does)
        own = {sha256_hex(t.text) for t in newest.content if isinstance(t, Text)}
        if own.intersection(REF_RE.findall(a)):
            return False
    # the same message, compressed, redacted or offloaded by the strategy: most of its head survives
    from difflib import SequenceMatcher

    return SequenceMatcher(None, a[:600], b[:600], autojunk=False).ratio() < 0.6


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100 * (len(s) - 1))))
    return float(s[k])


__all__ = ["MISSING_RESULT", "PreparedRun", "family_of", "is_blind", "percentile", "prepare", "recall", "recall_reads",
           "sanitize", "split_of"]
