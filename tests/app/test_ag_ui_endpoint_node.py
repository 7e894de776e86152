"""The real AG-UI client: ``@ag-ui/client``'s ``HttpAgent`` (pinned by
``tests/node/ag-ui-client/package-lock.json``) runs ``agui.test.mjs`` with Node's own test
runner against a gateway on loopback in front of the scripted AG-UI agent: a text answer, a
frontend tool round trip in two requests (one gateway run), an interrupt and its resume, and
``abortRun()`` mid-stream (``run.cancelled``, the upstream connection closed).

``npm ci`` installs the package on first use (the npm registry is the only network needed).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from tests.app.agui_upstream import agui_settings, serve_agui_agent
from tests.app.conftest import StartGateway

NODE_DIR = Path(__file__).resolve().parents[1] / "node" / "ag-ui-client"
TEST_FILE = "agui.test.mjs"


async def _run(*command: str, env: dict[str, str] | None = None, within: float) -> str:
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=NODE_DIR,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), within)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    text = output.decode(errors="replace")
    assert process.returncode == 0, f"{' '.join(command)} failed:\n{text}"
    return text


async def _installed() -> None:
    if (NODE_DIR / "node_modules" / "@ag-ui" / "client" / "package.json").is_file():
        return
    npm = shutil.which("npm")
    assert npm is not None, "npm is required for the AG-UI client test (Node >= 20)"
    env = {"DO_NOT_TRACK": "1", "SCARF_ANALYTICS": "false"}
    await _run(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", env=env, within=300)


async def test_http_agent_against_the_gateway(start_gateway: StartGateway) -> None:
    node = shutil.which("node")
    assert node is not None, "node is required for the AG-UI client test (Node >= 20)"
    await _installed()
    async with serve_agui_agent() as agent:
        gateway = await start_gateway(agui_settings(agent))
        env = {
            "GATEWAY_URL": gateway.url,
            "AGENT_STATS_URL": agent.url.removesuffix("/agent") + "/stats",
        }
        output = await _run(node, "--test", TEST_FILE, env=env, within=120)
        await gateway.stop()  # before the agent it calls goes away
    assert "# fail 0" in output and "# pass 4" in output, output
