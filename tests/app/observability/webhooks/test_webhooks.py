"""Completion webhooks against a loopback receiver: exact events, valid signatures, retries with
backoff until acknowledged, giving up after the bounded time (metric and log line), and a slow
receiver never delays a run."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
import orjson
import pytest

from app.api.webhooks_doc import WebhookPayload
from app.cli.gateway import openapi_document
from app.config import ConfigError, load_settings
from app.observability.webhooks import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    sign_payload,
    verify_signature,
)
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, start_run, terminal, wait_state
from tests.app.support.redis_support import (
    SHARED_REDIS_URL,
    GatewayProcess,
    shared_redis,
    unique_prefix,
)
from tests.app.support.scripted_provider import ScriptedProvider
from tests.app.support.webhook_support import Receiver, serve_receiver
from tests.support import eventually, eventually_async

SECRET = "whsec-loopback-test"


async def gateway_for(
    start_gateway: StartGateway,
    receiver: Receiver,
    events: list[str] | None = None,
    **more: Any,
) -> RunningGateway:
    hooks: dict[str, Any] = {"url": receiver.url, "secret": SECRET, **more}
    if events is not None:
        hooks["events"] = events
    gw = await start_gateway(make_settings(webhooks=hooks), providers={"demo": ScriptedProvider()})
    gw.gateway.webhooks.backoff_seconds = 0.05  # fast retries in tests
    return gw


async def settled(gw: RunningGateway) -> None:
    """Every run of ``gw`` ended and its webhook was handled (delivered, failed or skipped):
    whatever a test waits to *not* arrive would have arrived by now."""
    await eventually(lambda: gw.gateway.runs.active_count() == 0, what="every run ended")

    async def handled() -> bool:
        return await gw.gateway.webhooks.pending() == 0

    await eventually_async(handled, what="every webhook delivered or given up")


def test_signature_round_trip_and_rejections() -> None:
    body = b'{"a":1}'
    now = int(time.time())
    header = sign_payload(SECRET, now, body)
    assert verify_signature(SECRET, header, body)
    assert not verify_signature("other-secret", header, body)
    assert not verify_signature(SECRET, header, body + b" ")
    assert not verify_signature(SECRET, sign_payload(SECRET, now - 3600, body), body)
    assert not verify_signature(SECRET, "garbage", body)


async def test_receiver_gets_exactly_the_configured_events_signed(
    start_gateway: StartGateway,
) -> None:
    async with serve_receiver(Receiver()) as receiver:
        gw = await gateway_for(start_gateway, receiver, ["run.completed", "run.cancelled"])
        async with gw.client() as client:
            done = await start_run(client, "c1", "text:2")
            await wait_state(client, "c1", lambda s: not s["isRequesting"])
            failed = await start_run(client, "c2", "boom")
            await wait_state(client, "c2", lambda s: not s["isRequesting"])
            cancelled = await start_run(client, "c3", "sleep:5")
            await wait_state(client, "c3", lambda s: s["isRequesting"])
            abort = await client.post("/v1/conversations/c3/abort", json={})
            assert abort.status_code == 202
            await receiver.wait_acknowledged(2)
            await settled(gw)  # a delivery for the failed run would have arrived by now
            state = (await client.get("/v1/conversations/c2/state")).json()
            assert state["agentState"]["runs"][failed["runId"]]["status"] == "failed"
        assert len(receiver.attempts) == 2
        for headers, body in receiver.attempts:
            assert verify_signature(SECRET, headers[SIGNATURE_HEADER.lower()], body)
            assert headers["content-type"] == "application/json"
            assert SECRET not in body.decode() and SECRET not in str(headers)
        for hook in receiver.acknowledged:  # the documented payload (OpenAPI webhooks)
            WebhookPayload.model_validate(hook, strict=True)
        by_run = {hook["run"]["runId"]: hook for hook in receiver.acknowledged}
        assert set(by_run) == {done["runId"], cancelled["runId"]}
        completed, ended = by_run[done["runId"]], by_run[cancelled["runId"]]
        assert (completed["type"], completed["run"]["status"]) == ("run.completed", "completed")
        assert (ended["type"], ended["run"]["status"]) == ("run.cancelled", "cancelled")
        assert ended["run"]["reason"] == "aborted"
        assert completed["conversationKey"] == "c1" and completed["principal"] == "anonymous"
        assert completed["run"]["sessionId"] == done["sessionId"]
        headers = dict(receiver.attempts[0][0])
        assert headers[EVENT_HEADER.lower()] in ("run.completed", "run.cancelled")
        assert headers[DELIVERY_HEADER.lower()].startswith("whd_")


async def test_failed_run_is_delivered_with_the_default_events(
    start_gateway: StartGateway,
) -> None:
    async with serve_receiver(Receiver()) as receiver:
        gw = await gateway_for(start_gateway, receiver)
        async with gw.client() as client:
            run = await start_run(client, "c1", "boom")
            await receiver.wait_acknowledged(1)
        hook = receiver.acknowledged[0]
        assert hook["type"] == "run.failed" and hook["run"]["runId"] == run["runId"]
        assert hook["run"]["error"]["code"]


async def test_receiver_failing_twice_still_gets_the_event_once_acknowledged(
    start_gateway: StartGateway,
) -> None:
    async with serve_receiver(Receiver(fail_first=2)) as receiver:
        gw = await gateway_for(start_gateway, receiver)
        async with gw.client() as client:
            run = await start_run(client, "c1", "text:1")
            await receiver.wait_acknowledged(1)
            await settled(gw)
            metrics = (await client.get("/metrics")).text
        assert len(receiver.attempts) == 3 and len(receiver.acknowledged) == 1
        deliveries = {h[DELIVERY_HEADER.lower()] for h, _ in receiver.attempts}
        assert len(deliveries) == 1  # one delivery id across the retries
        assert all(verify_signature(SECRET, h[SIGNATURE_HEADER.lower()], b) for h, b in
                   receiver.attempts)  # fmt: skip
        assert receiver.acknowledged[0]["run"]["runId"] == run["runId"]
        assert 'agent_gateway_webhook_attempt_failures_total{event="run.completed"} 2.0' in metrics
        assert (
            'agent_gateway_webhook_deliveries_total{event="run.completed",outcome="delivered"} 1.0'
            in metrics
        )


async def test_retries_give_up_after_the_bounded_time_counted_and_logged(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="app.webhooks")
    async with serve_receiver(Receiver(fail_first=10**6)) as receiver:
        gw = await gateway_for(start_gateway, receiver, give_up_seconds=1.0)
        async with gw.client() as client:
            # Wall-clock time, as the give-up counts it (run ends are compared across
            # instances): a VM's clock stepped mid-test moves both alike. CI saw 0.26 s here
            # measured on the monotonic clock, both backends at once.
            began = time.time()
            run = await start_run(client, "c1", "text:1")
            await settled(gw)  # given up: nothing is pending any more, so no attempt follows
            given_up_after = time.time() - began
            metrics = (await client.get("/metrics")).text
        attempts = len(receiver.attempts)
        assert attempts >= 3 and not receiver.acknowledged  # backed off 0.05, 0.05, 0.1 … s
        assert 1.0 <= given_up_after < 8.0, given_up_after
        assert {h[DELIVERY_HEADER.lower()] for h, _ in receiver.attempts} == {
            receiver.attempts[0][0][DELIVERY_HEADER.lower()]
        }
        assert (
            'agent_gateway_webhook_deliveries_total{event="run.completed",outcome="failed"} 1.0'
            in metrics
        )
        assert (
            f'agent_gateway_webhook_attempt_failures_total{{event="run.completed"}} {attempts}.0'
            in metrics
        )
        lines = [
            r for r in caplog.records if r.name == "app.webhooks" and "given up" in r.getMessage()
        ]
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING
        assert run["runId"] in lines[0].getMessage() and SECRET not in lines[0].getMessage()


async def test_slow_receiver_never_delays_the_run(start_gateway: StartGateway) -> None:
    """The receiver hangs on the first delivery until the test lets it answer: three runs
    stream to their end meanwhile."""
    async with serve_receiver(Receiver(hold=asyncio.Event())) as receiver:
        assert receiver.hold is not None
        gw = await gateway_for(start_gateway, receiver)
        async with gw.client() as client:
            await start_run(client, "c1", "text:1")
            await asyncio.wait_for(receiver.arrived.wait(), 5)  # the receiver now hangs
            async with asyncio.timeout(30):  # a bound; runs waiting for it would hang here
                for i in range(3):  # runs keep streaming to their end while the receiver hangs
                    frames = await collect_sse(
                        client,
                        "/v1/conversations/c1/runs?stream=true",
                        method="POST",
                        json={"input": {"prompt": f"text:{i + 5}"}},
                        stop=terminal,
                    )
                    assert orjson.loads(frames[-1].data)["type"] == "run.completed"
            assert not receiver.acknowledged  # the first delivery is still being answered
            # ... in its first attempt: the runs did not wait for it to time out (10 s) either.
            first = receiver.attempts[0][0][DELIVERY_HEADER.lower()]
            assert [h[DELIVERY_HEADER.lower()] for h, _ in receiver.attempts].count(first) == 1
            receiver.hold.set()
            await receiver.wait_acknowledged(4, within=30)


def test_webhooks_are_in_the_openapi_document() -> None:
    document = openapi_document()
    assert set(document["webhooks"]) == {"run.completed", "run.failed", "run.cancelled"}
    post = document["webhooks"]["run.completed"]["post"]
    headers = {p["name"] for p in post["parameters"] if p["in"] == "header"}
    assert headers == {SIGNATURE_HEADER, DELIVERY_HEADER, EVENT_HEADER}
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/WebhookPayload"}
    payload = document["components"]["schemas"]["WebhookPayload"]
    assert set(payload["required"]) >= {"id", "type", "principal", "conversationKey", "run"}


class _FlakySnapshots:
    """A backend whose first ``failures`` snapshot reads raise (a Redis outage)."""

    def __init__(self, inner: Any, failures: int) -> None:
        self.inner, self.failures = inner, failures

    async def snapshot(self, ref: Any) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("backend down")
        return await self.inner.snapshot(ref)


async def test_run_read_is_retried_when_the_backend_is_down(start_gateway: StartGateway) -> None:
    async with serve_receiver(Receiver()) as receiver:
        gw = await gateway_for(start_gateway, receiver)
        dispatcher = gw.gateway.webhooks
        dispatcher.backend = _FlakySnapshots(dispatcher.backend, 2)  # type: ignore[assignment]
        async with gw.client() as client:
            run = await start_run(client, "c1", "text:1")
            await receiver.wait_acknowledged(1)
        assert receiver.acknowledged[0]["run"]["runId"] == run["runId"]


async def test_enqueue_is_retried_in_the_background_when_the_outbox_is_down(
    start_gateway: StartGateway,
) -> None:
    """The outbox refuses the first puts (Redis down at the run's end): the run still ends and
    frees its conversation at once, and the webhook is queued and delivered afterwards."""
    async with serve_receiver(Receiver()) as receiver:
        gw = await gateway_for(start_gateway, receiver)
        dispatcher = gw.gateway.webhooks
        dispatcher.enqueue_wait_seconds = 0.05
        put, failures = dispatcher.outbox.put, [2]

        async def flaky_put(entry: Any) -> None:
            if failures[0] > 0:
                failures[0] -= 1
                raise ConnectionError("outbox down")
            await put(entry)

        dispatcher.outbox.put = flaky_put  # type: ignore[method-assign]
        async with gw.client() as client:
            run = await start_run(client, "c1", "text:1")
            await wait_state(client, "c1", lambda s: not s["isRequesting"])
            second = await start_run(client, "c1", "text:1")  # the slot was released
            await receiver.wait_acknowledged(2)
        assert failures == [0]
        runs = {hook["run"]["runId"] for hook in receiver.acknowledged}
        assert runs == {run["runId"], second["runId"]}


@pytest.mark.only_backend("redis", reason="two instances share the webhook outbox in Redis")
async def test_two_instances_deliver_one_webhook_per_run() -> None:
    """On Redis every instance delivers from the shared outbox: still one delivery per run,
    signed."""
    async with serve_receiver(Receiver()) as receiver:
        prefix = unique_prefix()
        async with shared_redis(prefix):
            a = GatewayProcess("A", SHARED_REDIS_URL, prefix, lease_ttl=3.0)
            b = GatewayProcess("B", SHARED_REDIS_URL, prefix, lease_ttl=3.0)
            for process in (a, b):
                process.args += ["--webhook-url", receiver.url]
            try:
                a.start()
                b.start()
                await asyncio.gather(a.wait_ready(), b.wait_ready())
                async with (
                    httpx.AsyncClient(base_url=a.url, timeout=20) as ca,
                    httpx.AsyncClient(base_url=b.url, timeout=20) as cb,
                ):
                    first = await start_run(ca, "k1", "text:2")
                    await wait_state(cb, "k1", lambda s: not s["isRequesting"])
                    second = await start_run(cb, "k1", "text:1")
                    await wait_state(ca, "k1", lambda s: not s["isRequesting"])
                    third = await start_run(ca, "k2", "sleep:10")
                    await wait_state(cb, "k2", lambda s: s["isRequesting"])
                    assert (await cb.post("/v1/conversations/k2/abort", json={})).status_code == 202
                    await receiver.wait_acknowledged(3)
                # A stopped instance has delivered what it queued (graceful drain): once both
                # exited, a duplicate from the other instance would have arrived.
                await asyncio.gather(asyncio.to_thread(a.stop), asyncio.to_thread(b.stop))
            finally:
                a.close()
                b.close()
    assert len(receiver.attempts) == 3
    assert all(verify_signature("whsec-test", h[SIGNATURE_HEADER.lower()], body)
               for h, body in receiver.attempts)  # fmt: skip
    ends = {hook["run"]["runId"]: hook["type"] for hook in receiver.acknowledged}
    assert ends == {
        first["runId"]: "run.completed",
        second["runId"]: "run.completed",
        third["runId"]: "run.cancelled",
    }


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('url = "ftp://x"\nsecret = "s"', "webhooks.url"),
        ('url = "http://x"\nsecret = "s"\nevents = ["run.complete"]', "webhooks.events"),
        ('url = "http://x"\nsecret = "${AGW_TEST_UNSET_SECRET}"', "webhooks"),
    ],
)
def test_webhook_config_is_checked_at_start(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, table: str, key: str
) -> None:
    monkeypatch.delenv("AGW_TEST_UNSET_SECRET", raising=False)
    path = tmp_path / "gateway.toml"
    path.write_text(f"[webhooks]\n{table}\n")
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_settings(path)
