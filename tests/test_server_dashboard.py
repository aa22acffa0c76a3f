"""The dashboard in a real headless browser: Debian's chromium driven by Playwright's Python API
(``executable_path``: no browser download). A session with compactions is loaded; the charts (axes, turn numbers,
window and budget lines, redrawn on resize), the header, the headline figures and the what-if panel (the same
numbers as the API's JSON), the manifest tables with an artifact link opening the redacted text, the request sent,
the compaction list and a diff are checked; the session list is searched; a live update is awaited. Screenshots go
to ``test-artifacts/`` (and, with ``WINDOWSMITH_DOCS_SCREENSHOTS=1``, to ``docs/``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the server extra: pip install 'windowsmith[server]'")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the test extra)")

from server_agents import TRACE, run_anthropic_agent, run_openai_agent  # noqa: E402
from windowsmith.server import ServerConfig, create_app  # noqa: E402
from windowsmith.testing import BackgroundServer, FakeUpstream  # noqa: E402

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
DOCS = Path(__file__).resolve().parents[1] / "docs"

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


def launch(pw: Any) -> Any:
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def shoot(page: Any, name: str, **kw: Any) -> None:
    """A screenshot of a page or a locator into ``test-artifacts/``; with ``WINDOWSMITH_DOCS_SCREENSHOTS=1``, into the docs as well."""
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / name
    page.screenshot(path=str(shot), **kw)
    assert shot.stat().st_size > 5_000
    if os.environ.get("WINDOWSMITH_DOCS_SCREENSHOTS") == "1":
        target = DOCS / name if name == "dashboard.png" else DOCS / "guides" / name
        shutil.copyfile(shot, target)


def api(proxy: str, path: str) -> Any:
    return httpx.get(proxy + path, timeout=120).json()


def test_dashboard_shows_composition_cache_compactions_manifest_and_diff_live(proxy: str, request: pytest.FixtureRequest) -> None:
    client = openai.OpenAI(base_url=proxy + "/v1", api_key="sk-test", max_retries=0)
    request.addfinalizer(client.close)
    h = {"X-Windowsmith-Session": "swe-astropy-14182"}
    run_openai_agent(client, "gpt-4o", 16, headers=h)
    with sync_api.sync_playwright() as pw:
        browser = launch(pw)
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
            # axes: tick labels, a turn number under every bar, the window and budget lines
            assert page.locator("#composition text.tick").count() >= 3
            assert page.eval_on_selector_all("#composition text.xtick", "ts => ts.map(t => t.textContent)") == \
                [str(i) for i in range(1, 17)]
            assert sorted(page.eval_on_selector_all("#composition line.refline", "ls => ls.map(l => l.dataset.line)")) == \
                ["budget", "window"]
            assert page.eval_on_selector_all("#cache rect", "rs => rs.filter(r => r.dataset.key == 'cache_read').length") >= 10
            assert page.locator("#calls tr").count() == 17  # header + one row per call, with its cost
            assert "$" in page.locator("#calls").inner_text()
            compactions = page.locator("#compactions li").all_inner_texts()
            assert compactions and all(c.split()[0] in ("mask", "summary", "cut", "truncate", "shrink") for c in compactions)
            assert "emergency" not in page.locator("#compactions").inner_text()  # the routine cut is named "cut"
            assert "▲" in page.locator("#composition").inner_text()  # the turns where compaction happened
            check_header_and_headline(page, proxy)
            check_manifest_tables(page, proxy, browser)
            # clicking turn 3 shows its manifest and its diff
            page.locator('#composition rect[data-i="2"]').first.click()
            page.wait_for_function("document.getElementById('pack-title').textContent.startsWith('turn 3')")
            page.wait_for_function("document.getElementById('diff').textContent.includes('tokens')")
            page.locator('#composition rect[data-i="15"]').first.click()
            page.wait_for_function("document.getElementById('pack-title').textContent.startsWith('turn 16')")
            page.wait_for_function("document.getElementById('diff').textContent.includes('cache prefix')")
            check_request(page)
            check_whatif(page, proxy)
            shoot(page, "dashboard.png", full_page=True)
            shoot(page, "dashboard-headline.png", full_page=True, clip={"x": 0, "y": 0, "width": 1400, "height": 700})
            shoot(card(page, "#whatif-table"), "dashboard-whatif.png")
            shoot(card(page, "#layers-table"), "dashboard-pack.png")
            page.eval_on_selector("#request", "e => { e.style.maxHeight = '900px'; }")
            shoot(card(page, "#request"), "dashboard-request.png")
            # redrawn on resize: the charts follow the page's width
            wide = page.eval_on_selector("#composition svg", "s => +s.getAttribute('width')")
            page.set_viewport_size({"width": 900, "height": 1000})
            page.wait_for_function(f"+document.querySelector('#composition svg').getAttribute('width') < {wide}")
            assert errors == []
        finally:
            browser.close()


def card(page: Any, selector: str) -> Any:
    """The card (a locator) around ``selector``."""
    return page.locator(selector).locator("xpath=ancestor::div[contains(@class, 'card')][1]")


def check_header_and_headline(page: Any, proxy: str) -> None:
    """The header names model, window and provider; the headline figures are the API's numbers."""
    page.wait_for_function("document.getElementById('h-cost').dataset.value")
    ov = api(proxy, "/api/sessions/swe-astropy-14182/overview")
    assert page.locator("#hdr-model").inner_text() == "gpt-4o"
    assert page.locator("#hdr-window").inner_text() == "6,000 tokens"
    assert page.locator("#hdr-provider").inner_text() == "OpenAI"
    cache = page.locator("#hdr-cache").inner_text()
    assert "prompt_cache_key" in cache and "breakpoint" not in cache  # OpenAI's wording on an OpenAI pack
    figures = {k: page.locator(f"#{k}").get_attribute("data-value") for k in ("h-cost", "h-hit", "h-saved", "h-cost-saved")}
    assert float(figures["h-cost"]) == pytest.approx(ov["cost"], rel=1e-12)
    assert float(figures["h-hit"]) == pytest.approx(ov["cache_hit_rate"], rel=1e-12)
    assert int(figures["h-saved"]) == ov["tokens_saved"] > 0
    assert float(figures["h-cost-saved"]) == pytest.approx(ov["cost_saved"], rel=1e-12)
    assert page.locator("#h-cost").inner_text() == f"${ov['cost']:.4f}"
    assert page.locator("#h-hit").inner_text() == f"{ov['cache_hit_rate'] * 100:.1f}%"
    assert page.locator("#h-saved").inner_text() == f"{ov['tokens_saved']:,}"
    assert "priced" in (page.locator("#h-saved-card").get_attribute("title") or "")  # how it is computed


