"""A build does the work of what changed since the last one, and gives the same request as a build from scratch.

The history's lineage (``request.Lineage``) lets the renderer, the reference tracker, the checksum hashers and
the manifest's part digests extend what they kept from the last build instead of comparing whole-session
tuples. These tests check that this changes nothing a user sees: every request equals the one a fresh
renderer makes of the same neutral request, and the one a fresh engine builds from the log alone (real
traces, every format, with and without compaction; a hypothesis property over interleaved appends and
builds). The steps are counted, never timed (``benchmarks/bench_scale.py`` measures the time).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import windowsmith as ws
from conftest import DATA, FORMAT_MODEL
from windowsmith import refs
from windowsmith.formats import get_renderer
from windowsmith.snapshot import Snapshot
from windowsmith.store import packs
from windowsmith.traces import load_traces

FORMATS = ("anthropic", "openai-chat", "openai-responses", "gemini")


def _fresh_build(store: Path, sid: str, fmt: str, model: str, window: int | None) -> ws.Pack:
    with ws.Engine(model=model, store=store, window=window) as fresh:
        return fresh.session(sid).build(fmt)


def _same(a: ws.Pack, b: ws.Pack) -> None:
    assert a.request == b.request
    assert a.manifest.checksum == b.manifest.checksum
    assert a.manifest.parts == b.manifest.parts
    assert a.manifest.cache == b.manifest.cache
    assert a.manifest.artifacts == b.manifest.artifacts


def _scratch_render(fmt: str, pack: ws.Pack) -> None:
    """A fresh renderer (no memo, no body cache, no hash state) renders the same request, parts and digests."""
    r = get_renderer(fmt).render(pack.neutral)
    assert r.request == pack.request
    assert r.parts == pack.rendered.parts
    assert r.checksum == pack.rendered.checksum
    assert r.prefix_hash == pack.rendered.prefix_hash


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="shared trace data not available")
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("path", "idx", "window"), [
    ("tau-bench/gpt-4o-airline.json", 3, 10_000),  # small: masks, summaries, truncation rewrite the view
    ("mini-swe-agent/django__django-11119.traj.json", 0, None),  # the model's window: the history only grows
])
def test_incremental_builds_equal_builds_from_scratch_on_real_traces(tmp_path, fmt, path, idx, window):
    trace = load_traces(DATA / path)[idx]
    model = FORMAT_MODEL[fmt]
    store = tmp_path / "w.db"
    builds = 0
    with ws.Engine(model=model, store=store, window=window) as engine:
        s = engine.session("live", goal=(trace.meta.get("goal") if isinstance(trace.meta, dict) else None) or "finish")
        if trace.system:
            s.system(trace.system)
        if trace.tools:
            s.tools(trace.tools)
        for m in trace.messages:
            if m.role == "assistant" and s.state.units:
                pack = s.build(fmt)
                builds += 1
                _scratch_render(fmt, pack)
                if builds % 5 == 1:  # a fresh engine from the log alone (every fifth build: it replays everything)
                    _same(pack, _fresh_build(store, "live", fmt, model, window))
                s.record(message=m, pack=pack)
            else:
                s.add(m)
        s.user("one more thing")
        last = s.build(fmt)
        _scratch_render(fmt, last)
        _same(last, _fresh_build(store, "live", fmt, model, window))
        if window is not None:
            assert s.state.compactions, "the small window should have compacted (the view was rewritten)"
    assert builds > 5


_OPS = st.lists(st.sampled_from(["user", "assistant", "call", "calls", "build", "build-other", "other", "tools", "system"]),
                min_size=4, max_size=40)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, fmt=st.sampled_from(FORMATS), small=st.booleans())
def test_interleaved_appends_and_builds_equal_a_fresh_replay(ops, fmt, small):
    """Appends and builds in any order, with a second session and a second format sharing the engine's
    renderers: each request equals a fresh renderer's, and the last equals a fresh engine's build of the log."""
    model = FORMAT_MODEL[fmt]
    other_fmt = "openai-chat" if fmt != "openai-chat" else "openai-responses"
    window = 3_000 if small else None
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "w.db"
        with ws.Engine(model=model, store=store, window=window) as engine:
            s = engine.session("a", goal="work through the items")
            o = engine.session("b", goal="another session on the same engine")
            o.user("hello from b")
            s.user("start: " + "context " * 30)
            last = None
            for i, op in enumerate(ops):
                if op == "user":
                    s.user(f"user {i} " + "detail " * (i % 7))
                elif op == "assistant":
                    s.assistant(f"assistant {i}")
                elif op in ("call", "calls"):
                    ids = [f"c{i}"] if op == "call" else [f"c{i}a", f"c{i}b"]
                    s.assistant(tool_calls=[ws.ToolCall(c, "read", {"path": f"src/{c}.py"}) for c in ids])
                    for c in ids:
                        s.tool_result(c, f"contents of {c}\n" + "line\n" * (20 * (i % 5)))
                elif op == "tools":  # the head of the request changes while its history extends
                    s.tools([ws.ToolSpec(f"tool{i}", f"tool number {i}", {"type": "object", "properties": {}})])
                elif op == "system":
                    s.system(f"You are agent {i}.")
                elif op == "other":
                    o.user(f"b says {i}")
                    o.build(fmt)
                else:
                    use = fmt if op == "build" else other_fmt
                    pack = s.build(use, model=FORMAT_MODEL[use])
                    _scratch_render(use, pack)
                    if use == fmt:
                        last = pack
            s.user("the end")
            last = s.build(fmt)
            _scratch_render(fmt, last)
        _same(last, _fresh_build(store, "a", fmt, model, window))


@pytest.mark.slow
def test_each_build_renders_and_scans_only_the_new_messages(tmp_path, monkeypatch):
    """As the session grows, the messages rendered, scanned for references and hashed per build stay bounded;
    so do the part digests the pack's delta compares, and the request's message list is not copied."""
    scanned: list[int] = []
    real_refs = refs.message_refs

    def counting_refs(m):
        scanned.append(1)
        return real_refs(m)

    compared: list[int] = []  # characters of manifest values the delta encoder compares (part digests: 12 a part)
    real_prefix = packs._common_prefix

    def counting_prefix(a, b):
        compared.append(min(len(a), len(b)))
        return real_prefix(a, b)

    monkeypatch.setattr(refs, "message_refs", counting_refs)
    monkeypatch.setattr(packs, "_common_prefix", counting_prefix)
    with ws.Engine("gpt-4.1", store=tmp_path / "ws.db") as e:  # a 1M window: nothing compacted
        renderer = e.renderer("openai-chat")
        rendered: list[int] = []
        real_render = renderer.render_message

        def counting_render(message, extra):
            rendered.append(1)
            return real_render(message, extra)

        renderer.render_message = counting_render  # type: ignore[method-assign]
        s = e.session("grow", goal="work")
        per_build: list[tuple[int, int, int, int]] = []
        lineages = set()
        pack = None
        for i in range(300):
            s.user(f"step {i}")
            s.assistant(tool_calls=[ws.ToolCall(f"c{i}", "read", {"path": f"f{i}.py"})])
            s.tool_result(f"c{i}", f"ok {i}")
            s.assistant(f"done {i}")
            rendered.clear()
            scanned.clear()
            compared.clear()
            hashed_before = renderer._hashers[0]._k
            pack = s.build("openai-chat")  # the agent's loop: the last pack is held while the next one builds
            lineages.add(id(pack.neutral.lineage))
            per_build.append((len(rendered), len(scanned), renderer._hashers[0]._k - hashed_before, sum(compared)))
        assert not s.state.compactions
    assert len(pack.neutral.messages) == 1200
    assert len(lineages) == 1  # one view epoch: every build extended the last one
    # after the first build, each renders, scans and hashes its 4 new messages (and the tail), never the session
    assert max(r for r, _, _, _ in per_build[1:]) <= 4
    assert max(n for _, n, _, _ in per_build[1:]) <= 4
    assert max(h for _, _, h, _ in per_build[1:]) <= 4
    # the pack's delta compares the digests after the shared prefix the builder hints (the last parts and the
    # new ones), not the session's 1,200 x 12 characters; short strings (ids, hashes) are compared as before
    assert max(c for _, _, _, c in per_build[2:]) < 400
    # the request's message list: from the third build on, the list of the pack before the last (no one holds
    # it any more) is brought up to date in place instead of copying the whole history
    assert renderer.lists_reused == 298


@pytest.mark.parametrize("fmt", FORMATS)
def test_reused_message_lists_never_change_a_request_someone_holds(tmp_path, fmt):
    """The renderer recycles a request's message list only when no one refers to it: packs (or just their
    message lists) that a caller keeps stay as they were, and every request equals a fresh renderer's."""
    import copy

    kept: list[tuple[object, object]] = []  # (what the caller holds, a deep copy of it then)
    key = {"gemini": "contents", "openai-responses": "input"}.get(fmt, "messages")
    with ws.Engine(FORMAT_MODEL[fmt], store=tmp_path / "w.db") as e:
        renderer = e.renderer(fmt)
        s = e.session("keep", goal="work through the items")
        s.system("You are careful.")
        for i in range(40):
            s.user(f"step {i} " + "detail " * (i % 5))
            s.assistant(tool_calls=[ws.ToolCall(f"c{i}", "read", {"path": f"f{i}.py"})])
            s.tool_result(f"c{i}", f"ok {i}\n" + "line\n" * (i % 7))
            if i % 3 == 0:
                s.assistant(f"done {i}")
            pack = s.build(fmt)
            _scratch_render(fmt, pack)
            if i % 5 == 0:  # a whole pack
                kept.append((pack, copy.deepcopy(pack.request)))
            elif i % 5 == 2:  # only the request's message list
                kept.append((pack.request[key], copy.deepcopy(pack.request[key])))
            del pack
        assert renderer.lists_reused >= 15  # the rest were recycled
    for held, then in kept:
        assert (held.request if isinstance(held, ws.Pack) else held) == then


