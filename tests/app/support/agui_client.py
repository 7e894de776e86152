"""Client side of the AG-UI endpoint tests: post a ``RunAgentInput``, read the AG-UI events
back with httpx-sse and parse every one with the ``ag-ui-protocol`` models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from ag_ui.core import BaseEvent, Event
from httpx_sse import aconnect_sse
from pydantic import TypeAdapter

__all__ = ["WEATHER_TOOL", "kinds", "run_input", "stream_agui", "user"]

_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def run_input(
    thread: str, run: str, messages: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": messages, **extra}


def user(text: str, ident: str = "u1") -> dict[str, Any]:
    return {"id": ident, "role": "user", "content": text}


async def stream_agui(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    *,
    provider: str = "agent",
    path: str | None = None,
    stop: Callable[[list[BaseEvent]], bool] | None = None,
) -> list[BaseEvent]:
    """The parsed AG-UI events of one request to the gateway's ``provider`` (or to ``path``),
    until the stream ends (or ``stop``)."""
    events: list[BaseEvent] = []
    url = path or f"/v1/ag-ui/{provider}"
    async with aconnect_sse(client, "POST", url, json=body) as source:
        response = source.response
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for sse in source.aiter_sse():
            if not sse.data:
                continue
            events.append(_EVENT.validate_json(sse.data))
            if stop is not None and stop(events):
                break
    return events


def kinds(events: list[BaseEvent]) -> list[str]:
    return [event.type.value for event in events]
