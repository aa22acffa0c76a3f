"""The ``anthropic-context-editing`` bench strategy: Anthropic's documented clear_tool_uses edit, per window."""

from __future__ import annotations

from windowsmith.bench.base import BenchConfig
from windowsmith.bench.native import PLACEHOLDER, AnthropicContextEditing
from windowsmith.bench.strategies import STRATEGIES, VARIANTS, make_strategy
from windowsmith.model import Message, Text, ToolCall, ToolResult, ToolSpec
from windowsmith.registry import load_registry

SONNET = load_registry().get("claude-sonnet-4-5")
TOOLS = (ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}),)


def _run(s: AnthropicContextEditing, turns: int, size: int = 400) -> list:
    s.start("r", "You are a coding agent.", TOOLS)
    s.observe(Message("user", (Text("Fix the failing test in parser.py"),)))
    built = []
    for i in range(turns):
        s.observe(Message("assistant", (ToolCall(f"c{i}", "read_file", {"path": f"f{i}.py"}),)))
        s.observe(Message("tool", (ToolResult(f"c{i}", (Text(f"file {i}: " + "token " * size),)),)))
        built.append(s.build())
    return built


def test_registered_as_a_named_variant() -> None:
    cfg = BenchConfig.make(SONNET, 200_000)
    assert "anthropic-context-editing" in VARIANTS and "anthropic-context-editing" not in STRATEGIES
    s = make_strategy("anthropic-context-editing", cfg)
    assert isinstance(s, AnthropicContextEditing) and s.trigger == 100_000 and s.keep == 3  # the documented defaults
    assert make_strategy("anthropic-context-editing", BenchConfig.make(SONNET, 32_000)).trigger == 16_000


def test_clears_all_but_the_three_newest_results_once_the_request_passes_the_trigger() -> None:
    s = AnthropicContextEditing(BenchConfig.make(SONNET, 20_000))
    built = _run(s, 30)
    first = next(k for k, b in enumerate(built) if b.events.get("cleared"))
    assert first > 3  # nothing cleared under the trigger
    assert all(not b.events.get("cleared") for b in built[:first])
    last = built[-1].request.messages
    results = [r for m in last if m.role == "tool" for r in m.tool_results]
    kept = [r for r in results if r.content[0].text != PLACEHOLDER]
    assert len(kept) == 3 and kept == results[-3:]
    assert all(b.tokens <= s.cfg.available for b in built)
    # the calls stay (clear_tool_inputs is false): every tool_use of the history is still there
    assert sum(1 for m in last for b in m.content if isinstance(b, ToolCall)) == 30


def test_clear_at_least_holds_back_a_small_clearing() -> None:
    cfg = BenchConfig.make(SONNET, 20_000)
    plain = _run(AnthropicContextEditing(cfg), 30)
    held = _run(AnthropicContextEditing(cfg, clear_at_least=10**9), 30)
    assert any(b.events.get("cleared") for b in plain)
    assert not any(b.events.get("cleared") for b in held)
    assert any(b.events.get("overflow") for b in held)  # no other reaction: the request overflows
