"""The Responses API's stateful mode through the real openai client: only what is new goes out while the server
holds the history; a whole request after a rewrite or a broken chain; reasoning items kept, in order, in both modes."""

from __future__ import annotations

import copy
import json

import httpx2
import openai

import windowsmith as ws
from sdk_mock import responses_reply
from windowsmith.formats.responses_chain import ResponsesChain

TOOL = {"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}


class Server:
    """A loopback Responses endpoint: numbered responses, each asking to read one more file."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        n = len(self.bodies)
        reply = copy.deepcopy(responses_reply(f"Step {n}.", [(f"call_{n}", "read_file", {"path": f"f{n}.py"})], n=n))
        reply["id"] = f"resp_{n}"
        reply["output"][0]["encrypted_content"] = f"enc-{n}"
        return httpx2.Response(200, json=reply)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(api_key="t", http_client=httpx2.Client(transport=httpx2.MockTransport(self)), max_retries=0)


def _coding_session(e: ws.Engine) -> ws.Session:
    """The session each test drives: a coding agent with one tool, asked to fix a failing test."""
    s = e.session("st")
    s.system("You are a coding agent.")
    s.tools([TOOL])
    s.user("Fix the failing test in parser.py")
    return s


def _turn(s: ws.Session, chain: ResponsesChain, client: openai.OpenAI) -> dict:
    pack = s.build("openai-responses")
    resp = client.responses.create(**chain.request(pack.request))
    chain.observe(resp)
    s.record(resp, pack=pack)
    call = s.messages[-1].tool_calls[0]
    s.tool_result(call.id, f"contents of {call.arguments['path']}")
    return pack.request


def test_stateful_mode_sends_only_the_new_items_and_keeps_reasoning_in_order(tmp_path) -> None:
    server, chain = Server(), ResponsesChain()
    client = server.client()
    with ws.Engine(model="gpt-4.1", store=tmp_path / "w.db") as e:
        s = _coding_session(e)
        fulls = [_turn(s, chain, client) for _ in range(3)]
    first, second, third = server.bodies
    assert first["store"] is True and "previous_response_id" not in first
    assert second["previous_response_id"] == "resp_1" and third["previous_response_id"] == "resp_2"
    # only the function_call_output the server does not have
    assert [i["type"] for i in second["input"]] == ["function_call_output"] and second["input"][0]["call_id"] == "call_1"
    assert second["tools"] == first["tools"]
    assert chain.full_requests == 1 and chain.delta_requests == 2
    # the full request the session built (what a stateless call sends) carries each reasoning item, with its
    # encrypted_content, right before the output it preceded
    kinds = [(i["type"], i.get("encrypted_content")) for i in fulls[2]["input"] if i["type"] != "message"]
    assert kinds == [("reasoning", "enc-1"), ("function_call", None), ("function_call_output", None),
                     ("reasoning", "enc-2"), ("function_call", None), ("function_call_output", None)]


def test_a_rewritten_history_or_a_broken_chain_sends_the_whole_request(tmp_path) -> None:
    server, chain = Server(), ResponsesChain()
    client = server.client()
    with ws.Engine(model="gpt-4.1", store=tmp_path / "w.db") as e:
        s = _coding_session(e)
        _turn(s, chain, client)
        s.system("You are a careful coding agent.")  # the prefix changed: the server's copy is stale
        full = _turn(s, chain, client)
        assert "previous_response_id" not in server.bodies[-1] and server.bodies[-1]["input"] == full["input"]
        _turn(s, chain, client)
        assert server.bodies[-1]["previous_response_id"] == "resp_2"
        chain.observe({"id": None, "output": []})  # a response without an id breaks the chain
        _turn(s, chain, client)
        assert "previous_response_id" not in server.bodies[-1]
        chain.reset()
        _turn(s, chain, client)
        assert "previous_response_id" not in server.bodies[-1]


def test_a_compaction_falls_back_to_a_full_request(tmp_path) -> None:
    server, chain = Server(), ResponsesChain()
    client = server.client()
    with ws.Engine(model="gpt-4.1", store=tmp_path / "w.db", window=9000) as e:
        s = _coding_session(e)
        compacted = None
        for k in range(40):
            pack = s.build("openai-responses")
            resp = client.responses.create(**chain.request(pack.request))
            chain.observe(resp)
            s.record(resp, pack=pack)
            call = s.messages[-1].tool_calls[0]
            s.tool_result(call.id, " ".join(f"line {j} of {call.arguments['path']}" for j in range(120)))
            if k and any(a["kind"] in ("mask", "summary", "emergency", "truncate") for a in pack.manifest.actions):
                compacted = k
                break
    assert compacted is not None
    assert "previous_response_id" not in server.bodies[compacted]
    assert any("previous_response_id" in b for b in server.bodies[:compacted])
