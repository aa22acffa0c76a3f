"""Memory across sessions, on a SQLite file and on PostgreSQL: an item on a subject superseded by a newer
one is never returned or injected again (kept in history), expiry, promotion to project scope, and a
project lesson from one session injected in a later session when relevant and not when irrelevant."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

import windowsmith as ws
from test_store import pg_schema  # noqa: F401  (fixture: one schema per run for conftest's store)
from windowsmith.errors import UsageError
from windowsmith.memory import Memory, MemoryConfig
from windowsmith.store import Store


def test_a_superseded_item_never_comes_back(store: Store) -> None:
    cfg = MemoryConfig(project="shop", user="ann")
    with ws.Engine("gpt-4o", store=store, memory=cfg) as e:
        a = e.session("a", goal="refund order #W2378156")
        old = a.remember("Ann wants refunds confirmed by e-mail", scope="user", subject="refund confirmation")
        new = a.remember("Ann wants refunds confirmed by SMS", scope="user", subject="Refund  confirmation")
        assert old is not None and new is not None and old.id != new.id
        assert [m.text for m in a.memory.search("how are refunds confirmed for Ann")] == [new.text]
        assert [m.text for m in a.memory.list()] == [new.text]
        hist = {m.text: m.provenance for m in a.memory.list(history=True)}
        assert hist[old.text]["superseded_by"] == new.id and "superseded_by" not in hist[new.text]
        b = e.session("b", goal="refund order #W2378156")
        b.user("Please refund it and confirm it to Ann the usual way.")
        tail = json.dumps(b.build("openai-chat").request)
        assert "confirmed by SMS" in tail and "by e-mail" not in tail
        # the same words again revive nothing: the newest statement on the subject wins
        again = b.remember("Ann wants refunds confirmed by SMS.", scope="user", subject="refund confirmation")
        assert again is not None and [m.text for m in b.memory.list(scope="user")] == [again.text]
        with pytest.raises(UsageError):
            b.remember("x y z", subject=" ")


def test_expired_items_are_not_returned_and_are_pruned(store: Store) -> None:
    mem = Memory(store, None, MemoryConfig(project="p"))
    mem.add("The staging freeze runs until the release of version 4.2", scope="project", expires_days=2)
    mem.add("The staging cluster is staging-eu-2", scope="project")
    assert len(mem.search("staging freeze release version 4.2")) >= 1
    later = datetime.now(UTC) + timedelta(days=3)
    assert all("freeze" not in m.text for m in mem.search("staging freeze release version 4.2", now=later))
    assert [m.text for m in mem.list(now=later)] == ["The staging cluster is staging-eu-2"]
    assert mem.prune(now=later) == 1 and len(mem.list(history=True)) == 1
    with pytest.raises(UsageError):
        mem.add("x", scope="project", expires_days=0)


def test_a_lesson_reaches_a_later_session_of_the_project_when_relevant(store: Store) -> None:
    cfg = MemoryConfig(project="shop")
    with ws.Engine("gpt-4o", store=store, memory=cfg) as e:
        first = e.session("s1", goal="migrate the orders table")
        lesson = first.remember("alembic upgrade fails on the orders table unless ORDERS_LOCK_TIMEOUT=30 is set",
                                source="lesson")
        assert lesson is not None and lesson.scope == "session:s1"
        promoted = first.memory.promote(lesson.id)
        assert promoted is not None and promoted.scope == "project:shop"
        assert promoted.provenance["promoted_from"] == "session:s1" and promoted.source == "lesson"
        assert not promoted.trusted
        later = e.session("s2", goal="run the alembic upgrade for the orders table")
        later.user("alembic upgrade on orders timed out again")
        tail = json.dumps(later.build("openai-chat").request)
        assert "ORDERS_LOCK_TIMEOUT=30" in tail
        other = e.session("s3", goal="write the release notes for the new search page")
        other.user("draft the announcement for the search page")
        assert "ORDERS_LOCK_TIMEOUT" not in json.dumps(other.build("openai-chat").request)
        assert first.memory.promote(10**9) is None
