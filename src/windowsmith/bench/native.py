"""Provider-native context strategies, modelled as their providers document them.

* ``anthropic-context-editing`` — Anthropic's server-side context editing (``context_management`` with the
  ``clear_tool_uses_20250919`` edit, beta ``context-management-2025-06-27``), as
  platform.claude.com/docs/en/build-with-claude/context-editing describes it: the client sends its whole history
  every call and the API, before the prompt reaches the model, clears tool results when the request's input tokens
  exceed ``trigger``; it clears the oldest first, keeping the ``keep`` most recent tool uses, and replaces each
  cleared result with a placeholder; with ``clear_at_least`` it clears only when it can free at least that many
  input tokens. Documented defaults: ``trigger`` 100,000 input tokens, ``keep`` 3 tool uses, ``clear_at_least``
  unset (no minimum), ``clear_tool_inputs`` false (the calls' inputs stay), no ``exclude_tools``. The edit is applied
  to the whole history on every call, so the cache prefix the provider reads is that of the edited prompt ("clearing
  invalidates the cached prompt prefix", the docs' caching note): the bench prices exactly that request.

  Configured honestly for each window: the trigger is the documented 100,000 of Claude's 200K window, the same half
  of a smaller bench window (a user with a smaller window sets it so, or the edit never fires); keep and
  clear_at_least stay at the documented defaults. Cache breakpoints as every peer's (system, tools, the newest
  message). The thinking edit (``clear_thinking_20251015``) is not modelled separately: without it the API keeps only
  the newest assistant turn's thinking, which the token counter already bills (``ModelSpec.thinking_kept``). Context
  editing has no reaction to an overflow: a request still over the window after the edit fails, counted in
  ``events["overflow"]`` and cut to fit so that the run goes on, as for the other peers without one.
"""

from __future__ import annotations

from typing import Any

from ..compaction.context_editing import DEFAULT_KEEP, DEFAULT_TRIGGER
from .base import Built
from .peers import LangChainClearToolUses

#: the window Anthropic's default trigger is half of (Claude's 200K context window)
DEFAULT_WINDOW = 200_000
#: what replaces a cleared tool result (the API's exact placeholder text is not documented; a short note)
PLACEHOLDER = "[tool result cleared]"


class AnthropicContextEditing(LangChainClearToolUses):
    """Anthropic's ``clear_tool_uses_20250919`` edit (see the module docstring)."""

    name = "anthropic-context-editing"

    def __init__(self, cfg: Any, trigger: int | None = None, keep: int = DEFAULT_KEEP,
                 clear_at_least: int | None = None) -> None:
        super().__init__(cfg, keep=keep, placeholder=PLACEHOLDER)
        self.trigger = trigger if trigger is not None else int(DEFAULT_TRIGGER * min(1.0, cfg.window / DEFAULT_WINDOW))
        self.clear_at_least = clear_at_least

    def build(self) -> Built:
        h = self.history
        counter = self.cfg.counter
        msgs = list(h)
        events: dict[str, int] = {}
        synth: set[str] = set()
        if counter.request(self.request(h)) > self.trigger:  # the request's input tokens, system and tools included
            results = [(i, k) for i, m in enumerate(h) if m.role == "tool" for k in range(len(m.tool_results))]
            old = results[: len(results) - self.keep] if self.keep < len(results) else []
            upto: dict[int, int] = {}
            for i, k in old:
                upto[i] = k + 1
            edited = list(h)
            for i, n in upto.items():
                edited[i] = self._clear(i, n)
            freed = sum(counter.raw_message(h[i]) - counter.raw_message(edited[i]) for i in upto)
            if old and (self.clear_at_least is None or counter.scaled(freed) >= self.clear_at_least):
                msgs = edited
                synth.update(msgs[i].digest for i in upto)
                events["cleared"] = len(old)
        if self.over(msgs):
            events["overflow"] = 1
        return self.finish_build(msgs, events, frozenset(synth))


__all__ = ["DEFAULT_WINDOW", "PLACEHOLDER", "AnthropicContextEditing"]
