"""The archive bench counts each figure with the archive on until the archive has drained."""

from __future__ import annotations

import argparse
import math
from typing import Any

import pytest

from bench import archive_bench
from bench.harness.client import StreamResult


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeServer:
    def __init__(self, port: int) -> None:
        self.port = port

    def cpu_seconds(self) -> float:
        return 0.0


def _fakes(monkeypatch: pytest.MonkeyPatch, clock: Clock, drains: bool = True) -> list[int]:
    """Runs take 2 s, a stream 1 s, the archive 3 s more to drain (only the gateway on port 2
    has one); the ports asked whether they drained."""
    asked: list[int] = []

    async def many_conversations(port: int, *_: Any) -> None:
        clock.now += 2.0

    async def gateway_run(port: int, n: int) -> StreamResult:
        clock.now += 1.0
        return StreamResult(status=200, frames=n + 2, deltas=n)

    async def archive_drained(port: int) -> bool:
        asked.append(port)
        clock.now += 3.0
        return drains

    monkeypatch.setattr(archive_bench, "many_conversations", many_conversations)
    monkeypatch.setattr(archive_bench, "gateway_run", gateway_run)
    monkeypatch.setattr(archive_bench, "archive_drained", archive_drained)
    return asked


ARGS = argparse.Namespace(rounds=1, conversations=100, deltas=20, concurrency=10, chunks=998)


async def test_with_the_archive_on_the_clock_stops_when_it_has_drained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    asked = _fakes(monkeypatch, clock)
    gateways: Any = {"off": FakeServer(1), "on": FakeServer(2)}
    figures = await archive_bench.measure(gateways, ARGS, clock)
    assert figures["off"]["runs/s"] == [100 / 2.0]
    assert figures["on"]["runs/s"] == [100 / (2.0 + 3.0)]
    assert figures["on"]["drain s"] == [3.0]
    assert figures["off"]["drain s"] == [0.0]
    assert figures["off"]["events/s"] == [1000 / 1.0]
    assert figures["on"]["events/s"] == [1000 / (1.0 + 3.0)]
    assert set(asked) == {2}


async def test_an_archive_that_never_drains_has_no_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    _fakes(monkeypatch, clock, drains=False)
    gateways: Any = {"off": FakeServer(1), "on": FakeServer(2)}
    figures = await archive_bench.measure(gateways, ARGS, clock)
    assert math.isnan(figures["on"]["runs/s"][0])
    assert math.isnan(figures["on"]["events/s"][0])
