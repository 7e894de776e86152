"""Idempotency-Key on runs, reload and command routes: one effect, the first answer, 409 on reuse.

The last test is the retry storm: one key, many concurrent requests spread over two gateway
processes on one Redis, exactly one run started.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from app.api import idempotency
from app.api.errors import ApiError
from app.backends import IdempotencyRecord
from app.backends.memory import MemoryBackend
from app.cli.gateway import openapi_document
from tests.app.support.cluster_support import STEADY_LEASE_TTL, TERMINALS, cluster
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, events_of, start_run, wait_state
from tests.app.support.redis_support import (
    SHARED_REDIS_URL,
    GatewayProcess,
    shared_redis,
    stalled_key,
    unique_prefix,
)
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually_async

KEY = "idem-1"
RUNS = f"/v1/conversations/{KEY}/runs"
EVENTS = f"/v1/conversations/{KEY}/events"


def code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def idem(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider()


@pytest.fixture
async def gw(start_gateway: StartGateway, provider: ScriptedProvider) -> RunningGateway:
    settings = make_settings(gateway={"idempotency_ttl_seconds": 2})
    return await start_gateway(settings, providers={"demo": provider})


async def idle(client: httpx.AsyncClient, key: str = KEY) -> dict[str, Any]:
    return await wait_state(client, key, lambda s: not s["isRequesting"])


async def test_same_key_and_body_answers_the_first_answer_and_starts_nothing(
    gw: RunningGateway,
) -> None:
    async with gw.client() as client:
        body = {"input": {"prompt": "text:2"}}
        first = await client.post(RUNS, json=body, headers=idem("k1"))
        assert first.status_code == 202, first.text
        await idle(client)
        again = await client.post(RUNS, json=body, headers=idem("k1"))
        assert again.status_code == 202 and again.json() == first.json()
        state = await idle(client)
        assert list(state["agentState"]["runs"]) == [first.json()["runId"]]


async def test_same_key_other_body_route_or_conversation_is_409(gw: RunningGateway) -> None:
    async with gw.client() as client:
        first = await client.post(RUNS, json={"input": {"prompt": "text:1"}}, headers=idem("k2"))
        assert first.status_code == 202
        await idle(client)
        other_body = await client.post(
            RUNS, json={"input": {"prompt": "text:9"}}, headers=idem("k2")
        )
        assert code(other_body) == (409, "idempotency_key_reused")
        other_route = await client.post(
            f"/v1/conversations/{KEY}/reload", json={"input": {"prompt": "text:1"}},
            headers=idem("k2"),
        )  # fmt: skip
        assert code(other_route) == (409, "idempotency_key_reused")
        other_conversation = await client.post(
            "/v1/conversations/idem-2/runs", json={"input": {"prompt": "text:1"}},
            headers=idem("k2"),
        )  # fmt: skip
        assert code(other_conversation) == (409, "idempotency_key_reused")
        assert (await client.get("/v1/conversations/idem-2/state")).status_code == 404
        state = await idle(client)
        assert list(state["agentState"]["runs"]) == [first.json()["runId"]]


async def test_without_a_key_every_request_is_a_new_run(gw: RunningGateway) -> None:
    async with gw.client() as client:
        body = {"input": {"prompt": "text:1"}}
        ids = []
        for headers in ({}, {"Idempotency-Key": ""}, {"Idempotency-Key": ""}):
            answer = await client.post(RUNS, json=body, headers=headers)
            assert answer.status_code == 202
            ids.append(answer.json()["runId"])
            await idle(client)
        assert len(set(ids)) == 3


async def test_concurrent_retries_on_one_instance_start_one_run(gw: RunningGateway) -> None:
    async with gw.client() as client:
        body = {"input": {"prompt": "text:3"}}
        answers = await asyncio.gather(
            *(client.post(RUNS, json=body, headers=idem("storm")) for _ in range(12))
        )
        assert {a.status_code for a in answers} == {202}
        assert len({a.json()["runId"] for a in answers}) == 1
        state = await idle(client)
        assert list(state["agentState"]["runs"]) == [answers[0].json()["runId"]]


async def test_reload_is_idempotent(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await client.post(RUNS, json={"input": {"prompt": "text:1"}})
        await idle(client)
        url = f"/v1/conversations/{KEY}/reload"
        first = await client.post(url, headers=idem("r1"))
        assert first.status_code == 202, first.text
        await idle(client)
        again = await client.post(url, headers=idem("r1"))
        assert again.json() == first.json()
        state = await idle(client)
        assert len(state["agentState"]["runs"]) == 2


async def test_a_refused_request_is_not_remembered(
    gw: RunningGateway, provider: ScriptedProvider
) -> None:
    async with gw.client() as client:
        busy = await client.post(RUNS, json={"input": {"prompt": "gate:hold"}})
        assert busy.status_code == 202
        body = {"input": {"prompt": "text:1"}}
        refused = await client.post(RUNS, json=body, headers=idem("later"))
        assert code(refused) == (409, "run_in_progress")
        provider.gates["hold"].set()
        await idle(client)
        accepted = await client.post(RUNS, json=body, headers=idem("later"))
        assert accepted.status_code == 202
        again = await client.post(RUNS, json=body, headers=idem("later"))
        assert again.json() == accepted.json()


async def test_keys_expire_after_the_ttl(gw: RunningGateway) -> None:
    async with gw.client() as client:
        body = {"input": {"prompt": "text:1"}}
        began = time.monotonic()
        first = await client.post(RUNS, json=body, headers=idem("ttl"))
        await idle(client)
        answers: list[httpx.Response] = []

        async def expired() -> bool:  # a retry within the TTL replays the first answer
            answers.append(await client.post(RUNS, json=body, headers=idem("ttl")))
            return bool(answers[-1].json().get("runId") != first.json()["runId"])

        await eventually_async(expired, within=15, what="the key expires")
        assert time.monotonic() - began > 1.5  # idempotency_ttl_seconds = 2
        assert all(a.json() == first.json() for a in answers[:-1])
        assert answers[-1].status_code == 202


async def test_streamed_retry_follows_the_first_run(gw: RunningGateway) -> None:
    async with gw.client() as client:
        body = {"input": {"prompt": "text:2"}}
        first = await client.post(RUNS, json=body, headers=idem("s1"))
        run_id = first.json()["runId"]
        streamed = await client.post(RUNS + "?stream=true", json=body, headers=idem("s1"))
        assert streamed.status_code == 200
        assert f'"runId":"{run_id}"' in streamed.text and "run.completed" in streamed.text
        state = await idle(client)
        assert list(state["agentState"]["runs"]) == [run_id]


async def test_command_with_a_key_is_answered_once(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await client.post(RUNS, json={"input": {"prompt": "approval:a1"}})
        await wait_state(client, KEY, lambda s: bool(s["agentState"]["approvals"]))
        url = f"/v1/conversations/{KEY}/approvals/a1"
        answers = await asyncio.gather(
            *(client.post(url, json={"decision": "approved"}, headers=idem("c1")) for _ in range(5))
        )
        assert {a.status_code for a in answers} == {202}
        assert len({a.text for a in answers}) == 1
        other = await client.post(url, json={"decision": "rejected"}, headers=idem("c1"))
        assert code(other) == (409, "idempotency_key_reused")
        state = await idle(client)
        approval = next(iter(state["agentState"]["approvals"].values()))
        assert approval["decision"] == "approved"


# --- two instances on one Redis ---------------------------------------------------------------


@pytest.mark.only_backend("redis", reason="gateway processes sharing one Redis")
async def test_retry_storm_across_two_instances_starts_exactly_one_run() -> None:
    async with (
        cluster() as (a, b),
        httpx.AsyncClient(base_url=a.url, timeout=20) as ca,
        httpx.AsyncClient(base_url=b.url, timeout=20) as cb,
    ):
        body = {"input": {"prompt": "text:3 sleep:0.3"}}
        clients = [ca, cb] * 10
        answers = await asyncio.gather(
            *(c.post(RUNS, json=body, headers=idem("storm-1")) for c in clients)
        )
        assert {r.status_code for r in answers} == {202}, [r.text for r in answers]
        assert len({r.text for r in answers}) == 1  # byte-identical first answer everywhere
        run_id = answers[0].json()["runId"]
        for client in (ca, cb):
            state = await idle(client)
            assert list(state["agentState"]["runs"]) == [run_id]
            assert state["agentState"]["runs"][run_id]["status"] == "completed"
        other = await cb.post(RUNS, json={"input": {"prompt": "x"}}, headers=idem("storm-1"))
        assert code(other) == (409, "idempotency_key_reused")


@pytest.mark.only_backend("redis", reason="gateway processes sharing one Redis, one of them killed")
async def test_a_claim_left_by_a_killed_instance_lapses_within_seconds() -> None:
    """A kills -9 while it holds the key's claim mid-request: the retry on B is answered fast."""
    prefix = unique_prefix()
    async with shared_redis(prefix) as redis:
        a = GatewayProcess("A", SHARED_REDIS_URL, prefix, lease_ttl=3.0)
        a.args += ["--hold-conversation", KEY]
        b = GatewayProcess("B", SHARED_REDIS_URL, prefix, lease_ttl=3.0)
        try:
            a.start()
            b.start()
            await asyncio.gather(a.wait_ready(), b.wait_ready())
            body = {"input": {"prompt": "text:2"}}
            async with (
                httpx.AsyncClient(base_url=a.url, timeout=60) as ca,
                httpx.AsyncClient(base_url=b.url, timeout=60) as cb,
            ):
                first = asyncio.ensure_future(ca.post(RUNS, json=body, headers=idem("dies-1")))

                async def claimed() -> bool:
                    return bool([k async for k in redis.scan_iter(match=f"{prefix}:idem:*")])

                await eventually_async(claimed, within=20, what="A claims the key")
                a.kill()
                with pytest.raises(httpx.TransportError):
                    await first
                began = time.monotonic()
                retry = await cb.post(RUNS, json=body, headers=idem("dies-1"))
                elapsed = time.monotonic() - began
                assert retry.status_code == 202, retry.text
                assert elapsed < 10, elapsed  # the claim's TTL (5 s) plus B's own work
                state = await idle(cb)
                assert list(state["agentState"]["runs"]) == [retry.json()["runId"]]
                again = await cb.post(RUNS, json=body, headers=idem("dies-1"))
                assert again.text == retry.text
        finally:
            a.close()
            b.close()


