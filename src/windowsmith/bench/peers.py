"""Peer strategies, re-implemented as their projects ship them (read from their source, not copied).

Each class cites the file it follows and the defaults it uses. What a peer does when the provider
refuses a request as too long is part of the peer: Strands and OpenHands react (trim, truncate,
condense, then retry: each refused call is counted in ``events["overflow_retry"]``); SWE-agent,
LangChain's middlewares and a plain full history have no reaction, so the call would fail
(``events["overflow"]``) and the bench cuts the request to fit so that the run can go on
(:meth:`Strategy.finish_build`).

* ``sliding`` / ``sliding-per-turn`` — strands-agents 1.x
  ``strands/agent/conversation_manager/sliding_window_conversation_manager.py``:
  ``SlidingWindowConversationManager(window_size=40, should_truncate_results=True, per_turn=False)``.
  ``apply_management`` runs at the end of each agent invocation (``Agent`` calls it in the
  ``finally`` of an invocation; an invocation is one human message and everything until the next),
  or before every model call with ``per_turn=True``; it trims only when there are more than 40
  messages, from ``len - 40`` to the next valid trim point (a plain user message, else an
  assistant tool-use message followed by its result). On a context overflow
  (``reduce_context(e=...)``): truncate the tool results of the oldest message that has any (first and
  last 200 characters kept), or, when that changes nothing, trim (from index 2 when there are at most
  40 messages); retry. The edits are kept in the agent's messages.
* ``masking`` — SWE-agent 1.x ``sweagent/agent/history_processors.py``: ``LastNObservations(n=10,
  polling=1)``; observations except the first (the instance template) and the last ``n`` are replaced
  by ``Old environment output: (N lines omitted)``. ``n=10`` as in "The Complexity Trap" (2025);
  SWE-agent's own configs use 5. On a context overflow SWE-agent ends the run (``exit_context``).
* ``clear`` — LangChain 1.x ``langchain/agents/middleware/context_editing.py``:
  ``ContextEditingMiddleware(edits=[ClearToolUsesEdit()])``: on every model call, on a copy of the
  messages, when the messages count more than ``trigger`` tokens, the content of every ``ToolMessage``
  but the last ``keep=3`` becomes ``[cleared]``. The default ``trigger=100_000`` is half of a 200K
  window (Anthropic's ``clear_tool_uses`` default); here it is scaled to half of the bench window.
  Only native tool messages are cleared (mini-swe-agent and SWE-agent 0.x have none).
* ``summarize-langchain`` — LangChain 1.x ``langchain/agents/middleware/summarization.py``:
  ``SummarizationMiddleware(trigger=("tokens", 80% of available), keep=("messages", 20),
  trim_tokens_to_summarize=4000)``. It counts the messages (not the system prompt or tools), or the
  previous response's reported ``total_tokens``; the cut moves back to the assistant message of a
  tool result; the summarizer reads the last 4,000 tokens of the summarized messages, starting on a
  human message ("Previous conversation was too long to summarize." when there is none), after the
  491-token ``DEFAULT_SUMMARY_PROMPT``; all summarized messages, the first user message and an older
  summary included, are replaced by one human message ``Here is a summary of the conversation to
  date:\\n\\n<summary>``.
* ``summarize-openhands`` — OpenHands SDK ``openhands/sdk/context/condenser/llm_summarizing_condenser.py``:
  ``LLMSummarizingCondenser(max_size=120, keep_first=4)``. When the view has more than 120 events,
  the first 4 events and the last ``120 // 2 - 4 - 1 = 55`` are kept and the rest (an older summary
  included) is summarized into one event at offset 4. On a context overflow the agent files a
  condensation request and the condenser keeps ``len(view) // 2 - 4 - 1`` events from the tail.
  An event is one tool call or one tool result (OpenHands events), one message otherwise.

Every summary is a model call the agent pays for: the summarizer's input (its instructions, an
older summary it rewrites and the messages it reads) and its output are charged at the model's
prices (``Built.summary_input`` / ``Built.summary_output``). The summary text itself comes from
windowsmith's offline extractive summarizer for every strategy, with the same budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model import Message, Text, ToolResult
from .base import Built, Strategy, default_summarizer, messages_tokens

#: tokens of LangChain's ``DEFAULT_SUMMARY_PROMPT`` (langchain 1.x), counted with o200k
LANGCHAIN_SUMMARY_PROMPT_TOKENS = 491
#: tokens of OpenHands' ``summarizing_prompt.j2`` instructions (about the same size), counted the same way
OPENHANDS_SUMMARY_PROMPT_TOKENS = 420
LANGCHAIN_SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"
LANGCHAIN_EMPTY_SUMMARY = "Previous conversation was too long to summarize."
CLEARED = "[cleared]"
_STRANDS_PRESERVE = 200


def summary_budget(available: int) -> int:
    """The summary's token budget for every summarizing strategy: 15% of ``available``, at most 2,048."""
    return max(128, min(2048, int(available * 0.15)))


