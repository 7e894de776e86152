"""Run starts in progress at once (``gateway.max_concurrent_starts``): the slots alone, then
concurrent starts over real connections on both backends (two instances on Redis)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import operator
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx

from app.runs.start_slots import Started, StartSlots
from providers.context import RunContext
from tests.app.runs.concurrency_support import CountingProvider, Gateways, gateways
from tests.app.support.gateway_server import RunningGateway, make_settings
from tests.app.support.helpers import metric_sample, wait_state
from tests.support import eventually

__all__ = ["gateways"]


def _completed(run_id: str) -> Callable[[dict[str, Any]], bool]:
    """A state predicate: ``run_id`` completed."""
    return lambda body: bool(body["agentState"]["runs"][run_id]["status"] == "completed")


async def _waiting(slots: StartSlots, name: str, order: list[str]) -> None:
    await slots.acquire()
    order.append(name)


async def test_the_limit_is_admitted_at_once_and_the_rest_in_arrival_order() -> None:
    slots = StartSlots(2)
    await slots.acquire()
    await slots.acquire()
    order: list[str] = []
    tasks = [asyncio.create_task(_waiting(slots, name, order)) for name in "abc"]
    await eventually(lambda: slots.waiting == 3, what="three waiting")
    assert order == [] and slots.held == 2
    for expected in (["a"], ["a", "b"], ["a", "b", "c"]):
        slots.release()  # handed over: as many held as before
        await eventually(functools.partial(operator.eq, order, expected), what=str(expected))
        assert slots.held == 2
    await asyncio.gather(*tasks)
    slots.release()
    slots.release()
    assert (slots.held, slots.waiting) == (0, 0)
    await slots.acquire()  # free again: no wait
    assert slots.held == 1


async def test_a_waiter_that_gives_up_leaves_no_hole_and_one_handed_a_slot_passes_it_on() -> None:
    slots = StartSlots(1)
    await slots.acquire()
    order: list[str] = []
    gives_up = asyncio.create_task(_waiting(slots, "gives up", order))
    handed = asyncio.create_task(_waiting(slots, "handed, then cancelled", order))
    last = asyncio.create_task(_waiting(slots, "last", order))
    await eventually(lambda: slots.waiting == 3, what="three waiting")
    gives_up.cancel()
    slots.release()  # to the next one still waiting: ``handed``
    handed.cancel()  # before it resumed: the slot goes on to ``last``
    await asyncio.wait_for(last, 5)
    assert gives_up.cancelled() and handed.cancelled()
    assert order == ["last"] and (slots.held, slots.waiting) == (1, 0)
    slots.release()
    assert slots.held == 0


async def test_a_start_gives_its_slot_back_once_started_or_after_the_bound() -> None:
    slots = StartSlots(2)
    await slots.acquire()
    await slots.acquire()
    started, never = Started(), Started()
    slots.release_when(started, 60)
    slots.release_when(never, 0.05)
    assert slots.held == 2
    started.set()
    assert slots.held == 1  # at once, from set()
    await eventually(lambda: slots.held == 0, what="the bound's release")
    never.set()  # later: nothing more is released
    assert slots.held == 0
    done = Started()
    done.set()
    await slots.acquire()
    slots.release_when(done, 60)  # already started: released now
    assert slots.held == 0


class HeldUpstream(CountingProvider):
    """Each run is noted as it reaches its upstream (after its ``run.started``), then held
    there until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> Any:
        request = await super().prepare_request(input, ctx)
        await self.release.wait()
        return request


