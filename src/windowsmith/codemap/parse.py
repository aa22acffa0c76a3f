"""Parse source files with tree-sitter: definitions (with signatures and lines), referenced names, imports.

One grammar wheel per language (``tree-sitter-python``, ``-javascript``, ``-typescript``, ``-go``, ``-java``,
``-rust``), imported lazily: the ``codemap`` extra installs them (``pip install 'windowsmith[codemap]'``);
nothing is downloaded at run time.
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ..errors import ConfigError

EXTRA_HINT = "the code map needs tree-sitter and its grammar wheels: pip install 'windowsmith[codemap]'"

#: file extension → (language, grammar module, function returning the language)
EXTENSIONS: dict[str, tuple[str, str, str]] = {
    ".py": ("python", "tree_sitter_python", "language"),
    ".pyi": ("python", "tree_sitter_python", "language"),
    ".js": ("javascript", "tree_sitter_javascript", "language"),
    ".jsx": ("javascript", "tree_sitter_javascript", "language"),
    ".mjs": ("javascript", "tree_sitter_javascript", "language"),
    ".cjs": ("javascript", "tree_sitter_javascript", "language"),
    ".ts": ("typescript", "tree_sitter_typescript", "language_typescript"),
    ".tsx": ("tsx", "tree_sitter_typescript", "language_tsx"),
    ".go": ("go", "tree_sitter_go", "language"),
    ".java": ("java", "tree_sitter_java", "language"),
    ".rs": ("rust", "tree_sitter_rust", "language"),
}

_TS_DEFS = """
(function_declaration name: (identifier) @name) @def
(class_declaration name: (type_identifier) @name) @def
(abstract_class_declaration name: (type_identifier) @name) @def
(interface_declaration name: (type_identifier) @name) @def
(type_alias_declaration name: (type_identifier) @name) @def
(enum_declaration name: (identifier) @name) @def
(method_definition name: (property_identifier) @name) @def
(variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)]) @def
"""
DEFS: dict[str, str] = {
    "python": """
(class_definition name: (identifier) @name) @def
(function_definition name: (identifier) @name) @def
""",
    "javascript": """
(function_declaration name: (identifier) @name) @def
(class_declaration name: (identifier) @name) @def
(method_definition name: (property_identifier) @name) @def
(variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)]) @def
""",
    "typescript": _TS_DEFS,
    "tsx": _TS_DEFS,
    "go": """
(function_declaration name: (identifier) @name) @def
(method_declaration name: (field_identifier) @name) @def
(type_spec name: (type_identifier) @name) @def
""",
    "java": """
(class_declaration name: (identifier) @name) @def
(interface_declaration name: (identifier) @name) @def
(enum_declaration name: (identifier) @name) @def
(record_declaration name: (identifier) @name) @def
(method_declaration name: (identifier) @name) @def
(constructor_declaration name: (identifier) @name) @def
""",
    "rust": """
