"""docker-compose.yml brought up for real (podman-compose, or ``docker compose``): Redis, two
gateway replicas of the image ``make image`` builds, nginx in front (deploy/nginx.conf).

Where the compose file's ``redis`` and ``nginx`` images cannot be pulled (no registry reachable
here), stand-ins of the same names are built from Debian's ``redis-server`` and ``nginx``
packages on the local base image (tests/deploy/standins/), and a warning says so.

Then, through nginx: a rolling restart of the replicas under 20 streaming conversations (every
run completes, every client sees each event once, a POST refused by a draining replica is
retried with its Idempotency-Key and makes one run), and a ``kill -9`` of a replica mid-run
(its runs end ``gateway_instance_lost`` within the lease).
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml  # type: ignore[import-untyped]

from tests.deploy.container_support import (
    ROOT,
    ConversationClient,
    build_image,
    engine,
    script,
    wait_ready,
)
from tests.support import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.only_backend("redis", reason="the compose file: two replicas on one Redis"),
]

COMPOSE = ROOT / "docker-compose.yml"
STANDINS = ROOT / "tests" / "deploy" / "standins"
GATEWAYS = ("gateway-1", "gateway-2")
#: docker-compose.yml's lease_ttl_seconds and shutdown_grace_seconds.
LEASE_TTL = 10.0
GRACE = 10.0
#: The demo provider's pause between chunks: a "hello there" run lasts about 5 s, under the
#: grace period, so a draining replica finishes its runs (and refuses new ones meanwhile).
DELAY_MS = 450


@dataclass(frozen=True)
class Stack:
    project: str
    base: str  # nginx, on the host's loopback
    containers: dict[str, str]  # service -> container name

    def stop(self, service: str) -> int:
        """SIGTERM (the image's STOPSIGNAL) and wait for the exit; its exit code."""
        name = self.containers[service]
        engine().run("stop", "--time", str(int(GRACE) + 20), name, timeout=90)
        return int(engine().run("inspect", "--format", "{{.State.ExitCode}}", name).stdout)

    async def start(self, service: str) -> None:
        """Start the replica again, wait until it is ready, then reload nginx: it resolves the
        replicas' names when it (re)loads, and a restarted container may get a new address."""
        name = self.containers[service]
        engine().run("start", name)
        probe = (
            "import sys, urllib.request; "
            "sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status"
            " != 200)"
        )
        deadline = time.monotonic() + 60
        while engine().run("exec", name, "python", "-c", probe, check=False).returncode != 0:
            assert time.monotonic() < deadline, f"{service} not ready after its restart"
            await asyncio.sleep(0.3)
        engine().run("exec", self.containers["nginx"], "nginx", "-s", "reload")


def compose_images() -> dict[str, str]:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    return {name: services[name]["image"] for name in ("redis", "nginx")}


def ensure_service_images() -> None:
    """The compose file's redis and nginx images: present, or stand-ins built from Debian."""
    missing = {
        service: image
        for service, image in compose_images().items()
        if engine().run("image", "inspect", image, check=False).returncode != 0
    }
    if not missing:
        return
    base = script("base-image.sh")
    for service, image in missing.items():
        tag = image if "/" in image else f"docker.io/library/{image}"
        engine().run(
            "build", "--network", "host", "--format", "docker", "--tag", tag,
            "--build-arg", f"BASE={base}", "--file", str(STANDINS / f"{service}.Dockerfile"),
            str(STANDINS), timeout=900,
        )  # fmt: skip
    warnings.warn(
        f"compose test: {', '.join(missing.values())} cannot be pulled here; built stand-ins of "
        "the same names from Debian's redis-server and nginx packages (tests/deploy/standins)",
        stacklevel=1,
    )


def container_names(project: str) -> dict[str, str]:
    done = engine().run(
        "ps", "--all", "--filter", f"label=com.docker.compose.project={project}",
        "--format", '{{.Names}} {{index .Labels "com.docker.compose.service"}}',
    )  # fmt: skip
    pairs = (line.split() for line in done.stdout.splitlines() if line.strip())
    return {service: name for name, service in pairs}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    build_image()
    ensure_service_images()
    project = f"agwtest{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {**engine().env, "AGENT_GATEWAY_HTTP_PORT": str(port)}
    with tempfile.TemporaryDirectory(prefix="agw-compose-") as tmp:
        # The test's settings on top of the shipped compose file.
        override = Path(tmp) / "override.yml"
        pace = {
            "AGENT_GATEWAY_PROVIDERS__DEMO__DELAY_MS": str(DELAY_MS),
            # Every test client is one anonymous principal: lift its runs-per-minute cap.
            "AGENT_GATEWAY_LIMITS__RUNS_PER_MINUTE_PER_PRINCIPAL": "100000",
        }
        override.write_text(
            yaml.safe_dump({"services": {name: {"environment": pace} for name in GATEWAYS}})
        )
        files = ["-f", str(COMPOSE), "-f", str(override)]
        cmd = [*engine().compose(), "-p", project, *files]

        def compose(*args: str, timeout: float = 300) -> None:
            done = subprocess.run(
                [*cmd, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
            )
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

        try:
            compose("up", "--detach", "--no-build")
            containers = container_names(project)
            assert set(containers) == {"redis", *GATEWAYS, "nginx"}, containers
            base = f"http://127.0.0.1:{port}"
            asyncio.run(wait_ready(base, within=120))
            yield Stack(project, base, containers)
        finally:
            subprocess.run(
                [*cmd, "down", "--volumes"], cwd=ROOT, env=env, capture_output=True, timeout=300
            )


async def test_compose_up_serves_runs_through_nginx(stack: Stack) -> None:
    conversation = ConversationClient(stack.base, f"up-{uuid.uuid4().hex[:6]}")
    async with httpx.AsyncClient(base_url=stack.base, timeout=10.0) as client:
        run_id = await conversation.start_run(client, "hello there")
    end = await conversation.follow(run_id, within=30)
    assert end["type"] == "run.completed"
    conversation.assert_each_event_once()
    for service in GATEWAYS:  # each replica on its own: serving, as non-root
        name = stack.containers[service]
        assert engine().run("exec", name, "id", "-u").stdout.strip() == "10001"
        assert engine().run("healthcheck", "run", name, check=False).returncode == 0


async def test_rolling_restart_through_nginx_completes_every_run(stack: Stack) -> None:
    """20 conversations stream ~5 s runs through nginx while replica 1 gets SIGTERM and is
    started again, then replica 2. Every accepted run ends run.completed; every client, which
    reconnects with Last-Event-ID whenever its stream ends, sees each event exactly once; a POST
    answered 503 shutting_down is retried with its Idempotency-Key and yields one run."""
    tag = uuid.uuid4().hex[:6]
    clients = [ConversationClient(stack.base, f"roll-{tag}-{i}") for i in range(20)]
    done = asyncio.Event()

    async def converse(conversation: ConversationClient, delay: float) -> None:
        await asyncio.sleep(delay)  # the conversations out of step
        async with httpx.AsyncClient(base_url=stack.base, timeout=30.0) as client:
            while not done.is_set():
                run_id = await conversation.start_run(client, "hello there", within=90)
                await conversation.follow(run_id, within=120)
                await asyncio.sleep(random.uniform(0, 1))

    def completed() -> int:
        return sum(
            1
            for c in clients
            for v in c.runs.values()
            if v.end and v.end["type"] == "run.completed"
        )

    async def progress(runs: int, within: float) -> None:
        deadline = time.monotonic() + within
        target = completed() + runs
        while completed() < target:
            assert time.monotonic() < deadline, f"fewer than {runs} runs completed in {within} s"
            for task in tasks:
                if task.done():
                    task.result()  # a client that failed fails the test at once
            await asyncio.sleep(0.2)

    async def probe(stopping: asyncio.Task[int]) -> None:
        """New conversations, one run each, started while a replica drains: nginx sends some of
        their POSTs to it, which answers 503 shutting_down."""
        async with httpx.AsyncClient(base_url=stack.base, timeout=30.0) as client:
            while not stopping.done():
                conversation = ConversationClient(stack.base, f"probe-{tag}-{len(clients)}")
                clients.append(conversation)
                followers.append(asyncio.create_task(
                    conversation.follow(await conversation.start_run(client, "hi"), within=120)
                ))  # fmt: skip
                await asyncio.sleep(0.1)

    followers: list[asyncio.Task[dict[str, Any]]] = []
    tasks = [asyncio.create_task(converse(c, i * 0.25)) for i, c in enumerate(clients)]
    try:
        await progress(20, within=60)
        for service in GATEWAYS:
            stopping = asyncio.create_task(asyncio.to_thread(stack.stop, service))
            await probe(stopping)
            assert await stopping == 0, f"{service} did not exit 0 after SIGTERM"
            await progress(10, within=60)  # the other replica carries on alone
            await stack.start(service)
            await progress(20, within=60)
    finally:
        done.set()
        results = await asyncio.wait_for(
            asyncio.gather(*tasks, *followers, return_exceptions=True), 180
        )
    for result in results:
        if isinstance(result, BaseException):
            raise result
    ends: dict[str, int] = {}
    for conversation in clients:
        for view in conversation.runs.values():
            assert view.end is not None, f"{conversation.key} {view.run_id} has no end"
            ends[view.end["type"]] = ends.get(view.end["type"], 0) + 1
            assert view.end["type"] == "run.completed", (view.end, view.end.get("payload"))
        conversation.assert_each_event_once()
        # Every run in the conversation's log is one the client started: a retried POST
        # made no second run.
        assert set(conversation.runs) == set(conversation.accepted.values())
    assert ends == {"run.completed": completed()}
    # The draining replicas did refuse runs (503 shutting_down), and streams were cut: both
    # paths were taken, not just the easy one.
    assert sum(sum(c.post_retries.values()) for c in clients) >= 1
    assert sum(c.reconnects for c in clients) >= 1


async def test_kill_9_of_a_replica_ends_its_runs_gateway_instance_lost(stack: Stack) -> None:
    """Long runs on both replicas; replica 1 is killed (SIGKILL): the runs it owned end
    run.failed gateway_instance_lost within the lease (plus the reaper's tick); the others go
    on and are aborted afterwards."""
    tag = uuid.uuid4().hex[:6]
    clients = [ConversationClient(stack.base, f"kill-{tag}-{i}") for i in range(8)]
    async with httpx.AsyncClient(base_url=stack.base, timeout=10.0) as client:
        runs = [await c.start_run(client, "tell me a slow story") for c in clients]
        for conversation in clients:  # every run is running before the kill
            deadline = time.monotonic() + 30
            while not (await client.get(f"/v1/conversations/{conversation.key}/state")).json()[
                "isRequesting"
            ]:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
    follows = [
        asyncio.create_task(c.follow(run_id, within=300))
        for c, run_id in zip(clients, runs, strict=True)
    ]
    killed_at = time.monotonic()
    engine().run("kill", "--signal", "KILL", stack.containers["gateway-1"])
    # The bound: the lease, plus the sweep interval for a conversation (TTL/2), plus slack.
    _, pending = await asyncio.wait(follows, timeout=LEASE_TTL * 1.5 + 15)
    lost = [task.result() for task in follows if task.done()]
    elapsed = time.monotonic() - killed_at
    assert lost, f"no run of the killed replica ended within {elapsed:.0f} s"
    for end in lost:
        assert end["type"] == "run.failed", end
        assert end["payload"]["error"]["code"] == "gateway_instance_lost", end
    assert pending, "every run was on the killed replica: nothing checks the survivor"
    async with httpx.AsyncClient(base_url=stack.base, timeout=10.0) as client:
        for conversation, task in zip(clients, follows, strict=True):
            if task in pending:  # still running on replica 2: it was not lost
                res = await client.post(f"/v1/conversations/{conversation.key}/abort")
                assert res.status_code == 202, res.text
    for task in pending:
        cancelled: dict[str, Any] = await asyncio.wait_for(task, 30)
        assert cancelled["type"] == "run.cancelled"
    for conversation in clients:
        conversation.assert_each_event_once()
    await stack.start("gateway-1")
