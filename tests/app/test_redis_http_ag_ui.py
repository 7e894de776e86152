"""On the Redis backend: test_ag_ui_endpoint.py, plus a tool round trip across two instances
(the continuation request lands on an instance that does not own the run).

Not repeated: request validation (422/404), which never reaches the backend.
"""

from __future__ import annotations

from ag_ui.core import RunFinishedEvent, TextMessageContentEvent, ToolCallStartEvent

from tests.app.agui_client import WEATHER_TOOL, run_input, stream_agui, user
from tests.app.agui_upstream import AguiAgent, agui_settings
from tests.app.conftest import StartGateway
from tests.app.helpers import wait_state
from tests.app.redis_http import redis_start_gateway as start_gateway
from tests.app.test_ag_ui_endpoint import (
    agent,
    gateway,
    test_a_new_message_while_the_run_waits_follows_multitask,
    test_cancel_from_elsewhere_ends_the_stream_with_run_error_cancelled,
    test_disconnect_after_run_finished_waiting_on_the_client_aborts_nothing,
    test_disconnect_before_the_end_aborts_the_run_and_closes_the_upstream,
    test_every_event_kind_parses_back_and_an_interrupt_resumes_the_same_run,
    test_frontend_tool_round_trip_in_two_requests_is_one_gateway_run,
)

__all__ = [
    "agent",
    "gateway",
    "start_gateway",
    "test_a_new_message_while_the_run_waits_follows_multitask",
    "test_cancel_from_elsewhere_ends_the_stream_with_run_error_cancelled",
    "test_disconnect_after_run_finished_waiting_on_the_client_aborts_nothing",
    "test_disconnect_before_the_end_aborts_the_run_and_closes_the_upstream",
    "test_every_event_kind_parses_back_and_an_interrupt_resumes_the_same_run",
    "test_frontend_tool_round_trip_in_two_requests_is_one_gateway_run",
]


async def test_tool_round_trip_across_two_instances(
    agent: AguiAgent, start_gateway: StartGateway
) -> None:
    first_instance = await start_gateway(agui_settings(agent))
    second_instance = await start_gateway(agui_settings(agent))
    async with first_instance.client() as client:
        body = run_input("t-two", "c1", [user("weather?")], tools=[WEATHER_TOOL])
        first = await stream_agui(client, body)
    start = next(e for e in first if isinstance(e, ToolCallStartEvent))
    assert isinstance(first[-1], RunFinishedEvent)
    call = {
        "id": start.tool_call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"},
    }
    messages = [
        user("weather?"),
        {"id": "a1", "role": "assistant", "toolCalls": [call]},
        {"id": "t1", "role": "tool", "toolCallId": start.tool_call_id, "content": "sunny"},
    ]
    async with second_instance.client() as client:
        second = await stream_agui(client, run_input("t-two", "c2", messages))
        text = "".join(e.delta for e in second if isinstance(e, TextMessageContentEvent))
        assert text == "It is sunny in Paris."
        assert isinstance(second[-1], RunFinishedEvent)
        state = await wait_state(client, "t-two", lambda s: not s["isRequesting"])
    assert [r["status"] for r in state["agentState"]["runs"].values()] == ["completed"]
