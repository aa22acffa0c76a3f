"""The codebase map: tree-sitter definitions and references, a file graph, personalized PageRank, a budgeted
render, incremental updates (mtime + hash) and the import chain of edited files.

Needs the ``codemap`` extra (``pip install 'windowsmith[codemap]'``: tree-sitter and the Python, JavaScript,
TypeScript, Go, Java and Rust grammar wheels); the grammars are imported on first use, with an error naming
the extra when they are missing.
"""

from .graph import FileGraph
from .layer import CodeMapLayer
from .map import CodeMap, UpdateStats
from .parse import EXTENSIONS, Definition, FileInfo, parse_source

__all__ = ["EXTENSIONS", "CodeMap", "CodeMapLayer", "Definition", "FileGraph", "FileInfo", "UpdateStats", "parse_source"]
