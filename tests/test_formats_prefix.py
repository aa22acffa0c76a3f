"""Property: with the planner rule "breakpoint on the last message that is not the tail-prepend target",
request N's cached prefix is reproduced exactly by request N+1 (N's messages + more), and tool
call/result pairs stay adjacent and valid in every format."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_formats_cases import PNG_B64, TOOLS
from windowsmith.formats import FORMATS, get_renderer
from windowsmith.model import Image, Message, Text, ToolCall, ToolResult
from windowsmith.request import CachePlan, NeutralRequest, Segment

pytestmark = pytest.mark.slow  # every test here replays real traces or runs processes

words = st.text(alphabet="abcdefgh xyz", min_size=1, max_size=12)
images = st.sampled_from([Image(url="https://example.com/a.png"), Image(data=PNG_B64, media_type="image/png")])


@st.composite
def conversations(draw: Any) -> tuple[Message, ...]:
    msgs: list[Message] = []
    n_turns = draw(st.integers(1, 6))
    call_no = 0
    for _ in range(n_turns):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind == "user":
            blocks: list[Any] = [Text(draw(words))]
            if draw(st.booleans()):
                blocks.append(draw(images))
            msgs.append(Message("user", tuple(blocks)))
        elif kind == "assistant":
            msgs.append(Message.assistant(draw(words)))
        else:
            k = draw(st.integers(1, 3))
            calls = []
            for _ in range(k):
                call_no += 1
                calls.append(ToolCall(f"call_{call_no}", draw(st.sampled_from(["read_file", "screenshot"])),
                                      {"path": draw(words)}))
            msgs.append(Message.assistant(draw(st.sampled_from(["", "Calling tools."])), calls))
            results = []
            for c in calls:
                content: tuple[Any, ...] = (Text(draw(words)),)
                if draw(st.booleans()):
                    content = (*content, draw(images))
                results.append(ToolResult(c.id, content, is_error=draw(st.booleans())))
            msgs.append(Message("tool", tuple(results)))
    return tuple(msgs)


def planned(messages: tuple[Message, ...], tail: str | None) -> NeutralRequest:
    req = NeutralRequest(
        model="m", system=(Segment("sys", "system"),), session=(Segment("session ctx", "session"),), tools=TOOLS,
        messages=messages, tail=tail, max_output_tokens=256, cache_key="k",
    )
    last = len(messages) - 1 - (1 if req.tail_mode() == "prepend" else 0)
    plan = CachePlan(tools=True, system=True, session=True, message_index=last if last >= 0 else None)
    return NeutralRequest(**{**req.__dict__, "cache": plan})


def anthropic_blocks(request: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The request flattened to blocks in cache order, without cache markers, with a marked flag."""
    out: list[tuple[Any, ...]] = []

    def strip(b: dict[str, Any]) -> tuple[str, bool]:
        from windowsmith.hashing import canonical_json

        return canonical_json({k: v for k, v in b.items() if k != "cache_control"}), "cache_control" in b

    for t in request.get("tools", []):
        out.append(("tool", *strip(t)))
    for s in request.get("system", []):
        out.append(("system", *strip(s)))
    for i, m in enumerate(request["messages"]):
        for b in m["content"]:
            out.append((i, m["role"], *strip(b)))
    return out


def check_pairs(fmt: str, request: dict[str, Any]) -> None:
    if fmt == "anthropic":
        msgs = request["messages"]
        for i, m in enumerate(msgs):
            ids = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
            if ids:
                nxt = msgs[i + 1]
                assert nxt["role"] == "user"
                lead = [b["tool_use_id"] for b in nxt["content"][: len(ids)] if b["type"] == "tool_result"]
                assert lead == ids
        for a, b in itertools.pairwise(msgs):
            assert a["role"] != b["role"]
    elif fmt == "openai-chat":
        msgs = request["messages"]
        for i, m in enumerate(msgs):
            ids = [c["id"] for c in m.get("tool_calls", [])]
            if ids:
                assert [x.get("tool_call_id") for x in msgs[i + 1 : i + 1 + len(ids)]] == ids
    elif fmt == "openai-responses":
        items = request["input"]
        for i, it in enumerate(items):
            if it.get("type") == "function_call":
                j = i + 1
                while items[j].get("type") == "function_call":
                    j += 1
                outputs = []
                while j < len(items) and items[j].get("type") == "function_call_output":
                    outputs.append(items[j]["call_id"])
                    j += 1
                assert it["call_id"] in outputs
    else:
        contents = request["contents"]
        for i, c in enumerate(contents):
            ids = [p["function_call"]["id"] for p in c["parts"] if "function_call" in p]
            if ids:
                nxt = contents[i + 1]
                assert nxt["role"] == "user"
                assert [p["function_response"]["id"] for p in nxt["parts"][: len(ids)]] == ids


def tail_position_ok(fmt: str, req: NeutralRequest, request: dict[str, Any]) -> None:
    tail = req.tail
    dumped = str(request)
    assert dumped.count(repr(tail)) == 1
    mode = req.tail_mode()
    if fmt == "anthropic":
        # consecutive user messages merge, so the tail sits right before the final message's blocks
        last = request["messages"][-1]["content"]
        k = len(req.messages[-1].content) if mode == "prepend" else 0
        assert last[-1 - k] == {"type": "text", "text": tail}
    elif fmt == "gemini":
        last = request["contents"][-1]["parts"]
        k = len(req.messages[-1].content) if mode == "prepend" else 0
        assert last[-1 - k] == {"text": tail}
    else:
        seq = request["messages" if fmt == "openai-chat" else "input"]
        content = seq[-1]["content"]
        assert content[0]["text"] == tail
        if mode != "prepend":
            assert len(content) == 1


@settings(max_examples=120, deadline=None)
@given(conversations(), st.data())
def test_prefix_is_stable_across_turns(messages: tuple[Message, ...], data: Any) -> None:
    # N never ends between a tool call and its result (the agent is waiting on the tool then)
    cuts = [i for i in range(1, len(messages) + 1) if not messages[i - 1].tool_calls]
    n = data.draw(st.sampled_from(cuts), label="N")
    tail1 = data.draw(words, label="tail N")
    tail2 = data.draw(words, label="tail N+1")
    req1 = planned(messages[:n], "TAIL1 " + tail1)
    req2 = planned(messages, "TAIL2 " + tail2)
    for fmt in FORMATS:
        shared = get_renderer(fmt)
        r1 = shared.render(req1)
        r2_fresh = get_renderer(fmt).render(req2)
        r2 = shared.render(req2)
        assert r2.request == r2_fresh.request and r2.checksum == r2_fresh.checksum
        assert r1.parts[: r1.cache_prefix_parts] == r2.parts[: r1.cache_prefix_parts]
        assert r2.cache_prefix_parts >= r1.cache_prefix_parts
        check_pairs(fmt, r1.request)
        check_pairs(fmt, r2.request)
        tail_position_ok(fmt, req1, r1.request)
        tail_position_ok(fmt, req2, r2.request)
        if fmt == "anthropic":
            b1, b2 = anthropic_blocks(r1.request), anthropic_blocks(r2.request)
            marked = [i for i, b in enumerate(b1) if b[-1]]
            assert len(marked) <= 4
            cut = marked[-1] + 1
            # content (not markers) up to the last breakpoint is identical, message boundaries included
            assert [b[:-1] for b in b1[:cut]] == [b[:-1] for b in b2[:cut]]
