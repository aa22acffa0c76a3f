"""Importers that turn real agent trace files into neutral :class:`Trace` objects.

    load_traces(path, format=None) -> list[Trace]   every run in a file (tau-bench holds 200)
    detect_format(path) -> str                       by content, not by extension
    iter_trace_files(directory) -> list[Path]        recursively, known extensions
    FORMATS                                          the supported format names
    demo_trace_path() -> Path                        a small bundled tau-bench run

Errors are :class:`~windowsmith.errors.TraceFormatError` naming the file, the line (JSONL) or key
path, and the supported formats. Every repair is recorded in ``Trace.repairs``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError, WindowsmithError
from ..formats.reader import LARGE_OUTPUT_BYTES, NO_RESULT_TEXT, Ctx, as_dict, as_list, fail
from .base import FORMATS, TRACE_EXTENSIONS, Document, Trace, iter_trace_files, read_document
from .claude_code import import_claude_code, is_claude_code_record
from .codex import import_codex, is_codex_record
from .gemini_cli import import_gemini_cli, is_gemini_cli_record
from .inspect_ai import import_inspect_log, is_inspect_log
from .langchain_msgs import import_langchain_messages, is_langchain_messages
from .logs import import_anthropic_messages, import_openai_chat, import_openai_responses
from .openhands import import_openhands, is_v1_base_state, is_v1_event
from .pydantic_ai_msgs import import_pydantic_ai_messages, is_pydantic_ai_messages
from .swe import import_mini_swe_agent, import_swe_agent
from .tau import import_tau2_bench, import_tau_bench

Importer = Callable[[Any, Ctx, list[str], str], list[Trace]]

_IMPORTERS: dict[str, Importer] = {
    "tau-bench": import_tau_bench,
    "tau2-bench": import_tau2_bench,
    "mini-swe-agent": import_mini_swe_agent,
    "swe-agent": import_swe_agent,
    "openhands": import_openhands,
    "openai-chat": import_openai_chat,
    "openai-responses": import_openai_responses,
    "anthropic-messages": import_anthropic_messages,
    "claude-code": import_claude_code,
    "codex": import_codex,
    "gemini-cli": import_gemini_cli,
    "inspect-ai": import_inspect_log,
    "langchain": import_langchain_messages,
    "pydantic-ai": import_pydantic_ai_messages,
}

#: Agent CLIs' session files (JSONL): the format, and what tells one of its records apart.
_SESSION_FILES: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("claude-code", is_claude_code_record),
    ("codex", is_codex_record),
    ("gemini-cli", is_gemini_cli_record),
)

_RESPONSES_ITEMS = {
    "function_call",
    "function_call_output",
    "reasoning",
    "custom_tool_call",
    "custom_tool_call_output",
    "item_reference",
}
_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "server_tool_use"}


def demo_trace_path() -> Path:
    """The bundled demo: one real tau-bench airline run (gpt-4o), in the original tau-bench format."""
    return Path(__file__).resolve().parent.parent / "data" / "demo" / "tau_bench_airline_demo.json"


# ---------------------------------------------------------------------------------------------------
# Detection
# ---------------------------------------------------------------------------------------------------


def _is_message_record(v: Any) -> bool:
    """One chat message / input item (as in a JSONL log with one message per line)."""
    if not isinstance(v, dict) or any(k in v for k in ("messages", "history", "traj", "simulations", "input")):
        return False
    return "role" in v or _typ(v) in _RESPONSES_ITEMS or _typ(v) == "message"


def _typ(v: Any) -> str | None:
    t = v.get("type") if isinstance(v, dict) else None
    return t if isinstance(t, str) else None


def _detect_messages(items: list[Any]) -> str | None:
    responses = anthropic = openai = plain = 0
    for m in items[:500]:
        if not isinstance(m, dict):
            continue
        t = _typ(m)
        if t in _RESPONSES_ITEMS or (t == "message" and "role" in m):
            responses += 1
            continue
        role = m.get("role")
        if (
            role in ("tool", "function", "developer")
            or "tool_calls" in m
            or "tool_call_id" in m
            or "function_call" in m
        ):
            openai += 1
        content = m.get("content")
        if isinstance(content, list):
            for blk in content:
                bt = _typ(blk)
                if bt in _ANTHROPIC_BLOCKS or (bt == "image" and isinstance(blk.get("source"), dict)):
                    anthropic += 1
                elif bt in ("image_url",):
                    openai += 1
                elif bt in ("input_text", "output_text", "input_image"):
                    responses += 1
        if role in ("user", "assistant", "system"):
            plain += 1
    if responses and responses >= max(anthropic, openai):
        return "openai-responses"
    if anthropic > openai:
        return "anthropic-messages"
    if openai or plain:
        return "openai-chat"
    return None


def _is_openhands_event(v: Any) -> bool:
    return isinstance(v, dict) and "source" in v and ("action" in v or "observation" in v or is_v1_event(v))


def detect_value(v: Any) -> str | None:
    """The format of one parsed JSON value (a whole file or one JSONL record), or None."""
    if is_langchain_messages(v):
        return "langchain"
    if is_pydantic_ai_messages(v):
        return "pydantic-ai"
    if isinstance(v, list):
        first = next((x for x in v if isinstance(x, dict)), None)
        if first is None:
            return None
        if "traj" in first and ("task_id" in first or "reward" in first or "trial" in first):
            return "tau-bench"
        if (
            "history" in first
            and isinstance(first.get("history"), list)
            and ("instance_id" in first or any(_is_openhands_event(e) for e in first["history"][:5]))
        ):
            return "openhands"
        if _is_openhands_event(first):
            return "openhands"
        if any(is_claude_code_record(x) for x in v[:200]):
            return "claude-code"
        return _detect_messages(v)
    if not isinstance(v, dict):
        return None
    if isinstance(v.get("simulations"), list):
        return "tau2-bench"
    if is_inspect_log(v):
        return "inspect-ai"
    if is_v1_base_state(v):
        return "openhands"
    if "traj" in v and isinstance(v.get("traj"), list):
        return "tau-bench"
    info = as_dict(v.get("info"))
    if isinstance(v.get("messages"), list) and (
        str(v.get("trajectory_format", "")).startswith("mini-swe-agent") or "mini_version" in info
    ):
        return "mini-swe-agent"
    history = v.get("history")
    if isinstance(history, list) and history:
        if any(_is_openhands_event(e) for e in history[:5]):
            return "openhands"
        if any(isinstance(e, dict) and "role" in e for e in history[:5]):
            return "swe-agent"
    traj = v.get("trajectory")
    if (
        isinstance(traj, list)
        and traj
        and isinstance(traj[0], dict)
        and ("action" in traj[0] or "observation" in traj[0])
    ):
        return "swe-agent"
    if isinstance(v.get("messages"), list) and "sessionId" in v and "projectHash" in v:
        return "gemini-cli"
    if isinstance(v.get("messages"), list):
        tools = as_list(v.get("tools"))
        if "system" in v or any(isinstance(t, dict) and "input_schema" in t for t in tools):
            return "anthropic-messages"
        return _detect_messages(v["messages"]) or "openai-chat"
    if isinstance(v.get("input"), list) or (isinstance(v.get("output"), list) and v.get("object") == "response"):
        return "openai-responses"
    if _is_message_record(v):
        return _detect_messages([v])
    return None


def _unknown(path: Path, what: str) -> TraceFormatError:
    return fail(path, "", f"not a recognised trace format ({what})")


def _describe(v: Any) -> str:
    if isinstance(v, dict):
        keys = ", ".join(sorted(map(str, v))[:8])
        return f"a JSON object with keys [{keys}]"
    if isinstance(v, list):
        return f"a JSON array of {len(v)} items" + (
            f" starting with {_describe(v[0])}" if v and isinstance(v[0], dict | list) else ""
        )
    return f"a JSON {type(v).__name__}"


def _plan(doc: Document, fmt: str | None) -> tuple[str, list[tuple[int | None, Any]]]:
    """Decide the format and the units to import: [(line or None, value)]."""
    if doc.kind == "json":
        f = fmt or detect_value(doc.value)
        if f is None:
            raise _unknown(doc.path, _describe(doc.value))
        return f, [(None, doc.value)]
    if not doc.records:
        raise fail(doc.path, "", "no complete JSONL record")
    values = [v for _, v in doc.records]
    for session_fmt, is_record in _SESSION_FILES:  # one session per file: its bookkeeping records come along
        if fmt == session_fmt or (fmt is None and any(is_record(v) for v in values[:200])):
            return session_fmt, [(None, values)]
    if all(_is_message_record(v) for v in values):
        f = fmt or _detect_messages(values)
        if f is None:
            raise _unknown(doc.path, "JSONL of message-like records in no known shape")
        return f, [(None, values)]
    if fmt is not None:
        return fmt, list(doc.records)
    f = None
    for lineno, v in doc.records:
        g = detect_value(v)
        if g is None:
            raise fail(doc.path, f"line {lineno}", f"not a recognised trace record ({_describe(v)})")
        if f is not None and g != f:
            raise fail(doc.path, f"line {lineno}", f"record looks like {g!r} but earlier lines are {f!r}")
        f = g
    assert f is not None
    return f, list(doc.records)


def detect_format(path: str | Path) -> str:
    """The format of the trace file at ``path``, from its content."""
    return _safe_plan(read_document(path), None)[0]


def _safe_plan(doc: Document, fmt: str | None) -> tuple[str, list[tuple[int | None, Any]]]:
    try:
        return _plan(doc, fmt)
    except TraceFormatError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        raise fail(doc.path, "", f"not a recognised trace format ({type(e).__name__}: {e})") from None


def _stem(path: Path) -> str:
    name = path.name
    for ext in (".traj.json", *TRACE_EXTENSIONS):
        if name.lower().endswith(ext):
            return name[: -len(ext)]
    return path.stem


def load_traces(path: str | Path, format: str | None = None) -> list[Trace]:
    """Import every run in the file at ``path``. ``format=`` overrides detection."""
    if format is not None and format not in FORMATS:
        raise TraceFormatError(f"{path}: unknown format {format!r}; supported formats: {', '.join(FORMATS)}")
    doc = read_document(path)
    fmt, units = _safe_plan(doc, format)
    importer = _IMPORTERS[fmt]
    out: list[Trace] = []
    stem = _stem(doc.path)
    for lineno, value in units:
        if lineno is None:
            ctx = Ctx(doc.path, "", str(doc.path))
            tid = stem
        else:
            ctx = Ctx(doc.path, f"line {lineno}", f"{doc.path}:{lineno}")
            tid = f"{stem}:{lineno}"
        try:
            out.extend(importer(value, ctx, list(doc.notes), tid))
        except TraceFormatError:
            raise
        except WindowsmithError as e:  # a malformed message or block caught by the model's validation
            raise fail(doc.path, ctx.where, f"invalid content for format {fmt!r}: {e}") from None
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
            raise fail(
                doc.path, ctx.where, f"unexpected structure for format {fmt!r} ({type(e).__name__}: {e})"
            ) from None
    return out


__all__ = [
    "FORMATS",
    "LARGE_OUTPUT_BYTES",
    "NO_RESULT_TEXT",
    "TRACE_EXTENSIONS",
    "Trace",
    "demo_trace_path",
    "detect_format",
    "detect_value",
    "iter_trace_files",
    "load_traces",
]
