"""``validate_agent_provider_events``: the contract validator of protocol.md §7.

A port of the reference ``validateAgentProviderEvents.ts``: same codes, same messages, same
order of checks; the valid events are then replayed in record mode and every reducer issue
becomes ``invalid_lifecycle``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.events import RUN_TERMINAL_TYPES, is_agent_event
from core.jsnum import js_number_str
from core.kinds import ENTITY_MAPS
from providers.contract import Capabilities
from providers.history import replay_events

__all__ = ["validate_agent_provider_events"]

_FINAL = ("completed", "failed", "cancelled")


def _issue(code: str, message: str, event_id: Any = None) -> dict[str, Any]:
    issue: dict[str, Any] = {"code": code, "message": message}
    if isinstance(event_id, str):
        issue["eventId"] = event_id
    return issue


def validate_agent_provider_events(
    capabilities: Capabilities, events: Iterable[Any]
) -> list[dict[str, Any]]:
    issues: list[dict[str, Any]] = []
    event_ids: set[str] = set()
    session_id: str | None = None
    run_id: str | None = None
    last_sequence: float | None = None
    run_started = 0
    run_terminated = 0
    valid: list[dict[str, Any]] = []
    declared = set(capabilities.event_types)

    for event in events:
        if not is_agent_event(event):
            event_id = event.get("eventId") if isinstance(event, dict) else None
            issues.append(
                _issue(
                    "invalid_event",
                    "Provider emitted an invalid Agent Event envelope or payload.",
                    event_id,
                )
            )
            continue
        valid.append(event)
        event_id = event["eventId"]
        if event["type"] not in declared:
            issues.append(
                _issue(
                    "undeclared_event_type",
                    f'Event type "{event["type"]}" is not declared by the provider.',
                    event_id,
                )
            )
        if event_id in event_ids:
            issues.append(
                _issue("duplicate_event_id", f'Event id "{event_id}" is duplicated.', event_id)
            )
        event_ids.add(event_id)
        if session_id is None:
            session_id = event["sessionId"]
        if run_id is None:
            run_id = event["runId"]
        if event["sessionId"] != session_id or event["runId"] != run_id:
            issues.append(
                _issue(
                    "inconsistent_run",
                    "A provider run must emit one consistent sessionId and runId.",
                    event_id,
                )
            )
        sequence = event["sequence"]
        if last_sequence is not None and sequence <= last_sequence:
            issues.append(
                _issue(
                    "invalid_sequence",
                    f"Sequence {js_number_str(sequence)} must be greater than "
                    f"{js_number_str(last_sequence)}.",
                    event_id,
                )
            )
        last_sequence = max(last_sequence if last_sequence is not None else -1, sequence)
        if event["type"] == "run.started":
            run_started += 1
        if event["type"] in RUN_TERMINAL_TYPES:
            run_terminated += 1

    if run_started == 0:
        issues.append(_issue("missing_run_start", "A provider must emit run.started."))
    elif run_started > 1:
        issues.append(_issue("invalid_lifecycle", "A provider must emit run.started exactly once."))
    if run_terminated == 0:
        issues.append(
            _issue("missing_run_terminal", "A provider must emit one terminal run event.")
        )
    elif run_terminated > 1:
        issues.append(
            _issue("multiple_run_terminals", "A provider must emit exactly one terminal run event.")
        )

    state = replay_events(valid)
    for issue in state["issues"]:
        issues.append(_issue("invalid_lifecycle", issue["message"], issue.get("eventId")))

    active = sum(
        1
        for map_name in ENTITY_MAPS.values()
        for entity in state[map_name].values()
        if entity.get("status") not in _FINAL
    )
    if run_terminated == 1 and active > 0:
        issues.append(
            _issue("invalid_lifecycle", f"A terminal run has {active} non-terminal child entities.")
        )
    return issues
