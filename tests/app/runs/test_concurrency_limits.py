"""``[limits]`` under concurrent requests, on one instance and (Redis) split over two: each
counter is checked and recorded atomically and, on Redis, shared, so the instances together
admit exactly what one admits; refused requests do not count; stream slots free themselves."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.backends import ConversationRef
from app.backends.redis import RedisBackend
from app.backends.redis.limits import RedisLimits
from tests.app.runs.concurrency_support import CountingProvider, Gateways, gateways
from tests.app.support.gateway_server import RunningGateway, make_settings
from tests.app.support.helpers import wait_state

#: Also on the Redis Cluster backend (issue 52).
pytestmark = pytest.mark.on_redis_cluster

__all__ = ["gateways"]

REQUESTS = 20
LIMIT = 3


async def _pair(gateways: Gateways, **limits: Any) -> list[RunningGateway]:
    settings = make_settings(limits=limits, gateway={"heartbeat_seconds": 1})
    first = await gateways(settings, providers={"demo": CountingProvider()})
    if not gateways.shared:
        return [first]
    return [first, await gateways(settings, providers={"demo": CountingProvider()})]


@contextlib.asynccontextmanager
async def _clients(instances: list[RunningGateway]) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(gw.client()) for gw in instances]


def _outcomes(answers: list[httpx.Response]) -> Counter[tuple[int, str | None]]:
    return Counter(
        (a.status_code, a.json().get("error", {}).get("code") if a.status_code >= 400 else None)
        for a in answers
    )


async def _post_runs(
    clients: list[httpx.AsyncClient], keys: list[str], prompt: str = "text:1"
) -> list[httpx.Response]:
    """One POST …/runs per key, all at once, spread over the instances."""
    return list(
        await asyncio.gather(
            *(
                clients[i % len(clients)].post(
                    f"/v1/conversations/{key}/runs", json={"input": {"prompt": prompt}}
                )
                for i, key in enumerate(keys)
            )
        )
    )


async def test_runs_per_minute_admit_exactly_the_limit(gateways: Gateways) -> None:
    instances = await _pair(gateways, runs_per_minute_per_principal=LIMIT)
    async with _clients(instances) as clients:
        answers = await _post_runs(clients, [f"rate-{i}" for i in range(REQUESTS)])
    assert _outcomes(answers) == {(202, None): LIMIT, (429, "rate_limited"): REQUESTS - LIMIT}
    assert all(int(a.headers["retry-after"]) >= 1 for a in answers if a.status_code == 429)


async def test_refused_runs_do_not_count_against_the_rate(gateways: Gateways) -> None:
    instances = await _pair(gateways, runs_per_minute_per_principal=LIMIT)
    async with _clients(instances) as clients:
        # One run, long enough that it is still running when the last POST arrives: the rest
        # are refused (a run that had already ended would let the next one start).
        same = await _post_runs(clients, ["busy"] * REQUESTS, prompt="text:1 sleep:3")
        outcomes = _outcomes(same)
        assert outcomes[(202, None)] == 1
        # 409, or 429 while requests refused a moment later still held their place.
        assert set(outcomes) <= {(202, None), (409, "run_in_progress"), (429, "rate_limited")}
        assert outcomes[(409, "run_in_progress")] >= 1
        rest = await _post_runs(clients, [f"more-{i}" for i in range(REQUESTS)])
    assert _outcomes(rest)[(202, None)] == LIMIT - 1


async def test_conversations_per_principal_admit_exactly_the_limit(gateways: Gateways) -> None:
    instances = await _pair(gateways, max_conversations_per_principal=LIMIT)
    async with _clients(instances) as clients:
        answers = await _post_runs(clients, [f"conv-{i}" for i in range(REQUESTS)])
        outcomes = _outcomes(answers)
        assert outcomes == {
            (202, None): LIMIT,
            (429, "too_many_conversations"): REQUESTS - LIMIT,
        }
        listed = (await clients[-1].get("/v1/conversations")).json()
        assert len(listed["conversations"]) == LIMIT
        # A DELETE frees one: a new conversation is admitted again (and only one).
        accepted = next(a.json()["conversationKey"] for a in answers if a.status_code == 202)
        await wait_state(clients[0], accepted, lambda s: not s["isRequesting"])
        assert (await clients[0].delete(f"/v1/conversations/{accepted}")).status_code == 204
        again = await _post_runs(clients, [f"again-{i}" for i in range(REQUESTS)])
    assert _outcomes(again)[(202, None)] == 1


async def _open_streams(
    clients: list[httpx.AsyncClient], paths: list[str], stack: contextlib.AsyncExitStack
) -> list[int]:
    """Open one SSE stream per path at once (kept open in ``stack``); their status codes."""

    async def one(i: int, path: str) -> int:
        response = await stack.enter_async_context(clients[i % len(clients)].stream("GET", path))
        return response.status_code

    return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(paths))))


async def test_subscribers_admit_exactly_the_limits(gateways: Gateways) -> None:
    instances = await _pair(
        gateways, max_subscribers_per_conversation=2, max_subscribers_per_principal=LIMIT + 1
    )
    async with _clients(instances) as clients:
        async with contextlib.AsyncExitStack() as stack:
            codes = await _open_streams(clients, ["/v1/conversations/s1/events"] * 10, stack)
            assert Counter(codes) == {200: 2, 429: 8}
            others = [f"/v1/conversations/s{i}/events" for i in range(2, 12)]
            codes = await _open_streams(clients, others, stack)
            assert Counter(codes) == {200: LIMIT - 1, 429: 10 - (LIMIT - 1)}
        # Closed streams free their slots (on every instance).
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(100):
                codes = await _open_streams(clients, ["/v1/conversations/s1/events"] * 2, stack)
                if codes == [200, 200]:
                    break
                await stack.aclose()
            assert codes == [200, 200]


@pytest.mark.only_backend("redis", reason="on one instance, its stream slots die with it")
async def test_stream_slots_of_a_dead_instance_expire(gateways: Gateways) -> None:
    (gw,) = (await _pair(gateways, max_subscribers_per_conversation=1))[:1]
    inner = gw.gateway.backend.inner  # type: ignore[attr-defined]
    assert isinstance(inner, RedisBackend)
    # Never renewed; 2 s: the refusal below is asked well before it lapses, even under load.
    dead = RedisLimits(inner.redis, inner.prefix, slot_ttl_ms=2000)
    token, _ = await dead.take_subscriber(ConversationRef("anonymous", "s1"), 1, 100)
    assert token is not None
    async with gw.client() as client:
        async with client.stream("GET", "/v1/conversations/s1/events") as refused:
            assert refused.status_code == 429  # a stream: an accepted one would never end
        for _ in range(200):  # freed within the slot TTL, without anyone releasing it
            async with client.stream("GET", "/v1/conversations/s1/events") as response:
                if response.status_code == 200:
                    break
            await asyncio.sleep(0.02)
        assert response.status_code == 200
