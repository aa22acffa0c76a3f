"""Memory retrieval quality mechanics, on a SQLite file and on PostgreSQL: the relevance floor (a query
nothing answers returns nothing), neighbour turns (the answer to a question turn is found through the
question), near-duplicates dropped, and ``memory.add`` reading its item back by key."""

from __future__ import annotations

from test_store import pg_schema  # noqa: F401  (fixture: one schema per run for conftest's store)
from windowsmith.memory import Memory, MemoryConfig
from windowsmith.store import Store
from windowsmith.store.chunks_sql import chunk_by_key, neighbour_chunks


def _memory(store: Store, **cfg: object) -> Memory:
    return Memory(store, None, MemoryConfig(project="p", **cfg))  # type: ignore[arg-type]


TURNS = [
    ("assistant", "Welcome to the airline desk. How can I help you today?"),
    ("user", "I want to change the flight on my upcoming trip to Denver."),
    ("assistant", "Sure. Could you give me the reservation number for that booking?"),
    ("user", "It is K7QX2M."),
    ("assistant", "Thanks. Lunch is served at noon in the lounge while you wait."),
    ("user", "Great, and the passenger is Mia Gonzalez, born 1990-04-12."),
]


def _fill(mem: Memory) -> dict[str, int]:
    ids = {}
    for role, text in TURNS:
        item = mem.add(text, scope="project", source=role)
        assert item is not None
        ids[text] = item.id
    return ids


def test_an_unrelated_query_injects_nothing(store: Store) -> None:
    mem = _memory(store)
    _fill(mem)
    assert mem.search("How do I reset the APN settings on my phone to get mobile data back?") == []
    assert mem.search("kubernetes pod crashloop backoff after the helm upgrade") == []
    assert mem.search("the passenger Mia Gonzalez was born on which date") != []
    # an identifier is enough on its own
    hit, *near = mem.search("K7QX2M")
    assert hit.text == "It is K7QX2M." and hit.why == "matched k7qx2m"
    assert near == []  # its neighbours stand alone: they are not lent its score


def test_the_answer_turn_is_found_through_its_question(store: Store) -> None:
    mem = _memory(store)
    ids = _fill(mem)
    got = mem.search("which reservation number should I change the booking on", limit=4)
    assert ids["It is K7QX2M."] in [m.id for m in got]
    answer = next(m for m in got if m.id == ids["It is K7QX2M."])
    assert answer.why == "next to a matching item"
    off = _memory(store, neighbours=0.0)
    assert ids["It is K7QX2M."] not in [m.id for m in off.search("which reservation number should I change the booking on")]


def test_near_duplicates_are_not_returned_twice(store: Store) -> None:
    mem = _memory(store, merge_at=1.01)  # keep both items, the search must still show one
    mem.add("Deploys go through the blue cluster in eu-west-1 on Tuesdays", scope="project")
    mem.add("Deploys go through the blue cluster in eu-west-1 on Tuesdays!", scope="project", source="assistant")
    mem.add("The green cluster in us-east-2 serves the canary deploys", scope="project")
    got = [m.text for m in mem.search("which cluster do deploys go through on Tuesdays")]
    assert sum("blue cluster" in t for t in got) == 1 and len(got) == 2
    keep = _memory(store, merge_at=1.01, dedupe_at=1.01)
    assert sum("blue cluster" in m.text for m in keep.search("which cluster do deploys go through on Tuesdays")) == 2


def test_chunk_lookups_by_key_and_neighbours(store: Store) -> None:
    mem = _memory(store)
    ids = _fill(mem)
    other = Memory(store, None, MemoryConfig(project="q"))
    other.add("an item of another project between nothing", scope="project")
    c = next(x for x in store.list_chunks("memory", ["project:p"]) if x.id == ids["It is K7QX2M."])
    assert chunk_by_key(store, "memory", "project:p", c.key) == c
    assert chunk_by_key(store, "memory", "project:q", c.key) is None
    near = neighbour_chunks(store, "memory", ["project:p", "project:q"], [c])
    assert sorted(near) == [c.id - 1, c.id + 1]
    last = store.list_chunks("memory", ["project:p"])[-1]
    assert list(neighbour_chunks(store, "memory", ["project:p", "project:q"], [last])) == [last.id - 1]
