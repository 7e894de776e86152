"""A delaying TCP proxy in front of a Redis node, on loopback, that also times every command.

Each chunk Redis sends back is held ``delay`` seconds before it goes on to the client, so
every round trip costs at least ``delay`` (Redis across a network). The proxy parses both
directions as RESP (hiredis) and records each command: when its request reached the proxy and
when its reply left it. From those records :meth:`CommandLog.sequential` counts the round
trips a path waited for one after the other: a command sent after another's reply had reached
the client may have waited for it (times are ``time.monotonic()``); commands sent together
(one pipeline, or several tasks, or several nodes at once) overlap and count once. The count
is an upper bound of the causal depth: it counts the gateway's every connection, whatever
task or client path sent it.

Used by ``tests/app/backends/redis/test_round_trips.py`` and ``bench/ttfe_delay_bench.py``;
for a Redis Cluster, one proxy per node and the client's ``address_remap``
(:func:`cluster_remap`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType

import hiredis

__all__ = ["Command", "CommandLog", "DelayProxy", "cluster_remap", "delay_proxies", "script_names"]

#: Commands whose connection turns into a subscriber: its later pushes answer no request.
_SUBSCRIBE = {b"SUBSCRIBE", b"SSUBSCRIBE", b"PSUBSCRIBE"}
_PUSHES = {b"message", b"smessage", b"pmessage"}


@dataclass(slots=True)
class Command:
    """One command seen by a proxy: its name (and the script's first key for ``EVALSHA``),
    the connection, when its request arrived and when its reply left (``None`` until then)."""

    name: str
    connection: int
    start: float
    end: float | None = None


@dataclass
class CommandLog:
    """Every command the proxies of one client saw, in arrival order."""

    commands: list[Command] = field(default_factory=list)
    #: A script's name by its SHA1, to show ``EVALSHA`` calls by name (:func:`script_names`).
    scripts: dict[str, str] = field(default_factory=dict)

    def between(self, since: float, until: float) -> list[Command]:
        """The commands sent after ``since`` whose reply reached the client by ``until``."""
        return [
            c for c in self.commands if c.start >= since and c.end is not None and c.end <= until
        ]

    def chain(self, since: float, until: float) -> list[list[Command]]:
        """The longest chain of round trips between ``since`` and ``until``: each one sent
        after the reply of the one before reached the client; each step lists the commands
        sent with it (overlapping its round trip's start)."""
        commands = sorted(self.between(since, until), key=lambda c: c.start)
        depth: list[int] = []
        before: list[int] = []
        for n, c in enumerate(commands):
            best, link = 0, -1
            for m in range(n):
                q = commands[m]
                assert q.end is not None
                if q.end <= c.start and depth[m] > best:
                    best, link = depth[m], m
            depth.append(best + 1)
            before.append(link)
        if not commands:
            return []
        last = max(range(len(commands)), key=lambda n: (depth[n], -n))
        path: list[int] = []
        while last >= 0:
            path.append(last)
            last = before[last]
        steps: list[list[Command]] = []
        for n in reversed(path):
            c = commands[n]
            assert c.end is not None
            steps.append(
                [q for m, q in enumerate(commands) if depth[m] == depth[n] and q.start <= c.end]
            )
        return steps

    def sequential(self, since: float, until: float) -> int:
        """How many round trips the gateway waited for one after the other in the window."""
        return len(self.chain(since, until))

    def describe(self, since: float, until: float) -> list[str]:
        """The chain, one line per round trip: its commands, ``|``-separated."""
        return ["|".join(c.name for c in step) for step in self.chain(since, until)]

    def in_flight(self) -> int:
        """Commands sent and not answered yet (blocking reads aside)."""
        return sum(1 for c in self.commands if c.end is None and not c.name.endswith(" BLOCK"))


class _Connection:
    """One client connection through the proxy: requests go on at once, replies are held."""

    def __init__(self, proxy: DelayProxy, number: int) -> None:
        self.proxy = proxy
        self.number = number
        self.pending: deque[Command | None] = deque()
        self.subscriber = False
        self.requests = hiredis.Reader()
        self.replies = hiredis.Reader()

    def requested(self, data: bytes, now: float) -> None:
        self.requests.feed(data)
        while (request := self.requests.gets()) is not False:
            if not isinstance(request, list) or not request:
                continue
            name = bytes(request[0]).upper()
            shown = name.decode(errors="replace")
            if name == b"EVALSHA" and len(request) > 1:
                sha = bytes(request[1]).decode(errors="replace")
                shown = self.proxy.log.scripts.get(sha, f"EVALSHA {sha[:8]}")
            if name in (b"XREAD", b"XREADGROUP") and any(
                bytes(arg).upper() == b"BLOCK" for arg in request[1:]
            ):
                shown += " BLOCK"  # answered when an entry comes: no round trip waited for
            command = Command(shown, self.number, now)
            self.proxy.log.commands.append(command)
            self.pending.append(command)
            if name in _SUBSCRIBE:
                self.subscriber = True
                self.pending.extend([None] * (len(request) - 2))  # one reply per channel

    def replied(self, data: bytes, now: float) -> None:
        self.replies.feed(data)
        while (reply := self.replies.gets()) is not False:
            if self.subscriber and isinstance(reply, list) and reply and reply[0] in _PUSHES:
                continue  # a message, not a reply
            if self.pending:
                command = self.pending.popleft()
                if command is not None:
                    command.end = now


class DelayProxy:
    """Forwards ``127.0.0.1:port`` to ``target``, each chunk of the replies ``delay`` s late."""

    def __init__(self, target: tuple[str, int], delay: float, log: CommandLog) -> None:
        self.target = target
        self.delay = delay
        self.log = log
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        connection = _Connection(self, self._connections)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def upstream() -> None:
            while data := await reader.read(65536):
                connection.requested(data, time.monotonic())
                up_writer.write(data)
            up_writer.close()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                held.put_nowait((time.monotonic() + self.delay, data))
            held.put_nowait((0.0, b""))

        async def release() -> None:
            while True:
                due, data = await held.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                connection.replied(data, time.monotonic())
                writer.write(data)
            writer.close()

        pumps = [asyncio.ensure_future(p()) for p in (upstream, downstream, release)]
        for pump in pumps:
            self._tasks.add(pump)
            pump.add_done_callback(self._tasks.discard)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait(pumps, timeout=1)
        finally:
            for pump in pumps:
                pump.cancel()
            for pump in pumps:
                with contextlib.suppress(BaseException):
                    await pump
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()


def script_names(modules: Iterable[ModuleType]) -> dict[str, str]:
    """Every Lua script of ``modules`` (an upper-case ``str`` calling ``redis.call``), by SHA1."""
    found: dict[str, str] = {}
    for module in modules:
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str) and "redis.call" in value:
                found[hashlib.sha1(value.encode()).hexdigest()] = name
    return found


def cluster_remap(proxies: dict[int, DelayProxy]) -> Callable[[tuple[str, int]], tuple[str, int]]:
    """A cluster client's ``address_remap``: a node's announced port → its proxy."""

    def remap(address: tuple[str, int]) -> tuple[str, int]:
        proxy = proxies.get(address[1])
        return ("127.0.0.1", proxy.port) if proxy is not None else address

    return remap


@contextlib.asynccontextmanager
async def delay_proxies(
    ports: Iterable[int], delay: float, host: str = "127.0.0.1"
) -> AsyncIterator[tuple[dict[int, DelayProxy], CommandLog]]:
    """One :class:`DelayProxy` per port of ``host`` (a Redis, or each node of a cluster),
    sharing one :class:`CommandLog`; stopped afterwards."""
    log = CommandLog()
    proxies = {port: DelayProxy((host, port), delay, log) for port in ports}
    try:
        for proxy in proxies.values():
            await proxy.start()
        yield proxies, log
    finally:
        for proxy in proxies.values():
            await proxy.stop()
