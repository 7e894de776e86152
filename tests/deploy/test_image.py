"""The image ``make image`` builds from the Dockerfile, run as ops run it: read-only root
filesystem, non-root, no capabilities; the README tour's first steps against it; SIGTERM drains.

The build is cached: a second ``scripts/image.sh`` with unchanged inputs gives the same image.
Where no registry can be reached the base is the local Debian one (scripts/base-image.sh).
"""

from __future__ import annotations

import asyncio
import re
import time
import tomllib
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse
from packaging.requirements import Requirement

from tests.deploy.container_support import (
    ROOT,
    ConversationClient,
    build_image,
    engine,
    image_id,
    rebuild_image,
    running,
    wait_ready,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.only_backend("memory", reason="the image's default config: the memory backend"),
]

CONSTRAINTS = ROOT / "deploy" / "constraints.txt"
# How ops run it: nothing writable but a small /tmp, no capabilities, no privilege gain.
HARDENED = (
    "--read-only",
    "--tmpfs", "/tmp:rw,size=16m,mode=1777",
    "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges",
)  # fmt: skip
MEMORY = ("-e", "AGENT_GATEWAY_GATEWAY__BACKEND=memory")


def read_only_options() -> tuple[str, ...]:
    # Podman adds tmpfs mounts of its own to a read-only container; without them the test
    # proves the image needs nothing writable but /tmp (as under Docker).
    extra = ("--read-only-tmpfs=false",) if engine().name == "podman" else ()
    return (*HARDENED, *extra)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    yield build_image()


def pins() -> dict[str, str]:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[name] = version
    return out


