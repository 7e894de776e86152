"""Running the JavaScript client's Node tests from pytest, and the streams they compare."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
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
    output = proc.stdout + proc.stderr
    counts = {
        name: int(value)
        for name, value in re.findall(
            r"^# (tests|pass|fail|skipped|cancelled|todo) (\d+)$", output, re.M
        )
    }
    return NodeRun(proc.returncode, output, counts)


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
