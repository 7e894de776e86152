"""CopilotKit's runtime uses the gateway's AG-UI endpoint as its agent: ``bench/peer`` (the
pinned ``@copilotkit/runtime`` and its ``@ag-ui/client``) relays an ``HttpAgent`` pointed at
``/v1/ag-ui/agent``, and a text answer of the scripted AG-UI agent arrives through it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path

import httpx
import pytest
from ag_ui.core import RunFinishedEvent, TextMessageContentEvent

from tests.app.agui.node_support import ensure_installed
from tests.app.support.agui_client import run_input, stream_agui, user
from tests.app.support.agui_upstream import agui_settings, serve_agui_agent
from tests.app.support.gateway_server import StartGateway
from tests.support import free_port

PEER_DIR = Path(__file__).resolve().parents[3] / "bench" / "peer"


async def _ready(client: httpx.AsyncClient, process: asyncio.subprocess.Process) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        assert process.returncode is None, "the CopilotKit runtime exited"
        with contextlib.suppress(httpx.HTTPError):
            if (await client.get("/api/copilotkit/info")).status_code == 200:
                return
        assert asyncio.get_running_loop().time() < deadline, "CopilotKit runtime never ready"
        await asyncio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.only_backend(
    "memory", reason="CopilotKit side; the endpoint runs on both backends in test_ag_ui_endpoint"
)
async def test_copilotkit_runtime_relays_a_text_answer_from_the_gateway(
    start_gateway: StartGateway,
) -> None:
    node = shutil.which("node")
    assert node is not None, "node is required for the CopilotKit test (Node >= 20)"
    await ensure_installed(PEER_DIR, "@copilotkit/runtime/package.json")
    async with serve_agui_agent() as agent:
        gateway = await start_gateway(agui_settings(agent))
        port = free_port()
        env = {
            **os.environ,
            "PORT": str(port),
            "BENCH_AGUI_URL": f"{gateway.url}/v1/ag-ui/agent",
            "COPILOTKIT_TELEMETRY_DISABLED": "true",
            "DO_NOT_TRACK": "1",
        }
        process = await asyncio.create_subprocess_exec(
            node, "copilotkit_peer.mjs", cwd=PEER_DIR, env=env, stdout=asyncio.subprocess.DEVNULL
        )
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
                await _ready(client, process)
                body = run_input("ck-thread", "ck-run-1", [user("hello")])
                body.update(tools=[], context=[], state={}, forwardedProps={})
                events = await stream_agui(client, body, path="/api/copilotkit/agent/bench/run")
        finally:
            process.terminate()
            await process.wait()
        async with gateway.client() as client:
            state = (await client.get("/v1/conversations/ck-thread/state")).json()
        await gateway.stop()
    text = "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent))
    assert text == "Hello from the gateway!"
    assert isinstance(events[-1], RunFinishedEvent)
    assert [run["status"] for run in state["agentState"]["runs"].values()] == ["completed"]
    assert agent.requests and agent.requests[0]["messages"][-1]["content"] == "hello"
