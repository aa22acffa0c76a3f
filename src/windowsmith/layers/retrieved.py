"""Layers filled by retrieval for the current step: MEMORY (long-term memory by relevance) and RECALL
(snippets of evicted history). Both go in the dynamic tail, after the history, so they never break the
cached prefix; both are fenced as data (``<data ...>`` … ``</data>``), never instructions.

A layer is bound to its session (``bind(session)``) when the session opens; unbound (a bare
``assemble`` in a test), it yields nothing but the session's own memory notes. The query is the task
(goal, step) and the newest turn: its identifiers (paths, symbols, ids) as one query and its content
words as another (multi-query, fused with RRF). What went in, and why (the terms it matched), is each
item's provenance in the manifest.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..retrieval.history import HistoryIndex
from ..retrieval.search import Retriever
from ..retrieval.terms import identifiers, words
from .base import BuildContext, Item, Layer, shrink_text

if TYPE_CHECKING:
    from ..knowledge import Knowledge
    from ..memory import Memory
    from ..ports import BoundSession
    from ..state import SessionState


def fence(text: str, **attrs: str) -> str:
    """``text`` wrapped as data with its provenance; a closing tag inside the text is neutralised."""
    body = text.replace("</data>", "<\\/data>").replace("<data", "<\\data")
    head = " ".join(f'{k}="{v}"' for k, v in attrs.items() if v)
    return f"<data {head}>\n{body}\n</data>"


def retrieved(item_id: int, source: str, score: float, matched: Iterable[str], **extra: Any) -> dict[str, Any]:
    """What the manifest records of one retrieved item (never its text): its id in the store's chunks, its
    source, its score (rounded: 4 significant digits) and the query terms it matched (at most 5)."""
    entry: dict[str, Any] = {"id": item_id, "source": source, "score": float(f"{score:.4g}")}
    terms = list(matched)[:5]
    if terms:
        entry["matched"] = terms
    entry.update((k, v) for k, v in extra.items() if v not in (None, "", []))
    return entry


def newest_turn_text(state: SessionState, messages: int = 2, max_chars: int = 8000) -> str:
    """Text of the newest ``messages`` messages (the last action and what answered it), clipped."""
    parts = []
    for m in state.messages[-messages:]:
        parts.append(m.text if hasattr(m, "text") else "")
        for c in m.tool_calls:
            parts.append(f"{c.name} {c.arguments}")
        for r in m.tool_results:
            parts.append(r.text)
    text = "\n".join(p for p in parts if p)
    return text[-max_chars:]


class RecallLayer(Layer):
    """Snippets of evicted history (compacted-span transcripts, offloaded and folded results) that match
    the newest turn, within ``max_fraction`` of the available budget, each marked with its ``artifact://``."""

    name = "recall"

    def __init__(self, *, max_fraction: float = 0.08, max_snippets: int = 4, snippet_chars: int = 600,
                 fill_at: float = 0.7) -> None:
        self.max_fraction = max_fraction
        self.fill_at = fill_at
        self.max_snippets = max_snippets
        self.snippet_chars = snippet_chars
        self.index: HistoryIndex | None = None
        self.retriever: Retriever | None = None

    def bind(self, session: BoundSession) -> None:
        eng = session.engine
        self.index = HistoryIndex(eng.store, eng.artifacts, session.id, eng.embedder)
        self.retriever = Retriever(eng.store, eng.embedder)

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        state = ctx.state
        if self.index is None or self.retriever is None or not state.messages:
            return
        if not state.records and not state.notes_for("evidence"):
            return  # nothing has left the view or been offloaded
        last = state.records[-1] if state.records else None
        if last is not None and last.seq > state.message_seqs[-1] and "provider rejected" in str(getattr(last, "reason", "")):
            return  # the provider just refused the request as too long: the retry adds nothing optional
        self.index.update(state)
        text = newest_turn_text(state)
        ids = identifiers(text, limit=24)
        queries = [q for q in (ids, words(text, limit=12)) if q]
        if not queries:
            return
        hits = self.retriever.search("history", [self.index.scope], queries, limit=self.max_snippets * 2,
                                     texts=[text[-2000:]])
        visible = _visible_text(state)
        cap = min(int(ctx.available * self.max_fraction), self._free(ctx))
        if cap <= 0:
            return
        used = 0
        n = 0
        for h in hits:
            c = h.chunk
            new = [t for t in identifiers(c.text, limit=64) if t.lower() not in visible]
            if not new:
                continue  # every identifier it holds is still in the view
            lines = c.meta.get("lines") or [0, 0]
            anchor = [t.lower() for t in h.matched] or [t.lower() for t in new]
            snippet = c.text if len(c.text) <= self.snippet_chars else _around(c.text, anchor, self.snippet_chars)
            content = fence(snippet, source=c.source, lines=f"{lines[0]}-{lines[1]}", kind=str(c.meta.get("kind", "")))
            cost = ctx.counter.text(content)
            if used + cost > cap:
                continue
            used += cost
            yield Item(self.name, "tail", "dynamic", content, priority=self.max_snippets - n, header="RECALL",
                       order=n, shrink=shrink_text, ref=c.source,
                       meta={"listed": True, "retrieved": retrieved(c.id, c.source, h.score, h.matched,
                                                                    lines=[lines[0], lines[1]])},
                       provenance=f"recall:{c.source}#L{lines[0]}-{lines[1]} matched {', '.join(h.matched[:5])}; "
                                  f"adds {', '.join(new[:5])}")
            n += 1
            if n >= self.max_snippets:
                break


    def _free(self, ctx: BuildContext) -> int:
        """Tokens left under ``fill_at`` of the available budget by everything but the tail (estimated
        as the usage note does): recall only uses room nothing else wants, so it never brings the next
        compaction closer."""
        counter = ctx.counter
        state = ctx.state
        raw = counter.overheads.per_request + counter.raw_tools(state.tools)
        raw += sum(counter.raw_segment(t) for t in (*state.system.values(), *state.context.values()) if t)
        raw += sum(counter.raw_message(m) for m in state.view_slice(state.first_visible_unit()))
        return int(ctx.available * self.fill_at - raw * counter.scale)


