"""A run ends in one terminal event whatever happens around it: its own backend calls ride
out an outage (``app/runs/retry.py``), so a run that meets ``backend_unavailable`` at its start,
its end or its meta save still ends ``completed`` once instead of being dropped or failed
``provider_error``; a run whose provider this instance lacks ends ``run.failed``."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.errors import ApiError
from app.backends import ConversationMeta, ConversationRef, MemoryBackend, Snapshot
from app.observability.metrics import GatewayMetrics
from app.runs import retry
from app.runs.catalog import ProviderCatalog
from app.runs.execute import ActiveRun, RunRequest, execute_run
from app.runs.retry import until_available
from tests.app.support.backend_contract import meta
from tests.app.support.gateway_server import make_settings
from tests.app.support.scripted_provider import ScriptedProvider


def _down() -> ApiError:
    return ApiError(503, "backend_unavailable", "The backend is unavailable.")


class _Flaky(MemoryBackend):
    """Each listed operation fails ``failures`` times with backend_unavailable, then works."""

    def __init__(self, failures: int, operations: set[str]) -> None:
        super().__init__()
        self.left = {name: failures for name in operations}

    def _maybe_fail(self, name: str) -> None:
        if self.left.get(name):
            self.left[name] -= 1
            raise _down()

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        self._maybe_fail("snapshot")
        return await super().snapshot(ref)

    async def save_meta(
        self, ref: ConversationRef, meta: ConversationMeta, *, keep_title: bool = False
    ) -> None:
        self._maybe_fail("save_meta")
        await super().save_meta(ref, meta, keep_title=keep_title)

    async def get_meta(self, ref: ConversationRef) -> ConversationMeta | None:
        self._maybe_fail("get_meta")
        return await super().get_meta(ref)

    async def end_run(self, ref: ConversationRef, run_id: str) -> str | None:
        self._maybe_fail("end_run")
        return await super().end_run(ref, run_id)


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "_FIRST_DELAY", 0.01)


@pytest.mark.parametrize("operation", ["snapshot", "save_meta", "end_run"])
async def test_a_run_meeting_an_outage_ends_completed_once(operation: str) -> None:
    backend = _Flaky(2, {operation})
    ref = ConversationRef("p", "outage")
    await backend.create_conversation(ref, meta())
    settings = make_settings()
    catalog = ProviderCatalog(settings, {"demo": ScriptedProvider()})
    request = RunRequest("r1", {"prompt": "text:3"}, "demo")
    head = await backend.head_cursor(ref)
    await execute_run(backend, catalog, settings, ref, request, ActiveRun("r1"), GatewayMetrics())
    assert backend.left[operation] == 0  # it did fail, twice
    snapshot = await MemoryBackend.snapshot(backend, ref)
    assert snapshot is not None
    state: dict[str, Any] = snapshot.state
    assert state["runs"]["r1"]["status"] == "completed"
    log = await backend.read(ref, head, limit=1000, wait=0)
    terminals = [e.event_type for e in log.entries if e.is_run_terminal]
    assert "run.started" in [e.event_type for e in log.entries]
    assert terminals == ["run.completed"]


async def test_until_available_gives_up_after_its_budget_and_passes_other_errors() -> None:
    calls = 0

    async def always_down() -> None:
        nonlocal calls
        calls += 1
        raise _down()

    with pytest.raises(ApiError, match="unavailable"):
        await until_available(always_down, "test", budget=0.05)
    assert calls >= 2

    async def refused() -> None:
        raise ApiError(409, "run_in_progress", "busy")

    with pytest.raises(ApiError, match="busy"):
        await until_available(refused, "test")


async def test_a_run_whose_provider_is_unknown_here_ends_failed() -> None:
    # A queued run adopted from an instance configured with another provider.
    backend = MemoryBackend()
    ref = ConversationRef("p", "adopted")
    await backend.create_conversation(ref, meta())
    settings = make_settings()
    catalog = ProviderCatalog(settings, {"demo": ScriptedProvider()})
    request = RunRequest("r1", {"prompt": "text:3"}, "elsewhere")
    await execute_run(backend, catalog, settings, ref, request, ActiveRun("r1"), GatewayMetrics())
    snapshot = await backend.snapshot(ref)
    assert snapshot is not None
    run = snapshot.state["runs"]["r1"]
    assert run["status"] == "failed" and run["error"]["code"] == "unknown_provider"