(function_item name: (identifier) @name) @def
(function_signature_item name: (identifier) @name) @def
(struct_item name: (type_identifier) @name) @def
(enum_item name: (type_identifier) @name) @def
(trait_item name: (type_identifier) @name) @def
(type_item name: (type_identifier) @name) @def
(mod_item name: (identifier) @name) @def
(macro_definition name: (identifier) @name) @def
""",
}
_REF_NODES = {
    "python": ["identifier"],
    "javascript": ["identifier", "property_identifier"],
    "typescript": ["identifier", "property_identifier", "type_identifier"],
    "tsx": ["identifier", "property_identifier", "type_identifier"],
    "go": ["identifier", "field_identifier", "type_identifier"],
    "java": ["identifier", "type_identifier"],
    "rust": ["identifier", "field_identifier", "type_identifier"],
}
IMPORTS: dict[str, str] = {
    "python": "(import_statement) @imp (import_from_statement) @imp",
    "javascript": "(import_statement source: (string) @imp) (export_statement source: (string) @imp)",
    "typescript": "(import_statement source: (string) @imp) (export_statement source: (string) @imp)",
    "tsx": "(import_statement source: (string) @imp) (export_statement source: (string) @imp)",
    "go": "(import_spec path: (interpreted_string_literal) @imp)",
    "java": "(import_declaration) @imp",
    "rust": "(use_declaration) @imp (mod_item name: (identifier) @imp !body)",
}
_KINDS = {"class": "class", "interface": "interface", "enum": "enum", "struct": "struct", "trait": "trait",
          "type": "type", "mod": "module", "macro": "macro", "method": "method", "constructor": "method",
          "record": "class", "variable_declarator": "function", "function": "function"}


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str  # class, function, method, interface, struct, ...
    line: int  # 1-based
    signature: str
    depth: int  # nesting level among definitions (a method in a class: 1)

    def to_list(self) -> list[Any]:
        return [self.name, self.kind, self.line, self.signature, self.depth]


@dataclass
class FileInfo:
    path: str  # relative, with "/"
    language: str
    definitions: list[Definition] = field(default_factory=list)
    references: Counter[str] = field(default_factory=Counter)
    imports: list[str] = field(default_factory=list)  # raw import specs, resolved by the graph

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "language": self.language, "definitions": [d.to_list() for d in self.definitions],
                "references": dict(self.references), "imports": self.imports}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileInfo:
        return cls(d["path"], d["language"], [Definition(*x) for x in d["definitions"]], Counter(d["references"]),
                   list(d["imports"]))


def _tree_sitter() -> Any:
    try:
        return importlib.import_module("tree_sitter")
    except ImportError as e:
        raise ConfigError(EXTRA_HINT) from e


@cache
def _language(lang: str) -> tuple[Any, Any, Any, Any, Any]:
    """(parser, definitions query, references query, imports query, QueryCursor) of a language."""
    ts = _tree_sitter()
    module, fn = next((m, f) for (lg, m, f) in EXTENSIONS.values() if lg == lang)
    try:
        grammar = importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"{EXTRA_HINT} (missing {module.replace('_', '-')})") from e
    language = ts.Language(getattr(grammar, fn)())
    refs = " ".join(f"({n}) @ref" for n in _REF_NODES[lang])
    return (ts.Parser(language), ts.Query(language, DEFS[lang]), ts.Query(language, refs),
            ts.Query(language, IMPORTS[lang]), ts.QueryCursor)


def language_of(path: str) -> str | None:
    ext = path[path.rfind("."):] if "." in path else ""
    entry = EXTENSIONS.get(ext.lower())
    return entry[0] if entry else None


def _kind(node_type: str) -> str:
    for key, kind in _KINDS.items():
        if node_type.startswith(key) or key in node_type:
            return kind
    return "function"


def _signature(src: bytes, node: Any) -> str:
    body = node.child_by_field_name("body")
    end = body.start_byte if body is not None and body.start_byte > node.start_byte else node.end_byte
    text = src[node.start_byte:end].decode("utf-8", "replace")
    if body is None:
        text = text.split("\n", 1)[0]
    text = re.sub(r"\s+", " ", text).strip().rstrip("{:").rstrip()
    text = re.sub(r"([(\[]) ", r"\1", re.sub(r",? ([)\]])", r"\1", text))
    return text if len(text) <= 120 else text[:119] + "…"


def parse_source(path: str, src: bytes, language: str | None = None) -> FileInfo:
    """Definitions, references and imports of one file's bytes."""
    lang = language or language_of(path)
    if lang is None:
        raise ConfigError(f"no tree-sitter grammar for {path!r}; supported: {', '.join(sorted(EXTENSIONS))}")
    parser, dq, rq, iq, cursor = _language(lang)
    tree = parser.parse(src)
    root = tree.root_node
    info = FileInfo(path, lang)
    spans: list[tuple[int, int, int, str, str, str]] = []  # start, end, line, name, kind, signature
    name_at: set[int] = set()
    for _, caps in cursor(dq).matches(root):
        defs, names = caps.get("def"), caps.get("name")
        if not defs or not names:
            continue
        node, name = defs[0], names[0]
        name_at.add(name.start_byte)
        spans.append((node.start_byte, node.end_byte, node.start_point[0] + 1, name.text.decode("utf-8", "replace"),
                      _kind(node.type), _signature(src, node)))
    spans.sort(key=lambda s: (s[0], -s[1]))
    stack: list[int] = []
    for start, end, line, name, kind, sig in spans:
        while stack and stack[-1] <= start:
            stack.pop()
        info.definitions.append(Definition(name, kind, line, sig, len(stack)))
        stack.append(end)
    for nodes in cursor(rq).captures(root).values():
        for n in nodes:
            if n.start_byte not in name_at:
                info.references[n.text.decode("utf-8", "replace")] += 1
    for nodes in cursor(iq).captures(root).values():
        for n in nodes:
            info.imports.append(n.text.decode("utf-8", "replace"))
    return info


__all__ = ["EXTENSIONS", "EXTRA_HINT", "Definition", "FileInfo", "language_of", "parse_source"]
