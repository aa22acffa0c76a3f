"""The agent's ``memory`` tool (Anthropic memory tool shape) through ``Session.memory_tool``, on a SQLite
file and on PostgreSQL: scoped paths, redaction, untrusted marking, an event per change."""

from __future__ import annotations

import windowsmith as ws
from test_store import pg_schema  # noqa: F401  (fixture: one schema per run for conftest's store)
from windowsmith.memory import MemoryConfig
from windowsmith.store import Store


def test_the_agent_views_creates_edits_and_deletes_its_memory(store: Store) -> None:
    assert ws.MEMORY_TOOL["name"] == "memory"
    assert ws.MEMORY_TOOL["parameters"]["properties"]["command"]["enum"] == ["view", "create", "str_replace", "delete"]
    with ws.Engine("gpt-4o", store=store, memory=MemoryConfig(project="shop")) as e:
        s = e.session("a", goal="refund order 42")
        assert s.memory_tool("view", "/memories/project") == "/memories/project is empty"
        out = s.memory_tool("create", "/memories/project", file_text="Refunds go to the card; token ghp_abcdefghijklmnopqrstuvwxyz0123456789")
        assert out.startswith("created /memories/project/")
        item_id = int(out.rsplit("/", 1)[1])
        [item] = s.memory.list("project")
        assert item.id == item_id and "ghp_" not in item.text and not item.trusted
        assert item.source == "assistant" and item.provenance["via"] == "memory_tool"
        assert "1 item(s)" in s.memory_tool("view", "/memories")
        assert str(item_id) in s.memory_tool("view", "/memories/project")
        assert s.memory_tool("str_replace", f"/memories/project/{item_id}", old_str="the card", new_str="the gift card") \
            == f"edited /memories/project/{item_id}"
        assert "the gift card" in s.memory_tool("view", f"/memories/project/{item_id}")
        assert s.memory_tool("str_replace", f"/memories/project/{item_id}", old_str="nothing like it",
                             new_str="x").startswith("error: old_str must occur exactly once")
        assert s.memory_tool("view", f"/memories/session/{item_id}").startswith("error: no memory item")
        assert s.memory_tool("view", "/etc/passwd").startswith("error: path must start with /memories")
        assert s.memory_tool("view", "/memories/team").startswith("error: unknown memory scope")
        assert s.memory_tool("rename", "/memories/project").startswith("error: unknown command")
        assert s.memory_tool("delete", f"/memories/project/{item_id}") == f"deleted /memories/project/{item_id}"
        assert s.memory.list() == []
        edits = [ev.data for ev in store.events("a") if ev.kind == "meta" and ev.data.get("type") == "memory_edit"]
        assert [d["command"] for d in edits] == ["create", "str_replace", "delete"]
        assert {d["item"] for d in edits} == {item_id}
        # another project's session cannot reach it through the tool
        with ws.Engine("gpt-4o", store=store, memory=MemoryConfig(project="other")) as other:
            assert other.session("b").memory_tool("view", "/memories/project") == "/memories/project is empty"