@given(base=st.text("0123456789abcdef", max_size=400), keep=st.integers(0, 400),
       suffix=st.text("0123456789abcdef", max_size=60), other=st.booleans())
def test_a_hinted_delta_is_the_delta(base, keep, suffix, other):
    """The part-digest hint changes how much the delta encoder compares, never the delta it writes."""
    keep = min(keep, len(base))
    new_parts = base[:keep] + suffix
    old = {"parts": base, "seq": 1, "checksum": "a" * 40}
    new = {"parts": new_parts, "seq": 2, "checksum": ("b" if other else "a") * 40}
    want = packs.manifest_delta(old, new)
    assert packs.manifest_delta(old, new, {"parts": (base, keep)}) == want
    assert packs.apply_delta(old, want) == new
    # a hint about another string (not the base's own) is ignored
    assert packs.manifest_delta(old, new, {"parts": ("x" + base, keep)}) == want


@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat"])
def test_a_rewrite_that_keeps_the_history_length_starts_a_new_lineage(tmp_path, fmt):
    """Image stubs rewrite a message in place (the history keeps its length): the builds after them must not
    extend what was rendered before (a stale image would stay in the request)."""
    from test_compaction_mask import IMAGE_CFG, filler, image_session

    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", compaction=IMAGE_CFG) as e:
        s = image_session(e)
        model = None if fmt == "anthropic" else "gpt-4.1"
        packs = [s.build(fmt, model=model)]
        masks = [0]
        for i in range(3):
            filler(s, i)
            packs.append(s.build(fmt, model=model))
            masks.append(sum(c["type"] == "mask" for c in s.state.compactions))
            _scratch_render(fmt, packs[-1])
        assert sum(len(c["images"]) for c in s.state.compactions if c["type"] == "mask") == 2
        for k in range(1, len(packs)):  # a build that stubbed an image starts a new epoch, the others extend
            assert (packs[k].neutral.lineage is not packs[k - 1].neutral.lineage) == (masks[k] > masks[k - 1])
        assert "base64" not in str(packs[-1].request)


