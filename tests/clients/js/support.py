"""Running the JavaScript client's Node tests from pytest, and the streams they compare."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings

from core import create_agent_state, project_messages, reduce_agent_state, validate_event
from tests.core.strategies import any_streams

ROOT = Path(__file__).resolve().parents[3]
CLIENT = ROOT / "clients" / "js"


@dataclass(frozen=True)
class NodeRun:
    returncode: int
    output: str
    counts: dict[str, int]


def node() -> str:
    """Path of ``node``; fails the test with what to install when it is missing."""
    path = shutil.which("node")
    if path is None:
        pytest.fail(
            "tests/clients needs Node.js >= 18 on PATH (`node`): install it, e.g. "
            "`apt-get install nodejs`, then run the tests again",
            pytrace=False,
        )
    return path


def run_node_tests(*files: str, env: Mapping[str, str] | None = None) -> NodeRun:
    """``node --test`` on files under clients/js/test, TAP output parsed into its counts."""
    proc = subprocess.run(
        [node(), "--test", "--test-reporter=tap", *(f"test/{name}" for name in files)],
        cwd=CLIENT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return parse_tap(proc.returncode, proc.stdout + proc.stderr)


def seeded_streams(count: int, seed_value: int) -> list[list[Any]]:
    """``count`` event streams from tests/core/strategies.py, the same ones for a seed."""
    streams: list[list[Any]] = []

    @seed(seed_value)
    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(any_streams())
    def collect(events: list[Any]) -> None:
        streams.append(events)

    collect()
    return streams


def core_view(events: list[Any]) -> dict[str, Any]:
    """What core makes of a stream: per-event validity, state, projection, isRequesting."""
    state = create_agent_state()
    for event in events:
        state = reduce_agent_state(state, event)
    validity = []
    for event in events:
        problem = validate_event(event)
        validity.append(None if problem is None else problem.to_dict())
    return {
        "validity": validity,
        "state": state,
        "messages": project_messages(state),
        "requesting": any(run["status"] == "running" for run in state["runs"].values()),
    }


def to_json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as ``{"$number": ...}`` (JSON has no Infinity/NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        name = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
        return {"$number": name}
    if isinstance(value, dict):
        return {key: to_json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_json_safe(item) for item in value]
    return value


def npm() -> str:
    """Path of ``npm``; fails the test with what to install when it is missing."""
    path = shutil.which("npm")
    if path is None:
        pytest.fail("tests/clients needs npm on PATH (`apt-get install npm`)", pytrace=False)
    return path


def ensure_node_modules(package: Path) -> None:
    """``npm ci`` in ``package`` (from its lock file) unless its node_modules is installed; one
    worker at a time per package (``npm ci`` first deletes node_modules)."""
    name = hashlib.sha256(str(package).encode()).hexdigest()[:16]
    with (Path(tempfile.gettempdir()) / f"agent-gateway-npm-ci-{name}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        marker = package / "node_modules" / ".package-lock.json"
        lock = package / "package-lock.json"
        if marker.exists() and marker.stat().st_mtime >= lock.stat().st_mtime:
            return
        proc = subprocess.run(
            [npm(), "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=package,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, f"npm ci in {package} failed:\n{proc.stdout}{proc.stderr}"


def type_check(package: Path, config: str) -> subprocess.CompletedProcess[str]:
    """``tsc -p config`` in ``package``, with the TypeScript its lock file pins (emits nothing)."""
    ensure_node_modules(package)
    tsc = package / "node_modules" / "typescript" / "bin" / "tsc"
    return subprocess.run(
        [node(), str(tsc), "-p", config],
        cwd=package,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def parse_tap(returncode: int, output: str) -> NodeRun:
    counts = {
        name: int(value)
        for name, value in re.findall(
            r"^# (tests|pass|fail|skipped|cancelled|todo) (\d+)$", output, re.M
        )
    }
    return NodeRun(returncode, output, counts)


async def run_node_tests_async(
    *files: str, env: Mapping[str, str] | None = None, limit_seconds: float = 240
) -> NodeRun:
    """``run_node_tests`` without blocking the event loop (a gateway in this loop serves them)."""
    proc = await asyncio.create_subprocess_exec(
        node(),
        "--test",
        "--test-reporter=tap",
        *(f"test/{name}" for name in files),
        cwd=CLIENT,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), limit_seconds)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        return parse_tap(-1, out.decode(errors="replace") + "\n(timed out)")
    code = -1 if proc.returncode is None else proc.returncode
    return parse_tap(code, out.decode(errors="replace"))


#: The reply of the ``fixture`` provider the provider-switch tests select (unlike ``demo``'s).
FIXTURE_TEXT = "Fixture answer."


def write_fixed_reply(path: Path) -> Path:
    """A ``fixture`` provider's recording: one run answering ``FIXTURE_TEXT``."""

    def event(seq: int, type_: str, payload: dict[str, object]) -> dict[str, object]:
        return {
            "protocolVersion": "0.1",
            "type": type_,
            "eventId": f"e{seq}",
            "sessionId": "s",
            "runId": "r",
            "sequence": seq,
            "timestamp": 0,
            "payload": payload,
        }

    events = [
        event(0, "run.started", {}),
        event(1, "message.started", {"messageId": "m", "role": "assistant"}),
        event(2, "message.delta", {"messageId": "m", "delta": FIXTURE_TEXT}),
        event(3, "message.completed", {"messageId": "m"}),
        event(4, "run.completed", {}),
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path
