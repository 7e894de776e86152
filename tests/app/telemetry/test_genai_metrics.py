"""The GenAI client metrics, by provider and model: on ``/metrics`` and exported over OTLP."""

from __future__ import annotations

import asyncio

from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import metric_sample
from tests.app.telemetry.otlp_receiver import OtlpReceiver
from tests.providers.support.mock_upstreams import openai_frames, serve_mock

LABELS = {
    "gen_ai_operation_name": "chat",
    "gen_ai_provider_name": "openai",
    "gen_ai_request_model": "requested-model",
}


async def test_token_usage_and_duration_per_model_call(
    receiver: OtlpReceiver, start_gateway: StartGateway
) -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
    frames = [openai_frames(text="One.", usage=usage), openai_frames(text="Two.", usage=usage)]
    async with serve_mock(frames) as upstream:
        settings = make_settings(
            providers={
                "up": {"kind": "openai-chat", "url": upstream.url, "model": "requested-model"}
            },
            gateway={"default_provider": "up"},
            telemetry={"enabled": True},
        )
        gw = await start_gateway(settings)
        async with gw.client() as client:
            for _ in range(2):
                accepted = await client.post(
                    "/v1/conversations/m/runs", json={"input": {"prompt": "x"}}
                )
                await client.get(f"/v1/conversations/m/runs/{accepted.json()['runId']}/wait")

            async def sample(name: str, **labels: str) -> float:
                return await metric_sample(client, name, **LABELS, **labels)

            tokens = "gen_ai_client_token_usage"
            assert await sample(f"{tokens}_count", gen_ai_token_type="input") == 2
            assert await sample(f"{tokens}_sum", gen_ai_token_type="input") == 24
            assert await sample(f"{tokens}_sum", gen_ai_token_type="output") == 14
            duration = "gen_ai_client_operation_duration_seconds"
            assert await sample(f"{duration}_count", error_type="") == 2
            assert await sample(f"{duration}_sum", error_type="") > 0
        await gw.stop()
    expected = {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"}
    await asyncio.to_thread(receiver.wait_for, lambda _: expected <= receiver.metric_names)


async def test_without_telemetry_there_is_no_genai_family(start_gateway: StartGateway) -> None:
    gw = await start_gateway(make_settings())
    async with gw.client() as client:
        text = (await client.get("/metrics")).text
    assert "agent_gateway_runs_started" in text and "gen_ai_client" not in text
