"""What a session is told besides its messages: the system prompt, session context, tools, the task and
its acceptance checklist, notes, memories and instruction files. Each setter validates its input, redacts
secrets and appends one event only when the value changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidMessageError, InvalidToolSchemaError, UsageError
from ..ingest.messages import redact_spec
from ..instructions import InstructionFile, discover, repository_root
from ..jsonvalues import LOAD_ENVELOPE, check_nesting, clean_text
from ..layers.skills import Skill, catalog, discover_skills, loaded
from ..layers.task import ACCEPTANCE_NOTES, evidence_needed
from ..log import SessionLog
from ..memory import Memory, MemoryItem
from ..model import ToolSpec
from ..ports import SessionEngine
from ..state import SessionState


class Inputs:
    """The setters behind ``Session.system``, ``context``, ``tools``, ``task``, ``check``, ``note``,
    ``remember`` and ``instructions`` (see the module docstring)."""

    def __init__(self, engine: SessionEngine, log: SessionLog, memory: Memory,
                 redact_text: Callable[[str], str]) -> None:
        self.engine = engine
        self.log = log
        self.memory = memory
        self.redact_text = redact_text

    @property
    def state(self) -> SessionState:
        return self.log.state

    def system(self, text: str, *, name: str = "system") -> None:
        text, _ = clean_text(text, "system text")
        text = self.redact_text(text)
        if self.state.system.get(name) != text:
            self.log.append_event("system", {"name": name, "text": text})

    def context(self, text: str, *, name: str = "instructions") -> None:
        text, _ = clean_text(text, "context text")
        text = self.redact_text(text)
        if self.state.context.get(name) != text:
            self.log.append_event("system", {"name": name, "text": text, "slot": "session"})

    def tools(self, tools: Iterable[Mapping[str, Any] | ToolSpec]) -> None:
        if isinstance(tools, Mapping | str):
            raise InvalidMessageError("tools(...) takes a list of tool definitions")
        if not isinstance(tools, list | tuple):
            tools = list(tools)
        check_nesting(tools, "the tool list", envelope=LOAD_ENVELOPE, error=InvalidToolSchemaError)  # before anything recurses
        specs = [t if isinstance(t, ToolSpec) else ToolSpec.from_dict(t, f"tools[{i}]") for i, t in enumerate(tools)]
        names = [t.name for t in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidMessageError(f"duplicate tool name(s) {dup}; each tool needs a unique name")
        if self.engine.ingest.redact:
            specs = [redact_spec(t) for t in specs]
        if tuple(specs) != self.state.tools:
            self.log.append_event("tools", {"tools": [t.to_dict() for t in specs]})

    def task(
        self,
        goal: str | None = None,
        *,
        step: str | None = None,
        acceptance: Sequence[str] | None = None,
        required: bool | None = None,
    ) -> None:
        cur = self.state.task
        for field_name, value in (("goal", goal), ("step", step)):
            if value is not None and not isinstance(value, str):
                raise InvalidMessageError(f"the task {field_name} must be a string, got {type(value).__name__}")
        if acceptance is not None and (isinstance(acceptance, str) or not all(isinstance(a, str) for a in acceptance)):
            raise InvalidMessageError("acceptance must be a list of strings, e.g. ['refund issued', 'customer told']")
        goal = None if goal is None else self.redact_text(goal)
        step = None if step is None else self.redact_text(step)
        if acceptance is not None:
            acceptance = [self.redact_text(a) for a in acceptance]
        new_acc = cur.acceptance if acceptance is None else tuple(
            (a, dict(cur.acceptance).get(a, False)) for a in acceptance
        )
        data = {
            "goal": cur.goal if goal is None else goal,
            "step": cur.step if step is None else step,
            "acceptance": [{"item": a, "done": d} for a, d in new_acc],
            "required": cur.required if required is None else bool(required),
        }
        if data != cur.to_dict():
            self.log.append_event("task", data)

    def evidence_needed(self, items: Sequence[str]) -> None:
        if isinstance(items, str) or not all(isinstance(a, str) for a in items):
            raise InvalidMessageError("evidence_needed must be a list of acceptance items, e.g. ['refund issued']")
        names = [a for a, _ in self.state.task.acceptance]
        wanted = [self.redact_text(a) for a in items]
        unknown = [a for a in wanted if a not in names]
        if unknown:
            raise UsageError(f"evidence_needed: {unknown} are not acceptance items; the checklist is {names}")
        notes = self.state.notes_for(ACCEPTANCE_NOTES)
        if wanted != evidence_needed(notes) and (wanted or notes):
            self.log.append_event("meta", {"type": "note", "layer": ACCEPTANCE_NOTES, "kind": "needed", "text": "",
                                           "items": wanted})

    def check(self, item: str | int, done: bool = True, evidence: str | None = None) -> None:
        acc = list(self.state.task.acceptance)
        if isinstance(item, str):
            item = self.redact_text(item)  # the checklist is stored redacted
        idx = item if isinstance(item, int) else next((i for i, (a, _) in enumerate(acc) if a == item), None)
        if idx is None or not 0 <= idx < len(acc):
            raise UsageError(f"no acceptance item {item!r}; the checklist is {[a for a, _ in acc]}")
        if evidence is not None:
            if not isinstance(evidence, str) or not evidence.strip():
                raise InvalidMessageError("evidence must be non-empty text, e.g. 'artifact://<sha>' or 'pytest: 40 passed'")
            self.log.append_event("meta", {"type": "note", "layer": ACCEPTANCE_NOTES, "kind": "evidence",
                                           "item": acc[idx][0], "text": self.redact_text(evidence)})
        acc[idx] = (acc[idx][0], done)
        data = self.state.task.to_dict()
        data["acceptance"] = [{"item": a, "done": d} for a, d in acc]
        if data != self.state.task.to_dict():
            self.log.append_event("task", data)

    def note(self, layer: str, text: str, *, source: str | None = None, ref: str | None = None) -> None:
        if layer not in ("memory", "evidence", "knowledge"):
            raise UsageError(f"unknown note layer {layer!r}; use 'memory', 'evidence' or 'knowledge'")
        text, _ = clean_text(text, "note text")
        text = self.redact_text(text)
        data: dict[str, Any] = {"type": "note", "layer": layer, "text": text}
        if source:
            data["source"] = source
        if ref:
            data["ref"] = ref
        self.log.append_event("meta", data)

    def skills(self, root: str | Path | None, user_dir: str | Path | None) -> list[Skill]:
        found = discover_skills(root, user_dir)
        listed = [{**sk.to_dict(), "body": self.redact_text(sk.body)} for sk in found]
        if catalog(self.state.notes_for("skills")) != listed:  # logged once, again only when it changes
            self.log.append_event("meta", {"type": "note", "layer": "skills", "kind": "catalog", "text": "",
                                           "skills": listed})
        return found

    def load_skill(self, name: Any) -> str:
        notes = self.state.notes_for("skills")
        known = {str(s["name"]): s for s in catalog(notes)}
        if not isinstance(name, str) or name not in known:
            return (f"error: no skill named {name!r}; the skills are: {', '.join(sorted(known)) or 'none'} "
                    "(discover them with session.skills())")
        if name not in loaded(notes):
            self.log.append_event("meta", {"type": "note", "layer": "skills", "kind": "load", "text": "", "skill": name})
        return f"skill {name!r} loaded: its instructions are in the SKILL section of your context from now on"

    def remember(self, text: str, *, scope: str = "session", source: str = "user", subject: str | None = None,
                 expires_days: float | None = None) -> MemoryItem | None:
        return self.memory.add(text, scope=scope, source=source, seq=self.state.seq, subject=subject,
                               expires_days=expires_days)

    def instructions(self, root: str | Path | None = None, user_dir: str | Path | None = None,
                     cwd: str | Path | None = None) -> list[InstructionFile]:
        if cwd is not None and root is None:
            root = repository_root(Path(cwd).resolve())
        files = discover(root, user_dir, cwd=cwd)
        loaded = [{**f.to_dict(), "text": self.redact_text(f.text)} for f in files if f.duplicate_of is None]
        root_s = str(Path(root).resolve()) if root is not None else ""
        prev = self.state.notes_for("instruction-files")
        if not prev or prev[-1].get("files") != loaded or prev[-1].get("root") != root_s:
            self.log.append_event("meta", {"type": "note", "layer": "instruction-files", "text": "", "root": root_s,
                                  "files": loaded})
        return files


__all__ = ["Inputs"]