@pytest.mark.only_backend(
    "redis", reason="an instance killed after it accepted a run: gateway processes on Redis"
)
@pytest.mark.parametrize(
    ("multitask", "prompt", "end"),
    [("reject", "text:1 sleep:60", "run.failed"), ("enqueue", "text:2", "run.completed")],
)
async def test_a_run_accepted_by_a_killed_instance_is_what_the_retry_answers(
    multitask: str, prompt: str, end: str
) -> None:
    """A accepts the run (it claims the slot and starts it, or queues it behind a run on B),
    then dies (kill -9) before it stores its answer. The retry on B answers that run, as A
    would have, and starts no second one; the run ends in exactly one terminal event (a started
    run: the lost owner's ``run.failed``; a queued one: B adopts it and runs it)."""
    prefix = unique_prefix()
    async with shared_redis(prefix) as redis:
        a = GatewayProcess("A", SHARED_REDIS_URL, prefix, lease_ttl=STEADY_LEASE_TTL)
        a.args.append("--stall-idempotent-answers")
        b = GatewayProcess("B", SHARED_REDIS_URL, prefix, lease_ttl=STEADY_LEASE_TTL)
        try:
            a.start()
            b.start()
            await asyncio.gather(a.wait_ready(), b.wait_ready())
            async with (
                httpx.AsyncClient(base_url=a.url, timeout=60) as ca,
                httpx.AsyncClient(base_url=b.url, timeout=60) as cb,
            ):
                earlier = []
                if multitask == "enqueue":  # A's run waits behind this one, until it is approved
                    earlier.append((await start_run(cb, KEY, "approval:a1 text:1"))["runId"])
                    await wait_state(cb, KEY, lambda s: bool(s["agentState"]["approvals"]))
                body = {"input": {"prompt": prompt}, "multitask": multitask}
                first = asyncio.ensure_future(ca.post(RUNS, json=body, headers=idem("dies-2")))

                async def answer_stalled() -> bool:
                    return bool(await redis.exists(stalled_key(prefix)))

                await eventually_async(answer_stalled, within=20, what="A accepted the run")
                a.kill()
                with pytest.raises(httpx.TransportError):
                    await first
                retry = await cb.post(RUNS, json=body, headers=idem("dies-2"))
                assert retry.status_code == 202, retry.text
                answer = retry.json()
                assert answer["status"] == ("queued" if multitask == "enqueue" else "started")
                run_id = answer["runId"]
                if earlier:
                    queued = await cb.get(f"{RUNS}/{run_id}")
                    assert queued.json()["status"] == "queued", queued.text
                    approve = f"/v1/conversations/{KEY}/approvals/a1"
                    approved = await cb.post(approve, json={"decision": "approved"})
                    assert approved.status_code == 202, approved.text
                record = await cb.get(f"{RUNS}/{run_id}/wait", params={"timeout": 30})
                assert record.status_code == 200, record.text
                assert record.json()["status"] == end.removeprefix("run."), record.text
                state = await idle(cb)
                assert list(state["agentState"]["runs"]) == [*earlier, run_id]  # no second run
                frames = await collect_sse(cb, EVENTS, params={"since": "0", "untilIdle": "true"})
                ends = [
                    e
                    for e in events_of(frames)
                    if e["runId"] == run_id and e["type"] in ("run.started", *TERMINALS)
                ]
                assert [e["type"] for e in ends] == ["run.started", end]
                if end == "run.failed":
                    assert ends[-1]["payload"]["error"]["code"] == "gateway_instance_lost"
                again = await cb.post(RUNS, json=body, headers=idem("dies-2"))
                assert again.status_code == 202 and again.json() == answer
        finally:
            a.close()
            b.close()


