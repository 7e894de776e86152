"""Helpers shared by the whole tests tree: a free loopback port, waiting for a condition."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

__all__ = ["eventually", "eventually_async", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (for a child process to bind)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def eventually(check: Callable[[], bool], within: float = 10.0, what: str = "") -> None:
    """Wait until ``check()`` holds; fail after ``within`` seconds (a bound, never the target)."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"condition not reached in {within} s: {what}"
        await asyncio.sleep(0.02)


async def eventually_async(
    check: Callable[[], Awaitable[bool]], within: float = 10.0, what: str = ""
) -> None:
    """Like :func:`eventually` for a check that awaits (an HTTP call, a Redis read)."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"condition not reached in {within} s: {what}"
        await asyncio.sleep(0.02)
