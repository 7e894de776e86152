"""Protocol issues: the five codes and the reference's message texts (reduceAgentState.ts)."""

from __future__ import annotations

from typing import Final, Literal, TypedDict

from core.jsnum import js_number_str

__all__ = [
    "ISSUE_CODES",
    "AgentProtocolError",
    "AgentProtocolIssue",
    "IssueCode",
    "make_issue",
]

IssueCode = Literal[
    "duplicate_entity", "invalid_sequence", "invalid_transition", "missing_entity", "missing_run"
]
ISSUE_CODES: Final[frozenset[str]] = frozenset(
    {"duplicate_entity", "invalid_sequence", "invalid_transition", "missing_entity", "missing_run"}
)


class AgentProtocolIssue(TypedDict):
    code: IssueCode
    eventId: str
    runId: str
    message: str


class AgentProtocolError(Exception):
    """Raised by a strict store at the first protocol issue; carries it as ``.issue``."""

    def __init__(self, issue: AgentProtocolIssue) -> None:
        super().__init__(issue["message"])
        self.issue = issue


def make_issue(code: IssueCode, event_id: str, run_id: str, message: str) -> AgentProtocolIssue:
    return {"code": code, "eventId": event_id, "runId": run_id, "message": message}


# Entity labels used in messages, by entity kind.
ENTITY_LABELS: Final[dict[str, str]] = {
    "message": "Message",
    "reasoning": "Reasoning",
    "tool": "Tool call",
    "approval": "Approval",
    "task": "Task",
    "artifact": "Artifact",
}


def msg_sequence(sequence: int | float, last: int | float, run_id: str) -> str:
    return (
        f"Sequence {js_number_str(sequence)} must be greater than {js_number_str(last)} "
        f'for run "{run_id}".'
    )


def msg_session_mismatch(run_id: str, run_session: str, event_session: str) -> str:
    return f'Run "{run_id}" belongs to session "{run_session}", not "{event_session}".'


def msg_run_not_running(run_id: str, status: str) -> str:
    return f'Run "{run_id}" is already {status}.'


def msg_missing_run(run_id: str, event_type: str) -> str:
    return f'Run "{run_id}" must be started before "{event_type}".'


def msg_duplicate_session(session_id: str) -> str:
    return f'Session "{session_id}" already exists.'


def msg_duplicate_run(run_id: str) -> str:
    return f'Run "{run_id}" already exists.'


def msg_duplicate_entity(kind: str, entity_id: str) -> str:
    return f'{ENTITY_LABELS[kind]} "{entity_id}" already exists.'


def msg_missing_entity(kind: str, entity_id: str) -> str:
    return f'{ENTITY_LABELS[kind]} "{entity_id}" does not exist.'


def msg_terminal_entity(kind: str, entity_id: str, status: str) -> str:
    if kind == "approval":
        return f'Approval "{entity_id}" is already resolved.'
    return f'{ENTITY_LABELS[kind]} "{entity_id}" is already {status}.'
