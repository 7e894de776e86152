"""The backend guard: a test that runs a gateway runs it on every backend, or says why not.

Every way a test can run a gateway passes one of three points, which ``install()`` watches:

- ``Gateway.start()``: the app's lifespan under any server (uvicorn in the test's loop or in a
  thread, ``serve_asgi``, a ``TestClient`` used as a context manager), or a test that drives a
  ``Gateway`` object directly;
- the app answering a request or a WebSocket (``GatewayApp.__call__``): also without a lifespan
  (``httpx.ASGITransport``, a ``TestClient`` outside ``with``);
- ``subprocess.Popen``, which ``asyncio.create_subprocess_exec`` uses too, of a gateway command
  (``agent-gateway serve``, ``python -m app.cli serve``, a test module serving one).

While a test runs (setup, call, teardown: ``tests/conftest.py`` arms the guard around them, so a
module-scoped fixture is checked too), a gateway passes only if the test is marked
``@pytest.mark.only_backend(..., reason=...)``, or it is parametrized over the backends
(``backend_kind``, e.g. through the ``start_gateway`` fixture) and the gateway runs on the
test's backend. A gateway process always needs the marker: its backend is out of sight.
Outside pytest (the benchmarks) the guard stays disarmed.
"""

from __future__ import annotations

import functools
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.backends import Backend
from app.backends.memory import MemoryBackend
from app.backends.redis import RedisBackend, is_cluster
from app.factory import GatewayApp
from app.gateway import Gateway

__all__ = ["BACKEND_GUARD", "BackendGuard", "OffBackends", "backend_of", "install"]

#: Modules of the test tree that serve a gateway in a process of their own (``python -m ...``).
GATEWAY_SERVER_MODULES = frozenset(
    {"tests.app.support.redis_support", "tests.app.archive.redis_serve"}
)
#: The gateway's CLI: its ``serve`` command runs a gateway.
CLI_MODULES = frozenset({"app.cli", "app.cli.main"})
CLI_EXECUTABLE = "agent-gateway"

HOW_TO = (
    "start gateways with the start_gateway fixture (it runs the test on memory and Redis), or"
    " take the backend_kind fixture and start each gateway on that backend, or mark the test"
    " @pytest.mark.only_backend(..., reason=...)"
)

UNSEEN = (
    "the guard cannot see this gateway's backend, so mark the test"
    " @pytest.mark.only_backend(<its backend>, reason=...)"
)


class OffBackends(AssertionError):
    """A test ran a gateway outside the backend parametrization, unmarked."""


def backend_of(backend: Backend) -> str | None:
    """``memory`` / ``redis`` / ``redis-cluster``, through wrappers that expose ``inner`` (the
    metrics', the archive's, ``DelegatingBackend``s); None for a backend of another kind."""
    while not isinstance(backend, MemoryBackend | RedisBackend):
        inner: Backend | None = getattr(backend, "inner", None)
        if inner is None:
            return None
        backend = inner
    if isinstance(backend, MemoryBackend):
        return "memory"
    return "redis-cluster" if is_cluster(backend.redis) else "redis"


def gateway_command(args: Any) -> str | None:
    """The command line, if ``args`` (``Popen``'s) runs a gateway; else None."""
    if isinstance(args, str | bytes | Path):
        argv = shlex.split(args.decode() if isinstance(args, bytes) else str(args))
    else:
        argv = [a.decode() if isinstance(a, bytes) else str(a) for a in args]
    if not argv:
        return None
    modules = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-m"}
    serves = "serve" in argv and (
        Path(argv[0]).name == CLI_EXECUTABLE or bool(modules & CLI_MODULES)
    )
    if serves or modules & GATEWAY_SERVER_MODULES:
        return shlex.join(argv)
    return None


@dataclass
class BackendGuard:
    """What the test that runs now may start, and the violations it made: its teardown fails on
    them. An in-process gateway starts anyway (raising inside an app's lifespan would make
    uvicorn end the whole process); a gateway process is refused at once."""

    armed: bool = False
    test: str = ""
    #: The test's ``backend_kind`` parameter; None when it is not parametrized over backends.
    backend: str | None = None
    violations: list[str] = field(default_factory=list)

    def arm(self, test: str, backend: str | None, marked: bool) -> None:
        self.armed, self.test, self.backend = not marked, test, backend
        self.violations = []

    def disarm(self) -> list[str]:
        violations, self.violations = self.violations, []
        self.armed = False
        return violations

    def check(self, way: str, kind: str | None) -> str | None:
        """A gateway starts, ``way``, on backend ``kind`` (None: unknown): None if fine, else
        the violation's message, kept for the test's teardown to fail it."""
        if not self.armed or (self.backend is not None and kind == self.backend):
            return None
        if self.backend is None:
            where = "without the backend parametrization"
        else:
            where = f"in its [{self.backend}] run"
        fix = HOW_TO if kind is not None else UNSEEN
        on = kind or "some backend"
        message = f"{self.test} started a gateway on {on} ({way}) {where}: {fix}"
        self.violations.append(message)
        return message


BACKEND_GUARD = BackendGuard()


def install() -> None:
    """Watch the three points (once per process)."""
    if getattr(Gateway.start, "__backend_guard__", False):
        return
    start = Gateway.start

    @functools.wraps(start)
    async def guarded_start(self: Gateway) -> None:
        BACKEND_GUARD.check("Gateway.start", backend_of(self.backend))
        await start(self)

    guarded_start.__backend_guard__ = True  # type: ignore[attr-defined]
    Gateway.start = guarded_start  # type: ignore[method-assign]

    call = GatewayApp.__call__

    @functools.wraps(call)
    async def guarded_call(self: GatewayApp, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and BACKEND_GUARD.armed:
            gateway: Gateway = self.state.gateway
            BACKEND_GUARD.check(f"the app answered {scope['type']}", backend_of(gateway.backend))
        await call(self, scope, receive, send)

    GatewayApp.__call__ = guarded_call  # type: ignore[method-assign]

    popen_init = subprocess.Popen.__init__

    @functools.wraps(popen_init)
    def guarded_popen(self: subprocess.Popen[Any], args: Sequence[Any], *a: Any, **kw: Any) -> None:
        command = gateway_command(args)
        violation = None if command is None else BACKEND_GUARD.check(f"process: {command}", None)
        if violation is not None:
            raise OffBackends(violation)
        popen_init(self, args, *a, **kw)

    subprocess.Popen.__init__ = guarded_popen  # type: ignore[method-assign, assignment]
