"""Gateway tests run on every backend: starting a gateway outside ``start_gateway`` fails unless
the test says, with ``only_backend`` and a reason, that it holds on one backend only."""

from __future__ import annotations

import pytest

from tests.app.gateway_server import launch, make_settings


async def test_a_gateway_started_directly_fails_an_unmarked_test() -> None:
    with pytest.raises(AssertionError, match="start_gateway fixture"):
        await launch(make_settings())


@pytest.mark.only_backend("memory", reason="checks the marker's exemption from the guard itself")
async def test_a_marked_test_may_start_a_gateway_directly() -> None:
    gateway = await launch(make_settings())
    try:
        async with gateway.client() as client:
            assert (await client.get("/healthz")).status_code == 200
    finally:
        await gateway.stop()
