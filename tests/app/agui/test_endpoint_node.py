"""The real AG-UI client: ``@ag-ui/client``'s ``HttpAgent`` (pinned by
``tests/node/ag-ui-client/package-lock.json``) runs ``agui.test.mjs`` with Node's own test
runner against a gateway on loopback in front of the scripted AG-UI agent: a text answer, a
frontend tool round trip in two requests (one gateway run), an interrupt and its resume,
``abortRun()`` mid-stream (``run.cancelled``, the upstream connection closed), and a failed
run and a run cancelled elsewhere (``RUN_ERROR`` with the code) through the client's verifier.

``npm ci`` installs the package on first use (the npm registry is the only network needed).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.app.agui.node_support import ensure_installed, run_node
from tests.app.support.agui_upstream import agui_settings, serve_agui_agent
from tests.app.support.gateway_server import StartGateway

NODE_DIR = Path(__file__).resolve().parents[2] / "node" / "ag-ui-client"


@pytest.mark.only_backend(
    "memory", reason="AG-UI client; the endpoint runs on both backends in test_ag_ui_endpoint"
)
async def test_http_agent_against_the_gateway(start_gateway: StartGateway) -> None:
    node = shutil.which("node")
    assert node is not None, "node is required for the AG-UI client test (Node >= 20)"
    await ensure_installed(NODE_DIR, "@ag-ui/client/package.json")
    async with serve_agui_agent() as agent:
        gateway = await start_gateway(agui_settings(agent))
        env = {
            "GATEWAY_URL": gateway.url,
            "AGENT_STATS_URL": agent.url.removesuffix("/agent") + "/stats",
        }
        output = await run_node(NODE_DIR, node, "--test", "agui.test.mjs", env=env, within=120)
        await gateway.stop()  # before the agent it calls goes away
    assert "# fail 0" in output and "# pass 6" in output, output
