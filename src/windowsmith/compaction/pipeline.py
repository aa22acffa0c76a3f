"""The compaction pipeline: mask → summarize → emergency truncation, cheapest first, each at most once.

The engine calls :meth:`Compactor.run` before the final assembly of a build (and on demand). Each
stage appends one ``compaction`` record to the log carrying everything replay needs (fold lines,
summary text, work log), so the view is a pure function of the log and a resumed session never
re-runs a summarizer. The stages:

1. **mask** — exchanges (a tool call with its results) older than the last ``keep_turns`` exchanges
   fold into one line each: ``[turn 12] run_tests(path=tests/) → 3 failed: … (artifact://<sha256>)``;
   the full result is put in the blob store first (a result offloaded at ingest already is: its footer
   names the artifact). The record maps each call id to its result's artifact (``calls``), which the
   summary's references use. In the same batch, every image (in a user message or a tool result) that
   ``image_keep_turns`` assistant turns have followed becomes a text stub,
   ``[image: <caption> (<media type>, <bytes>) (artifact://<sha256>)]``, its bytes (decoded base64, or
   the URL's text) stored first; the record lists each stub (log seq, block path, text) so replay needs
   nothing else, and the log keeps the image. An image inside a folded exchange is named by its stub in
   the fold line. The batch is applied only when it saves at least ``mask_min_tokens`` (hysteresis) and
   holds ``mask_batch`` exchanges, or images saving that much on their own (or the request is at the
   summary threshold): each rewrite of old history invalidates the provider's prompt cache from the
   first change on.
2. **summary** — when the request passes ``summarize_at``, the oldest span (after the pinned first
   request) is replaced by a structured summary that absorbs the previous one; lessons are stored as
   ``meta`` ``lesson`` events with provenance. Bad output (exception, timeout, empty, echo, error text,
   not shorter) is detected: a ``failed`` record is written and the next stage runs.
3. **emergency** — no model: keep the pinned request, the summary, a work log of one line per
   dropped exchange and the last ``emergency_keep`` messages.

When to compact is decided on the counted size of the whole request (tools included) and the
billed size of the last call, plus a cost model: masking below the window-pressure threshold only
happens when the cache-read tokens it saves over ``expected_turns`` turns outweigh the one-time
cache rewrite it causes (priced with the model's input, cache-write and cache-read prices).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import urllib.parse
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..assemble import Action
from ..errors import ConfigError
from ..model import Image, Message, Text, ToolCall, ToolResult
from ..state import message_images, stub_images
from .base import Summary
from .references import OFFLOAD_RE, extract_refs, format_args, merge_refs, result_keys
from .summarizer import OfflineSummarizer, check_summary, render_transcript

if TYPE_CHECKING:
    from ..budget import Budget
    from ..registry import ModelSpec
    from ..state import SessionState, Unit
    from ..tokens import TokenCounter

STAGES: tuple[str, ...] = ("mask", "summary", "emergency")


@dataclass(frozen=True)
class CompactionConfig:
    """When and how hard to compact. Fractions are of the available budget (window - output - slack).

    Defaults tuned with ``windowsmith bench`` on the shared traces (README).
    ``keep_turns``: the newest exchanges never masked; ``mask_batch``: fewest exchanges folded at once. ``mask_at``: above this fill, masking runs
    whenever its batch is big enough; below it only when the cost model says it pays.
    ``mask_min_tokens``: the hysteresis — a batch must save at least this many tokens (default: 8%
    of the available budget, at least 512). ``summarize_at``: fill that triggers a summary (default:
    ``BudgetConfig.compact_at``). ``keep_ratio``: after a summary or emergency truncation the verbatim
    history aims at this share (masking keeps at least two exchanges). ``summary_target``: a summary
    brings the whole request down to this share. ``summary_tokens``: output budget reserved for a
    summary (at most 12% of the available budget). ``mask_low_water``: a mask batch due because the
    request reached ``summarize_at`` folds deeper (keeps ``keep_ratio * mask_low_water`` verbatim), and is
    skipped for the summary when even that would leave the request above ``mask_at``: at the ceiling,
    one real compaction beats a small cache-breaking batch every turn.
    ``emergency_keep``: messages kept verbatim by emergency truncation (fewer when they would leave the
    request above ``summary_target``, the newest unit always; so a rebuild never truncates again). ``expected_turns``: remaining
    turns the cost model assumes. ``image_keep_turns``: an image (in a user message or a tool result)
    is replaced by a text stub naming it and its artifact once this many assistant turns followed it,
    in a mask batch (``None``: never). ``enabled=False`` turns proactive compaction off (the assembler
    still truncates to fit).
    """

    enabled: bool = True
    keep_turns: int = 12
    mask_batch: int = 4
    mask_at: float = 0.6
    mask_min_tokens: int | None = None
    summarize_at: float | None = None
    keep_ratio: float = 0.5
    mask_low_water: float = 0.6  # near the summary threshold, mask keeps this share of keep_ratio verbatim
    summary_target: float = 0.5
    summary_tokens: int = 2048
    emergency_keep: int = 6
    expected_turns: int = 10
    cost_aware: bool = True
    fold_chars: int = 160
    fold_keys: int = 12  # identifiers (ids, paths, error names, symbols) a fold keeps from its result
    extract_lessons: bool = True
    work_log_ratio: float = 0.08  # the work log of emergency truncations keeps its newest lines within this share
    image_keep_turns: int | None = 3  # images stay this many assistant turns, then become text stubs; None: always

    def __post_init__(self) -> None:
        if self.keep_turns < 1:
            raise ConfigError(f"keep_turns must be >= 1 (the newest exchange is never folded), got {self.keep_turns}")
        if not 0 < self.mask_at <= 1:
            raise ConfigError(f"mask_at is a fraction of the available budget in (0, 1], got {self.mask_at}")
        if self.summarize_at is not None and not 0 < self.summarize_at <= 1:
            raise ConfigError(f"summarize_at is a fraction in (0, 1], got {self.summarize_at}")
        if not 0.05 <= self.keep_ratio < 1:
            raise ConfigError(f"keep_ratio must be in [0.05, 1), got {self.keep_ratio}")
        if self.summary_tokens < 64 or self.emergency_keep < 1 or self.expected_turns < 0:
            raise ConfigError("summary_tokens must be >= 64, emergency_keep >= 1 and expected_turns >= 0")
        if self.image_keep_turns is not None and self.image_keep_turns < 1:
            raise ConfigError(f"image_keep_turns must be >= 1 (the model sees an image at least once) or None "
                              f"(images are never replaced), got {self.image_keep_turns}")

    def min_saving(self, available: int) -> int:
        return self.mask_min_tokens if self.mask_min_tokens is not None else max(512, int(available * 0.08))


@dataclass
class CompactionResult:
    """What one compaction pass did (also recorded in the log and the next manifest)."""

    actions: list[Action] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.stages)

    def describe(self) -> str:
        if not self.actions:
            return f"nothing to compact (the request is {self.tokens_before:,} tokens)"
        lines = [f"compacted the context: {self.tokens_before:,} → {self.tokens_after:,} tokens"]
        lines += [f"- {a.kind}: {a.reason} ({a.tokens_before:,} → {a.tokens_after:,})" for a in self.actions]
        return "\n".join(lines)


@dataclass(frozen=True)
class _Fold:
    unit: int
    first_seq: int
    last_seq: int
    text: str
    saving: int  # raw tokens
    blobs: tuple[tuple[str, bytes], ...]  # (sha, bytes) to store before the record is written
    calls: Mapping[str, str] = field(default_factory=dict)  # call id → artifact sha of its full result
    artifacts: tuple[str, ...] = ()  # every artifact the line links


@dataclass(frozen=True)
class _UnitImages:
    """The image stubs planned for one unit."""

    unit: int
    first_seq: int
    last_seq: int
    saving: int  # raw tokens
    stubs: tuple[dict[str, Any], ...]  # record entries: seq, at, text, artifact
    blobs: tuple[tuple[str, bytes], ...]


class ImageStub(NamedTuple):
    """The text that stands for an image once it has aged out of the context, and what it links."""

    text: str
    sha: str
    raw: bytes  # what the artifact holds: the decoded image, or the URL's text


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data)
    except (binascii.Error, ValueError):
        return data.encode("utf-8")  # not base64 after all: keep the text as given


def image_stub(image: Image) -> ImageStub:
    """``[image: <caption> (<media type>, <size>) (artifact://<sha>)]``, and the bytes behind it.

    Inline images (base64, or a ``data:`` URL) store their decoded bytes; a URL image stores the URL."""
    media = image.media_type
    if image.data is not None:
        raw, what = _b64(image.data), None
    elif image.url is not None and image.url.startswith("data:"):
        head, _, payload = image.url.partition(",")
        media = media or head[5:].split(";")[0] or None
        raw = _b64(payload) if head.endswith(";base64") else urllib.parse.unquote_to_bytes(payload)
        what = None
    else:
        url = image.url or ""
        raw, what = url.encode("utf-8"), f"at {url if len(url) <= 200 else url[:199] + '…'}"
    if what is None:
        what = f"{media or 'image'}, {len(raw):,} bytes"
    sha = hashlib.sha256(raw).hexdigest()
    caption = " ".join((image.caption or "").split())
    if len(caption) > 200:
        caption = caption[:199] + "…"
    desc = f"{caption} ({what})" if caption else what
    return ImageStub(f"[image: {desc} (artifact://{sha})]", sha, raw)


def _has_images(u: Unit) -> bool:
    return any(next(message_images(m), None) is not None for m in u.messages)


def _preview(text: str, n: int) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "(empty)"
    errs = [ln for ln in lines if any(w in ln for w in ("Error", "FAILED", "failed", "error:", "Exception", "Traceback"))]
    head = errs[0] if errs else lines[0]
    more = len(lines) - 1
    out = " ".join(head.split())
    if len(out) > n:
        out = out[: n - 1] + "…"
    return out + (f" … (+{more} lines)" if more > 0 else "")


class Folded(NamedTuple):
    """A fold line and what it points at."""

    text: str
    blobs: list[tuple[str, bytes]]  # (sha, bytes) to store before the record is written
    calls: dict[str, str]  # tool-call id → sha of the artifact holding that call's full result
    artifacts: list[str]  # every artifact the line links, in order, once each


def fold_line(turn: int, unit: Unit, *, chars: int = 160, keys: int = 12,
              originals: Mapping[str, ToolResult] | None = None) -> Folded:
    """One line per tool call of an exchange unit, call and result together, with the result's artifact.

    A result offloaded at ingest already has its artifact (named by its footer); any other result's text is
    stored now. ``originals``: the results as logged, by call id, in case the view's copy was rewritten."""
    calls: list[ToolCall] = []
    said = ""
    results: dict[str, ToolResult] = {}
    for m in unit.messages:
        for b in m.content:
            if isinstance(b, ToolCall):
                calls.append(b)
            elif isinstance(b, ToolResult):
                results[b.call_id] = b
            elif isinstance(b, Text) and m.role == "assistant" and b.text.strip():
                said = b.text
    if originals:
        results.update((k, v) for k, v in originals.items() if k in results)
    blobs: list[tuple[str, bytes]] = []
    mapping: dict[str, str] = {}
    links: list[str] = []
    parts = []
    for c in calls:
        r = results.get(c.id)
        if r is None:
            parts.append(f"{c.name}({format_args(c.arguments)}) → (no result)")
            continue
        text = r.text
        status = "error: " if r.is_error else ""
        images = [image_stub(b) for b in r.content if isinstance(b, Image)]  # named by their stubs, never inlined
        blobs.extend((im.sha, im.raw) for im in images)
        shown = " ".join(im.text for im in images)
        if images and not text.strip():
            mapping[c.id] = images[0].sha
            links.extend(im.sha for im in images)
            parts.append(f"{c.name}({format_args(c.arguments)}) → {status}{shown}")
            continue
        found = OFFLOAD_RE.search(text)
        if found:
            sha = found.group(1) or found.group(2)  # offloaded at ingest: the artifact holds the full original
        else:
            raw = text.encode("utf-8")
            sha = hashlib.sha256(raw).hexdigest()
            blobs.append((sha, raw))
        mapping[c.id] = sha
        links.append(sha)
        links.extend(im.sha for im in images)
        preview = _preview(text, chars)
        extra = [k for k in result_keys(text, keys) if k not in preview] if keys else []
        more = f" [keys: {', '.join(extra)}]" if extra else ""
        more += f" {shown}" if shown else ""
        parts.append(f"{c.name}({format_args(c.arguments)}) → {status}{preview}{more} (artifact://{sha})")
    prefix = f"[turn {turn}] "
    if said:
        s = " ".join(said.split())
        prefix += f"«{s if len(s) <= 100 else s[:99] + '…'}» "
    return Folded(prefix + "; ".join(parts), blobs, mapping, list(dict.fromkeys(links)))


def _is_exchange(u: Unit) -> bool:
    return bool(u.messages) and u.messages[0].role == "assistant" and bool(u.messages[0].tool_calls)


class Compactor:
    """Runs the stages for one session. Keeps an incremental scan so a build costs O(new units)."""

    def __init__(self, config: CompactionConfig | None = None, summarizer: Any = None) -> None:
        self.config = config or CompactionConfig()
        self.summarizer = summarizer if summarizer is not None else OfflineSummarizer()
        self._scan_next = 0
        self._scan_turn = 0
        self._turns: list[int] = []  # turn number of each scanned unit
        self._image_next = 0
        self._image_units: set[int] = set()  # units that may still hold an image
        self._plan_key: tuple[int, int, int] | None = None  # (first visible unit, compaction records, counter)
        self._planned: list[_Fold] = []  # folds planned for the units before _planned_upto
        self._planned_upto = 0

    # ------------------------------------------------------------------ sizes

    def _turn_numbers(self, state: SessionState) -> list[int]:
        # units only grow, and a fold keeps its unit's place and role: the scan is incremental
        for u in state.units[self._scan_next:]:
            if u.messages and (u.messages[0].role == "assistant" or u.folded):
                self._scan_turn += 1
            self._turns.append(self._scan_turn)
        self._scan_next = len(state.units)
        return self._turns

    def plan_mask(self, state: SessionState, counter: TokenCounter, counts: Sequence[int],
                  keep_raw: float | None = None) -> list[_Fold]:
        """Folds for every unfolded exchange older than the last ``keep_turns`` exchanges (or, in a small
        window, older than the newest ``keep_raw`` tokens of exchanges; at least two stay) that gets shorter."""
        units = state.units
        turns = self._turn_numbers(state)
        seen = 0
        kept = 0
        limit = None
        for i in range(len(units) - 1, -1, -1):
            if _is_exchange(units[i]) or units[i].folded:
                seen += 1
                kept += counts[i] if i < len(counts) else 0
                if seen >= self.config.keep_turns or (keep_raw is not None and seen >= 2 and kept > keep_raw):
                    limit = i
                    break
        if limit is None:
            return []
        lo = state.first_visible_unit()
        # incremental: closed units never change and the view changes only with a compaction record, so the
        # folds planned for units [lo, upto) stay valid until then; a build plans only the units that aged
        key = (lo, len(state.compactions), id(counter))
        if key != self._plan_key:
            self._plan_key, self._planned, self._planned_upto = key, [], lo
        if limit < self._planned_upto:
            self._planned = [f for f in self._planned if f.unit < limit]
            self._planned_upto = limit
        end = min(limit, len(counts))  # a unit the history layer did not count yet is planned next time
        for i in range(max(self._planned_upto, lo), end):  # never a unit before the view
            u = units[i]
            if u.folded or u.pinned or u.is_open or not _is_exchange(u):
                continue
            fl = fold_line(turns[i], u, chars=self.config.fold_chars, keys=self.config.fold_keys,
                           originals=_originals(state, u))
            new = counter.raw_message(Message("assistant", (Text(fl.text),)))
            saving = counts[i] - new
            if saving > 0:
                self._planned.append(_Fold(i, u.first_seq, u.last_seq, fl.text, saving, tuple(fl.blobs), fl.calls,
                                           tuple(fl.artifacts)))
        self._planned_upto = max(self._planned_upto, end)
        return list(self._planned)

    def plan_images(self, state: SessionState, counter: TokenCounter, counts: Sequence[int], *,
                    skip: Collection[int] = ()) -> list[_UnitImages]:
        """Text stubs for the images of every visible unit that ``image_keep_turns`` assistant turns (or more)
        have followed; units in ``skip`` (folded by the same batch) are left to their fold."""
        keep = self.config.image_keep_turns
        if keep is None:
            return []
        units = state.units
        turns = self._turn_numbers(state)
        for i in range(max(0, self._image_next - 1), len(units)):  # the last unit may have grown since
            if _has_images(units[i]):
                self._image_units.add(i)
        self._image_next = len(units)
        lo = state.first_visible_unit()
        now = turns[-1] if turns else 0
        out = []
        for i in sorted(self._image_units):
            u = units[i]
            if u.folded or (i < lo and not u.pinned) or not _has_images(u):
                self._image_units.discard(i)  # folded, compacted away or already stubbed: for good
                continue
            if now - turns[i] < keep:
                break  # turn numbers only grow: every later unit is younger
            if i in skip or u.is_open:
                continue
            seqs = [q for q, _ in state.span_messages(u.first_seq, u.last_seq)]
            msgs = list(u.messages)
            stubs: list[dict[str, Any]] = []
            blobs: list[tuple[str, bytes]] = []
            for k, m in enumerate(u.messages[: len(seqs)]):  # a repair message after them holds no image
                paths: dict[tuple[int, ...], str] = {}
                for path, img in message_images(m):
                    st = image_stub(img)
                    paths[path] = st.text
                    stubs.append({"seq": seqs[k], "at": list(path), "text": st.text, "artifact": st.sha})
                    blobs.append((st.sha, st.raw))
                if paths:
                    msgs[k] = stub_images(m, paths)
            old = counts[i] if i < len(counts) else sum(counter.raw_message(m) for m in u.messages)
            saving = old - sum(counter.raw_message(m) for m in msgs)
            if stubs and saving > 0:
                out.append(_UnitImages(i, u.first_seq, u.last_seq, saving, tuple(stubs), tuple(blobs)))
        return out

    # ------------------------------------------------------------------ the pass

    def run(
        self,
        session: Any,
        *,
        size: int,
        counts: Sequence[int],
        counter: TokenCounter,
        budget: Budget,
        spec: ModelSpec,
        compact_at: float,
        breaker: set[str],
        force: bool = False,
        harder: bool = False,
        reason: str = "",
    ) -> CompactionResult:
        """Run the stages that are due (all of them when ``force``), each at most once per ``breaker``; a
        mask that did not run before a successful summary is checked once more after it.

        ``size``: the request's counted (or billed, if larger) tokens before compaction; ``counts``:
        raw tokens of each unit, as the history layer counted them.
        """
        cfg = self.config
        state: SessionState = session.state
        avail = budget.available
        scale = counter.scale
        res = CompactionResult(tokens_before=size, tokens_after=size)
        summarized_before = "summary" in breaker
        keep_ratio = cfg.keep_ratio * (0.7 if harder else 1.0)
        summarize_at = cfg.summarize_at if cfg.summarize_at is not None else compact_at
        why = reason or f"the request is {size:,} tokens, {size / avail:.0%} of the {avail:,} available"

        # 1. mask: fold old exchanges, replace aged images by text stubs, in one batch
        def mask(size: int) -> int:
            if "mask" in breaker or not (force or harder or size >= cfg.mask_at * avail or cfg.cost_aware):
                return size
            # low water: a batch due because a summary is near folds deeper, so the next one is turns away
            # instead of one small batch (one more cache rewrite) every turn or two at the ceiling
            deep = cfg.mask_low_water if size >= summarize_at * avail else 1.0
            folds = self.plan_mask(state, counter, counts, keep_raw=keep_ratio * deep * avail / scale)
            images = self.plan_images(state, counter, counts, skip={f.unit for f in folds})
            edits: list[_Fold | _UnitImages] = sorted([*folds, *images], key=lambda x: x.unit)
            image_saved = sum(x.saving for x in images) * scale
            saved = int(sum(f.saving for f in folds) * scale + image_saved)
            pressure = size >= cfg.mask_at * avail
            pays, economics = self._mask_pays(edits, counts, scale, spec)
            # hysteresis: a batch of at least mask_batch exchanges (or images) saving min_saving tokens (any batch
            # when the alternative is a summary), so the cache prefix breaks every few turns at most
            floor = cfg.min_saving(avail)
            near_summary = size >= summarize_at * avail
            big_enough = saved >= floor and (len(folds) >= cfg.mask_batch or near_summary or image_saved >= floor)
            if near_summary and not (force or harder) and size - saved >= cfg.mask_at * avail:
                big_enough = False  # folding cannot make real room any more: let the summary do it, once
            if edits and ((force or harder) or (big_enough and (pressure or pays))):
                breaker.add("mask")
                for e in edits:
                    for _sha, raw in e.blobs:
                        session.engine.artifacts.put(raw, session_id=session.id)
                trigger = "on demand" if force else ("window pressure" if pressure else "cost model: pays back")
                stubs = [st for x in images for st in x.stubs]
                what = []
                if folds:
                    what.append(f"{len(folds)} exchange(s) older than the last {cfg.keep_turns} folded")
                if stubs:
                    what.append(f"{len(stubs)} image(s) older than {cfg.image_keep_turns} turn(s) replaced by text stubs")
                rec = {
                    "type": "mask",
                    "folds": [{"first_seq": f.first_seq, "last_seq": f.last_seq, "text": f.text,
                               "artifacts": list(f.artifacts), "calls": dict(f.calls)} for f in folds],
                    **({"images": stubs} if stubs else {}),
                    "saved_tokens": saved,
                    "reason": f"{why}; {trigger}; {'; '.join(what)}",
                    **economics,
                }
                session._append("compaction", rec)
                before = size
                size -= saved
                res.stages.append("mask")
                res.actions.append(Action("mask", "history", rec["reason"], before, size,
                                          {"folds": len(folds), **({"images": len(stubs)} if stubs else {}),
                                           "first_seq": edits[0].first_seq, "last_seq": max(x.last_seq for x in edits),
                                           "record_seq": state.seq, **economics}))
            return size

        size = mask(size)

        # 2. summary
        failed = False
        if "summary" not in breaker and (force or harder or size >= summarize_at * avail):
            sbudget = min(cfg.summary_tokens, max(256, int(0.12 * avail)))
            fixed_raw, pinned_raw = _fixed_raw(state, counter, size, scale)
            target = int(cfg.summary_target * (0.7 if harder else 1.0) * avail / scale - fixed_raw - pinned_raw - sbudget)
            span = self._summary_span(state, counter, max(0, target), force=force or harder)
            if span is not None and not (force or harder):
                # hysteresis: a summary rewrites the cache from the pinned request on; make it count
                span_raw = sum(counts[span[0]:span[1]]) - (0 if state.summary else sbudget)
                if span_raw * scale < cfg.min_saving(avail):
                    span = None
            if span is not None:
                breaker.add("summary")
                lo, cut = span
                before = size
                outcome = self._summarize(session, counter, lo, cut, why, sbudget)
                if isinstance(outcome, str):
                    failed = True
                    res.actions.append(Action("summary_failed", "history", outcome, before, before,
                                              {"summarizer": getattr(self.summarizer, "name", "?"),
                                               "record_seq": state.seq}))
                else:
                    removed, added = outcome
                    size = max(0, size - int((removed - added) * scale))
                    res.stages.append("summary")
                    res.actions.append(Action("summary", "history", state.compactions[-1]["reason"], before, size,
                                              {"first_seq": state.units[lo].first_seq,
                                               "last_seq": state.units[cut - 1].last_seq,
                                               "keep_from_seq": state.units[cut].first_seq,
                                               "summarizer": getattr(self.summarizer, "name", "?"),
                                               "record_seq": state.seq}))

        if "summary" in res.stages:
            # the view changed: what a mask would do now (typically: aged images in the kept span) is due now,
            # not at the next build, so a rebuild with no new events compacts nothing (the mask runs once)
            size = mask(size)

        # 3. emergency truncation (no model)
        due = (
            (failed and size >= summarize_at * avail)  # the summary failed: the next stage
            or (harder and summarized_before)  # the provider still refused after a summary
            or size > avail  # still does not fit
        )
        if "emergency" not in breaker and due:
            # what the kept messages may take so the request lands at summary_target (hence under every
            # trigger: a rebuild with no new events must not truncate again)
            fixed_raw, pinned_raw = _fixed_raw(state, counter, size, scale)
            log_cap = max(200, int(cfg.work_log_ratio * avail / scale))
            keep_raw = cfg.summary_target * (0.7 if harder else 1.0) * avail / scale - fixed_raw - pinned_raw - log_cap
            r = self._emergency(session, counter, why if not failed else f"{why}; the summary failed", avail,
                                keep_raw=max(0.0, keep_raw))
            breaker.add("emergency")
            if r is not None:
                removed, added, rec = r
                before = size
                size = max(0, size - int((removed - added) * scale))
                res.stages.append("emergency")
                res.actions.append(Action("emergency", "history", rec["reason"], before, size,
                                          {"keep_from_seq": rec["keep_from_seq"], "first_seq": rec["first_seq"],
                                           "last_seq": rec["last_seq"], "work_log_lines": len(rec["work_log"]),
                                           "record_seq": state.seq}))
        res.tokens_after = size
        return res

    def _mask_pays(self, edits: Sequence[_Fold | _UnitImages], counts: Sequence[int], scale: float,
                   spec: ModelSpec) -> tuple[bool, dict[str, Any]]:
        """Whether folding (and stubbing images) now saves money over ``expected_turns``: the saved tokens would
        otherwise be read from cache every turn; the batch rewrites the cache from its first edit on, once."""
        if not edits:
            return False, {}
        p = spec.prices
        read = p.cache_read or p.input
        write = p.cache_write or p.input
        saved = sum(f.saving for f in edits) * scale
        after = sum(counts[min(f.unit for f in edits):]) * scale - saved
        per_turn = saved * read / 1e6
        rewrite = max(0.0, after) * max(0.0, write - read) / 1e6
        gain = per_turn * self.config.expected_turns - rewrite
        return gain > 0, {"saving_usd_per_turn": round(per_turn, 6), "rewrite_usd": round(rewrite, 6),
                          "net_usd": round(gain, 6), "expected_turns": self.config.expected_turns}

    def _summary_span(self, state: SessionState, counter: TokenCounter, target_raw: int, *,
                      force: bool) -> tuple[int, int] | None:
        """Units [lo, cut) to summarize: the oldest visible ones, keeping at most ``target`` tokens verbatim."""
        units = state.units
        n = len(units)
        lo = state.first_compactable_unit()
        if n - lo < 3:
            return None
        kept = 0
        cut = n
        while cut > lo + 1:
            c = sum(counter.raw_message(m) for m in units[cut - 1].messages)
            if kept + c > target_raw:
                break
            kept += c
            cut -= 1
        cut = min(cut, n - 2)  # the two newest units stay verbatim
        if force:
            cut = max(cut, min(n - 2, n - self.config.keep_turns))
        if cut <= lo:
            return None
        return lo, cut

    def _summarize(self, session: Any, counter: TokenCounter, lo: int, cut: int, why: str,
                   sbudget: int) -> tuple[int, int] | str:
        state: SessionState = session.state
        units = state.units[lo:cut]
        removed = sum(counter.raw_message(m) for u in units for m in u.messages)  # what leaves the view
        first_seq, last_seq = units[0].first_seq, units[-1].last_seq
        old_summary = state.summary_message
        # the summarizer reads the original messages (not their folds), plus the work log it absorbs
        originals = state.span_messages(first_seq, last_seq)
        view_msgs = [m for _, m in originals]
        if state.work_log:
            view_msgs = [Message("user", (Text("[work log]\n" + "\n".join(state.work_log)),)), *view_msgs]
        prev = Summary.from_dict(state.summary) if state.summary else None
        transcript = render_transcript(view_msgs)
        span_in = sum(counter.raw_message(m) for m in view_msgs) + (counter.raw_text(prev.text) if prev else 0)
        name = getattr(self.summarizer, "name", type(self.summarizer).__name__)
        problem: str | None
        summary: Any = None
        try:
            summary = self.summarizer.summarize(view_msgs, goal=state.task.goal, previous=prev,
                                                budget_tokens=sbudget)
            problem = check_summary(summary, transcript, input_tokens=span_in)
        except Exception as e:  # a summarizer failing must never lose history
            problem = f"the summarizer raised {type(e).__name__}: {str(e)[:200]}"
        if problem is None and counter.raw_text(summary.text) > sbudget * 1.5:
            problem = f"the summary is over its budget of {sbudget:,} tokens"
        if problem is not None:
            session._append("compaction", {"type": "failed", "stage": "summary", "summarizer": name,
                                           "first_seq": first_seq, "last_seq": last_seq,
                                           "reason": f"{problem}; falling back to the next stage, history kept"})
            return f"summary by {name} rejected: {problem}"
        # references from the original (unmasked) messages, so every compacted span stays reconstructible
        artifacts: dict[str, str] = {}
        for u in units:
            if u.folded:
                artifacts.update(_fold_artifacts(state, u.first_seq))
        refs = extract_refs([m for _, m in originals], seqs=[s for s, _ in originals], goal=state.task.goal,
                            artifacts=artifacts)
        summary = Summary(summary.text, tuple(merge_refs(summary.refs, refs)), summary.lessons, summary.summarizer or name,
                          summary.input_tokens, summary.output_tokens, summary.sections)
        keep_from = state.units[cut].first_seq
        transcript = store_transcript(session, originals, first_seq, last_seq)
        rec = {
            "type": "summary",
            "first_seq": first_seq,
            "last_seq": last_seq,
            "keep_from_seq": keep_from,
            "transcript": transcript,
            "summary": summary.to_dict(),
            "summarizer": summary.summarizer,
            "absorbs": next((c["seq"] for c in reversed(state.compactions) if c.get("type") == "summary"), None),
            "reason": f"{why}; {cut - lo} unit(s) (log seq {first_seq}-{last_seq}) summarized by {name}",
        }
        session._append("compaction", rec)
        if self.config.extract_lessons:
            known = {x.get("text") for x in state.lessons}
            for lesson in summary.lessons:
                if lesson not in known:
                    session._append("meta", {"type": "lesson", "text": lesson, "source": f"compaction:{name}",
                                             "provenance": {"first_seq": first_seq, "last_seq": last_seq,
                                                            "summary_seq": state.seq}})
        new_summary = state.summary_message
        added = counter.raw_message(new_summary) if new_summary is not None else 0
        if old_summary is not None:
            removed += counter.raw_message(old_summary)
        return removed, added

    def _emergency(self, session: Any, counter: TokenCounter, why: str,
                   budget_available: int, keep_raw: float | None = None) -> tuple[int, int, dict[str, Any]] | None:
        """Keep the last ``emergency_keep`` messages (whole units, the newest always), and no more than
        ``keep_raw`` raw tokens of them; everything older becomes work-log lines."""
        state: SessionState = session.state
        units = state.units
        n = len(units)
        lo = state.first_compactable_unit()
        keep_msgs = 0
        kept = 0
        cut = n
        while cut > lo + 1 and keep_msgs < self.config.emergency_keep:
            c = sum(counter.raw_message(m) for m in units[cut - 1].messages)
            if keep_raw is not None and cut < n and kept + c > keep_raw:
                break  # over the room left for verbatim messages (the newest unit stays regardless)
            cut -= 1
            kept += c
            keep_msgs += len(units[cut].messages)
        if keep_msgs > self.config.emergency_keep and cut < n - 1:
            cut += 1  # the last N messages, not more (a unit is never split)
        cut = min(cut, n - 1)  # the newest unit always stays
        if cut <= lo:
            return None
        turns = self._turn_numbers(state)
        lines: list[str] = []
        blobs: list[tuple[str, bytes]] = []
        removed = 0
        for i in range(lo, cut):
            u = units[i]
            removed += sum(counter.raw_message(m) for m in u.messages)
            if u.folded:
                lines.append(u.messages[0].text)
            elif _is_exchange(u):
                fl = fold_line(turns[i], u, chars=80, originals=_originals(state, u))
                lines.append(fl.text)
                blobs.extend(fl.blobs)
            else:
                m = u.messages[0]
                t = " ".join(m.text.split())
                lines.append(f"[turn {turns[i]}] {m.role}: {t if len(t) <= 120 else t[:119] + '…'}")
        for _sha, raw in blobs:
            session.engine.artifacts.put(raw, session_id=session.id)
        transcript = store_transcript(session, state.span_messages(units[lo].first_seq, units[cut - 1].last_seq),
                                       units[lo].first_seq, units[cut - 1].last_seq)
        # the record holds the whole new work log (older lines first), trimmed to its budget
        log = [*state.work_log, *lines]
        cap = max(200, int(self.config.work_log_ratio * budget_available / counter.scale))
        while len(log) > 1 and sum(counter.raw_text(x) + 1 for x in log) > cap:
            log.pop(0)
        lines = log
        old = state.summary_message
        if old is not None:
            removed += counter.raw_message(old)
        rec = {
            "type": "emergency",
            "first_seq": units[lo].first_seq,
            "last_seq": units[cut - 1].last_seq,
            "keep_from_seq": units[cut].first_seq,
            "work_log": lines,
            "transcript": transcript,
            "artifacts": [s for s, _ in blobs],
            "reason": f"{why}; emergency truncation without a model: kept the first request, the summary, a work log "
                      f"and the last {sum(len(u.messages) for u in units[cut:])} message(s)",
        }
        session._append("compaction", rec)
        new = state.summary_message
        return removed, counter.raw_message(new) if new is not None else 0, rec


def _fixed_raw(state: SessionState, counter: TokenCounter, size: int, scale: float) -> tuple[float, int]:
    """``(fixed, pinned)`` raw tokens of a request of ``size`` tokens: what is not compactable history
    (tools, system, layers, tail) and the pinned original request. Counted on the current view, so a mask
    applied earlier in the same pass is reflected (per-message counts are cached by content)."""
    lo = state.first_visible_unit()
    history = sum(counter.raw_message(m) for u in state.units[lo:] for m in u.messages)
    pinned = sum(counter.raw_message(m) for m in state.units[0].messages) if lo > 0 and state.pinned else 0
    if state.summary_message is not None and lo > 0:
        history += counter.raw_message(state.summary_message)
    if lo == 0 and state.pinned:  # the pinned request is the first visible unit
        pinned = sum(counter.raw_message(m) for m in state.units[0].messages)
        history -= pinned
    return max(0.0, size / scale - history - pinned), pinned


def store_transcript(session: Any, originals: Sequence[tuple[int, Message]], first_seq: int, last_seq: int) -> str:
    """Store the span about to leave the view, verbatim as it was sent, as an artifact; returns its sha.

    The first line points at the transcript of the previous compaction, so the context needs one
    reference for the whole compacted history: the agent reads back along the chain with
    ``read_result``/``search_result``, and ``Session.reconstruct`` can too."""
    prev = session.state.transcript
    head = f"[windowsmith transcript of log seq {first_seq}-{last_seq}: the messages compacted out of the context]"
    if prev:
        head += f"\n[earlier history: artifact://{prev}]"
    body = render_transcript([m for _, m in originals], max_chars_per_block=1 << 30)
    return str(session.engine.artifacts.put((head + "\n" + body + "\n").encode("utf-8"), session_id=session.id))


def _originals(state: SessionState, u: Unit) -> dict[str, ToolResult]:
    """The tool results of a unit as logged (the view's copy may have been rewritten), by call id."""
    return {r.call_id: r for _, m in state.span_messages(u.first_seq, u.last_seq) for r in m.tool_results}


def _fold_artifacts(state: SessionState, first_seq: int) -> dict[str, str]:
    """call id → artifact sha for a folded unit, from its mask record.

    Records carry the mapping (``calls``). Records written before it only list artifacts: those are
    paired with the span's results in order, which is right unless the exchange mixed results offloaded
    at ingest with inline ones."""
    for rec in reversed(state.compactions):
        if rec.get("type") != "mask":
            continue
        for f in rec.get("folds", ()):
            if f.get("first_seq") == first_seq:
                calls = f.get("calls")
                if isinstance(calls, Mapping):
                    return {str(k): str(v) for k, v in calls.items()}
                shas = [*f.get("artifacts", [])]
                ids = [b.call_id for _, m in state.span_messages(f["first_seq"], f["last_seq"])
                       for b in m.content if isinstance(b, ToolResult)]
                return dict(zip(ids, shas, strict=False))
    return {}


#: Summarizer-or-factory accepted by the engine.
SummarizerLike = Any | Callable[[], Any]

__all__ = ["STAGES", "CompactionConfig", "CompactionResult", "Compactor", "Folded", "ImageStub", "fold_line", "image_stub",
           "store_transcript"]