class _Overflow(Exception):
    """A framework's overflow reaction gave up (Strands' ContextWindowOverflowException)."""


# ---------------------------------------------------------------------------------------------------
# Strands
# ---------------------------------------------------------------------------------------------------


class StrandsSlidingWindow(Strategy):
    """strands-agents ``SlidingWindowConversationManager`` with its defaults (see the module docstring)."""

    name = "sliding"

    def __init__(self, cfg: Any, window_size: int = 40, per_turn: bool = False) -> None:
        super().__init__(cfg)
        self.window_size = window_size
        self.per_turn = per_turn
        if per_turn:
            self.name = "sliding-per-turn"

    def reset(self) -> None:
        self.msgs: list[Message] = []
        self.kinds: list[str] = []  # "user" (a human message), "result", "use", "text"
        self.truncated: set[int] = set()  # id() of messages already truncated

    def _kind(self, m: Message, i: int) -> str:
        if m.role == "tool" or self.is_observation(i):
            return "result"
        if m.role == "user":
            return "user"
        return "use" if m.tool_calls else "text"

    def observe(self, m: Message) -> None:
        i = len(self.history)
        super().observe(m)
        kind = self._kind(m, i)
        if kind == "user" and self.msgs:
            self.apply_management()  # the previous invocation ended
        if kind == "result" and not self.native_tools and self.kinds and self.kinds[-1] == "text":
            self.kinds[-1] = "use"  # an action whose observation follows (no native tool calls)
        self.msgs.append(m)
        self.kinds.append(kind)

    def apply_management(self) -> None:
        if len(self.msgs) > self.window_size:
            self.reduce_context(overflow=False)

    def _valid_trim_point(self, start: int) -> int:
        k = self.kinds
        i = start
        while i < len(k) and k[i] != "user":
            i += 1
        if i < len(k):
            return i
        for j in range(start, len(k) - 1):  # fallback: assistant tool use followed by its result
            if k[j] == "use" and k[j + 1] == "result":
                return j
        return len(k)

    def _truncate_oldest_results(self) -> bool:
        idx = next((i for i, k in enumerate(self.kinds) if k == "result"), None)
        if idx is None:
            return False
        m = self.msgs[idx]
        changed = False
        blocks = []
        for b in m.content:
            if isinstance(b, ToolResult | Text):
                t = b.text
                if "... [truncated:" not in t and len(t) > 2 * _STRANDS_PRESERVE:
                    removed = len(t) - 2 * _STRANDS_PRESERVE
                    t = f"{t[:_STRANDS_PRESERVE]}...\n\n... [truncated: {removed} chars removed] ...\n\n...{t[-_STRANDS_PRESERVE:]}"
                    b = ToolResult(b.call_id, (Text(t),), b.is_error, b.name) if isinstance(b, ToolResult) else Text(t)
                    changed = True
            blocks.append(b)
        if changed:
            self.msgs[idx] = Message(m.role, tuple(blocks))
        return changed

    def reduce_context(self, *, overflow: bool) -> None:
        if overflow and self._truncate_oldest_results():
            return
        start = 2 if len(self.msgs) <= self.window_size else len(self.msgs) - self.window_size
        trim = self._valid_trim_point(start)
        if trim >= len(self.msgs) or trim == 0:
            if overflow:
                raise _Overflow
            return
        del self.msgs[:trim]
        del self.kinds[:trim]

    def build(self) -> Built:
        if self.per_turn:
            self.apply_management()
        events: dict[str, int] = {}
        retries = 0
        while self.over(self.msgs):
            retries += 1
            try:
                self.reduce_context(overflow=True)
            except _Overflow:
                events["overflow"] = 1
                break
        if retries:
            events["overflow_retry"] = retries
        dropped = len(self.history) - len(self.msgs)
        if dropped:
            events["dropped_messages"] = dropped
        return self.finish_build(self.msgs, events)


