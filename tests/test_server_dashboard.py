"""The dashboard in a real headless browser: Debian's chromium driven by Playwright's Python API
(``executable_path``: no browser download). A session with compactions is loaded; the composition
chart, the cache chart, the compaction list, a manifest and a diff are checked, a live update is
awaited, and a screenshot is kept in ``test-artifacts/dashboard.png``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
openai = pytest.importorskip("openai")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the test extra)")

from server_agents import TRACE, run_openai_agent  # noqa: E402
from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH: `apt-get install chromium` (.ci/run does this)"),
    pytest.mark.skipif(not TRACE.exists(), reason=f"needs the shared traces ({TRACE.name})"),
]


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[str]:
    with BackgroundServer(FakeUpstream()) as up:
        app = create_app(ServerConfig(store=tmp_path / "dash.db", openai_base_url=up.url + "/v1",
                                      model_window=6000, poll_seconds=0.3))
        with BackgroundServer(app) as p:
            yield p.url


def test_dashboard_shows_composition_cache_compactions_manifest_and_diff_live(proxy: str, request: pytest.FixtureRequest) -> None:
    client = openai.OpenAI(base_url=proxy + "/v1", api_key="sk-test", max_retries=0)
    request.addfinalizer(client.close)
    h = {"X-Windowsmith-Session": "swe-astropy-14182"}
    run_openai_agent(client, "gpt-4o", 16, headers=h)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(proxy + "/?session=swe-astropy-14182")
            page.wait_for_selector("#composition svg rect")
            turns = page.eval_on_selector_all("#composition rect", "rs => new Set(rs.map(r => r.dataset.i)).size")
            assert turns == 16
            layers = page.eval_on_selector_all("#composition rect", "rs => [...new Set(rs.map(r => r.dataset.key))]")
            assert {"tools", "system", "history"} <= set(layers)
            assert page.eval_on_selector_all("#cache rect", "rs => rs.filter(r => r.dataset.key == 'cache_read').length") >= 10
            assert page.locator("#calls tr").count() == 17  # header + one row per call, with its cost
            assert "$" in page.locator("#calls").inner_text()
            compactions = page.locator("#compactions li").all_inner_texts()
            assert compactions and any(c.split()[0] in ("mask", "summary", "emergency", "truncate") for c in compactions)
            assert "▲" in page.locator("#composition").inner_text()  # the turns where compaction happened
            # the last pack's manifest and its diff against the previous one
            page.wait_for_function("document.getElementById('manifest').textContent.includes('pack_id')")
            page.wait_for_function("document.getElementById('diff').textContent.includes('cache prefix')")
            assert '"session_id": "swe-astropy-14182"' in page.locator("#manifest").inner_text()
            # clicking turn 3 shows its manifest and its diff
            page.locator('#composition rect[data-i="2"]').first.click()
            page.wait_for_function("document.getElementById('pack-title').textContent.startsWith('turn 3')")
            page.wait_for_function("document.getElementById('diff').textContent.includes('tokens')")
            page.locator('#composition rect[data-i="15"]').first.click()
            page.wait_for_function("document.getElementById('pack-title').textContent.startsWith('turn 16')")
            page.wait_for_function("document.getElementById('diff').textContent.includes('cache prefix')")
            assert errors == []
            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        finally:
            browser.close()


def test_dashboard_updates_while_the_agent_runs(proxy: str, request: pytest.FixtureRequest) -> None:
    client = openai.OpenAI(base_url=proxy + "/v1", api_key="sk-test", max_retries=0)
    request.addfinalizer(client.close)
    h = {"X-Windowsmith-Session": "live"}
    msgs: list[dict] = [{"role": "user", "content": "first question"}]

    def turn(text: str) -> None:
        reply = client.chat.completions.create(model="gpt-4o", messages=msgs, extra_headers=h)
        msgs.extend([reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": text}])

    turn("second question")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(proxy + "/?session=live")
            page.wait_for_selector("#composition svg rect")
            assert page.locator("#calls tr").count() == 2
            turn("third question")
            turn("fourth question")
            # no reload: the page polls and redraws when the session's head moves
            page.wait_for_function("document.querySelectorAll('#calls tr').length == 4", timeout=15_000)
            assert page.eval_on_selector_all("#composition rect", "rs => new Set(rs.map(r => r.dataset.i)).size") == 3
        finally:
            browser.close()