def test_constraints_pin_every_runtime_dependency_of_pyproject() -> None:
    """deploy/constraints.txt (scripts/constraints.sh) pins, exactly, a version of every runtime
    dependency that satisfies pyproject.toml's range."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = pins()
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", v) for v in pinned.values()), pinned
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pinned, f"{name} is not pinned in {CONSTRAINTS.name}"
        assert req.specifier.contains(pinned[name], prereleases=True), (name, pinned[name])
    dockerfile = (ROOT / "Dockerfile").read_text()
    # The pinned set is installed before the code is copied (a code change does not reinstall
    # it), and the project adds nothing to it.
    deps = dockerfile.index("pip install --no-cache-dir -r deploy/constraints.txt")
    assert (
        deps
        < dockerfile.index("COPY app ")
        < dockerfile.index("pip install --no-cache-dir --no-deps .")
    )


def test_a_rebuild_with_unchanged_inputs_is_cached(image: str) -> None:
    before = image_id(image)
    start = time.monotonic()
    assert rebuild_image() == image
    assert image_id(image) == before
    assert time.monotonic() - start < 120, "an unchanged rebuild should reuse every layer"


def test_runtime_has_the_pinned_set_and_no_build_tools(image: str) -> None:
    probe = (
        "import importlib.metadata as m, json, shutil;"
        "print(json.dumps({'dists': {d.metadata['Name']: d.version for d in m.distributions()},"
        "'tools': [t for t in ('gcc', 'cc', 'c++', 'make', 'ld', 'as', 'pip', 'pip3')"
        " if shutil.which(t)]}))"
    )
    done = engine().run("run", "--rm", *read_only_options(), "--entrypoint", "python", image,
                        "-c", probe)  # fmt: skip
    found = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert found["tools"] == []
    dists = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in found["dists"].items()}
    assert "pip" not in dists and "setuptools" not in dists
    dists.pop("agent-event-gateway")
    # Every installed package at its pinned version (a pin whose environment marker does not
    # hold for the base's Python may stay unused).
    assert {name: v for name, v in dists.items() if pins().get(name) != v} == {}
    inspected = orjson.loads(engine().run("image", "inspect", image).stdout)[0]
    config = inspected["Config"]
    assert config["User"] == "10001:10001"
    health = inspected.get("Healthcheck") or config["Healthcheck"]  # Podman's place, Docker's
    assert "/healthz" in " ".join(health["Test"])
    assert "AGENT_GATEWAY_GATEWAY__LOG_STREAM=stdout" in config["Env"]


async def test_read_only_non_root_container_walks_the_tour(image: str) -> None:
    """README's tour, steps 2 to 5, against the image run read-only as uid 10001: start a slow
    run, watch it, resume with Last-Event-ID (the very next event), abort (twice)."""
    with running(image, *read_only_options(), *MEMORY) as container:
        await wait_ready(container.base, container=container)
        assert engine().run("exec", container.name, "id", "-u").stdout.strip() == "10001"
        done = engine().run("exec", container.name, "sh", "-c", "touch /opt/x", check=False)
        assert done.returncode != 0 and "Read-only file system" in done.stderr
        if engine().name == "podman":  # the image's HEALTHCHECK, run once by hand
            assert engine().run("healthcheck", "run", container.name).returncode == 0
        async with httpx.AsyncClient(base_url=container.base, timeout=10.0) as client:
            res = await client.post(
                "/v1/conversations/tour/runs", json={"input": {"prompt": "tell me a slow story"}}
            )
            assert res.status_code == 202, res.text
            assert res.json()["status"] == "started"
            frames: list[tuple[str, dict[str, Any]]] = []
            async with aconnect_sse(client, "GET", "/v1/conversations/tour/events") as source:
                async for sse in source.aiter_sse():
                    if sse.event == "snapshot" or (sse.event == "message" and sse.data):
                        frames.append((sse.id, orjson.loads(sse.data)))
                    if len(frames) == 4:
                        break
            assert frames[0][1]["conversationKey"] == "tour"  # the snapshot frame
            last_id, last = frames[-1]
            resumed = []
            headers = {"Last-Event-ID": last_id}
            async with aconnect_sse(
                client, "GET", "/v1/conversations/tour/events", headers=headers
            ) as source:
                async for sse in source.aiter_sse():
                    assert sse.event != "snapshot"
                    if sse.event == "message" and sse.data:
                        resumed.append(orjson.loads(sse.data))
                        break
            assert resumed[0]["runId"] == last["runId"]
            assert resumed[0]["sequence"] == last["sequence"] + 1  # no gap, no duplicate
            first = await client.post("/v1/conversations/tour/abort")
            assert first.status_code == 202 and first.json()["aborted"] is True
            again = await client.post("/v1/conversations/tour/abort")
            assert again.status_code == 200 and again.json() == {"aborted": False}
            tail = []
            async with aconnect_sse(
                client, "GET", f"/v1/conversations/tour/events?since={last_id}&untilIdle=true"
            ) as source:
                async for sse in source.aiter_sse():
                    if sse.event == "message" and sse.data:
                        tail.append(orjson.loads(sse.data))
            assert tail[-1]["type"] == "run.cancelled"
            assert tail[-1]["payload"]["reason"] == "aborted"
        stdout, _ = container.logs()
        records = [orjson.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        assert records and all({"ts", "level", "msg"} <= set(r) for r in records)


async def test_sigterm_drains_runs_then_the_container_exits_0(image: str) -> None:
    """SIGTERM: new runs get 503 shutting_down at once, the run in flight still completes
    (shorter than shutdown_grace_seconds), then the process exits 0."""
    pace = ("-e", "AGENT_GATEWAY_PROVIDERS__DEMO__DELAY_MS=200")  # a run of a few seconds
    with running(image, *read_only_options(), *MEMORY, *pace) as container:
        await wait_ready(container.base, container=container)
        conversation = ConversationClient(container.base, "drain")
        async with httpx.AsyncClient(base_url=container.base, timeout=10.0) as client:
            run_id = await conversation.start_run(client, "hello there")
            follow = asyncio.create_task(conversation.follow(run_id, within=60))
            await asyncio.sleep(0)
            start = time.monotonic()
            engine().run("kill", "--signal", "TERM", container.name)
            refused = None
            probes = 0
            while refused is None and time.monotonic() - start < 10:
                probes += 1  # a conversation each: a second run of one would be a 409
                res = await client.post(
                    f"/v1/conversations/other-{probes}/runs", json={"input": {"prompt": "hi"}}
                )
                if res.status_code == 503:
                    refused = res
                else:
                    # Not draining yet: the signal is on its way; this run is drained as well.
                    assert res.status_code == 202, res.text
                    await asyncio.sleep(0.05)
            assert refused is not None and refused.json()["error"]["code"] == "shutting_down"
            assert (await client.get("/readyz")).status_code == 503
        end = await follow
        assert end["type"] == "run.completed"
        conversation.assert_each_event_once()
        waited = engine().run("wait", container.name, timeout=60).stdout.strip()
        assert waited.splitlines()[-1] == "0"
        assert container.state("{{.State.ExitCode}}") == "0"
