"""Metrics: families, bounded labels, the run tracker's derived figures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.backends import (
    Backend,
    ConversationMeta,
    ConversationRef,
    LogItem,
    MemoryBackend,
    ReadResult,
    ReadSink,
)
from app.backends.delegating import backend_operations
from app.observability.metrics import OTHER, GatewayMetrics, InstrumentedBackend, LabelGuard
from app.observability.metrics.run_tracker import COUNT_EVERY_EVENTS, COUNT_EVERY_SECONDS
from app.runs.start_slots import StartSlots
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import (
    SoonMemoryBackend,
    collect_sse,
    events_of,
    start_run,
    wait_metric,
    wait_state,
)
from tests.support import eventually


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ev(type_: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": type_, "payload": payload or {}}


def sample(m: GatewayMetrics, name: str, **labels: str) -> float | None:
    value = m.registry.get_sample_value(name, labels)
    return value


def test_label_guard_closed_vocabulary() -> None:
    guard = LabelGuard({"sse", "ws"})
    assert guard("sse") == "sse"
    assert guard("http") == OTHER
    assert guard(None) == OTHER
    assert guard("") == OTHER


def test_label_guard_open_vocabulary_is_bounded() -> None:
    guard = LabelGuard(max_values=3)
    assert [guard(v) for v in ("a", "b", "c", "d", "a")] == ["a", "b", "c", OTHER, "a"]
    assert guard("x" * 65) == OTHER


def test_completed_run_figures() -> None:
    clock = FakeClock()
    m = GatewayMetrics(clock=clock, providers=["demo"])
    tracker = m.run_tracker("demo")
    assert sample(m, "agent_gateway_active_runs", provider="demo") == 1
    tracker.on_event(ev("run.started"))
    clock.now += 0.2
    tracker.on_event(ev("message.started", {"messageId": "m1", "role": "assistant"}))
    tracker.on_event(ev("message.delta", {"messageId": "m1", "delta": "hi"}))
    clock.now += 1.0
    tracker.on_event(ev("run.completed"))
    tracker.on_event(ev("run.completed"))  # fed twice: counted once
    assert sample(m, "agent_gateway_runs_started_total", provider="demo") == 1
    assert sample(m, "agent_gateway_runs_ended_total", provider="demo", outcome="completed") == 1
    assert sample(m, "agent_gateway_active_runs", provider="demo") == 0
    assert sample(m, "agent_gateway_events_total", type="message.delta") == 1
    assert sample(m, "agent_gateway_events_total", type="run.completed") == 2
    assert sample(m, "agent_gateway_time_to_first_event_seconds_sum", provider="demo") == (
        pytest.approx(0.2)
    )
    assert sample(
        m, "agent_gateway_run_duration_seconds_sum", provider="demo", outcome="completed"
    ) == (pytest.approx(1.2))
    assert tracker.ended


def test_time_to_first_event_skips_the_user_turn() -> None:
    clock = FakeClock()
    m = GatewayMetrics(clock=clock)
    tracker = m.run_tracker("demo")
    tracker.on_event(ev("session.started"))
    tracker.on_event(ev("run.started"))
    tracker.on_event(ev("message.started", {"messageId": "u", "role": "user", "content": "q"}))
    tracker.on_event(ev("message.completed", {"messageId": "u"}))
    clock.now += 0.7
    tracker.on_event(ev("reasoning.started", {"reasoningId": "r"}))
    clock.now += 5
    tracker.on_event(ev("run.completed"))
    assert sample(m, "agent_gateway_time_to_first_event_seconds_sum", provider="demo") == (
        pytest.approx(0.7)
    )


async def test_finish_counts_the_runs_protocol_issues_and_closes() -> None:
    m = GatewayMetrics()
    tracker = m.run_tracker("demo")
    issues = [
        {"code": "missing_entity", "runId": "run_1", "eventId": "e1", "message": "x"},
        {"code": "missing_entity", "runId": "run_0", "eventId": "e0", "message": "old run"},
        {"code": "invalid_sequence", "runId": "run_1", "eventId": "e2", "message": "y"},
    ]

    async def run_issues() -> list[dict[str, Any]]:
        return issues

    await tracker.finish("run_1", run_issues, cancelled=True)
    assert sample(m, "agent_gateway_protocol_issues_total", code="missing_entity") == 1
    assert sample(m, "agent_gateway_protocol_issues_total", code="invalid_sequence") == 1
    assert sample(m, "agent_gateway_runs_ended_total", provider="demo", outcome="cancelled") == 1

    async def broken() -> list[dict[str, Any]]:
        raise ConnectionError("backend down")

    other = m.run_tracker("demo")
    await other.finish("run_2", broken)  # a failing read never breaks the run's end
    assert sample(m, "agent_gateway_runs_ended_total", provider="demo", outcome="failed") == 1


def _figures(m: GatewayMetrics) -> dict[str, float]:
    """Every sample of the registry except the run tracker's own durations' buckets."""
    return {
        f"{s.name}{sorted(s.labels.items())}": s.value
        for family in m.registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_on_events_in_batches_gives_the_figures_of_one_event_at_a_time() -> None:
    """The hot path feeds the tracker one batch per upstream read: the counters, the time to
    first event (after the user turn) and the terminal come out as with one call per event."""
    run = [
        ev("session.started"),
        ev("run.started"),
        ev("message.started", {"messageId": "u", "role": "user", "content": "q"}),
        ev("message.completed", {"messageId": "u"}),
        ev("message.started", {"messageId": "m", "role": "assistant"}),
        *[ev("message.delta", {"messageId": "m", "delta": "x"}) for _ in range(40)],
        ev("message.completed", {"messageId": "m"}),
        ev("run.failed", {"error": {"code": "upstream_http_error", "message": "x"}}),
        ev("message.delta", {"messageId": "m", "delta": "late"}),  # after the end: counted
    ]
    for size in (1, 3, 16, len(run)):
        one_clock, batch_clock = FakeClock(), FakeClock()
        one = GatewayMetrics(clock=one_clock)
        batched = GatewayMetrics(clock=batch_clock)
        t_one, t_batched = one.run_tracker("demo"), batched.run_tracker("demo")
        for start in range(0, len(run), size):
            part = run[start : start + size]
            for event in part:
                t_one.on_event(event)
            t_batched.on_events(part)
            one_clock.now += 0.25
            batch_clock.now += 0.25
        assert t_batched.ended
        assert _figures(batched) == _figures(one), size
        assert sample(batched, "agent_gateway_events_total", type="message.delta") == 41


def test_batched_event_counts_lag_at_most_a_bound_and_are_complete_at_the_end() -> None:
    clock = FakeClock()
    m = GatewayMetrics(clock=clock)
    tracker = m.run_tracker("demo")
    tracker.on_events([ev("run.started"), ev("message.started", {"messageId": "m"})])
    delta = ev("message.delta", {"messageId": "m", "delta": "x"})
    for _ in range(COUNT_EVERY_EVENTS - 3):
        tracker.on_events([delta])
    assert (sample(m, "agent_gateway_events_total", type="message.delta") or 0) == 0
    tracker.on_events([delta])  # the COUNT_EVERY_EVENTS-th event: all counted
    assert sample(m, "agent_gateway_events_total", type="message.delta") == COUNT_EVERY_EVENTS - 2
    tracker.on_events([delta])
    clock.now += COUNT_EVERY_SECONDS
    tracker.on_events([delta])  # a slow stream: counted once a second
    assert sample(m, "agent_gateway_events_total", type="message.delta") == COUNT_EVERY_EVENTS
    tracker.on_events([delta, ev("run.completed")])  # the end counts what is left
    assert sample(m, "agent_gateway_events_total", type="message.delta") == COUNT_EVERY_EVENTS + 1
    assert sample(m, "agent_gateway_events_total", type="run.completed") == 1


def test_failed_run_counts_upstream_error_code() -> None:
    m = GatewayMetrics()
    tracker = m.run_tracker("openai")
    tracker.on_event(ev("run.failed", {"error": {"code": "upstream_http_error", "message": "x"}}))
    other = m.run_tracker("openai")
    other.on_event(ev("run.failed", {"error": {"code": "some-random-code", "message": "x"}}))
    assert (
        sample(
            m, "agent_gateway_upstream_errors_total", provider="openai", code="upstream_http_error"
        )
        == 1
    )
    assert sample(m, "agent_gateway_upstream_errors_total", provider="openai", code=OTHER) == 1
    assert sample(m, "agent_gateway_runs_ended_total", provider="openai", outcome="failed") == 2


def test_abort_latency_measured_to_cancelled_terminal() -> None:
    clock = FakeClock()
    m = GatewayMetrics(clock=clock)
    tracker = m.run_tracker("demo")
    tracker.on_event(ev("run.started"))
    clock.now += 3
    tracker.abort_requested()
    clock.now += 0.05
    tracker.on_event(ev("run.cancelled", {"reason": "aborted"}))
    assert sample(m, "agent_gateway_abort_latency_seconds_sum", provider="demo") == pytest.approx(
        0.05
    )
    assert sample(m, "agent_gateway_abort_latency_seconds_count", provider="demo") == 1


def test_close_without_terminal_counts_failed_once() -> None:
    m = GatewayMetrics()
    tracker = m.run_tracker("demo")
    tracker.close()
    tracker.close()
    assert sample(m, "agent_gateway_runs_ended_total", provider="demo", outcome="failed") == 1
    assert sample(m, "agent_gateway_active_runs", provider="demo") == 0


def test_subscribers_backend_issues_dropped() -> None:
    m = GatewayMetrics()
    with m.track_subscriber("sse"):
        assert sample(m, "agent_gateway_subscribers", transport="sse") == 1
    assert sample(m, "agent_gateway_subscribers", transport="sse") == 0
    with m.backend_op("redis", "append"):
        pass
    with pytest.raises(RuntimeError), m.backend_op("redis", "append"):
        raise RuntimeError("down")
    assert sample(m, "agent_gateway_backend_op_seconds_count", backend="redis", op="append") == 2
    assert sample(m, "agent_gateway_backend_op_errors_total", backend="redis", op="append") == 1
    m.protocol_issues_from([{"code": "missing_entity"}, {"code": "bogus"}])
    assert sample(m, "agent_gateway_protocol_issues_total", code="missing_entity") == 1
    assert sample(m, "agent_gateway_protocol_issues_total", code=OTHER) == 1
    m.subscriber_dropped("ws")
    assert sample(m, "agent_gateway_dropped_subscribers_total", transport="ws") == 1


def test_render_is_parseable_and_never_holds_unbounded_values() -> None:
    m = GatewayMetrics(providers=["demo"])
    for i in range(100):
        m.run_tracker(f"conv-key-{i}").close()
        m.observe_event(f"custom.{i}")
    text = m.render().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "agent_gateway_runs_started" in families
    providers = {s.labels["provider"] for s in families["agent_gateway_runs_started"].samples}
    assert len(providers) <= 33  # 32 kept + "other"
    types = {s.labels["type"] for s in families["agent_gateway_events"].samples}
    assert types == {OTHER}
    assert "conv-key-99" not in text


def test_registries_are_independent() -> None:
    a, b = GatewayMetrics(), GatewayMetrics()
    a.run_tracker("demo")
    assert sample(b, "agent_gateway_runs_started_total", provider="demo") is None


def test_abort_signal_callback_feeds_abort_latency() -> None:
    from providers.signal import AbortSignal

    clock = FakeClock()
    m = GatewayMetrics(clock=clock)
    signal = AbortSignal()
    tracker = m.run_tracker("demo", abort_signal=signal)
    clock.now += 1
    signal.abort("aborted")
    clock.now += 0.25
    tracker.on_event(ev("run.cancelled", {"reason": "aborted"}))
    assert sample(m, "agent_gateway_abort_latency_seconds_sum", provider="demo") == pytest.approx(
        0.25
    )


class _DownOnRead(MemoryBackend):
    """A memory backend whose reads fail as Redis does when it is down."""

    def __init__(self) -> None:
        super().__init__()
        self.woken = 0

    async def read(
        self,
        ref: ConversationRef,
        after: str,
        *,
        limit: int,
        wait: float,
        sink: ReadSink | None = None,
    ) -> ReadResult:
        raise ConnectionError("redis down")

    def wake_readers(self) -> None:
        self.woken += 1


async def test_instrumented_backend_times_ops_and_counts_errors() -> None:
    m = GatewayMetrics()
    inner = _DownOnRead()
    backend = InstrumentedBackend(inner, m, "memory")
    ref = ConversationRef("p", "c")
    now = 1.0
    assert await backend.create_conversation(ref, ConversationMeta("s", now, now))
    entry = await backend.append_event(
        ref, {"type": "run.started", "runId": "r1", "sessionId": "s"}
    )
    assert entry.event_type == "run.started"
    assert (await inner.snapshot(ref)) is not None
    backend.wake_readers()
    assert inner.woken == 1
    with pytest.raises(ConnectionError):
        await backend.read(ref, "0", limit=10, wait=0)
    assert (
        sample(m, "agent_gateway_backend_op_seconds_count", backend="memory", op="append_event")
        == 1
    )
    assert (
        sample(m, "agent_gateway_backend_op_errors_total", backend="memory", op="append_event") == 0
    )
    assert sample(m, "agent_gateway_backend_op_errors_total", backend="memory", op="read") == 1
    assert sample(m, "agent_gateway_backend_op_seconds_count", backend="memory", op="read") is None


class _Ticking:
    """A clock that moves ``step`` seconds per reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def test_instrumented_append_batch_times_each_call_and_counts_its_errors() -> None:
    """``append_batch`` (timed inline, not through ``_call``) observes one latency per call,
    into the right bucket, and counts a failed call as one error."""
    m = GatewayMetrics(clock=_Ticking(0.003))
    backend = InstrumentedBackend(MemoryBackend(), m, "memory")
    ref = ConversationRef("p", "c")
    await backend.create_conversation(ref, ConversationMeta("s", 1.0, 1.0))
    started = {"type": "run.started", "runId": "r1", "sessionId": "s", "eventId": "e"}
    entries = await backend.append_batch(ref, [LogItem.of_event(started)])
    assert [e.event_type for e in entries] == ["run.started"]
    await backend.append_batch(ref, [])
    with pytest.raises(KeyError):  # another incarnation's event: all or nothing
        await backend.append_batch(ref, [LogItem.of_event({**started, "sessionId": "old"})])
    labels = {"backend": "memory", "op": "append_batch"}
    assert sample(m, "agent_gateway_backend_op_seconds_count", **labels) == 3
    assert sample(m, "agent_gateway_backend_op_seconds_sum", **labels) == pytest.approx(0.009)
    assert sample(m, "agent_gateway_backend_op_seconds_bucket", le="0.0025", **labels) == 0
    assert sample(m, "agent_gateway_backend_op_seconds_bucket", le="0.005", **labels) == 3
    assert sample(m, "agent_gateway_backend_op_errors_total", **labels) == 1


