"""`windowsmith serve --workers N`: several processes over one store, a session's turns never interleave."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from server_agents import TRACE, run_openai_agent
from windowsmith.engine import Engine
from windowsmith.errors import UsageError
from windowsmith.server import ServerConfig
from windowsmith.server.app import SERVE_ENV, app_from_env, config_to_env
from windowsmith.server.locks import SessionLock, cross_process_locks, lock_path
from windowsmith.server.state import ServerState
from windowsmith.store import open_store
from windowsmith.testing import BackgroundServer, FakeUpstream

pytestmark = pytest.mark.skipif(not cross_process_locks(), reason="several workers need POSIX file locks")


def _take_turns(lock_dir: str, log: str, turns: int, hold: float) -> None:
    """A worker process: ``turns`` times, hold the lock of session ``s-1`` and write ``in``/``out`` around a sleep."""

    async def main() -> None:
        lock = SessionLock(lock_path(Path(lock_dir), None, "s-1"))
        for _ in range(turns):
            await lock.acquire()
            try:
                with open(log, "a") as f:
                    f.write(f"{os.getpid()} in\n")
                await asyncio.sleep(hold)
                with open(log, "a") as f:
                    f.write(f"{os.getpid()} out\n")
            finally:
                lock.release()

    asyncio.run(main())


@pytest.mark.slow
def test_a_session_lock_excludes_the_other_processes(tmp_path: Path) -> None:
    log = tmp_path / "turns.log"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_take_turns, args=(str(tmp_path), str(log), 12, 0.004)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = [ln.split() for ln in log.read_text().splitlines()]
    assert len(lines) == 3 * 12 * 2
    # every turn is an "in" then the same process's "out": no two processes ever held the lock at once
    for (pid_in, k_in), (pid_out, k_out) in zip(lines[0::2], lines[1::2], strict=True):
        assert (k_in, k_out) == ("in", "out") and pid_in == pid_out
    assert len({pid for pid, _ in lines}) == 3


def test_a_cancelled_wait_leaves_no_lock_behind(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = lock_path(tmp_path, "team-a", "ticket-42")
        holder, waiter = SessionLock(path), SessionLock(path)  # two descriptors: flock makes them exclude each other
        await holder.acquire()
        task = asyncio.create_task(waiter.acquire())
        await asyncio.sleep(0.05)
        assert not task.done()  # it waits for the holder
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert not waiter.locked()
        holder.release()
        await asyncio.wait_for(waiter.acquire(), 5)  # the cancelled wait kept nothing: the lock is free
        waiter.release()

    asyncio.run(scenario())


def test_each_session_has_its_own_lock_file_and_a_released_lock_leaves_none(tmp_path: Path) -> None:
    paths = {lock_path(tmp_path, t, f"s-{i}") for t in (None, "team-a") for i in range(500)}
    assert len(paths) == 1_000  # no two sessions wait for each other's turn
    assert lock_path(tmp_path, None, "s-1") == lock_path(tmp_path, None, "s-1")  # every worker finds the same file

    async def turns() -> None:
        a, b = SessionLock(lock_path(tmp_path, None, "s-1")), SessionLock(lock_path(tmp_path, None, "s-2"))
        await a.acquire()
        await asyncio.wait_for(b.acquire(), 2)  # another session: no wait
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([a.path.name, b.path.name])
        a.release()
        b.release()
        for _ in range(3):  # taken again after its file was removed
            await a.acquire()
            a.release()

    asyncio.run(turns())
    assert list(tmp_path.iterdir()) == []  # the lock directory holds files only for sessions in a turn


def test_worker_configuration_round_trips_and_bad_input_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = ServerConfig(store=tmp_path / "w.db", openai_base_url="http://127.0.0.1:9/v1", model_window=6000,
                       tokens={"t" * 24: "team-a"}, lock_dir=tmp_path)
    monkeypatch.setenv(SERVE_ENV, config_to_env(cfg))
    state = app_from_env().state.windowsmith
    assert state.lock_dir == tmp_path and state.config.model_window == 6000
    assert state.config.tokens == {"t" * 24: "team-a"}
    assert state.session_lock(None, "s").path == lock_path(tmp_path, None, "s")
    state.store.close()
    with open_store(str(tmp_path / "x.db")) as opened, pytest.raises(UsageError, match="postgresql:// URL"):
        config_to_env(ServerConfig(store=opened))
    monkeypatch.delenv(SERVE_ENV)
    with pytest.raises(UsageError, match="windowsmith serve --workers"):
        app_from_env()
    with pytest.raises(UsageError, match="not a directory"):
        ServerState(ServerConfig(store=tmp_path / "y.db", lock_dir=tmp_path / "missing"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (d / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
    return out


@pytest.mark.slow
@pytest.mark.skipif(not TRACE.exists(), reason=f"needs the shared traces ({TRACE.name})")
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="counts the worker processes in /proc")
def test_serve_with_two_workers_records_every_turn_of_every_session(tmp_path: Path) -> None:
    store = tmp_path / "workers.db"
    log = tmp_path / "serve.log"
    with BackgroundServer(FakeUpstream()) as up, open(log, "w") as err:
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "windowsmith.cli", "serve", "--workers", "2", "--port", str(port), "--store",
             str(store), "--openai-base-url", up.url + "/v1", "--anthropic-base-url", up.url, "--model-window", "6000"],
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=err)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    if httpx.get(url + "/api/sessions", timeout=5).status_code == 200 and len(_children(proc.pid)) >= 2:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the workers did not come up"
                time.sleep(0.2)
            workers = [p for p in _children(proc.pid) if "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_text()]
            assert len(workers) == 2
            turns, agents = 8, 4
            results: dict[int, Any] = {}

            def agent(i: int) -> None:
                client = openai.OpenAI(base_url=url + "/v1", api_key="sk-proj-" + "k" * 40, max_retries=0,
                                       default_headers={"x-windowsmith-session": f"agent-{i}"})
                try:
                    results[i] = run_openai_agent(client, "gpt-4o", turns, stream_every=3)
                except Exception as e:
                    results[i] = e
                finally:
                    client.close()

            threads = [threading.Thread(target=agent, args=(i,)) for i in range(agents)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            assert len(results) == agents and all(isinstance(r, list) and len(r) == turns for r in results.values()), results
            sessions = {s["id"]: s for s in httpx.get(url + "/api/sessions", timeout=30).json()}
            assert set(sessions) == {f"agent-{i}" for i in range(agents)}
            for sid in sessions:
                detail = httpx.get(f"{url}/api/sessions/{sid}", timeout=30).json()
                assert len(detail["calls"]) == turns  # every turn recorded once, whichever worker served it
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    assert proc.returncode in (0, -15)
    # the store holds each session's conversation once, whichever worker appended each part: the task, a reply a turn,
    # and the result of every turn but the last (sent with the next call, which never came)
    with Engine("gpt-4o", store=store) as e:
        for i in range(agents):
            roles = [m.role for m in e.session(f"agent-{i}").messages]
            assert roles == ["user", *(["assistant", "tool"] * (turns - 1)), "assistant"], roles
