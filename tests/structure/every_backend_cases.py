"""Cases for the backend guard, run by ``test_every_backend.py`` in a pytest of their own (the
name keeps them out of the suite's collection): one unmarked test per way a test can run a
gateway, which the guard must fail (``test_off_*``), and tests it must let pass (``test_ok_*``).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.testclient import TestClient

from app.cli.gateway import openapi_document
from app.factory import create_app
from app.gateway import Gateway
from app.server import GatewayServer
from tests.app.support.gateway_server import StartGateway, launch, make_settings, start_server
from tests.app.support.redis_support import SHARED_REDIS_URL, GatewayProcess, unique_prefix
from tests.loopback_asgi import serve_asgi
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def _uvicorn_in_this_loop() -> AsyncIterator[None]:
    config = uvicorn.Config(create_app(make_settings()), port=0, log_level="warning")
    server = GatewayServer(config, install_signal_handlers=False)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


async def _healthz(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).status_code == 200


async def test_off_launch() -> None:
    gateway = await launch(make_settings())
    await gateway.stop()


async def test_off_start_server() -> None:
    gateway = await start_server(make_settings())
    await gateway.stop()


async def test_off_uvicorn_in_the_tests_loop() -> None:
    async with _uvicorn_in_this_loop():
        pass


def test_off_uvicorn_in_a_thread() -> None:
    config = uvicorn.Config(create_app(make_settings()), port=0, log_level="warning")
    server = GatewayServer(config, install_signal_handlers=False)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    server.should_exit = True
    thread.join(30)


async def test_off_serve_asgi_without_lifespan() -> None:
    async with serve_asgi(create_app(make_settings())) as port:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await _healthz(client)


async def test_off_asgi_transport() -> None:
    transport = httpx.ASGITransport(app=create_app(make_settings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        await _healthz(client)


def test_off_test_client() -> None:
    with TestClient(create_app(make_settings())) as client:
        assert client.get("/healthz").status_code == 200


async def test_off_a_gateway_object() -> None:
    gateway = Gateway(make_settings())
    await gateway.start()
    await gateway.close()


def test_off_cli_serve_process() -> None:
    args = [sys.executable, "-m", "app.cli", "serve", "--port", str(free_port())]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.terminate()
    proc.wait(20)


async def test_off_cli_executable_process() -> None:
    exe = shutil.which("agent-gateway") or str(Path(sys.executable).with_name("agent-gateway"))
    proc = await asyncio.create_subprocess_exec(
        exe, "serve", "--port", str(free_port()), stdout=subprocess.DEVNULL
    )
    proc.terminate()
    await proc.wait()


def test_off_gateway_module_process() -> None:
    process = GatewayProcess("A", SHARED_REDIS_URL, unique_prefix())
    process.start()
    process.close()


async def test_off_another_backend_than_the_tests(backend_kind: str) -> None:
    """Parametrized over the backends, but always on memory: its [redis] run fails."""
    gateway = await launch(make_settings())
    await gateway.stop()


async def test_ok_start_gateway(start_gateway: StartGateway) -> None:
    async with (await start_gateway()).client() as client:
        await _healthz(client)


@pytest.mark.only_backend("memory", reason="the marker's exemption from the guard")
async def test_ok_marked() -> None:
    async with _uvicorn_in_this_loop():
        pass


def test_ok_an_app_built_not_started() -> None:
    assert openapi_document()["info"]["title"] == "Agent Event Gateway"


def test_ok_another_process() -> None:
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0
