"""The telemetry's resource: computed once, equal to (and hashed as) the SDK's own."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import Resource

from app.telemetry.setup import HashedResource


def test_a_hashed_resource_is_the_resource_it_wraps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    plain = Resource.create({"service.name": "gateway-under-test"})
    hashed = HashedResource(plain)
    assert hashed == plain and plain == hashed
    assert hash(hashed) == hash(plain)
    assert dict(hashed.attributes) == dict(plain.attributes)
    assert hashed.attributes["deployment.environment"] == "test"
    assert hashed != Resource.create({"service.name": "another"})
    assert {plain: "spans"}[hashed] == "spans"  # the encoder's grouping finds it
