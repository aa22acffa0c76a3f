"""Anthropic's server-side context editing, as a compaction option.

With ``CompactionConfig(server_editing=ContextEditing())`` an Anthropic request carries ``context_management``
(and the beta its SDK needs: send it with ``client.beta.messages.create(**pack.request)``): the API itself clears the
oldest tool results (``clear_tool_uses_20250919``) and, with extended thinking, the thinking of older turns
(``clear_thinking_20251015``) before the prompt reaches the model. The session's log and windowsmith's own
compaction are unchanged; the provider's edit applies on top of the request windowsmith built. Other formats
ignore it.

Defaults are Anthropic's (platform.claude.com/docs/en/build-with-claude/context-editing, "Configuration options"):
the tool-result edit triggers at 100,000 input tokens, keeps the 3 most recent tool uses, clears no minimum
(``clear_at_least`` unset), clears results only (``clear_tool_inputs: false``) and excludes no tool; the thinking
edit keeps the thinking of the last assistant turn (``keep: {type: thinking_turns, value: 1}``). A ``None`` here
leaves the field out, so the API's default applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

#: the API's defaults (see the module docstring)
DEFAULT_TRIGGER = 100_000
DEFAULT_KEEP = 3


@dataclass(frozen=True)
class ContextEditing:
    """The edits of Anthropic's ``context_management``. ``trigger``: input tokens that start clearing (None: the
    API's 100,000); ``keep``: tool uses kept (None: 3); ``clear_at_least``: the fewest input tokens a clearing must
    free, else it does not happen (None: no minimum; set it so that the cache re-write each clearing costs pays);
    ``exclude_tools``: tools whose uses are never cleared; ``clear_tool_inputs``: clear the calls' inputs too.
    ``thinking_keep``: add the thinking edit, keeping the thinking of this many recent assistant turns (``"all"``:
    keep all, best for the cache; None: no thinking edit). ``tool_uses=False``: no tool-result edit."""

    tool_uses: bool = True
    trigger: int | None = None
    keep: int | None = None
    clear_at_least: int | None = None
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool = False
    thinking_keep: int | str | None = None

    def __post_init__(self) -> None:
        for name in ("trigger", "keep", "clear_at_least"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ConfigError(f"ContextEditing({name}={v!r}) must be a non-negative number of tokens or None")
        if isinstance(self.thinking_keep, str) and self.thinking_keep != "all":
            raise ConfigError(f"ContextEditing(thinking_keep={self.thinking_keep!r}): use a number of turns or 'all'")
        if not self.tool_uses and self.thinking_keep is None:
            raise ConfigError("ContextEditing with tool_uses=False and thinking_keep=None edits nothing; drop it")

    def to_param(self) -> dict[str, Any]:
        """The ``context_management`` value (the anthropic SDK's ``BetaContextManagementConfigParam``); the thinking
        edit comes first, as the API requires when both are given."""
        edits: list[dict[str, Any]] = []
        if self.thinking_keep is not None:
            keep: Any = "all" if self.thinking_keep == "all" else {"type": "thinking_turns", "value": self.thinking_keep}
            edits.append({"type": "clear_thinking_20251015", "keep": keep})
        if self.tool_uses:
            edit: dict[str, Any] = {"type": "clear_tool_uses_20250919"}
            if self.trigger is not None:
                edit["trigger"] = {"type": "input_tokens", "value": self.trigger}
            if self.keep is not None:
                edit["keep"] = {"type": "tool_uses", "value": self.keep}
            if self.clear_at_least is not None:
                edit["clear_at_least"] = {"type": "input_tokens", "value": self.clear_at_least}
            if self.exclude_tools:
                edit["exclude_tools"] = list(self.exclude_tools)
            if self.clear_tool_inputs:
                edit["clear_tool_inputs"] = True
            edits.append(edit)
        return {"edits": edits}


__all__ = ["DEFAULT_KEEP", "DEFAULT_TRIGGER", "ContextEditing"]
