"""Tool deferral (native defer_loading + tool search, or a tool_search function) and step-scoped tools.

Requests are checked against the SDKs' param types; the cache prefix is checked on a real trace replayed
with a 100-tool set in every format, across a tool search that loads tools.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from google.genai import types as gtypes
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

import windowsmith as ws
from test_formats_cases import check_typed
from test_invariants import _anthropic_prefix, _canon, _cut_at, _message_array, _stable_messages, _strip_cc
from windowsmith.formats import get_renderer
from windowsmith.guidance.tools import DeferredToolsLayer, ToolPolicy, deferred_layers, search_tools
from windowsmith.request import NeutralRequest
from windowsmith.traces import load_traces

CATALOG = [ws.ToolSpec.from_dict(t) for t in json.loads(
    (Path(__file__).resolve().parents[1] / "benchmarks/data/mcp_catalog.json").read_text())["tools"]]
ORDER = {"name": "get_order", "description": "Look up an order by id.",
         "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}
MODEL = {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-pro"}
PARAMS = {"anthropic": MessageCreateParamsNonStreaming, "openai-chat": CompletionCreateParamsNonStreaming,
          "openai-responses": ResponseCreateParamsNonStreaming}


def _check_sdk(fmt: str, request: dict) -> None:
    if fmt == "gemini":
        gtypes.GenerateContentConfig.model_validate(request["config"])
    else:
        check_typed(request, PARAMS[fmt])


def _session(make_engine, fmt: str, policy: ToolPolicy | None = None, sid: str = "t") -> ws.Session:
    engine = make_engine(model=MODEL.get(fmt, "gpt-4.1"), layers=lambda: deferred_layers(policy or ToolPolicy(core=("get_order",))))
    s = engine.session(sid)
    s.tools([ORDER, *CATALOG])
    s.user("open a GitHub issue about order 42")
    return s


def test_search_ranks_the_matching_tools_first():
    names = [t.name for t in search_tools(CATALOG, "create github issue", 3)]
    assert names[0] == "github__create_issue"
    assert search_tools(CATALOG, "post a slack message", 2)[0].name == "slack__post_message"
    assert search_tools(CATALOG, "zzqx", 3) == []


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
def test_native_deferral_keeps_every_tool_marks_the_deferred_and_adds_the_providers_search(make_engine, fmt):
    s = _session(make_engine, fmt)
    pack = s.build(fmt)
    tools = pack.request["tools"]
    assert [t.get("name") for t in tools[:-1]] == ["get_order", *(t.name for t in CATALOG)]
    assert "defer_loading" not in tools[0] and all(t["defer_loading"] is True for t in tools[1:-1])
    if fmt == "anthropic":
        assert tools[-1] == {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25",
                             "cache_control": {"type": "ephemeral"}}
    else:
        assert tools[-1] == {"type": "tool_search"}
    _check_sdk(fmt, pack.request)
    rep = pack.manifest.guidance["tools"]
    assert rep["mode"] == "native" and rep["declared"] == 77 and rep["deferred"] == 76 and rep["saved_tokens"] > 4000
    full = make_engine(model=MODEL.get(fmt, "gpt-4.1"), store=Path(s.engine.store.path).with_name("full.db"))
    f = full.session("t")
    f.tools([ORDER, *CATALOG])
    f.user("open a GitHub issue about order 42")
    assert f.build(fmt).tokens - pack.tokens == pytest.approx(rep["saved_tokens"], rel=0.01)  # per-tool rounding


@pytest.mark.parametrize("fmt", ["openai-chat", "gemini", "anthropic"])
def test_search_mode_appends_found_tools_after_the_stable_block(make_engine, fmt, tmp_path):
    s = _session(make_engine, fmt, ToolPolicy(core=("get_order",), native=False))
    first = s.build(fmt)
    assert [t.name for t in first.neutral.tools] == ["get_order", "tool_search"]
    s.assistant(tool_calls=[{"id": "c1", "name": "tool_search", "arguments": {"query": "create github issue"}}])
    answer = s.tool_search("create github issue", limit=2)
    assert answer.splitlines()[1].startswith("- github__create_issue(assignees, body, labels, owner, repo, title): Open an issue")
    s.tool_result("c1", answer)
    second = s.build(fmt)
    names = [t.name for t in second.neutral.tools]
    assert names[:2] == ["get_order", "tool_search"] and names[2] == "github__create_issue" and len(names) == 4
    assert second.manifest.guidance["tools"]["loaded"] == 2
    _check_sdk(fmt, second.request)
    assert s.tool_search("create github issue", limit=2).startswith("2 tool(s) found")  # already loaded: no event
    loads = [e for e in s.engine.store.events(s.id) if e.kind == "meta" and e.data.get("type") == "tools_loaded"]
    assert len(loads) == 1 and loads[0].data["names"] == names[2:]
    again = make_engine(model=MODEL.get(fmt, "gpt-4.1"), layers=lambda: deferred_layers(ToolPolicy(core=("get_order",), native=False)))
    assert again.session("t").build(fmt).manifest.checksum == second.manifest.checksum  # the log alone rebuilds it


def test_few_tools_are_not_deferred(make_engine):
    s = make_engine(layers=lambda: deferred_layers(ToolPolicy(defer_over=15))).session("few")
    s.tools([ORDER, *CATALOG[:5]])
    s.user("hi")
    pack = s.build()
    assert pack.manifest.guidance["tools"] == {"mode": "all", "declared": 6, "sent": 6}
    assert all("defer_loading" not in t for t in pack.request["tools"])


def test_formats_without_native_deferral_refuse_a_deferred_request():
    req = NeutralRequest(model="m", system=(), session=(), tools=tuple(CATALOG[:2]), messages=(ws.Message.user("x"),),
                         tail=None, max_output_tokens=10, cache_key="k", deferred=(CATALOG[1].name,))
    for fmt in ("openai-chat", "gemini"):
        with pytest.raises(ws.ConfigError, match="no native deferred tool loading"):
            get_renderer(fmt).render(req)


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "gemini", "anthropic"])
def test_step_scope_restricts_by_name_and_tag_without_changing_the_tool_list(make_engine, fmt):
    engine = make_engine(model=MODEL.get(fmt, "gpt-4.1"), layers=lambda: deferred_layers(
        ToolPolicy(defer_over=1000, tags={"orders": ["get_order"]})))
    s = engine.session("scope", goal="triage", step="read the failing job")
    s.tools([ORDER, *CATALOG[:12]])
    s.user("go")
    before = s.build(fmt)
    s.scope_tools(["tag:orders", "github__get_file_contents"])
    scoped = s.build(fmt)
    assert scoped.request.get("tools") == before.request.get("tools")  # cache-safe: the list is untouched
    assert scoped.manifest.guidance["tools"]["scope"] == ["get_order", "github__get_file_contents"]
    req = scoped.request
    if fmt == "openai-chat":
        assert req["tool_choice"] == {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
            {"type": "function", "function": {"name": "get_order"}},
            {"type": "function", "function": {"name": "github__get_file_contents"}}]}}
    elif fmt == "openai-responses":
        assert req["tool_choice"]["tools"] == [{"type": "function", "name": "get_order"},
                                               {"type": "function", "name": "github__get_file_contents"}]
    elif fmt == "gemini":
        assert req["config"]["tool_config"] == {"function_calling_config": {
            "mode": "VALIDATED", "allowed_function_names": ["get_order", "github__get_file_contents"]}}
    else:
        assert "## TOOLS\n- In this step use only these tools: get_order, github__get_file_contents" in scoped.neutral.tail
    _check_sdk(fmt, req)
    s.scope_tools(["tag:github"])  # MCP namespace as a tag
    assert len(s.build(fmt).manifest.guidance["tools"]["scope"]) == sum(t.name.startswith("github__") for t in CATALOG[:12])
    s.task(step="write the fix")  # a new step: no scope
    assert "scope" not in s.build(fmt).manifest.guidance["tools"] and "tool_choice" not in s.build(fmt).request
    with pytest.raises(ws.UsageError, match="match no declared tool"):
        s.scope_tools(["no_such_tool"])


def test_anthropic_tool_search_blocks_round_trip(make_engine):
    s = _session(make_engine, "anthropic")
    pack = s.build()
    s.record({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": "tool_use",
              "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 10},
              "content": [
                  {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_bm25", "input": {"query": "github issue"}},
                  {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1",
                   "content": {"type": "tool_search_tool_search_result", "tool_references": [
                       {"type": "tool_reference", "tool_name": "github__create_issue"}]}},
                  {"type": "tool_use", "id": "toolu_1", "name": "github__create_issue",
                   "input": {"owner": "acme", "repo": "shop", "title": "order 42"}}]}, pack=pack)
    s.tool_result("toolu_1", "created issue #7")
    req = s.build().request
    assistant = req["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["server_tool_use", "tool_search_tool_result", "tool_use"]
    assert assistant[1]["content"]["tool_references"][0]["tool_name"] == "github__create_issue"
    check_typed(req, MessageCreateParamsNonStreaming)


# ---------------------------------------------------------------------------------------------- the cached prefix

@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses", "gemini"])
def test_deferral_keeps_the_cache_prefix_on_a_real_trace(traces_dir, tmp_path, fmt):
    trace = load_traces(traces_dir / "openhands/msb_example_output.jsonl")[0]
    core = tuple(t.name for t in trace.tools)
    native = fmt in ("anthropic", "openai-responses")
    with ws.Engine(model=MODEL.get(fmt, "gpt-4.1"), store=tmp_path / "w.db",
                   layers=lambda: deferred_layers(ToolPolicy(core=core, native=native))) as engine:
        s = engine.session("d")
        s.system(trace.system)
        s.tools([*trace.tools, *CATALOG])
        packs = []
        for m in trace.messages:
            if m.role == "assistant" and s.state.units:
                if len(packs) == 3:
                    s.tool_search("create github pull request", 3)
                packs.append(s.build(fmt))
                s.record(message=m, pack=packs[-1])
            else:
                s.add(m)
    breaks = 0
    for prev, cur in itertools.pairwise(packs):
        if cur.manifest.actions:
            continue
        if prev.manifest.guidance["tools"].get("loaded") != cur.manifest.guidance["tools"].get("loaded") and not native:
            breaks += 1  # the one search that loaded tools: the tool list grew at its end
            assert [t.name for t in cur.neutral.tools][: len(prev.neutral.tools)] == [t.name for t in prev.neutral.tools]
            continue
        if fmt == "anthropic":
            prefix, pos = _anthropic_prefix(prev.request)
            assert _canon(_strip_cc(json.loads(prefix))) == _canon(_strip_cc(json.loads(_cut_at(cur.request, pos))))
        else:
            before = _stable_messages(fmt, prev.request, prev.neutral.tail)
            assert _canon(_message_array(fmt, cur.request)[: len(before)]) == _canon(before)
            assert _canon(prev.request.get("tools") or prev.request.get("config", {}).get("tools")) == \
                _canon(cur.request.get("tools") or cur.request.get("config", {}).get("tools"))
    assert breaks == (0 if native else 1)
    assert len(packs) > 10
    assert isinstance(engine, ws.Engine) and DeferredToolsLayer.name == "tools"