async def test_instrumented_append_soon_is_timed_and_counted_as_append_batch() -> None:
    """A write not waited for is the same operation: one latency per call, its error counted,
    and its outcome handed on unchanged."""
    m = GatewayMetrics(clock=_Ticking(0.003))
    backend = InstrumentedBackend(SoonMemoryBackend(), m, "memory")
    ref = ConversationRef("p", "c")
    await backend.create_conversation(ref, ConversationMeta("s", 1.0, 1.0))
    started = {"type": "run.started", "runId": "r1", "sessionId": "s", "eventId": "e"}
    outcomes: list[tuple[Any, Any]] = []
    for event in (started, {**started, "sessionId": "old"}):
        assert backend.append_soon(
            ref, [LogItem.of_event(event)], lambda e, x: outcomes.append((e, x))
        )
    await eventually(lambda: len(outcomes) == 2, what="both outcomes")
    (entries, error), (none, failure) = outcomes
    assert error is None and [e.event_type for e in entries] == ["run.started"]
    assert none is None and isinstance(failure, KeyError)
    labels = {"backend": "memory", "op": "append_batch"}
    assert sample(m, "agent_gateway_backend_op_seconds_count", **labels) == 2
    assert sample(m, "agent_gateway_backend_op_errors_total", **labels) == 1


