"""One rendered request per format, pinned byte for byte (update with --inline-snapshot=fix)."""

from __future__ import annotations

from inline_snapshot import snapshot

from windowsmith.formats import get_renderer
from windowsmith.model import Message, Text, ToolCall, ToolResult, ToolSpec
from windowsmith.request import CachePlan, NeutralRequest, Segment


def small_request() -> NeutralRequest:
    return NeutralRequest(
        model="model-x",
        system=(Segment("You are terse.", "system"),),
        session=(Segment("cwd: /repo", "session"),),
        tools=(ToolSpec("ls", "List a directory.", {"type": "object", "properties": {"dir": {"type": "string"}}}),),
        messages=(
            Message.user("What is in /repo?"),
            Message.assistant("", [ToolCall("c1", "ls", {"dir": "/repo"})]),
            Message("tool", (ToolResult("c1", (Text("a.py\nb.py"),)),)),
        ),
        tail="Goal: answer the question.",
        max_output_tokens=512,
        cache_key="s-1",
        cache=CachePlan(tools=True, system=True, session=False, message_index=2),
    )


def test_anthropic_snapshot() -> None:
    assert get_renderer("anthropic").render(small_request()).request == snapshot(
        {
            "model": "model-x",
            "max_tokens": 512,
            "tools": [
                {
                    "name": "ls",
                    "input_schema": {"type": "object", "properties": {"dir": {"type": "string"}}},
                    "description": "List a directory.",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
            "system": [
                {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "cwd: /repo"},
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is in /repo?"}]},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c1", "name": "ls", "input": {"dir": "/repo"}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "c1",
                            "content": [
                                {
                                    "type": "text",
                                    "text": """\
a.py
b.py\
""",
                                }
                            ],
                            "cache_control": {"type": "ephemeral"},
                        },
                        {"type": "text", "text": "Goal: answer the question."},
                    ],
                },
            ],
        }
    )


def test_openai_chat_snapshot() -> None:
    assert get_renderer("openai-chat").render(small_request()).request == snapshot(
        {
            "model": "model-x",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "system", "content": "cwd: /repo"},
                {"role": "user", "content": [{"type": "text", "text": "What is in /repo?"}]},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"dir":"/repo"}'}}
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "c1",
                    "content": """\
a.py
b.py\
""",
                },
                {"role": "user", "content": [{"type": "text", "text": "Goal: answer the question."}]},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "ls",
                        "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}},
                        "description": "List a directory.",
                    },
                }
            ],
            "max_completion_tokens": 512,
            "prompt_cache_key": "s-1",
        }
    )


def test_openai_responses_snapshot() -> None:
    assert get_renderer("openai-responses").render(small_request()).request == snapshot(
        {
            "model": "model-x",
            "input": [
                {"type": "message", "role": "system", "content": "You are terse."},
                {"type": "message", "role": "system", "content": "cwd: /repo"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is in /repo?"}]},
                {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": '{"dir":"/repo"}'},
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": """\
a.py
b.py\
""",
                },
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Goal: answer the question."}],
                },
            ],
            "tools": [
                {
                    "type": "function",
                    "name": "ls",
                    "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}},
                    "strict": False,
                    "description": "List a directory.",
                }
            ],
            "max_output_tokens": 512,
            "prompt_cache_key": "s-1",
        }
    )


def test_gemini_snapshot() -> None:
    assert get_renderer("gemini").render(small_request()).request == snapshot(
        {
            "model": "model-x",
            "contents": [
                {"role": "user", "parts": [{"text": "What is in /repo?"}]},
                {"role": "model", "parts": [{"function_call": {"id": "c1", "name": "ls", "args": {"dir": "/repo"}}}]},
                {
                    "role": "user",
                    "parts": [
                        {
                            "function_response": {
                                "id": "c1",
                                "name": "ls",
                                "response": {
                                    "output": """\
a.py
b.py\
"""
                                },
                            }
                        },
                        {"text": "Goal: answer the question."},
                    ],
                },
            ],
            "config": {
                "system_instruction": {"parts": [{"text": "You are terse."}, {"text": "cwd: /repo"}]},
                "tools": [
                    {
                        "function_declarations": [
                            {
                                "name": "ls",
                                "parameters_json_schema": {"type": "object", "properties": {"dir": {"type": "string"}}},
                                "description": "List a directory.",
                            }
                        ]
                    }
                ],
                "max_output_tokens": 512,
            },
        }
    )
