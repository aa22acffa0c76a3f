"""The server's logs: one access line per proxied call (logger ``windowsmith.access``), and the format of every
line (``serve --log-format text|json``, ``--log-level``).

An access line holds the session, the pack, the billed tokens (in, out, cache read, cache write), the latency
windowsmith added (the call's time less the upstream's) and the status. In JSON each field is a key; in text the
line reads ``session=... pack=... in=... out=... cache_read=... cache_write=... added_ms=... status=...``. No
header, key or message content is ever logged.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

access_log = logging.getLogger("windowsmith.access")

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")


@dataclass
class CallLog:
    """What one proxied call reports in its access line (filled in as the call goes)."""

    path: str
    session: str | None = None
    pack: str | None = None
    status: int = 0
    tokens_in: int | None = None
    tokens_out: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    outcome: str = "forwarded"  # forwarded, replayed, refused
    upstream_s: float = 0.0
    t0: float = field(default_factory=time.perf_counter)
    done: bool = False
    streaming: bool = False  # the relay writes the line when the stream ends
    added_s: float | None = None  # a stream's: fixed when its first byte can go out

    def opened(self) -> None:
        """A stream opened upstream: what windowsmith added is known now (the rest is the provider's stream)."""
        self.streaming = True
        self.added_s = max(0.0, time.perf_counter() - self.t0 - self.upstream_s)

    def usage(self, u: Any) -> None:
        """Take the billed counts of a neutral :class:`~windowsmith.model.Usage`."""
        self.tokens_in, self.tokens_out = u.prompt_tokens, u.output_tokens
        self.cache_read, self.cache_write = u.cache_read_tokens, u.cache_write_tokens

    def fields(self) -> dict[str, Any]:
        total = time.perf_counter() - self.t0
        added = self.added_s if self.added_s is not None else max(0.0, total - self.upstream_s)
        return {"path": self.path, "session": self.session, "pack": self.pack, "status": self.status,
                "outcome": self.outcome, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                "cache_read": self.cache_read, "cache_write": self.cache_write,
                "added_ms": round(added * 1000, 1), "total_ms": round(total * 1000, 1)}

    def emit(self) -> None:
        """Write the access line (once)."""
        if self.done:
            return
        self.done = True
        f = self.fields()
        text = " ".join(f"{k}={'-' if v is None else v}" for k, v in f.items())
        access_log.info(text, extra={"access": f})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and an access line's fields as keys."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname.lower(),
                               "logger": record.name}
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            out.update(access)
        else:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(level: str = "info", fmt: str = "text") -> None:
    """Log windowsmith's server lines to stderr at ``level`` in ``fmt`` (``text`` or ``json``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    for name in ("windowsmith.server", "windowsmith.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.setLevel(level.upper())
        lg.propagate = False


__all__ = ["FORMATS", "LEVELS", "CallLog", "JsonFormatter", "access_log", "configure"]
