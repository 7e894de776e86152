"""The pure Agent Event core: protocol 0.1, reducer, store (no I/O, no asyncio, no web libs).

Events travel as plain wire-form dicts (camelCase). Public surface:

- ``core.events``: ``PROTOCOL_VERSION``, ``EVENT_TYPES``, ``RUN_TERMINAL_TYPES``,
  ``validate_event``, ``is_agent_event``, ``parse_event``, ``EventValidationError``
- ``core.factory``: ``EventFactory``
- ``core.reducer``: ``create_agent_state``, ``reduce_agent_state``, ``entity_key``
- ``core.store``: ``AgentStore``, ``AgentProtocolError``, ``DispatchOutcome``
- ``core.projection``: ``project_messages``, ``is_requesting``
- ``core.replay``: ``replay_jsonl``
- ``core.schema``: ``agent_event_json_schema``
- ``core.selectors``: ``select_agent_timeline``, ``select_running_runs``, ``parse_tool_arguments``…
"""

from core.events import (
    EVENT_TYPES,
    PROTOCOL_VERSION,
    RUN_TERMINAL_TYPES,
    EventValidationError,
    is_agent_event,
    parse_event,
    validate_event,
)
from core.factory import EventFactory
from core.issues import ISSUE_CODES, AgentProtocolError, AgentProtocolIssue
from core.keys import entity_key, event_key, utf16_len
from core.models import AgentEvent, dump_event
from core.projection import is_requesting, message_status, project_messages
from core.reducer import reduce_agent_state
from core.replay import ReplayResult, ReplayStopped, replay_jsonl
from core.schema import agent_event_json_schema
from core.selectors import (
    parse_tool_arguments,
    select_agent_timeline,
    select_approval,
    select_run,
    select_running_runs,
    select_tool_call,
)
from core.state import AgentState, create_agent_state
from core.store import AgentStore, DispatchOutcome, StoreMode

__all__ = [
    "EVENT_TYPES",
    "ISSUE_CODES",
    "PROTOCOL_VERSION",
    "RUN_TERMINAL_TYPES",
    "AgentEvent",
    "AgentProtocolError",
    "AgentProtocolIssue",
    "AgentState",
    "AgentStore",
    "DispatchOutcome",
    "EventFactory",
    "EventValidationError",
    "ReplayResult",
    "ReplayStopped",
    "StoreMode",
    "agent_event_json_schema",
    "create_agent_state",
    "dump_event",
    "entity_key",
    "event_key",
    "is_agent_event",
    "is_requesting",
    "message_status",
    "parse_event",
    "parse_tool_arguments",
    "project_messages",
    "reduce_agent_state",
    "replay_jsonl",
    "select_agent_timeline",
    "select_approval",
    "select_run",
    "select_running_runs",
    "select_tool_call",
    "utf16_len",
    "validate_event",
]
