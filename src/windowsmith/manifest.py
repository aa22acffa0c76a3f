"""The manifest: what went into a pack, what was compressed or dropped, and why.

Stored with every pack. ``parts`` is the request's cache-order part digests (12 hex chars each,
concatenated), so two manifests can say exactly where a cache prefix broke without storing requests.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

PART_LEN = 12


@dataclass
class Manifest:
    pack_id: str
    session_id: str
    seq: int  # log seq the pack was built at
    head: str | None  # log head hash
    model: str
    format: str
    window: int
    reserved_output: int
    available: int
    tokens: int  # tokens of the whole request as the provider is expected to bill it (calibrated)
    layers: dict[str, dict[str, Any]]
    components: dict[str, int]
    actions: list[dict[str, Any]] = field(default_factory=list)
    repairs: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)  # secret markers in the pack, by type
    cache: dict[str, Any] = field(default_factory=dict)
    checksum: str = ""
    parts: str = ""
    status: str = "ok"  # ok | warn | compact (a request over block_at is refused: BudgetBlockedError)
    warnings: list[str] = field(default_factory=list)
    #: the calibration the count used: billed ≈ offset + slope x tokens_counted (tokens.Calibration)
    calibration: dict[str, Any] = field(default_factory=lambda: {"slope": 1.0, "offset": 0, "observations": 0})
    messages: int = 0
    guidance: dict[str, Any] = field(default_factory=dict)  # guidance layers' reports (recitation, failures, ...)
    tokens_counted: int | None = None  # the request's count before calibration (tokenizer x factor)

    def to_dict(self) -> dict[str, Any]:
        """The manifest as JSON-ready values: ``dataclasses.asdict`` (a deep copy), without its per-value dataclass
        checks (the fields hold JSON values, copied here by their exact type; anything else goes through
        ``asdict``'s rules), since a manifest is turned into a dict on every build."""
        return {name: _copy(getattr(self, name)) for name in _FIELDS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        if isinstance(kw.get("calibration"), int | float):  # manifests stored before the affine calibration
            kw["calibration"] = {"slope": float(kw["calibration"]), "offset": 0, "observations": None}
        return cls(**kw)

    @property
    def part_list(self) -> list[str]:
        return [self.parts[i: i + PART_LEN] for i in range(0, len(self.parts), PART_LEN)]

    @property
    def fill(self) -> float:
        return self.tokens / self.available if self.available else 0.0

    def summary(self) -> str:
        lines = [
            f"pack {self.pack_id}  session {self.session_id}  seq {self.seq}  {self.model} ({self.format})",
            f"tokens {self.tokens:,} of {self.available:,} available ({self.fill:.0%}); window {self.window:,}, "
            f"reserved output {self.reserved_output:,}; status {self.status}"
            + (f"; counted {self.tokens_counted:,} before calibration" if self.tokens_counted not in (None, self.tokens)
               else ""),
            "layers: " + ", ".join(f"{k} {v['used']:,}" for k, v in self.layers.items() if v["used"] or v["dropped"]),
            f"cache: {self.cache.get('breakpoints', 0)} breakpoints, prefix {self.cache.get('prefix_tokens', 0):,} tokens "
            f"({self.cache.get('prefix_hash', '')[:12]})",
        ]
        for a in self.actions:
            lines.append(f"  {a['kind']} {a['layer']}: {a['tokens_before']:,} → {a['tokens_after']:,} tokens; {a['reason']}")
        for r in self.repairs:
            lines.append(f"  repair at seq {r['seq']}: {r['what']}")
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        lines.append(f"checksum {self.checksum[:16]}")
        return "\n".join(lines)


def diff(a: Manifest, b: Manifest) -> dict[str, Any]:
    """What changed from pack ``a`` to pack ``b``, and where ``b``'s cache prefix diverged from ``a``."""
    pa, pb = a.part_list, b.part_list
    shared = 0
    for x, y in zip(pa, pb, strict=False):
        if x != y:
            break
        shared += 1
    a_prefix = a.cache.get("prefix_parts", 0)
    prefix_kept = shared >= a_prefix
    layers = {}
    for name in sorted(set(a.layers) | set(b.layers)):
        ua = a.layers.get(name, {}).get("used", 0)
        ub = b.layers.get(name, {}).get("used", 0)
        if ua != ub:
            layers[name] = {"a": ua, "b": ub, "delta": ub - ua}
    return {
        "a": a.pack_id,
        "b": b.pack_id,
        "same_session": a.session_id == b.session_id,
        "tokens": {"a": a.tokens, "b": b.tokens, "delta": b.tokens - a.tokens},
        "layers": layers,
        "parts": {"a": len(pa), "b": len(pb), "shared": shared},
        "cache_prefix": {
            "a_prefix_parts": a_prefix,
            "kept": prefix_kept,
            "broke_at_part": None if prefix_kept else shared,
            "broke_in": None if prefix_kept else _locate(b, shared),
        },
        "actions_b": b.actions,
        "identical": a.checksum == b.checksum,
    }


def _locate(m: Manifest, part: int) -> str:
    """Name the region of the request a part index falls in (tools, system, message N)."""
    layout = m.cache.get("layout", {})
    tools = layout.get("tools", 0)
    system = layout.get("system", 0)
    if part < tools:
        return f"tools (definition {part})"
    if part < tools + system:
        return f"system (block {part - tools})"
    return f"messages (message {part - tools - system})"


_FIELDS = tuple(f.name for f in fields(Manifest))
_ATOMS = (str, int, float, bool, type(None))


def _copy(v: Any) -> Any:
    """``v`` deep-copied as ``dataclasses.asdict`` copies a field's value."""
    t = type(v)
    if t in _ATOMS:
        return v
    if t is dict:
        return {_copy(k): _copy(x) for k, x in v.items()}
    if t is list:
        return [_copy(x) for x in v]
    if t is tuple:
        return tuple([_copy(x) for x in v])
    if is_dataclass(v) and not isinstance(v, type):
        return asdict(v)
    return copy.deepcopy(v)


__all__ = ["Manifest", "diff"]
