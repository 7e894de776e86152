"""Each operation of the backend interface is written in three places — the interface
(``app/backends/roles.py``), ``memory.py`` and its Redis role module — and forwarded by none
(issue 50, item 3): ``RedisBackend`` inherits its roles, ``DelegatingBackend`` makes its
forwards from the interface. Every operation reaches both backends and passes every wrapper.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, cast

import pytest

from app.archive.backend import ArchivingBackend
from app.archive.writer import ArchiveWriter
from app.backends import Backend
from app.backends.delegating import DelegatingBackend, backend_operations
from app.backends.memory import MemoryBackend
from app.backends.redis import RedisBackend
from app.backends.redis.role import RedisRole
from app.backends.types import LogEntry
from app.observability.metrics import GatewayMetrics, InstrumentedBackend

ROOT = Path(__file__).resolve().parents[3]

#: The modules that once forwarded every operation by hand, and the operations each may still
#: write, with why: none of them passes the operation on to another object's same operation.
FORWARDERS: Mapping[str, Mapping[str, str]] = {
    "app/backends/redis/backend.py": {
        "start": "the whole backend's: starts the instance's pub/sub, tickets and sweeps",
        "close": "the whole backend's: stops them, the owned runs and the client",
        "ping": "the whole backend's: the client's readiness",
        "webhook_outbox": "the prefix's outbox, made once",
        "watch_lost_runs": "listeners of the instance's reaper",
    },
    "app/backends/delegating.py": {
        "append_soon": "not passed on: a wrapper adding to append_batch would be skipped",
    },
}


def defined_operations(source: str, operations: Iterable[str]) -> list[str]:
    """The functions of ``source`` (at any depth) named like an operation, in order."""
    wanted = set(operations)
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in wanted
    ]


def test_no_module_forwards_an_operation_by_hand() -> None:
    operations = backend_operations()
    assert len(operations) >= 39
    for module, allowed in FORWARDERS.items():
        source = (ROOT / module).read_text(encoding="utf-8")
        written = defined_operations(source, operations)
        assert sorted(written) == sorted(allowed), (
            f"{module} writes operations of the Backend interface; RedisBackend gets them from"
            f" its roles, DelegatingBackend makes them from backend_operations(): {written}"
        )


def test_a_hand_written_forward_is_found() -> None:
    source = (
        "class RedisBackend:\n"
        "    def keys(self, ref): ...\n"
        "    async def read(self, ref, after, *, limit, wait, sink=None):\n"
        "        return await self.reads.read(ref, after, limit=limit, wait=wait, sink=sink)\n"
        "    def wake_readers(self):\n"
        "        self.reads.wake_readers()\n"
    )
    assert defined_operations(source, backend_operations()) == ["read", "wake_readers"]


@pytest.mark.parametrize("backend", [MemoryBackend, RedisBackend])
def test_every_operation_is_implemented_by_both_backends(backend: type[Backend]) -> None:
    assert not getattr(backend, "__abstractmethods__", None)
    for op in backend_operations():
        implementation = getattr(backend, op)
        assert not getattr(implementation, "__isabstractmethod__", False), op
        assert callable(implementation), op
        if backend is RedisBackend and op not in FORWARDERS["app/backends/redis/backend.py"]:
            # The role's own method, reached through the class, not a forward to a role object.
            owner = next(k for k in RedisBackend.__mro__ if op in vars(k))
            assert issubclass(owner, RedisRole) and owner is not RedisBackend, (op, owner)
            assert owner.__module__.startswith("app.backends.redis."), (op, owner)


class Recorder:
    """A backend that records each operation called on it with its arguments (as bound to
    the interface's signature, defaults applied) and answers ``answer(op)``."""

    inline_appends = False
    appends_wait = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []


@cache
def answer(op: str) -> Any:
    """What the recorder answers ``op``: one object per operation, compared by identity."""
    declared = inspect.signature(getattr(Backend, op)).return_annotation
    if declared == "None":
        return None
    if op in ("append_event", "append_extension"):
        return LogEntry("1-0", "event", b"{}", event_type="x")
    if op == "append_batch":
        return [LogEntry("1-0", "event", b"{}", event_type="x")]
    if op == "get_meta":
        return None
    return ("answer of", op)


def _recorded(op: str, coroutine: bool) -> Callable[..., Any]:
    signature = inspect.signature(getattr(Backend, op))

    def record(self: Recorder, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        self.calls.append((op, {k: v for k, v in bound.arguments.items() if k != "self"}))
        return answer(op)

    async def record_async(self: Recorder, *args: Any, **kwargs: Any) -> Any:
        return record(self, *args, **kwargs)

    return record_async if coroutine else record


for _op, _coroutine in backend_operations().items():
    setattr(Recorder, _op, _recorded(_op, _coroutine))


class Writer:
    """The archive's writer, only counting what the archiving wrapper hands it."""

    def __init__(self) -> None:
        self.handed = 0

    def flush(self, *args: Any, **kwargs: Any) -> None:
        self.handed += 1

    def delete(self, *args: Any, **kwargs: Any) -> None:
        self.handed += 1


def arguments(op: str) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """A call of ``op`` with a distinct value per parameter: positional ones by position,
    keyword-only ones by name; and the arguments the inner backend must see."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    parameters = list(inspect.signature(getattr(Backend, op)).parameters.values())[1:]
    for parameter in parameters:
        value: Any = f"{op}.{parameter.name}"
        if parameter.name == "done":
            value = lambda entries, error: None  # noqa: E731
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[parameter.name] = value
        else:
            args.append(value)
        expected[parameter.name] = value
    return args, kwargs, expected


WRAPPERS: Mapping[str, Callable[[Recorder], Any]] = {
    "delegating": lambda inner: DelegatingBackend(cast(Backend, inner)),
    "archiving": lambda inner: ArchivingBackend(
        cast(Backend, inner), cast(ArchiveWriter, Writer())
    ),
    "instrumented": lambda inner: InstrumentedBackend(cast(Backend, inner), GatewayMetrics(), "x"),
    "gateway's": lambda inner: InstrumentedBackend(
        ArchivingBackend(cast(Backend, inner), cast(ArchiveWriter, Writer())), GatewayMetrics()
    ),
}


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
async def test_every_operation_passes_every_wrapper(wrapper: str) -> None:
    """Called on the wrapper with its arguments, each operation reaches the wrapped backend
    with the same ones (defaults applied as the interface declares them) and answers what it
    answered; ``append_soon`` reaches it only through a wrapper that does what it adds in
    ``done`` (the plain ``DelegatingBackend`` answers False: its caller awaits
    ``append_batch``)."""
    inner = Recorder()
    backend = WRAPPERS[wrapper](inner)
    assert backend.inline_appends is False and backend.appends_wait is True
    for op, coroutine in backend_operations().items():
        inner.calls.clear()
        args, kwargs, expected = arguments(op)
        result = getattr(backend, op)(*args, **kwargs)
        if coroutine:
            result = await result
        if op == "append_soon":
            if wrapper == "delegating":
                assert result is False and inner.calls == [], op
                continue
            (called, seen), *_ = inner.calls
            assert called == op and seen["done"] is not expected["done"], op  # wrapped
            seen["done"] = expected["done"]
            assert seen == expected and result is answer(op), op
            continue
        assert (op, expected) in inner.calls, (op, inner.calls)
        assert result is answer(op), op


def test_the_forwards_keep_the_interface_signatures() -> None:
    """A forward made from the interface takes what the interface's operation takes."""
    for op in backend_operations():
        if op in FORWARDERS["app/backends/delegating.py"]:
            continue
        made = inspect.signature(getattr(DelegatingBackend, op))
        declared = inspect.signature(getattr(Backend, op))
        assert [(p.name, p.kind, p.default) for p in made.parameters.values()] == [
            (p.name, p.kind, p.default) for p in declared.parameters.values()
        ], op