@given(head=st.lists(st.integers(), max_size=3), items=st.lists(st.integers(), max_size=12),
       extra=st.lists(st.integers(), max_size=3), data=st.data())
def test_a_snapshot_is_the_tuple_of_its_window_and_appends_never_change_it(head, items, extra, data):
    start = data.draw(st.integers(0, len(items)))
    stop = data.draw(st.integers(start, len(items)))
    snap = Snapshot(tuple(head), items, start, stop, tuple(extra))
    want = (*head, *items[start:stop], *extra)
    items.extend([-1, -2])  # the owner appends: the snapshot keeps its window
    i = data.draw(st.integers(-len(want) - 2, len(want) + 2))
    s = slice(data.draw(st.integers(-20, 20) | st.none()), data.draw(st.integers(-20, 20) | st.none()),
              data.draw(st.sampled_from([None, 1, 2, -1])))
    assert len(snap) == len(want)
    assert snap[s] == want[s] and isinstance(snap[s], tuple)
    if -len(want) <= i < len(want):
        assert snap[i] == want[i]
    else:
        with pytest.raises(IndexError):
            snap[i]
    assert snap == want and want == snap and tuple(snap) == want and hash(snap) == hash(want)
    assert list(reversed(snap)) == list(reversed(want))


def test_earlier_packs_keep_their_history_when_the_view_is_rewritten(tmp_path):
    """A pack's history is a snapshot of the session's view: later appends and rewrites (folds) leave it as it was."""
    with ws.Engine("claude-sonnet-4-5", store=tmp_path / "w.db", window=16_000) as e:
        s = e.session("keep")
        s.user("go")
        kept = []
        for i in range(40):
            s.assistant("", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"i": i}}])
            s.tool_result(f"c{i}", f"FAILED test_{i}\n" + "noise line\n" * 120)
            pack = s.build()
            kept.append((pack, pack.neutral.messages[:], dict(pack.request)))  # a slice: the snapshot stays lazy
        assert any(c["type"] == "mask" for c in s.state.compactions)
    for pack, messages, request in kept:
        assert pack.neutral.messages[:] == messages and pack.request == request
        _scratch_render("anthropic", pack)