def check_manifest_tables(page: Any, proxy: str, browser: Any) -> None:
    """The last pack's manifest as tables (layers calibrated as the total is), and an artifact link that opens the
    redacted text the API serves."""
    page.wait_for_function("document.querySelectorAll('#layers-table tr').length > 2")
    ov = api(proxy, "/api/sessions/swe-astropy-14182/overview")
    cal = ov["turn_layers"][-1]["layers"]
    rows = {r.split("\t")[0].strip(): r.split("\t")[1] for r in page.locator("#layers-table tr").all_inner_texts()[1:]}
    assert {k: int(v.replace(",", "")) for k, v in rows.items() if k in cal} == cal
    assert page.locator("#actions-table th").first.inner_text() == "action"
    links = page.locator("#artifacts-table a.artifact")
    assert links.count() >= 1
    href = links.first.get_attribute("href") or ""
    with page.context.expect_page() as opened:
        links.first.click()
    tab = opened.value
    tab.wait_for_load_state()
    expected = httpx.get(proxy + href, timeout=60).text
    assert tab.locator("body").inner_text().strip() == expected.strip() and len(expected) > 100
    tab.close()


def check_request(page: Any) -> None:
    """The request last sent, as messages: system first, tool calls and results, OpenAI's cache wording."""
    page.wait_for_selector("#request .msg")
    roles = page.eval_on_selector_all("#request .msg .role", "rs => rs.map(r => r.textContent.split(' ')[1])")
    assert roles[0] == "system" and "assistant" in roles and "tool" in roles
    assert page.locator("#request .call").count() >= 1
    assert "prompt_cache_key" in page.locator("#request-note").inner_text()
    assert page.locator("#request .bp").count() == 0  # no cache_control marks on an OpenAI request
    refs = page.eval_on_selector_all("#request a.artifact", "as => as.map(a => a.href)")
    assert refs  # the artifact:// references in the text open the artifact
    assert httpx.get(refs[0], timeout=60).status_code == 200