def test_idempotency_key_is_in_the_openapi_document() -> None:
    paths = openapi_document()["paths"]
    base = "/v1/conversations/{conversationKey}"
    for path in (
        f"{base}/runs",
        f"{base}/reload",
        f"{base}/approvals/{{approvalId}}",
        f"{base}/tools/{{toolCallId}}/result",
        f"{base}/tools/{{toolCallId}}/retry",
    ):
        names = {p["name"] for p in paths[path]["post"]["parameters"]}
        assert {"Idempotency-Key", "X-Act-As"} <= names, path
        assert "409" in paths[path]["post"]["responses"], path


class _AnswerStoreDown(MemoryBackend):
    """Claims work; storing an answer fails ``failures`` times (a Redis blip), then works."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        if ":claim:" not in scope and ":released:" not in scope and self.failures:
            self.failures -= 1
            raise ApiError(503, "backend_unavailable", "down")
        return await super().idempotency_put(scope, record, ttl)


@pytest.mark.parametrize("failures", [2, 1000])
async def test_work_done_is_answered_even_when_its_answer_cannot_be_stored(
    failures: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idempotency, "STORE_RETRY_SECONDS", 0.5)
    backend = _AnswerStoreDown(failures)
    produced: list[int] = []

    async def produce() -> dict[str, Any]:
        produced.append(1)
        return {"runId": "run_1"}

    answer = await idempotency._once(backend, "key:p:k", "fp", 60, produce)
    assert answer == {"runId": "run_1"} and produced == [1]
    stored = await backend.idempotency_get("key:p:k")
    # A blip: the answer is stored after the retries; a long outage: answered unstored.
    assert (stored is not None) == (failures == 2)