# ---------------------------------------------------------------------------------------------------
# SWE-agent
# ---------------------------------------------------------------------------------------------------


class SweAgentLastNObservations(Strategy):
    """SWE-agent ``LastNObservations(n=10, polling=1)`` (see the module docstring)."""

    name = "masking"

    def __init__(self, cfg: Any, n: int = 10, polling: int = 1) -> None:
        super().__init__(cfg)
        self.n = n
        self.polling = polling

    def reset(self) -> None:
        self.obs: list[int] = []  # observation indices; the first user message (instance template) first
        self._masked: dict[int, Message] = {}

    def observe(self, m: Message) -> None:
        i = len(self.history)
        super().observe(m)
        if (i == 0 and m.role == "user") or self.is_observation(i):
            self.obs.append(i)

    def _mask(self, i: int) -> Message:
        got = self._masked.get(i)
        if got is None:
            m = self.history[i]

            def note(text: str) -> str:
                return f"Old environment output: ({len(text.splitlines())} lines omitted)"

            if m.role == "tool":
                got = Message("tool", tuple(ToolResult(r.call_id, (Text(note(r.text)),), r.is_error, r.name)
                                            for r in m.tool_results))
            else:
                got = Message(m.role, (Text(note(m.text)),))
            self._masked[i] = got
        return got

    def build(self) -> Built:
        last_removed = max(0, (len(self.obs) // self.polling) * self.polling - self.n)
        old = self.obs[1:last_removed]
        msgs = list(self.history)
        synth = set()
        for i in old:
            msgs[i] = self._mask(i)
            synth.add(msgs[i].digest)
        events = {"masked": len(old)} if old else {}
        if self.over(msgs):
            events["overflow"] = 1
        return self.finish_build(msgs, events, frozenset(synth))


# ---------------------------------------------------------------------------------------------------
# LangChain
# ---------------------------------------------------------------------------------------------------


class LangChainClearToolUses(Strategy):
    """LangChain ``ContextEditingMiddleware`` with ``ClearToolUsesEdit`` (see the module docstring)."""

    name = "clear"

    def __init__(self, cfg: Any, keep: int = 3, trigger_share: float = 0.5, placeholder: str = CLEARED) -> None:
        super().__init__(cfg)
        self.keep = keep
        self.trigger = int(cfg.window * trigger_share)
        self.placeholder = placeholder

    def reset(self) -> None:
        self._cleared: dict[tuple[int, int], Message] = {}

    def _clear(self, i: int, upto: int) -> Message:
        """Message ``i`` with its first ``upto`` results cleared (one ToolMessage per result in LangChain)."""
        got = self._cleared.get((i, upto))
        if got is None:
            m = self.history[i]
            got = Message("tool", tuple(ToolResult(r.call_id, (Text(self.placeholder),), r.is_error, r.name)
                                        if k < upto else r for k, r in enumerate(m.tool_results)))
            self._cleared[(i, upto)] = got
        return got

    def build(self) -> Built:
        h = self.history
        msgs = list(h)
        events: dict[str, int] = {}
        synth = set()
        if messages_tokens(h, self.cfg.counter) > self.trigger:
            # one ToolMessage per tool result in LangChain: every result but the last ``keep`` is cleared
            results = [(i, k) for i, m in enumerate(h) if m.role == "tool" for k in range(len(m.tool_results))]
            old = results[: len(results) - self.keep] if self.keep < len(results) else []
            upto: dict[int, int] = {}
            for i, k in old:
                upto[i] = k + 1
            for i, n in upto.items():
                msgs[i] = self._clear(i, n)
                synth.add(msgs[i].digest)
            if old:
                events["cleared"] = len(old)
        if self.over(msgs):
            events["overflow"] = 1
        return self.finish_build(msgs, events, frozenset(synth))


def _lc_weight(m: Message) -> int:
    """How many LangChain messages one neutral message is (one ``ToolMessage`` per tool result)."""
    return max(1, len(m.tool_results)) if m.role == "tool" else 1


def _oh_weight(m: Message) -> int:
    """How many OpenHands events one neutral message is (one action per tool call, one observation
    per result)."""
    if m.role == "tool":
        return max(1, len(m.tool_results))
    if m.role == "assistant":
        return max(1, len(m.tool_calls))
    return 1


class LangChainSummarization(Strategy):
    """LangChain ``SummarizationMiddleware`` (see the module docstring)."""

    name = "summarize-langchain"

    def __init__(self, cfg: Any, keep_messages: int = 20, trigger_share: float = 0.8, trim_tokens: int = 4000,
                 summarizer: Any = None) -> None:
        super().__init__(cfg)
        self.keep_messages = keep_messages
        self.trigger_share = trigger_share
        self.trigger: int | None = None  # a fixed ("tokens", N) trigger; None: trigger_share of the run's budget
        self.trim_tokens = trim_tokens
        self.summarizer = summarizer or default_summarizer()

    def reset(self) -> None:
        self.msgs: list[Message] = []
        self.human: list[bool] = []  # a LangChain HumanMessage (user text, observations without native tools)
        self.summaries: set[str] = set()
        self.reported = 0  # the previous response's total tokens (usage_metadata)

    def observe(self, m: Message) -> None:
        super().observe(m)
        self.msgs.append(m)
        self.human.append(m.role == "user")

    def _cutoff(self) -> int:
        """``_find_safe_cutoff``: keep the last ``keep_messages`` LangChain messages; a cut on a tool
        result moves back to its assistant message."""
        total = sum(_lc_weight(m) for m in self.msgs)
        if total <= self.keep_messages:
            return 0
        target = total - self.keep_messages
        seen = 0
        for i, m in enumerate(self.msgs):
            if seen >= target:
                cut = i
                break
            seen += _lc_weight(m)
        else:
            return 0
        if seen > target and self.msgs[cut - 1].role == "tool":
            cut -= 1  # the target fell inside a multi-result tool message
        while cut > 0 and self.msgs[cut].role == "tool":
            cut -= 1
        return cut

    def _trimmed(self, span: Sequence[Message], human: Sequence[bool]) -> list[Message]:
        """``trim_messages(strategy="last", max_tokens=4000, start_on="human")`` over the span."""
        counter = self.cfg.counter
        n = 0
        start = len(span)
        for i in range(len(span) - 1, -1, -1):
            n += counter.message(span[i])
            if n > self.trim_tokens:
                break
            start = i
        while start < len(span) and not human[start]:
            start += 1
        return list(span[start:])

    def build(self) -> Built:
        cfg = self.cfg
        events: dict[str, int] = {}
        s_in = s_out = 0
        trigger = self.trigger if self.trigger is not None else int(cfg.available * self.trigger_share)  # run_budget
        if messages_tokens(self.msgs, cfg.counter) >= trigger or self.reported >= trigger:
            cut = self._cutoff()
            if cut > 0:
                span, human = self.msgs[:cut], self.human[:cut]
                read = self._trimmed(span, human)
                if read:
                    summary = self.summarizer.summarize(read, goal=None, previous=None,
                                                        budget_tokens=summary_budget(cfg.available))
                    text = summary.text.strip()
                    s_in = LANGCHAIN_SUMMARY_PROMPT_TOKENS + messages_tokens(read, cfg.counter)
                    s_out = cfg.counter.text(text)
                else:
                    text = LANGCHAIN_EMPTY_SUMMARY
                msg = Message("user", (Text(LANGCHAIN_SUMMARY_PREFIX + text),))
                self.summaries.add(msg.digest)
                self.msgs = [msg, *self.msgs[cut:]]
                self.human = [True, *self.human[cut:]]
                events["summarize"] = 1
        synth = frozenset(m.digest for m in self.msgs if m.digest in self.summaries)
        if self.over(self.msgs):
            events["overflow"] = 1
        built = self.finish_build(self.msgs, events, synth)
        built.summary_input, built.summary_output = s_in, s_out
        return built

    def after_call(self, built: Built, output_tokens: int) -> None:
        self.reported = built.tokens + output_tokens


# ---------------------------------------------------------------------------------------------------
# OpenHands
# ---------------------------------------------------------------------------------------------------


class OpenHandsSummarizing(Strategy):
    """OpenHands ``LLMSummarizingCondenser(max_size=120, keep_first=4)`` (see the module docstring)."""

    name = "summarize-openhands"

    def __init__(self, cfg: Any, max_size: int = 120, keep_first: int = 4, summarizer: Any = None) -> None:
        super().__init__(cfg)
        self.max_size = max_size
        self.keep_first = keep_first
        self.summarizer = summarizer or default_summarizer()

    def reset(self) -> None:
        self.msgs: list[Message] = []
        self.summary: Any = None
        self.summary_msg: Message | None = None

    def observe(self, m: Message) -> None:
        super().observe(m)
        self.msgs.append(m)

    def _head_end(self) -> int:
        n = i = 0
        while i < len(self.msgs) and n + _oh_weight(self.msgs[i]) <= self.keep_first:
            n += _oh_weight(self.msgs[i])
            i += 1
        # an action whose observation is not kept is filtered out of the view: end the head on a unit
        while i > 0 and self.msgs[i - 1].role == "assistant" and self.msgs[i - 1].tool_calls \
                and (i >= len(self.msgs) or self.msgs[i].role == "tool"):
            i -= 1
        return i

    def _condense(self, target: int) -> tuple[int, int]:
        """Summarize everything between the head and the last ``target - head - 1`` events."""
        cfg = self.cfg
        head = self._head_end()
        from_tail = max(0, target - head - 1)
        tail_start = len(self.msgs)
        n = 0
        while tail_start > head and n < from_tail:
            tail_start -= 1
            n += _oh_weight(self.msgs[tail_start])
        while tail_start < len(self.msgs) - 1 and self.msgs[tail_start].role == "tool":
            tail_start += 1  # an observation without its action is filtered out of the view
        forgotten = [m for m in self.msgs[head:tail_start] if m is not self.summary_msg]
        if not forgotten and self.summary_msg is None:
            return 0, 0
        prev = self.summary
        self.summary = self.summarizer.summarize(forgotten, goal=None, previous=prev,
                                                 budget_tokens=summary_budget(cfg.available))
        s_in = OPENHANDS_SUMMARY_PROMPT_TOKENS + messages_tokens(forgotten, cfg.counter) \
            + (cfg.counter.text(prev.text) if prev is not None else 0)
        s_out = cfg.counter.text(self.summary.text)
        self.summary_msg = Message("user", (Text(self.summary.text),))
        self.msgs = [*self.msgs[:head], self.summary_msg, *self.msgs[tail_start:]]
        return s_in, s_out

    def build(self) -> Built:
        events: dict[str, int] = {}
        s_in = s_out = 0
        if sum(_oh_weight(m) for m in self.msgs) > self.max_size:
            a, b = self._condense(self.max_size // 2)
            s_in, s_out = s_in + a, s_out + b
            events["summarize"] = 1
        retries = 0
        while self.over(self.msgs):
            retries += 1
            size = len(self.msgs)
            a, b = self._condense(sum(_oh_weight(m) for m in self.msgs) // 2)
            s_in, s_out = s_in + a, s_out + b
            events["summarize"] = 1
            if len(self.msgs) >= size:
                events["overflow"] = 1
                break
        if retries:
            events["overflow_retry"] = retries
        synth = frozenset({self.summary_msg.digest}) if self.summary_msg is not None else frozenset()
        built = self.finish_build(self.msgs, events, synth)
        built.summary_input, built.summary_output = s_in, s_out
        return built


__all__ = [
    "CLEARED",
    "LANGCHAIN_SUMMARY_PREFIX",
    "LANGCHAIN_SUMMARY_PROMPT_TOKENS",
    "OPENHANDS_SUMMARY_PROMPT_TOKENS",
    "LangChainClearToolUses",
    "LangChainSummarization",
    "OpenHandsSummarizing",
    "StrandsSlidingWindow",
    "SweAgentLastNObservations",
    "summary_budget",
]
