"""Pure-text parts of tool-result ingest: secret redaction and content-aware compression."""

from .redact import SECRET_TYPES, Redaction, has_candidate, redact, redact_obj

__all__ = ["SECRET_TYPES", "Redaction", "has_candidate", "redact", "redact_obj"]
