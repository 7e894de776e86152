"""A backend that times every operation and counts its errors, delegating to the real one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from app.backends.base import Backend
from app.backends.delegating import DelegatingBackend, backend_operations
from app.backends.types import AppendDone, ConversationRef, LogEntry, LogItem, ReadResult, ReadSink

if TYPE_CHECKING:
    from prometheus_client.metrics import Counter, Histogram

    from app.observability.metrics.registry import GatewayMetrics

__all__ = ["InstrumentedBackend"]

#: Waits for new entries or a notification (long polls): only their errors are counted.
UNTIMED = frozenset({"read", "wait_run_slot"})


class InstrumentedBackend(DelegatingBackend):
    """Wraps a backend: every coroutine operation is timed and its errors are counted.

    ``read`` and ``wait_run_slot`` wait (``UNTIMED``), so only their errors are counted. The
    synchronous operations are passed through. The hot ones (``append_batch``,
    ``append_soon``, ``read``) are written out below; every other operation of the interface
    is made once, when this module loads, by :func:`_timed` / :func:`_passed`: a new
    operation of :class:`Backend` is timed here without a line of its own.
    """

    def __init__(self, inner: Backend, metrics: GatewayMetrics, backend: str | None = None) -> None:
        super().__init__(inner)
        self._metrics = metrics
        #: ``memory`` / ``redis``: given, else from the class name (``RedisBackend`` -> redis).
        self._backend = metrics.backend_label(
            backend or type(inner).__name__.lower().removesuffix("backend")
        )
        #: op -> (errors counter, latency histogram or None): resolved once per operation.
        self._ops: dict[str, tuple[Counter, Histogram | None]] = {}
        #: ``append_batch``'s, once resolved (its hot path skips the dict).
        self._append_children: tuple[Counter, Histogram] | None = None

    def _children(self, op: str, timed: bool) -> tuple[Counter, Histogram | None]:
        children = self._ops.get(op)
        if children is None:
            m = self._metrics
            labels = (self._backend, m.op_label(op))
            latency = m.backend_op_latency.labels(*labels) if timed else None
            children = self._ops[op] = (m.backend_op_errors.labels(*labels), latency)
        return children

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        # Written out: this runs once per upstream read (once per delta at 50 deltas/s). In a
        # capacity profile the wrapper cost about as much as the memory append it wrapped
        # (BENCHMARKS.md, "Costs behind the code's shortcuts"); part of that is the histogram
        # (kept), the rest its coroutine and op lookup (gone).
        children = self._append_children or self._append_metrics()
        clock = self._metrics.clock
        start = clock()
        try:
            return await self._inner.append_batch(ref, items)
        except Exception:  # a cancellation is not a backend error
            children[0].inc()
            raise
        finally:
            children[1].observe(clock() - start)

    def _append_metrics(self) -> tuple[Counter, Histogram]:
        errors, latency = self._children("append_batch", True)
        assert latency is not None  # timed
        self._append_children = (errors, latency)
        return errors, latency

    def append_soon(self, ref: ConversationRef, items: Sequence[LogItem], done: AppendDone) -> bool:
        children = self._append_children or self._append_metrics()
        clock = self._metrics.clock
        start = clock()

        def timed(entries: list[LogEntry] | None, error: Exception | None) -> None:
            # Counted as ``append_batch``: the same write, not waited for.
            if error is not None:
                children[0].inc()
            children[1].observe(clock() - start)
            done(entries, error)

        return self._inner.append_soon(ref, items, timed)

    async def read(
        self,
        ref: ConversationRef,
        after: str,
        *,
        limit: int,
        wait: float,
        sink: ReadSink | None = None,
    ) -> ReadResult:
        # Written out: every follower reads once per delivery (hundreds per append
        # in a fan-out), and an untimed operation needs only its error count.
        try:
            return await self._inner.read(ref, after, limit=limit, wait=wait, sink=sink)
        except Exception:  # a cancellation is not a backend error
            self._children("read", False)[0].inc()
            raise


def _timed(op: str) -> Callable[..., Awaitable[object]]:
    """``op`` of the inner backend, timed (unless ``UNTIMED``) and its errors counted."""
    timed = op not in UNTIMED

    async def operation(self: InstrumentedBackend, *args: object, **kwargs: object) -> object:
        errors, latency = self._children(op, timed)
        clock = self._metrics.clock
        start = clock()
        try:
            result: object = await getattr(self._inner, op)(*args, **kwargs)
        except Exception:  # a cancellation is not a backend error
            errors.inc()
            raise
        finally:
            if latency is not None:
                latency.observe(clock() - start)
        return result

    operation.__name__ = operation.__qualname__ = op
    return operation


def _passed(op: str) -> Callable[..., object]:
    """``op`` (synchronous) of the inner backend, as it is."""

    def operation(self: InstrumentedBackend, *args: object, **kwargs: object) -> object:
        return getattr(self._inner, op)(*args, **kwargs)

    operation.__name__ = operation.__qualname__ = op
    return operation


for _op, _coroutine in backend_operations().items():
    if _op not in vars(InstrumentedBackend):
        setattr(InstrumentedBackend, _op, _timed(_op) if _coroutine else _passed(_op))
