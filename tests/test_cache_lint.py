"""Cache-break linting: volatile spans in the stable layers are reported, and moved to the tail on request."""

from __future__ import annotations

import json

import anthropic

import windowsmith as ws
from sdk_mock import MockModel, anthropic_reply
from windowsmith.cache import CacheConfig
from windowsmith.cache_lint import lint_request, scan


def _pack(e: ws.Engine, sid: str, stamp: str) -> ws.Pack:
    s = e.session(sid)
    s.system(f"You are a support agent. Current time: {stamp}. Be brief and cite order ids.")
    s.user("Where is order o1?")
    return s.build("anthropic")


def test_scan_finds_each_kind_and_leaves_plain_text() -> None:
    text = ("now 2026-12-02T01:59:20Z, on 2026-12-02, id 123e4567-e89b-12d3-a456-426614174000, "
            "req_8f3a9c2b7d11, turn #14, at 13:04:55")
    kinds = [k for k, _, _ in scan(text)]
    assert kinds == ["timestamp", "date", "uuid", "request_id", "counter", "timestamp"]
    assert scan("Be brief. Follow the steps: 1. read, 2. answer. Use Python 3.11.") == ()


def test_timestamp_in_system_prompt_is_a_manifest_warning(tmp_path) -> None:
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db") as e:
        pack = _pack(e, "a", "2026-12-02T01:59:20Z")
    m = pack.manifest
    warn = [w for w in m.warnings if w.startswith("cache break")]
    assert len(warn) == 1 and "'2026-12-02T01:59:20Z'" in warn[0] and "'system'" in warn[0]
    (span,) = m.cache["volatile"]["spans"]
    assert span["layer"] == "system" and span["kind"] == "timestamp" and span["text"] == "2026-12-02T01:59:20Z"
    assert m.cache["volatile"]["moved"] is False
    assert "2026-12-02T01:59:20Z" in pack.request["system"][0]["text"]  # reported only: the request is unchanged


def test_no_volatile_content_no_warning(tmp_path) -> None:
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db") as e:
        s = e.session("plain")
        s.system("You are a support agent.")
        s.user("hi")
        m = s.build("anthropic").manifest
    assert "volatile" not in m.cache and not any(w.startswith("cache break") for w in m.warnings)


def test_moved_to_tail_keeps_the_cached_prefix_byte_identical(tmp_path) -> None:
    cfg = CacheConfig(volatile_to_tail=True)
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", cache=cfg) as e:
        p1 = _pack(e, "one", "2026-12-02T01:59:20Z")
        p2 = _pack(e, "two", "2026-12-02T02:04:41Z")
    r1, r2 = p1.request, p2.request
    assert r1["system"] == r2["system"] and "2026-12-02" not in r1["system"][0]["text"]
    assert p1.manifest.cache["prefix_hash"] == p2.manifest.cache["prefix_hash"]
    assert p1.manifest.cache["prefix_parts"] >= 1
    assert r1 != r2  # the value still reaches the model, after the cached prefix
    tail1 = r1["messages"][-1]["content"][0]["text"]
    assert "2026-12-02T01:59:20Z" in tail1 and "(system)" in tail1
    assert not [w for w in p1.manifest.warnings if w.startswith("cache break")]
    assert p1.manifest.cache["volatile"]["moved"] is True
    assert lint_request(p2.neutral) == []
    # the real SDK sends both, and the bodies it sends share the cached prefix byte for byte
    mock = MockModel("anthropic", [anthropic_reply()])
    client = anthropic.Anthropic(api_key="test", http_client=mock.client())
    for r in (r1, r2):
        client.messages.create(**r)
    b1, b2 = mock.bodies
    assert json.dumps(b1["system"]) == json.dumps(b2["system"]) and b1["system"][-1]["cache_control"]


def test_stable_hashes_are_not_flagged() -> None:
    assert scan("Pinned at commit 3f2a9c1d4e5b6a7980112233445566778899aabb; see artifact://" + "ab" * 32) == ()