def _visible_text(state: SessionState) -> str:
    lo = state.first_visible_unit()
    parts: list[str] = []
    for m in state.view_slice(lo):
        parts.append(m.text.lower())
        for c in m.tool_calls:
            parts.append(str(c.arguments).lower())
        for r in m.tool_results:
            parts.append(r.text.lower())
    return "\n".join(parts)


def _around(text: str, terms: list[str], width: int) -> str:
    low = text.lower()
    at = min((low.find(t) for t in terms if t in low), default=0)
    start = max(0, at - width // 3)
    piece = text[start:start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


class MemoryLayer(Layer):
    """The MEMORY section: the session's memory notes, then memory items chosen by relevance to the task
    and the newest turn (lessons from summaries are remembered first, once each)."""

    name = "memory"

    def __init__(self, *, max_items: int = 6) -> None:
        self.max_items = max_items
        self.memory: Memory | None = None
        self._lessons_seen = 0

    def bind(self, session: BoundSession) -> None:
        self.memory = session.memory

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        state = ctx.state
        notes = state.notes_for(self.name)
        for i, note in enumerate(notes):
            yield Item(self.name, "tail", "dynamic", note["text"], priority=i, provenance=note.get("source", self.name),
                       header="MEMORY", order=i, shrink=shrink_text, ref=note.get("ref") or None)
        mem = self.memory
        if mem is None:
            return
        self._sync_lessons(state, mem)
        task = state.task
        texts = [t for t in (" ".join(x for x in (task.goal, task.step) if x), newest_turn_text(state)) if t.strip()]
        if not texts:
            return
        found = mem.search(texts, limit=self.max_items)
        if not found:
            return
        base = len(notes)
        for k, m in enumerate(found):
            trust = "trusted" if m.trusted else "untrusted tool output"
            content = fence(m.text, memory=str(m.id), scope=m.scope.split(":", 1)[0], source=m.source, trust=trust)
            yield Item(self.name, "tail", "dynamic", content, priority=-1 - k, header="MEMORY", order=base + k,
                       shrink=shrink_text, provenance=f"memory:{m.id} {m.scope.split(':', 1)[0]} {m.why}",
                       meta={"listed": True, "retrieved": retrieved(m.id, m.source, m.score, (),
                                                                    scope=m.scope.split(":", 1)[0], why=m.why)})
        mem.touch([m.id for m in found])

    def _sync_lessons(self, state: SessionState, mem: Memory) -> None:
        lessons: list[dict[str, Any]] = state.lessons
        for lesson in lessons[self._lessons_seen:]:
            text = str(lesson.get("text", "")).strip()
            if text:
                src = str(lesson.get("source", "assistant"))
                mem.add(text, scope="session", source="lesson", seq=lesson.get("seq"),
                        meta={"lesson": src}, once=f"lesson:{lesson.get('seq')}")
        self._lessons_seen = len(lessons)


class KnowledgeLayer(Layer):
    """The KNOWLEDGE section: the session's knowledge notes, then chunks of the project's knowledge
    (``engine.knowledge.add``) retrieved for the task and the newest turn, each with its source."""

    name = "knowledge"

    def __init__(self, *, max_items: int = 4) -> None:
        self.max_items = max_items
        self.knowledge: Knowledge | None = None

    def bind(self, session: BoundSession) -> None:
        self.knowledge = session.engine.knowledge

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        state = ctx.state
        notes = state.notes_for(self.name)
        for i, note in enumerate(notes):
            yield Item(self.name, "tail", "dynamic", note["text"], priority=i, provenance=note.get("source", self.name),
                       header="KNOWLEDGE", order=i, shrink=shrink_text, ref=note.get("ref") or None)
        kn = self.knowledge
        if kn is None or not kn.store.list_chunks("knowledge", [kn.scope], limit=1):
            return
        task = state.task
        texts = [t for t in (" ".join(x for x in (task.goal, task.step) if x), newest_turn_text(state)) if t.strip()]
        if not texts:
            return
        for k, h in enumerate(kn.search(texts, limit=self.max_items)):
            c = h.chunk
            content = fence(c.text, source=c.source)
            why = ("matched " + ", ".join(h.matched[:5])) if h.matched else "related"
            yield Item(self.name, "tail", "dynamic", content, priority=-1 - k, header="KNOWLEDGE", order=len(notes) + k,
                       shrink=shrink_text, provenance=f"knowledge:{c.source} {why}",
                       meta={"listed": True, "retrieved": retrieved(c.id, c.source, h.score, h.matched)})


__all__ = ["KnowledgeLayer", "MemoryLayer", "RecallLayer", "fence", "newest_turn_text", "retrieved"]