class PeakSlots(StartSlots):
    """The slots, noting the most held at once, every acquisition and those that had to wait
    for their turn. A slot is given back only at its run's ``run.started`` (the bound after
    which a start gives it back anyway is lifted): what lets every run start is that alone."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.peak = 0
        self.acquired = 0
        self.waited = 0

    async def acquire(self) -> None:
        self.waited += self.held >= self.limit or self.waiting > 0
        await super().acquire()
        self.acquired += 1
        self.peak = max(self.peak, self.held)

    def release_when(self, started: Started, within: float) -> None:
        super().release_when(started, 3600)


_bursts = itertools.count()


@contextlib.asynccontextmanager
async def _clients(instances: list[RunningGateway]) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(gw.client()) for gw in instances]


async def _starts(gateways: Gateways, limit: int, n: int) -> tuple[list[PeakSlots], HeldUpstream]:
    """``n`` runs started at once over real connections (spread over the instances) on
    gateways allowing ``limit`` starts at a time. Each run holds in its upstream request,
    after its ``run.started``, until the provider is released: only a slot given back at
    ``run.started`` (not at the run's end) lets every run start."""
    provider = HeldUpstream()
    tag = next(_bursts)
    settings = make_settings(gateway={"max_concurrent_starts": limit})
    instances = [await gateways(settings, providers={"demo": provider})]
    if gateways.shared:
        instances.append(await gateways(settings, providers={"demo": provider}))
    slots = []
    for gw in instances:
        gw.app.state.gateway.runs.start_slots = PeakSlots(limit)
        slots.append(gw.app.state.gateway.runs.start_slots)
    async with _clients(instances) as clients:
        answers = await asyncio.wait_for(
            asyncio.gather(
                *(
                    clients[i % len(clients)].post(
                        f"/v1/conversations/start-{tag}-{i}/runs",
                        json={"input": {"prompt": "text:1"}},
                    )
                    for i in range(n)
                )
            ),
            60,  # a bound: a slot not given back at run.started would never be
        )
        assert [a.status_code for a in answers] == [202] * n
        # Every run reaches its upstream and holds there, all at once.
        await eventually(lambda: len(provider.reached) == n, what="every run held upstream")
        provider.release.set()
        for i, answer in enumerate(answers):
            await wait_state(
                clients[i % len(clients)], f"start-{tag}-{i}", _completed(answer.json()["runId"])
            )
    return slots, provider


#: Scenarios tried until the interleaving under test happened (each is valid whatever it is).
ATTEMPTS = 4


async def test_starts_beyond_the_limit_all_run_no_more_than_the_limit_starting_at_once(
    gateways: Gateways,
) -> None:
    for _ in range(ATTEMPTS):
        slots, _ = await _starts(gateways, limit=2, n=12)
        assert sum(s.acquired for s in slots) == 12
        assert all(s.peak <= 2 for s in slots), [s.peak for s in slots]
        assert all((s.held, s.waiting) == (0, 0) for s in slots)  # every slot given back
        if sum(s.waited for s in slots):
            break  # some starts found every slot taken and waited for their turn
    else:
        raise AssertionError(f"no start ever waited for a slot in {ATTEMPTS} bursts")


async def test_without_a_tight_limit_those_starts_overlap(gateways: Gateways) -> None:
    """The control of the test above: the same starts under the default limit are in
    progress together (what the limit of 2 held back)."""
    peaks = []
    for _ in range(ATTEMPTS):
        slots, _ = await _starts(gateways, limit=16, n=12)
        assert sum(s.waited for s in slots) == 0  # none waited: the limit held none back
        peaks.append(max(s.peak for s in slots))
        if peaks[-1] > 2:
            break
    assert peaks[-1] > 2, peaks


async def test_a_start_that_waited_for_its_turn_while_the_drain_began_is_refused(
    gateways: Gateways,
) -> None:
    """A start waiting for a slot when the gateway begins to drain is answered 503
    ``shutting_down`` once its turn comes (no run starts that the drain does not wait for)."""
    gw = await gateways(make_settings(gateway={"max_concurrent_starts": 1}))
    runs = gw.app.state.gateway.runs
    await runs.start_slots.acquire()  # the one slot, held as by a start in progress
    async with gw.client() as client:
        answer = asyncio.ensure_future(
            client.post("/v1/conversations/late/runs", json={"input": {"prompt": "text:1"}})
        )
        await eventually(lambda: runs.start_slots.waiting == 1, what="the start waits")
        runs.shutting_down = True  # as drain() begins
        runs.start_slots.release()
        refused = await asyncio.wait_for(answer, 5)
        runs.shutting_down = False  # the fixture stops the gateway as usual
        assert (await client.get("/v1/conversations/late/state")).status_code == 404
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutting_down"
    assert (runs.start_slots.held, runs.start_slots.waiting) == (0, 0)


async def _run_starts(client: httpx.AsyncClient) -> tuple[float, float]:
    """``agent_gateway_run_starts``: (in progress, waiting), read from ``/metrics``."""
    name = "agent_gateway_run_starts"
    return (
        await metric_sample(client, name, state="in_progress"),
        await metric_sample(client, name, state="waiting"),
    )


async def test_metrics_show_the_starts_in_progress_and_those_waiting_their_turn(
    gateways: Gateways,
) -> None:
    gw = await gateways(make_settings(gateway={"max_concurrent_starts": 1}))
    runs = gw.app.state.gateway.runs
    async with gw.client() as client:
        assert await _run_starts(client) == (0, 0)
        await runs.start_slots.acquire()  # the one slot, held as by a start in progress
        posts = asyncio.gather(
            *(
                client.post(f"/v1/conversations/waits-{i}/runs", json={"input": {"prompt": "x"}})
                for i in range(3)
            )
        )
        await eventually(lambda: runs.start_slots.waiting == 3, what="three starts wait")
        assert await _run_starts(client) == (1, 3)
        runs.start_slots.release()
        answers = await asyncio.wait_for(posts, 10)
        assert [a.status_code for a in answers] == [202] * 3
        await eventually(lambda: runs.start_slots.held == 0, what="every slot given back")
        assert await _run_starts(client) == (0, 0)
