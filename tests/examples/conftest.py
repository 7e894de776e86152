from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from tests.examples.support import CHROMIUM, DIST, LAUNCH_ARGS, build_example


@pytest.fixture(scope="session")
def example_build() -> Path:
    """examples/antd-x-chat/dist, built at most once per session."""
    build_example()
    return DIST


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Debian's Chromium, headless, driven by Playwright (no browser download)."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield browser
        finally:
            await browser.close()