def test_instrumented_backend_delegates_every_backend_operation() -> None:
    """A Backend method it does not define itself would not reach the wrapped backend."""
    operations = {
        name
        for klass in Backend.__mro__
        if klass.__module__.startswith("app.backends")
        for name, value in vars(klass).items()
        if callable(value) and not name.startswith("_")
    }
    assert len(operations) >= 26
    assert operations <= set(vars(InstrumentedBackend)), operations - set(vars(InstrumentedBackend))


async def test_instrumented_backend_times_and_passes_on_every_operation_it_makes() -> None:
    """The operations made from the interface (all but the hot ones written out) reach the
    inner backend with their arguments, answer its result and count a call and an error
    under their own name (the long polls only their errors)."""
    hand_written = {"append_batch", "append_soon", "read"}
    made = {op: c for op, c in backend_operations().items() if op not in hand_written}
    assert len(made) >= 30
    calls: list[tuple[str, tuple[object, ...], dict[str, object]]] = []
    inner = MemoryBackend()
    for op, coroutine in made.items():

        def sync(*args: object, _op: str = op, **kwargs: object) -> object:
            calls.append((_op, args, kwargs))
            if kwargs.get("fail"):
                raise ConnectionError(_op)
            return f"{_op}!"

        async def coro(*args: object, _sync: Any = sync, **kwargs: object) -> object:
            return _sync(*args, **kwargs)

        setattr(inner, op, coro if coroutine else sync)
    m = GatewayMetrics()
    backend = InstrumentedBackend(inner, m, "memory")
    for op, coroutine in made.items():
        for fail in (False, True):
            calls.clear()
            call = getattr(backend, op)
            try:
                result = await call(op, fail=fail) if coroutine else call(op, fail=fail)
            except ConnectionError as exc:
                assert fail and str(exc) == op
            else:
                assert not fail and result == f"{op}!"
            assert calls == [(op, (op,), {"fail": fail})]
        labels = {"backend": "memory", "op": op}
        timed = coroutine and op != "wait_run_slot"  # a wait: only its errors count
        count = sample(m, "agent_gateway_backend_op_seconds_count", **labels)
        assert count == (2 if timed else None), op
        errors = sample(m, "agent_gateway_backend_op_errors_total", **labels)
        assert errors == (1 if coroutine else None), op


