"""``agent-gateway check-config FILE --probe-tools`` against the test MCP server run as the
README runs it (``python -m tests.mcp_server --port N``): the tools, which are exposed, and
exit 1 naming an unreachable server."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.cli.main import main
from tests.mcp_server import DEFAULT_TOKEN
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp_server", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "the test MCP server exited"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/stats", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)  # polling a starting process: no event to wait on
        yield f"http://127.0.0.1:{port}/mcp/"
    finally:
        proc.terminate()
        proc.wait(10)


def test_probe_lists_tools_and_exposure(
    tmp_path: Path, mcp_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(
        f'[mcp.servers.tools]\nurl = "{mcp_url}"\n'
        f'headers = {{ Authorization = "Bearer {DEFAULT_TOKEN}" }}\n'
        'deny = ["grow"]\napproval = { echo = "never" }\n'
        '[providers.chat]\nkind = "openai-chat"\nurl = "http://x/"\nmcp_servers = ["tools"]\n'
    )
    assert main(["check-config", str(config), "--probe-tools"]) == 0
    out = capsys.readouterr().out
    assert f"server tools ({mcp_url}): 5 tools (used by chat)" in out
    assert "echo: exposed as tools__echo (no approval)" in out
    assert "slow: exposed as tools__slow (approval)" in out
    assert "grow: hidden (allow/deny)" in out
    assert DEFAULT_TOKEN not in out


def test_probe_names_unreachable_servers(
    tmp_path: Path, mcp_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gw.toml"
    down = f"http://127.0.0.1:{free_port()}/mcp/"
    config.write_text(
        f'[mcp.servers.up]\nurl = "{mcp_url}"\n[mcp.servers.down]\nurl = "{down}"\n'
        "timeout_seconds = 5\n"
    )
    assert main(["check-config", str(config), "--probe-tools"]) == 1
    captured = capsys.readouterr()
    assert "server down" in captured.out and "UNREACHABLE" in captured.out
    assert "unreachable MCP servers: down" in captured.err
    assert "server up" in captured.out and "5 tools" in captured.out
