"""The container engine the deploy tests drive (Podman here, Docker where its daemon answers).

``engine()`` reads what ``scripts/container-engine.sh`` picks (and, for Podman, its
containers.conf: runc, the host's hard limits); ``build_image()`` runs ``make image``'s script;
``Container`` runs one container on a loopback port; ``ConversationClient`` follows a
conversation through reconnects and checks it sees every event once.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from httpx_sse import aconnect_sse

from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
IMAGE = "agent-gateway:latest"
TERMINALS = {"run.completed", "run.failed", "run.cancelled"}


@dataclass(frozen=True)
class Engine:
    name: str  # "podman" or "docker"
    env: dict[str, str]

    def run(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.name, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check:
            assert done.returncode == 0, f"{self.name} {' '.join(args)}: {done.stderr}"
        return done

    def compose(self) -> list[str]:
        return ["podman-compose"] if self.name == "podman" else ["docker", "compose"]


@functools.cache
def dockerfile_instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined: (WORD, the rest)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def engine() -> Engine:
    script = "source scripts/container-engine.sh && container_engine && env -0"
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    env = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    return Engine(env["ENGINE"], {**os.environ, **env})


def script(path: str, env: dict[str, str] | None = None, timeout: float = 1200) -> str:
    """Run one of ``scripts/`` (e.g. ``image.sh``); its last stdout line (an image name)."""
    done = subprocess.run(
        [str(ROOT / "scripts" / path)],
        cwd=ROOT,
        env={**engine().env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1]


def rebuild_image() -> str:
    """``make image`` (scripts/image.sh): the engine's layer cache makes it quick when nothing
    changed. One build at a time across test processes (a lock file): two builds of one tag at
    once would each make layers of their own and leave the tag on whichever ended last."""
    with (Path(tempfile.gettempdir()) / "agent-gateway-image-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return script("image.sh", {"IMAGE": IMAGE})


@functools.cache
def build_image() -> str:
    """The image, built once per test process (the image and compose tests share it)."""
    return rebuild_image()


def image_id(name: str) -> str:
    return engine().run("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()


@dataclass
class Container:
    """``podman run -d`` of the image, its port 8000 on a free loopback port."""

    image: str
    options: Sequence[str] = ()
    name: str = field(default_factory=lambda: f"agw-test-{uuid.uuid4().hex[:8]}")
    port: int = field(default_factory=free_port)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        publish = f"127.0.0.1:{self.port}:8000"
        engine().run("run", "-d", "--name", self.name, "-p", publish, *self.options, self.image)

    def remove(self) -> None:
        engine().run("rm", "-f", "-t", "0", self.name, check=False)

    def state(self, fmt: str) -> str:
        return engine().run("inspect", "--format", fmt, self.name).stdout.strip()

    def logs(self) -> tuple[str, str]:
        done = engine().run("logs", self.name, check=False)
        return done.stdout, done.stderr


@contextmanager
def running(image: str, *options: str) -> Iterator[Container]:
    container = Container(image, options)
    container.start()
    try:
        yield container
    finally:
        container.remove()


async def wait_ready(base: str, within: float = 60.0, container: Container | None = None) -> float:
    """Poll ``/readyz`` until 200; the seconds it took."""
    start = time.monotonic()
    async with httpx.AsyncClient(base_url=base, timeout=2.0) as client:
        while True:
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return time.monotonic() - start
            except httpx.HTTPError:
                pass
            if container is not None:
                running = container.state("{{.State.Running}}")
                assert running == "true", container.logs()
            assert time.monotonic() - start < within, f"{base}/readyz not ready in {within} s"
            await asyncio.sleep(0.1)


@dataclass
class RunView:
    run_id: str
    sequences: list[int] = field(default_factory=list)
    end: dict[str, Any] | None = None


class ConversationClient:
    """Runs started with an ``Idempotency-Key`` (retried on 503 / connection errors) and
    followed over SSE, reconnecting with ``Last-Event-ID`` whenever a stream ends early."""

    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key
        self.last_id: str | None = None
        self.runs: dict[str, RunView] = {}
        self.reconnects = 0
        self.post_retries: dict[str, int] = {}  # Idempotency-Key -> retries after a 503
        self.accepted: dict[str, str] = {}  # Idempotency-Key -> runId
        self.refusals: dict[str, int] = {}  # what a POST got instead: status or exception

    async def start_run(self, client: httpx.AsyncClient, prompt: str, within: float = 60) -> str:
        idem = f"{self.key}-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + within
        run_ids: set[str] = set()
        while True:
            try:
                res = await client.post(
                    f"/v1/conversations/{self.key}/runs",
                    json={"input": {"prompt": prompt}},
                    headers={"Idempotency-Key": idem},
                )
            except httpx.TransportError as exc:
                self.refusals[type(exc).__name__] = self.refusals.get(type(exc).__name__, 0) + 1
                res = None
            if res is not None and res.status_code in (200, 202):
                run_ids.add(res.json()["runId"])
                if self.last_id is None:  # the first run: follow from where it was accepted
                    self.last_id = res.json()["cursor"]
                break
            if res is not None:
                self.refusals[str(res.status_code)] = self.refusals.get(str(res.status_code), 0) + 1
                assert res.status_code in (502, 503), res.text
                if res.status_code == 503:
                    assert res.json()["error"]["code"] == "shutting_down", res.text
                    self.post_retries[idem] = self.post_retries.get(idem, 0) + 1
            assert time.monotonic() < deadline, f"no run accepted for {self.key}"
            await asyncio.sleep(0.2)
        (run_id,) = run_ids
        self.accepted[idem] = run_id
        self.runs.setdefault(run_id, RunView(run_id))
        return run_id

    async def follow(self, run_id: str, within: float) -> dict[str, Any]:
        """The run's terminal event, reconnecting (``Last-Event-ID``) as often as needed."""
        deadline = time.monotonic() + within
        view = self.runs[run_id]
        while view.end is None:
            assert time.monotonic() < deadline, f"{self.key}: {run_id} did not end"
            headers = {"Last-Event-ID": self.last_id} if self.last_id else {}
            try:
                async with (
                    httpx.AsyncClient(base_url=self.base, timeout=httpx.Timeout(30.0)) as client,
                    aconnect_sse(
                        client, "GET", f"/v1/conversations/{self.key}/events", headers=headers
                    ) as source,
                ):
                    async for sse in source.aiter_sse():
                        if sse.event != "message" or not sse.data:
                            continue  # snapshot (first connection), heartbeats, hints
                        event: dict[str, Any] = orjson.loads(sse.data)
                        self.last_id = sse.id
                        seen = self.runs.setdefault(event["runId"], RunView(event["runId"]))
                        seen.sequences.append(event["sequence"])
                        if event["type"] in TERMINALS:
                            seen.end = event
                            if seen is view:
                                return event
            except httpx.HTTPError:
                pass
            self.reconnects += 1
            await asyncio.sleep(0.1)
        return view.end

    def assert_each_event_once(self) -> None:
        for view in self.runs.values():
            assert view.sequences == list(range(len(view.sequences))), (
                f"{self.key} {view.run_id}: sequences {view.sequences}"
            )
