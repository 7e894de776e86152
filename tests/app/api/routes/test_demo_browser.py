"""The demo page and the browser client (clients/js) in a real browser (Debian's Chromium).

Playwright drives the system Chromium (``executable_path``); Playwright's own browser download
is not used. Skipped nowhere: ``.ci/run`` installs ``chromium`` when it is missing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Locator, Page, async_playwright, expect

from tests.app.support.gateway_server import StartGateway, make_settings

CLIENT_SRC = Path(__file__).resolve().parents[4] / "clients" / "js" / "src"
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


# -- the demo page against a real gateway -------------------------------------------------------

ARTIFACT = Path(__file__).resolve().parents[4] / "artifacts" / "demo.png"
KEY = "browser-e2e"
STREAMING_VISIBLE = """() => {
    const el = document.querySelector(
        '.message.role-assistant[data-status=streaming] [data-testid=message-content]');
    return !!el && el.textContent.length > 0
        && document.getElementById('run-status').textContent === 'running';
}"""


async def _send(page: Page, prompt: str) -> None:
    await page.get_by_test_id("prompt").fill(prompt)
    await page.get_by_test_id("send").click()


def _last(page: Page, selector: str) -> Locator:
    return page.locator(selector).last


@pytest.mark.slow
async def test_demo_page_end_to_end(browser: Browser, start_gateway: StartGateway) -> None:
    settings = make_settings(
        gateway={"default_provider": "demo"},
        providers={
            "demo": {"kind": "local-demo", "delay_ms": 50},
            "second": {"kind": "local-demo", "delay_ms": 10},
        },
    )
    gw = await start_gateway(settings)
    page = await browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    await page.goto(f"{gw.url}/?c={KEY}")
    run_status = page.get_by_test_id("run-status")
    await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "open")
    await expect(page.get_by_test_id("provider-select")).to_have_value("demo")

    # 1. streaming text is visible while the run is still running; reasoning, task, artifact
    await _send(page, "think about a task and an artifact")
    await page.wait_for_function(STREAMING_VISIBLE, timeout=15_000)
    await expect(run_status).to_have_text("completed", timeout=20_000)
    reasoning = _last(page, "[data-testid=reasoning]")
    await expect(reasoning).to_have_attribute("data-status", "completed")
    assert await reasoning.evaluate("el => el.open") is False  # collapsed until clicked
    await reasoning.locator("summary").click()
    await expect(reasoning.locator("pre")).to_contain_text("Let me work out")
    await expect(_last(page, "[data-testid=task-progress]")).to_have_attribute("value", "100")
    await expect(_last(page, "[data-testid=artifact-content]")).to_have_text("# Report v3")

    # 2. approve an approval: the run continues and completes
    await _send(page, "please approve the deploy")
    approve = _last(page, "[data-testid=approval]").get_by_test_id("approve")
    await expect(approve).to_be_visible(timeout=15_000)
    await expect(run_status).to_have_text("running")
    await approve.click()
    await expect(_last(page, "[data-testid=approval-decision]")).to_have_text(
        "decision: approved", timeout=10_000
    )
    await expect(run_status).to_have_text("completed", timeout=15_000)
    await expect(_last(page, ".message.role-assistant")).to_contain_text("Deployed as approved.")

    # 3. submit the result of a tool the app executes
    await _send(page, "what is the weather")
    form = _last(page, "[data-testid=tool-result-form]")
    await expect(form).to_be_visible(timeout=15_000)
    await form.get_by_test_id("tool-result-input").fill('{"tempC": 21, "sky": "clear"}')
    await form.get_by_test_id("tool-result-submit").click()
    tool = _last(page, ".entity.tool")
    await expect(tool).to_have_attribute("data-status", "completed", timeout=10_000)
    await expect(tool.get_by_test_id("tool-result")).to_contain_text('"tempC": 21')
    await expect(form).to_be_hidden()
    await expect(run_status).to_have_text("completed", timeout=15_000)
    await expect(_last(page, ".message.role-assistant")).to_contain_text("weather tool answered")

    # 4. a slow run: kill the SSE connection, resume without duplicates, then stop it
    await _send(page, "slow please")
    await page.wait_for_function(STREAMING_VISIBLE, timeout=15_000)
    last_text = _last(page, ".message.role-assistant [data-testid=message-content]")
    before = len(await last_text.text_content() or "")
    await page.get_by_test_id("kill-connection").click()
    await expect(page.get_by_test_id("connection")).to_have_attribute(
        "data-state", "resumed", timeout=10_000
    )
    await expect(page.get_by_test_id("connection")).to_contain_text("resumed")
    await page.wait_for_function(
        """(n) => {
            const all = document.querySelectorAll(
                '.message.role-assistant [data-testid=message-content]');
            return all[all.length - 1].textContent.length > n + 40;
        }""",
        arg=before,
        timeout=15_000,
    )
    await page.get_by_test_id("stop").click()
    await expect(run_status).to_have_text("cancelled", timeout=10_000)
    await expect(_last(page, ".message.role-assistant")).to_have_attribute(
        "data-status", "cancelled"
    )
    page_text = await last_text.text_content()
    async with gw.client() as client:
        state = (await client.get(f"/v1/conversations/{KEY}/state")).json()
    server_text = state["messages"][-1]["message"]["content"]
    assert page_text == server_text  # every delta exactly once across the reconnect
    assert server_text.startswith("Streaming slowly, word by word. Streaming slowly")
    counters = await page.evaluate("window.gatewayDebug.client.counters")
    assert counters["duplicates"] == 0  # the server resumed after the cursor, no replays
    assert counters["snapshots"] == 1  # resumed from the log, not from a fresh snapshot
    assert counters["reconnects"] >= 1

    # 5. switch provider: only the next request changes
    await page.get_by_test_id("provider-select").select_option("second")
    async with page.expect_request(lambda r: r.method == "POST" and "/runs" in r.url) as req:
        await _send(page, "hello from the second provider")
    assert json.loads((await req.value).post_data or "{}")["provider"] == "second"
    await expect(run_status).to_have_text("completed", timeout=15_000)
    await expect(_last(page, ".message.role-assistant")).to_contain_text(
        "You said: hello from the second provider."
    )
    await expect(page.get_by_test_id("conversation-key")).to_have_value(KEY)
    await expect(page.locator("section.run")).to_have_count(5)

    # 6. the same page over WebSocket
    await page.get_by_test_id("transport-select").select_option("ws")
    await expect(page.get_by_test_id("connection")).to_contain_text("WS")
    await _send(page, "think over the websocket")
    await expect(page.locator("section.run")).to_have_count(6, timeout=10_000)
    await expect(run_status).to_have_text("completed", timeout=20_000)
    await expect(_last(page, ".message.role-assistant")).to_contain_text(
        "You said: think over the websocket."
    )
    await expect(page.get_by_test_id("issue-count")).to_have_text("0")
    # useXChat-shaped surface, stable snapshots for useSyncExternalStore
    shape = await page.evaluate(
        """() => { const c = window.gatewayDebug.client; const a = c.getSnapshot();
                   return { same: a === c.getSnapshot(), n: a.messages.length,
                            statuses: a.messages.map((m) => m.status),
                            requesting: a.isRequesting,
                            fns: ['onRequest', 'abort', 'onReload'].every(
                                (k) => typeof c[k] === 'function') }; }"""
    )
    assert shape["same"] and shape["fns"] and shape["requesting"] is False
    assert shape["n"] == 14  # 6 user messages + 8 assistant messages
    assert "abort" in shape["statuses"] and "local" in shape["statuses"]

    # The timeline scrolls inside the page: grow the viewport so the screenshot shows it all.
    height = await page.evaluate(
        """() => { const t = document.getElementById('timeline');
                   return document.body.clientHeight - t.clientHeight + t.scrollHeight; }"""
    )
    await page.set_viewport_size({"width": 1100, "height": min(int(height) + 8, 8000)})
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACT))
    assert errors == []
    # nothing fetched from anywhere but the gateway (no CDN, no fonts, no analytics)
    assert requested and all(url.startswith(gw.url + "/") for url in requested), requested
    assert sockets and all(url.startswith(gw.ws_url + "/v1/conversations/") for url in sockets)
    assert {url.split("?")[0].removeprefix(gw.url) for url in requested} >= {
        "/",
        "/static/demo.js",
        "/static/client/gateway-client.js",
        "/static/client/agent-reducer.js",
        "/static/demo.css",
        "/v1/providers",
    }


async def test_demo_page_can_be_turned_off(start_gateway: StartGateway) -> None:
    on = await start_gateway(make_settings())
    off = await start_gateway(make_settings(gateway={"demo_page": False}))
    async with on.client() as client:
        page = await client.get("/")
        module = await client.get("/static/client/gateway-client.js")
        reducer = await client.get("/static/client/agent-reducer.js")
    assert page.status_code == 200 and 'id="timeline"' in page.text
    assert module.status_code == 200
    for served, name in ((module, "gateway-client.js"), (reducer, "agent-reducer.js")):
        assert "javascript" in served.headers["content-type"]  # servable as an ES module
        assert served.content == (CLIENT_SRC / name).read_bytes()  # the package's own file
    async with off.client() as client:
        assert (await client.get("/")).status_code == 404
        assert (await client.get("/static/client/gateway-client.js")).status_code == 404
