"""Knowledge: structure-aware chunking and retrieval over this repository's own docs and code, on SQLite
and PostgreSQL; offline vectors (WordLlama's shipped weights) for hybrid retrieval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import windowsmith as ws
from test_store import pg_schema  # noqa: F401  (fixture: one schema per run for conftest's store)
from windowsmith.errors import UsageError
from windowsmith.knowledge import chunk_markdown, chunk_python
from windowsmith.store import Store

REPO = Path(__file__).resolve().parents[1]


def test_markdown_chunks_follow_headings_of_the_internals_doc() -> None:
    text = (REPO / "docs" / "internals.md").read_text()
    sections = chunk_markdown(text)
    titles = [s.title for s in sections]
    top = "Internals: how each mechanism works"
    assert f"{top} > `Session.add`: from event to log" in titles
    assert any(t.startswith(f"{top} > `Session.add`: from event to log > Ingest") for t in titles)
    lines = text.split("\n")
    for s in sections:
        assert len(s.text) <= 1500
        assert s.text.split("\n")[0].strip() in lines[s.first - 1]  # the line range is where the text is


def test_python_chunks_are_symbols_of_the_real_store_module() -> None:
    text = (REPO / "src" / "windowsmith" / "store" / "sqlite.py").read_text()
    sections = chunk_python(text)
    titles = [s.title for s in sections]
    assert titles[0] == "module" and "SQLiteStore.__init__" in titles and "SQLiteStore._migrate" in titles
    schema = chunk_python((REPO / "src" / "windowsmith" / "store" / "sqlite_schema.py").read_text())
    assert "m001_initial" in [s.title for s in schema]
    lines = text.split("\n")
    mig = next(s for s in sections if s.title == "SQLiteStore._migrate")
    assert lines[mig.first - 1].strip().startswith("def _migrate")


@pytest.mark.slow
def test_repository_as_knowledge_is_found_by_the_layer_within_its_project(store: Store, tmp_path: Path) -> None:
    with ws.Engine("gpt-4o", store=store, memory=ws.MemoryConfig(project="ws")) as e:
        n = e.knowledge.add(REPO / "docs") + e.knowledge.add(REPO / "src" / "windowsmith" / "store")
        assert n > 50
        assert e.knowledge.add(REPO / "docs") == 0  # unchanged: nothing added
        hits = e.knowledge.search("where does the SQLite store apply its migrations _migrate")
        assert any(h.chunk.source.startswith("sqlite.py#L") and "_migrate" in h.chunk.text for h in hits)
        s = e.session("k", goal="add a migration to the SQLite store")
        s.user("where is _migrate defined in sqlite.py?")
        p = s.build("openai-chat")
        assert p.manifest.layers["knowledge"]["used"] > 0
        tail = p.neutral.tail or ""
        assert "## KNOWLEDGE" in tail and '<data source="sqlite.py#L' in tail
        # a changed file replaces its chunks
        doc = tmp_path / "notes.md"
        doc.write_text("# Deploy\nrun make deploy-blue\n")
        e.knowledge.add(doc)
        doc.write_text("# Deploy\nrun make deploy-green\n")
        e.knowledge.add(doc)
        texts = [h.chunk.text for h in e.knowledge.search("make deploy-green deploy-blue")]
        assert any("deploy-green" in t for t in texts) and not any("deploy-blue" in t for t in texts)
    with ws.Engine("gpt-4o", store=store, memory=ws.MemoryConfig(project="other")) as e2:
        assert e2.knowledge.search("_migrate sqlite.py") == []  # another project reads nothing of it


def test_knowledge_text_is_redacted_and_validated(store: Store) -> None:
    with ws.Engine("gpt-4o", store=store) as e:
        e.knowledge.add("# Ops\nThe deploy token is ghp_abcdefghijklmnopqrstuvwxyz0123456789 for CI.\n", name="ops.md")
        [hit] = e.knowledge.search("deploy token CI")
        assert "ghp_" not in hit.chunk.text and "[REDACTED:" in hit.chunk.text
        with pytest.raises(UsageError):
            e.knowledge.add("   ")


@pytest.mark.slow
def test_offline_vectors_make_retrieval_hybrid(store: Store) -> None:
    pytest.importorskip("wordllama")
    from windowsmith.retrieval import WordLlamaEmbedder

    emb = WordLlamaEmbedder()
    with ws.Engine("gpt-4o", store=store, embedder=emb) as e:
        e.knowledge.add("# Pool\nThe connection pool keeps twenty database connections open.\n", name="pool.md")
        e.knowledge.add("# Bread\nBanana bread needs ripe bananas and an hour in the oven.\n", name="bread.md")
        [c] = [c for c in store.list_chunks("knowledge", [e.knowledge.scope]) if "pool" in c.text]
        assert c.vector is not None and len(c.vector) == 256 * 4
        # no shared word: only the vectors can find it
        hits = e.knowledge.search("postgres sessions limit", limit=1)
        assert hits and "connection pool" in hits[0].chunk.text and "vector" in hits[0].via
        assert json.dumps(emb.embed(["x"])[0][:1])  # plain floats


def test_openai_embedder_through_the_real_sdk(tmp_path: Path) -> None:
    import httpx2
    import openai

    from windowsmith.retrieval import OpenAIEmbedder

    seen: list[dict] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        seen.append(body)
        data = [{"object": "embedding", "index": i, "embedding": [float(len(t)), 1.0, 0.0]}
                for i, t in reversed(list(enumerate(body["input"])))]  # out of order: the embedder sorts
        return httpx2.Response(200, json={"object": "list", "data": data, "model": body["model"],
                                          "usage": {"prompt_tokens": 1, "total_tokens": 1}})

    client = openai.OpenAI(api_key="t", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)), max_retries=0)
    emb = OpenAIEmbedder(client=client, batch=2)
    vecs = emb.embed(["a", "bbb", "cc"])
    assert vecs == [[1.0, 1.0, 0.0], [3.0, 1.0, 0.0], [2.0, 1.0, 0.0]]
    assert [b["input"] for b in seen] == [["a", "bbb"], ["cc"]] and seen[0]["model"] == "text-embedding-3-small"
    with ws.Engine("gpt-4o", store=tmp_path / "w.db", embedder=emb) as e:
        e.knowledge.add("# A\nalpha beta\n", name="a.md")
        [c] = e.store.list_chunks("knowledge", [e.knowledge.scope])
        assert c.vector is not None and len(c.vector) == 3 * 4


def test_long_single_line_text_is_indexed_as_text(store: Store) -> None:
    # a one-line text longer than a file name may be is text, not a path (it raised ENAMETOOLONG)
    line = "The staging deploy uses the blue cluster and rotates its credentials weekly; " * 5
    assert len(line) > 255 and "\n" not in line
    with ws.Engine("gpt-4o", store=store) as e:
        assert e.knowledge.add(line) >= 1
        assert any("blue cluster" in h.chunk.text for h in e.knowledge.search("staging deploy blue cluster"))
