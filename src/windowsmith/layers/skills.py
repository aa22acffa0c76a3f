"""Skills, as the Agent Skills convention lays them out: a folder with a ``SKILL.md`` whose YAML front matter
gives ``name`` and ``description`` (files beside it are the skill's own).

``Session.skills()`` discovers them (the project's ``.windowsmith/skills`` and ``.claude/skills``, then the user's
``~/.windowsmith/skills`` and ``~/.claude/skills``; the first skill of a name wins) and logs the catalog once (again
only when it changes). Every request then carries each skill's name and description in the cached session context
(stable phase); a skill's body joins the dynamic tail (a ``SKILL`` section) when the agent loads it with the
``load_skill`` tool (:data:`LOAD_SKILL_TOOL`, answered by ``Session.load_skill``) or when the current step names
it. Both count against the ``skills`` budget (its weight, and its cap in ``BudgetConfig.caps``).

The front matter is parsed by hand (``key: value`` lines, quoted or not, folded ``>``/``|`` blocks): no YAML
library, and nothing in it is executed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .base import BuildContext, Item, Layer, shrink_text

#: The ``load_skill`` tool: declare it with ``session.tools([..., LOAD_SKILL_TOOL])`` and answer its calls with
#: ``session.tool_result(call.id, session.load_skill(**call.arguments))``.
LOAD_SKILL_TOOL: dict[str, Any] = {
    "name": "load_skill",
    "description": "Load the full instructions of one of the skills listed under SKILLS, by its name, before doing "
                   "a task it covers.",
    "parameters": {"type": "object", "properties": {"name": {"type": "string", "description": "the skill's name"}},
                   "required": ["name"]},
}
#: Where skills are looked for, under the project root and under the user's home, in this order.
PROJECT_DIRS: tuple[str, ...] = (".windowsmith/skills", ".claude/skills")
USER_DIRS: tuple[str, ...] = (".windowsmith/skills", ".claude/skills")
MAX_SKILL_BYTES = 256_000  # a SKILL.md over this is refused (a skill is instructions, not data)
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: str
    body: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "description": self.description, "path": self.path, "body": self.body}


def front_matter(text: str, where: str) -> tuple[dict[str, str], str]:
    """The ``key: value`` pairs of a leading ``---`` block and the text after it."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise UsageError(f"{where} has no YAML front matter; start it with '---', then 'name: ...' and "
                         "'description: ...', then '---'")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise UsageError(f"{where}: the front matter is not closed; add a '---' line after it") from None
    out: dict[str, str] = {}
    key: str | None = None
    for raw in lines[1:end]:
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw[:1] in " \t" and key is not None:  # a continuation of a folded or multi-line value
            out[key] = f"{out[key]} {raw.strip()}".strip()
            continue
        k, sep, v = raw.partition(":")
        if not sep:
            raise UsageError(f"{where}: front matter line {raw.strip()!r} is not 'key: value'")
        key, v = k.strip(), v.strip()
        if v in (">", "|", ">-", "|-"):
            v = ""
        elif len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
            v = v[1:-1]
        out[key] = v
    return out, "\n".join(lines[end + 1:]).strip()


def read_skill(path: Path) -> Skill:
    """The skill of one ``SKILL.md`` (its name must be lower-case letters, digits and hyphens)."""
    where = str(path)
    if path.stat().st_size > MAX_SKILL_BYTES:
        raise UsageError(f"{where} is over {MAX_SKILL_BYTES:,} bytes; move its reference material to files beside it")
    meta, body = front_matter(path.read_text(encoding="utf-8", errors="replace"), where)
    name, desc = meta.get("name", "").strip(), " ".join(meta.get("description", "").split())
    if not _NAME.match(name):
        raise UsageError(f"{where}: name {name!r} must be 1-64 lower-case letters, digits and hyphens")
    if not desc:
        raise UsageError(f"{where}: add a 'description:' saying what the skill does and when to use it")
    return Skill(name, desc, where, body)


def discover_skills(root: str | Path | None = None, user_dir: str | Path | None = None) -> list[Skill]:
    """The skills under ``root`` (default: the working directory) then ``user_dir`` (default: the home folder),
    sorted by name; a name found twice keeps the first (the project's)."""
    bases = [Path(root or Path.cwd()) / d for d in PROJECT_DIRS]
    bases += [Path(user_dir if user_dir is not None else Path.home()) / d for d in USER_DIRS]
    found: dict[str, Skill] = {}
    for base in bases:
        if not base.is_dir():
            continue
        for md in sorted(base.glob("*/SKILL.md")):
            skill = read_skill(md)
            found.setdefault(skill.name, skill)
    return [found[n] for n in sorted(found)]


def catalog_text(skills: Sequence[Mapping[str, Any]]) -> str:
    lines = ["SKILLS (load one with the load_skill tool before a task it covers):"]
    lines += [f"- {s['name']}: {s['description']}" for s in skills]
    return "\n".join(lines)


def catalog(notes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The newest logged skill catalog of a session's ``skills`` notes."""
    return next((list(n.get("skills", ())) for n in reversed(notes) if n.get("kind") == "catalog"), [])


def loaded(notes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Skill names loaded with ``load_skill``, in order."""
    out: list[str] = []
    for n in notes:
        if n.get("kind") == "load" and n.get("skill") not in out:
            out.append(str(n.get("skill")))
    return out


class SkillsLayer(Layer):
    """The skills catalog (session slot, stable) and the bodies of loaded or step-named skills (tail, ``SKILL``)."""

    name = "skills"

    def items(self, ctx: BuildContext) -> Iterable[Item]:
        notes = ctx.state.notes_for("skills")
        if not notes:
            return
        skills = catalog(notes)
        if not skills:
            return
        yield Item(self.name, "session", "stable", catalog_text(skills), priority=85, provenance="skills:catalog",
                   order=90, shrink=shrink_text)
        by_name = {str(s["name"]): s for s in skills}
        step = (ctx.state.task.step or "").lower()
        named = [n for n in by_name if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", step)]
        for i, name in enumerate(dict.fromkeys([*loaded(notes), *named])):
            s = by_name.get(name)
            if s is None:
                continue
            yield Item(self.name, "tail", "dynamic", f"{name} ({s['path']}):\n{s['body']}", priority=75, header="SKILL",
                       order=i, provenance=f"skill:{name}", shrink=shrink_text)


__all__ = ["LOAD_SKILL_TOOL", "Skill", "SkillsLayer", "catalog", "catalog_text", "discover_skills", "front_matter",
           "loaded", "read_skill"]
