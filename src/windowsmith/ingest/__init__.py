"""Pure-text parts of tool-result ingest: secret redaction and content-aware compression."""

from .compress import KINDS, Compressed, compress, detect_kind, elision_marker, head_tail
from .redact import SECRET_TYPES, Redaction, has_candidate, redact, redact_obj

__all__ = [
    "KINDS",
    "SECRET_TYPES",
    "Compressed",
    "Redaction",
    "compress",
    "detect_kind",
    "elision_marker",
    "has_candidate",
    "head_tail",
    "redact",
    "redact_obj",
]
