"""Many hosts over one PostgreSQL: two ``windowsmith serve`` processes that share no directory, one database, one
S3-compatible object store (moto's server). Eight agents send every turn to both hosts at once (a retry racing the
original, on another machine): each session's turns are recorded once and in order, both hosts answer the same,
and offloaded tool results land in the object store under the tenant's prefix."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
pytest.importorskip("obstore")
pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from windowsmith.store import open_store  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
AGENTS, TURNS = 8, 5
BIG = "\n".join(f"line {i}: " + "log output " * 12 for i in range(1500))  # offloaded to the artifact store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "server exited"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready after {timeout} s")


@pytest.fixture
def moto_s3(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_two_hosts_one_database_one_bucket(tmp_path: Path, pg_schema: str, moto_s3: str) -> None:
    aws = {"AWS_ENDPOINT_URL": moto_s3, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    s3 = boto3.client("s3", endpoint_url=moto_s3, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    s3.create_bucket(Bucket="gateway")
    store = f"postgresql://postgres@127.0.0.1:5432/test?schema={pg_schema}"
    open_store(store).close()  # (migrated once, as an operator's deploy step would)
    up = FakeUpstream(latency=0.05)
    procs: list[subprocess.Popen[bytes]] = []
    with BackgroundServer(up) as u:
        urls = []
        for host in ("a", "b"):
            home = tmp_path / host  # nothing shared between the two hosts but the database and the bucket
            home.mkdir()
            port = free_port()
            env = {**os.environ, **aws, "HOME": str(home), "WINDOWSMITH_STORE": store, "WINDOWSMITH_PORT": str(port),
                   "WINDOWSMITH_ARTIFACTS": "s3://gateway/ws", "WINDOWSMITH_OPENAI_BASE_URL": u.url + "/v1",
                   "WINDOWSMITH_MODEL_WINDOW": "20000", "WINDOWSMITH_LOG_LEVEL": "warning", "TMPDIR": str(home)}
            procs.append(subprocess.Popen([sys.executable, "-c", "from windowsmith.cli import main; main()", "serve"],
                                          cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            urls.append(f"http://127.0.0.1:{port}")
        try:
            for url, proc in zip(urls, procs, strict=True):
                wait_ready(url + "/readyz", proc)
            assert httpx.get(urls[0] + "/readyz").json()["artifacts"] == "ok"
            clients = [openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=120) for url in urls]
            errors: list[BaseException] = []
            pool = ThreadPoolExecutor(max_workers=2 * AGENTS)

            def agent(i: int) -> None:
                try:
                    h = {"X-Windowsmith-Session": f"agent-{i}"}
                    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Task {i}: fix the build."}]
                    for turn in range(TURNS):
                        both = [pool.submit(c.chat.completions.create, model="gpt-4o", messages=list(msgs),
                                            tools=TOOLS, extra_headers=h) for c in clients]
                        answers = [f.result() for f in both]
                        calls = [a.choices[0].message.tool_calls[0].id for a in answers]
                        assert calls[0] == calls[1], "both hosts must give the turn's one answer"
                        m = answers[0].choices[0].message
                        msgs.append({"role": "assistant", "content": m.content, "tool_calls": [
                            c.model_dump() for c in m.tool_calls]})
                        out = BIG if turn == 1 else f"ok {turn}"
                        msgs.append({"role": "tool", "tool_call_id": calls[0], "content": out})
                except BaseException as e:  # (reported below, with the agent)
                    errors.append(e)

            threads = [threading.Thread(target=agent, args=(i,)) for i in range(AGENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=300)
            pool.shutdown()
            for c in clients:
                c.close()
            assert not errors, errors[0]
        finally:
            for proc in procs:
                proc.terminate()  # SIGTERM: a graceful stop
            for proc in procs:
                # (uvicorn finishes the calls in flight, then re-raises the signal it caught)
                assert proc.wait(timeout=40) in (0, -15)
                _, err = proc.communicate()
                assert b"Traceback" not in err, err.decode()
    assert len(up.requests) == AGENTS * TURNS  # each turn forwarded once, whichever host took it
    with open_store(store) as st:
        for i in range(AGENTS):
            events = st.events(f"agent-{i}")
            roles = [e.data["message"]["role"] for e in events if e.kind == "message"]
            assert roles == ["user"] + ["assistant", "tool"] * (TURNS - 1) + ["assistant"], (i, roles)
            assert sum(e.kind == "usage" for e in events) == TURNS
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="gateway").get("Contents", [])]
    assert any(k.startswith("ws/tenants/_default/") for k in keys), keys