def test_sessions_building_in_threads_share_the_engine_renderer_safely(tmp_path):
    """An engine's renderer (its body cache and hash states, extended in place) is shared by its sessions, which
    may build at the same time in different threads (the async API runs builds in worker threads). A smoke
    check: without the renderer's lock it passed here too (the race window is small), but a race shows as a mismatch."""
    from concurrent.futures import ThreadPoolExecutor

    with ws.Engine("gpt-4.1", store=tmp_path / "w.db") as e:
        def run(k: int) -> list[ws.Pack]:
            s = e.session(f"t{k}", goal=f"thread {k}")
            packs = []
            for i in range(30):
                s.user(f"{k}: step {i}")
                s.assistant(tool_calls=[ws.ToolCall(f"c{k}_{i}", "read", {"path": f"{k}/{i}.py"})])
                s.tool_result(f"c{k}_{i}", f"{k} ok {i}")
                packs.append(s.build("openai-chat"))
            return packs

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(run, range(4)))
    for built in results:
        for pack in built:
            _scratch_render("openai-chat", pack)


@pytest.mark.slow
def test_a_build_under_the_cut_mark_never_sums_the_history(tmp_path, monkeypatch):
    """The free cut's check (``cut_saves``: does a cut remove enough?) sums the whole compactable history; a
    build whose request is under the high-water mark never asks it, so a long session's build does not grow
    with the session."""
    from windowsmith.compaction import emergency

    asked: list[int] = []
    real = emergency.cut_saves

    def counting(p):
        asked.append(1)
        return real(p)

    monkeypatch.setattr(emergency, "cut_saves", counting)
    with ws.Engine("gpt-4.1", store=tmp_path / "ws.db") as e:  # a 1M window: far under the mark
        s = e.session("grow", goal="work")
        for i in range(200):
            s.user(f"step {i}")
            s.assistant(tool_calls=[ws.ToolCall(f"c{i}", "read", {"path": f"f{i}.py"})])
            s.tool_result(f"c{i}", f"ok {i}")
            s.build("openai-chat")
        assert not s.state.compactions
    assert asked == []