async def test_instrumented_backend_names_the_backend_from_its_class() -> None:
    m = GatewayMetrics()
    inner = MemoryBackend()
    backend = InstrumentedBackend(inner, m)
    assert await backend.ping()
    assert backend.inner is inner
    assert sample(m, "agent_gateway_backend_op_seconds_count", backend="memory", op="ping") == 1


# -- /metrics of a real gateway --------------------------------------------------------------


def _scrape(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_gateway_metrics_endpoint(start_gateway: StartGateway, backend_kind: str) -> None:
    settings = make_settings(providers={"demo": {"kind": "local-demo", "delay_ms": 1}})
    gw = await start_gateway(settings)
    key = "metrics-conversation-key"
    async with gw.client() as client:
        stream = asyncio.create_task(
            collect_sse(
                client,
                f"/v1/conversations/{key}/events",
                stop=lambda frames: (
                    sum(
                        e["type"].startswith("run.") and e["type"] != "run.started"
                        for e in events_of(frames)
                    )
                    == 3
                ),
            )
        )
        await wait_metric(client, "agent_gateway_subscribers", 1)
        during = _scrape((await client.get("/metrics")).text)
        assert _value(during, "agent_gateway_subscribers", transport="sse") == 1

        await start_run(client, key, "hello")
        await wait_state(client, key, lambda s: not s["isRequesting"])
        await start_run(client, key, "fail please")
        await wait_state(client, key, lambda s: not s["isRequesting"])
        answer = await start_run(client, key, "slow")
        await wait_state(client, key, lambda s: len(s["messages"]) >= 6)
        abort = await client.post(f"/v1/conversations/{key}/abort", json={})
        assert abort.status_code == 202
        await wait_state(client, key, lambda s: not s["isRequesting"])
        await asyncio.wait_for(stream, 10)
        for _ in range(100):  # the server notices the closed stream shortly after
            response = await client.get("/metrics")
            if _value(_scrape(response.text), "agent_gateway_subscribers", transport="sse") == 0:
                break
            await asyncio.sleep(0.05)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    m = _scrape(text)
    assert _value(m, "agent_gateway_runs_started_total", provider="demo") == 3
    for outcome in ("completed", "failed", "cancelled"):
        assert _value(m, "agent_gateway_runs_ended_total", provider="demo", outcome=outcome) == 1
    assert _value(m, "agent_gateway_active_runs", provider="demo") == 0
    assert _value(m, "agent_gateway_events_total", type="run.started") == 3
    assert _value(m, "agent_gateway_events_total", type="session.started") == 1
    assert _value(m, "agent_gateway_events_total", type="message.delta") > 10
    assert (
        _value(m, "agent_gateway_upstream_errors_total", provider="demo", code="upstream_error")
        == 1
    )
    assert _value(m, "agent_gateway_time_to_first_event_seconds_count", provider="demo") == 3
    assert (
        _value(m, "agent_gateway_run_duration_seconds_count", provider="demo", outcome="completed")
        == 1
    )
    assert _value(m, "agent_gateway_abort_latency_seconds_count", provider="demo") == 1
    assert _value(m, "agent_gateway_abort_latency_seconds_sum", provider="demo") < 5
    assert (
        _value(m, "agent_gateway_backend_op_seconds_count", backend=backend_kind, op="append_batch")
        >= 3  # runs log their events in batches: at least one per run
    )
    assert _value(m, "agent_gateway_protocol_issues_total", code="missing_entity") == 0
    assert _value(m, "agent_gateway_subscribers", transport="sse") == 0
    assert answer["runId"] not in text
    assert key not in text  # never the conversation key as a label value


async def test_run_starts_gauge_reads_the_slots_the_manager_holds_at_each_scrape() -> None:
    m = GatewayMetrics()
    holder = {"slots": StartSlots(1)}
    m.watch_start_slots(lambda: holder["slots"])
    assert sample(m, "agent_gateway_run_starts", state="in_progress") == 0
    await holder["slots"].acquire()
    waiter = asyncio.create_task(holder["slots"].acquire())
    await eventually(lambda: holder["slots"].waiting == 1, what="one waiting")
    assert sample(m, "agent_gateway_run_starts", state="in_progress") == 1
    assert sample(m, "agent_gateway_run_starts", state="waiting") == 1
    holder["slots"].release()  # handed to the waiter
    await waiter
    assert sample(m, "agent_gateway_run_starts", state="waiting") == 0
    holder["slots"] = StartSlots(4)  # replaced: the next scrape reads the new one
    assert sample(m, "agent_gateway_run_starts", state="in_progress") == 0
