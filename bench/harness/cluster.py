"""A disposable cluster for the soak: one persistent Redis and gateway instances that can be
killed and restarted on the same port, with a timeline of every disruption.

Redis runs with ``--appendonly yes --appendfsync always`` in a directory of its own, so a
``kill -9`` loses nothing it acknowledged, and restarts on the same port and directory. An
instance is a real ``agent-gateway serve`` process (its log in the cluster's directory),
restarted on its port so clients can go back to it. Every disruption is a :class:`Window`
(from the signal to "ready again"); callers classify what they saw by these windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.harness.procs import ROOT, free_port

__all__ = ["Instance", "RestartableRedis", "Window", "Windows", "kill_process", "spawn"]

AGENT_GATEWAY = Path(sys.executable).parent / "agent-gateway"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Child side: get SIGKILL when the soak dies, never outlive it."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Window:
    """One disruption: ``start`` (monotonic, the signal) to ``end`` (ready again; None while
    it lasts)."""

    label: str
    start: float
    end: float | None = None


class Windows:
    """The disruptions so far, and whether a moment falls in (or just after) one."""

    def __init__(self, grace: float) -> None:
        #: After "ready again", clients may still meet the effects (a lost lease is noticed
        #: up to a lease TTL later, pooled connections to the dead process fail on first use).
        self.grace = grace
        self.items: list[Window] = []

    def open(self, label: str) -> Window:
        window = Window(label, time.monotonic())
        self.items.append(window)
        return window

    def during(self, at: float) -> Window | None:
        for window in self.items:
            end = window.end if window.end is not None else float("inf")
            if window.start - 0.5 <= at <= end + self.grace:
                return window
        return None

    def last_before(self, at: float) -> Window | None:
        earlier = [w for w in self.items if w.start <= at]
        return earlier[-1] if earlier else None


async def spawn(args: list[str], log: Path) -> asyncio.subprocess.Process:
    """Start ``args`` (output appended to ``log``); it gets SIGKILL when the soak dies."""
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *args,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            cwd=str(ROOT),
            preexec_fn=_die_with_parent,
        )


async def kill_process(process: asyncio.subprocess.Process | None, sig: int) -> None:
    """Send ``sig`` and wait for the exit (SIGKILL after 20 s); nothing if it is not running."""
    if process is None or process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(sig)
    try:
        await asyncio.wait_for(process.wait(), 20)
    except TimeoutError:
        process.kill()
        await process.wait()


class RestartableRedis:
    """``redis-server`` with an append-only file fsynced on every write, on a fixed port."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self, within: float = 30.0) -> None:
        args = [
            "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
        ]  # fmt: skip
        self.process = await spawn(args, self.directory / "redis.log")
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            if await asyncio.to_thread(self._pong):
                return
            await asyncio.sleep(0.05)
        raise RuntimeError("redis-server did not become ready")

    def _pong(self) -> bool:
        """PING answered (not LOADING: the AOF is replayed before Redis serves)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), 0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        await kill_process(self.process, sig)


class Instance:
    """An ``agent-gateway serve`` process on a fixed port; ``up`` is False while it is down."""

    def __init__(self, name: str, config: str, directory: Path) -> None:
        self.name = name
        self.config = config
        self.port = free_port()
        self.log = directory / f"gateway-{name}.log"
        self.process: asyncio.subprocess.Process | None = None
        self.up = False
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, within: float = 180.0) -> None:
        """Start the process and wait for ``/readyz`` (a loaded pair of cores took more than
        60 s to start one next to a soak)."""
        args = [
            str(AGENT_GATEWAY), "serve",
            "--config", self.config,
            "--port", str(self.port),
            "--log-level", "warning",
        ]  # fmt: skip
        self.process = await spawn(args, self.log)
        self.starts += 1
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(base_url=self.url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.returncode is not None:
                    raise RuntimeError(f"gateway {self.name} exited: see {self.log}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        self.up = True
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError(f"gateway {self.name} did not become ready: see {self.log}")

    async def kill(self) -> None:
        """``kill -9``: no drain, no lease release."""
        self.up = False
        await kill_process(self.process, signal.SIGKILL)

    async def stop(self) -> None:
        self.up = False
        await kill_process(self.process, signal.SIGTERM)

    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid
