"""One trace across instances (two gateway processes on Redis, exporting to one receiver).

The issue's scenario: a run queued on A (its request continuing the caller's trace), A killed
(``kill -9``), B adopts the run and executes it as a child of A's request span; the abort is
sent to A, restarted: its ``abort_run`` span links to the run's span on B. The run A was
executing when it died is ended by B's reaper with ``end_lost_run``, a child of that run's span.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.app.support.cluster_support import LEASE_TTL, cluster
from tests.app.telemetry.otlp_receiver import OtlpReceiver, Span
from tests.app.telemetry.trees import one, render
from tests.support import eventually_async

pytestmark = pytest.mark.only_backend(
    "redis", reason="a run adopted and aborted across gateway processes: Redis only"
)

KEY = "across"
RUNNING_TRACE = "11111111111111111111111111111111"
QUEUED_TRACE = "22222222222222222222222222222222"
ABORT_TRACE = "33333333333333333333333333333333"


def traceparent(trace_id: str, span_id: str = "aaaaaaaaaaaaaaaa") -> str:
    return f"00-{trace_id}-{span_id}-01"


async def run_status(client: httpx.AsyncClient, run_id: str) -> str:
    answer = await client.get(f"/v1/conversations/{KEY}/runs/{run_id}")
    return str(answer.json().get("status")) if answer.status_code == 200 else ""


async def test_a_run_queued_on_a_killed_instance_adopted_elsewhere_and_aborted_is_one_trace(
    receiver: OtlpReceiver,
) -> None:
    async with cluster(lease_ttl=LEASE_TTL, telemetry=True) as (a, b):
        async with httpx.AsyncClient(base_url=a.url, timeout=10) as ca:
            running = await ca.post(
                f"/v1/conversations/{KEY}/runs",
                json={"input": {"prompt": "text:1 sleep:60"}},
                headers={"traceparent": traceparent(RUNNING_TRACE)},
            )
            queued = await ca.post(
                f"/v1/conversations/{KEY}/runs",
                json={"input": {"prompt": "text:1 sleep:60"}, "multitask": "enqueue"},
                headers={"traceparent": traceparent(QUEUED_TRACE)},
            )
            assert queued.json()["status"] == "queued"
        running_id, queued_id = running.json()["runId"], queued.json()["runId"]
        # A's request span of the queued run is exported (it ended with its 202) before A dies.
        await asyncio.to_thread(
            receiver.wait_for, lambda spans: any(s.trace_id == QUEUED_TRACE for s in spans)
        )
        a.kill()
        async with httpx.AsyncClient(base_url=b.url, timeout=10) as cb:

            async def adopted_and_running() -> bool:
                return await run_status(cb, queued_id) == "running"

            await eventually_async(adopted_and_running, LEASE_TTL * 3 + 15, "B runs the run")
        a.start()  # restarted: a new process, same port
        await a.wait_ready()
        async with httpx.AsyncClient(base_url=a.url, timeout=10) as ca:
            aborted = await ca.post(
                f"/v1/conversations/{KEY}/abort",
                json={"runId": queued_id},
                headers={"traceparent": traceparent(ABORT_TRACE)},
            )
            assert aborted.json() == {"runId": queued_id, "aborted": True}
            record = await ca.get(f"/v1/conversations/{KEY}/runs/{queued_id}/wait")
            assert record.json()["status"] == "cancelled"
            assert await run_status(ca, running_id) == "failed"  # ended by the reaper
        b.stop()  # graceful: each exports what it still holds
        a.stop()

    spans = receiver.wait_for(
        lambda found: {"invoke_agent demo", "abort_run", "end_lost_run"} <= {s.name for s in found}
    )
    ours = {RUNNING_TRACE, QUEUED_TRACE, ABORT_TRACE}
    print(render([s for s in spans if s.trace_id in ours]))  # the cross-instance trace (-s)

    def in_trace(trace_id: str) -> list[Span]:
        return [s for s in spans if s.trace_id == trace_id]

    queued_trace = in_trace(QUEUED_TRACE)
    request = one(queued_trace, "POST /v1/conversations/{conversationKey}/runs")
    run = one(queued_trace, "invoke_agent demo")
    assert run.parent_span_id == request.span_id  # B continued A's request
    assert run.attributes["agent_gateway.run.id"] == queued_id
    assert run.attributes["agent_gateway.run.status"] == "cancelled"
    assert ("run.abort", {"agent_gateway.abort.reason": "aborted"}) in run.events
    abort_trace = in_trace(ABORT_TRACE)
    abort = one(abort_trace, "abort_run")
    abort_request = one(abort_trace, "POST /v1/conversations/{conversationKey}/abort")
    assert abort.parent_span_id == abort_request.span_id
    links: list[Any] = [link[:2] for link in abort.links]
    assert links == [(QUEUED_TRACE, run.span_id)]  # linked to the run's span, on B
    lost = one(in_trace(RUNNING_TRACE), "end_lost_run")
    assert lost.attributes["agent_gateway.run.id"] == running_id
    assert (lost.status, lost.attributes["error.type"]) == ("ERROR", "gateway_instance_lost")
    accepted = one(in_trace(RUNNING_TRACE), "POST /v1/conversations/{conversationKey}/runs")
    # Its parent is the lost run's span (A's, never exported: A was killed while it ran).
    assert lost.parent_span_id not in ("", accepted.span_id)
