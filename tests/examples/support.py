"""Building examples/antd-x-chat once per test session (skipped when its build is current)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.clients.js.support import CLIENT, ensure_node_modules, npm

ROOT = Path(__file__).resolve().parents[2]
#: The browser end-to-end tests run on the memory backend only.
BROWSER_E2E_ON_MEMORY = pytest.mark.only_backend(
    "memory",
    reason=(
        "a browser end-to-end test of the page itself; the routes it calls run on both"
        " backends in tests/app and tests/clients/js, and Redis would double its minutes"
        " of browser time"
    ),
)
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
EXAMPLE = ROOT / "examples" / "antd-x-chat"
DIST = EXAMPLE / "dist"
#: What the build reads: the example's sources and config, and the client package it links.
SOURCES = [
    EXAMPLE / "index.html",
    EXAMPLE / "vite.config.js",
    EXAMPLE / "package.json",
    EXAMPLE / "package-lock.json",
    *sorted((EXAMPLE / "src").rglob("*")),
    *sorted((CLIENT / "src").rglob("*.js")),
    CLIENT / "package.json",
]


def build_is_current() -> bool:
    built = DIST / "index.html"
    if not built.is_file():
        return False
    newest = max(path.stat().st_mtime for path in SOURCES if path.is_file())
    return built.stat().st_mtime > newest


def build_example() -> None:
    """``npm ci`` (when node_modules is missing or older than the lock) and ``vite build``."""
    if build_is_current():
        return
    ensure_node_modules(EXAMPLE)
    proc = subprocess.run(
        [npm(), "run", "build", "--silent"],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"vite build failed:\n{proc.stdout}{proc.stderr}"
    assert build_is_current()
