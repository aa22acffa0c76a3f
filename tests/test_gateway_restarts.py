"""``serve`` killed (SIGKILL) and restarted while agents run, their SDKs retrying as they do by default: no session
is left refusing requests, no message is recorded twice, and every turn's answer is in the log once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from windowsmith.store import open_store  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

pytestmark = pytest.mark.slow

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
AGENTS, TURNS, KILLS = 8, 8, 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(env: dict[str, str], cwd: Path, url: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", "from windowsmith.cli import main; main()", "serve"], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("serve did not start")


def test_sigkill_and_restart_leave_no_stuck_or_duplicated_session(tmp_path: Path) -> None:
    up = FakeUpstream(latency=0.3)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with BackgroundServer(up) as u:
        env = {**os.environ, "WINDOWSMITH_STORE": str(tmp_path / "k.db"), "WINDOWSMITH_PORT": str(port),
               "WINDOWSMITH_OPENAI_BASE_URL": u.url + "/v1", "WINDOWSMITH_LOG_LEVEL": "warning"}
        proc = start(env, tmp_path, url)
        errors: list[BaseException] = []
        finished: list[int] = []

        def agent(i: int) -> None:
            client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=10, timeout=20)
            try:
                h = {"X-Windowsmith-Session": f"agent-{i}"}
                msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Task {i}."}]
                for turn in range(TURNS):
                    r = client.chat.completions.create(model="gpt-4o", messages=msgs, tools=TOOLS, extra_headers=h)
                    m = r.choices[0].message
                    msgs.append({"role": "assistant", "content": m.content,
                                 "tool_calls": [c.model_dump() for c in m.tool_calls]})
                    msgs.append({"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": f"out {turn}"})
                finished.append(i)
            except BaseException as e:  # (reported below)
                errors.append(e)
            finally:
                client.close()

        threads = [threading.Thread(target=agent, args=(i,)) for i in range(AGENTS)]
        for t in threads:
            t.start()
        try:
            for _ in range(KILLS):
                time.sleep(1.5)
                proc.send_signal(signal.SIGKILL)  # mid-call: some replies recorded and not delivered, some not recorded
                proc.wait(timeout=10)
                proc = start(env, tmp_path, url)
            for t in threads:
                t.join(timeout=300)
        finally:
            proc.terminate()
            proc.wait(timeout=40)
    assert not errors, errors[0]
    assert sorted(finished) == list(range(AGENTS))  # 0 stuck sessions
    with open_store(str(tmp_path / "k.db")) as st:
        for i in range(AGENTS):
            events = st.events(f"agent-{i}")
            roles = [e.data["message"]["role"] for e in events if e.kind == "message"]
            # every turn once, in order: no duplicated message, no reply missing
            assert roles == ["user"] + ["assistant", "tool"] * (TURNS - 1) + ["assistant"], (i, roles)