def check_whatif(page: Any, proxy: str) -> None:
    """The what-if panel shows, per strategy, the API's cost (computed on demand, server side)."""
    assert page.locator("#whatif-table tr").count() == 0  # on demand only
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-table .strategy", timeout=120_000)
    w = api(proxy, "/api/sessions/swe-astropy-14182/whatif")
    shown = page.eval_on_selector_all("#whatif-table tr", "rs => rs.slice(2).map(r => [r.querySelector('.strategy').textContent, "
                                                          "+r.querySelector('.cost').dataset.value, r.querySelector('.cost').textContent])")
    assert [s[0] for s in shown] == [r["strategy"] for r in w["rows"]]
    for (_, value, text), r in zip(shown, w["rows"], strict=True):
        assert value == pytest.approx(r["cost"], rel=1e-12) and text == f"${r['cost']:.4f}"
    assert "this session" in page.locator("#whatif-table tr").nth(1).inner_text()
    assert page.locator("#whatif-chart rect").count() == len(w["rows"])  # a bar per strategy


def test_session_list_shows_cost_calls_and_is_searchable(proxy: str, request: pytest.FixtureRequest) -> None:
    client = openai.OpenAI(base_url=proxy + "/v1", api_key="sk-test", max_retries=0)
    request.addfinalizer(client.close)
    for sid, turns in (("alpha-run", 2), ("beta-run", 3), ("beta-retry", 1)):
        run_openai_agent(client, "gpt-4o", turns, headers={"X-Windowsmith-Session": sid})
    index = {s["id"]: s for s in api(proxy, "/api/index")}
    with sync_api.sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(proxy + "/?session=beta-retry")
            page.wait_for_function("document.getElementById('session-count').textContent.startsWith('3 of 3')")
            meta = page.locator('#sessions a[data-session="beta-run"] .meta').inner_text()
            assert meta.startswith(f"${index['beta-run']['cost']:.4f} · 3 calls")
            page.fill("#search", "beta")
            page.wait_for_function("document.querySelectorAll('#sessions a').length == 2")
            assert page.eval_on_selector_all("#sessions a", "as => as.map(a => a.dataset.session)") == ["beta-run", "beta-retry"]
            shoot(page, "dashboard-sessions.png", full_page=True, clip={"x": 0, "y": 0, "width": 320, "height": 260})
            page.fill("#search", "nothing-like-it")
            page.wait_for_function("document.querySelectorAll('#sessions a').length == 0")
            # a one-call session: the what-if panel says it is too short
            page.fill("#search", "")
            page.click("#whatif-run")
            page.wait_for_function("document.getElementById('whatif-status').textContent.includes('too short')")
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
        browser = launch(pw)
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


def test_anthropic_session_behind_a_token_shows_its_breakpoints(tmp_path: Path) -> None:
    """An Anthropic session, on a server with ``--token``: the page works from ``?token=``, names the provider and
    its cache_control breakpoints, marks them in the request, and keeps the token in the artifact links."""
    anthropic = pytest.importorskip("anthropic")
    token = "t" * 24
    with BackgroundServer(FakeUpstream()) as up:
        app = create_app(ServerConfig(store=tmp_path / "a.db", anthropic_base_url=up.url, model_window=6000,
                                      poll_seconds=0.3, tokens={token: "team"}))
        with BackgroundServer(app) as p:
            client = anthropic.Anthropic(base_url=p.url, api_key="sk-test", max_retries=0)
            try:
                run_anthropic_agent(client, "claude-sonnet-5-5", 8,
                                    headers={"X-Windowsmith-Session": "claude-run", "X-Windowsmith-Token": token})
            finally:
                client.close()
            with sync_api.sync_playwright() as pw:
                browser = launch(pw)
                try:
                    page = browser.new_page(viewport={"width": 1300, "height": 1000})
                    errors: list[str] = []
                    page.on("pageerror", lambda e: errors.append(str(e)))
                    page.goto(f"{p.url}/?session=claude-run&token={token}")
                    page.wait_for_selector("#request .msg")
                    assert page.locator("#hdr-provider").inner_text() == "Anthropic"
                    assert "cache_control breakpoints" in page.locator("#hdr-cache").inner_text()
                    assert page.locator("#request .bp").count() >= 1
                    assert page.locator("#request-note").inner_text().startswith("Anthropic")
                    page.wait_for_function("document.querySelectorAll('#sessions a').length == 1")
                    assert f"token={token}" in (page.locator("#sessions a").first.get_attribute("href") or "")
                    for href in page.eval_on_selector_all("#artifacts-table a.artifact", "as => as.map(a => a.href)"):
                        assert f"token={token}" in href
                    assert httpx.get(p.url + "/api/sessions/claude-run/overview", timeout=30).status_code == 401
                    assert errors == []
                finally:
                    browser.close()
