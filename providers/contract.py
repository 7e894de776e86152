"""The provider contract: what every AgentProvider and AgentTransport looks like.

This module is the seam between ``providers/`` and ``app/``. Events travel as plain wire-form
dicts (camelCase AgentEvent envelopes, see ``core``); they are validated by the runner before
they reach the consumer.

A provider is recognised by ``provider.protocol["name"] == "agent-event"``, never by class.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from providers.signal import AbortSignal

if TYPE_CHECKING:
    from providers.tracing import RunTracing

AGENT_EVENT_PROTOCOL: Mapping[str, str] = {"name": "agent-event", "version": "0.1"}

#: One AgentEvent envelope in wire form (camelCase keys, plain JSON data).
AgentEvent = dict[str, Any]
#: The consumer of a run's events. Exceptions it raises propagate unchanged out of the runner.
OnEvent = Callable[[AgentEvent], Awaitable[None]]
#: The same consumer taking the checked events of one upstream read at once (never empty).
OnEvents = Callable[[list[AgentEvent]], Awaitable[None]]
#: Sink for namespaced extension values (``"agui.state"`` ...): not AgentEvents, never reduced.
OnExtension = Callable[[str, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Capabilities:
    event_types: tuple[str, ...]
    transports: tuple[str, ...]
    extensions: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    resumable: bool = False

    def to_wire(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "eventTypes": list(self.event_types),
            "transports": list(self.transports),
        }
        if self.extensions:
            data["extensions"] = list(self.extensions)
        if self.commands:
            data["commands"] = list(self.commands)
        if self.resumable:
            data["resumable"] = True
        return data


@dataclass(frozen=True, slots=True)
class Command:
    """A command from the app to a waiting run (protocol.md §9).

    ``type`` is ``approval.resolve`` | ``tool.submit_result`` | ``tool.retry`` | ``run.cancel``
    | ``approval.expire`` (internal, sent by the runner). ``payload`` is camelCase wire data.
    """

    type: str
    payload: Mapping[str, Any]


@dataclass(slots=True)
class RunOptions:
    """Everything the gateway hands a run. Built by the app, read by the provider context."""

    session_id: str
    run_id: str
    signal: AbortSignal
    #: Derived from the conversation state (protocol.md §11) unless ``input.messages`` is given.
    history: list[dict[str, Any]] = field(default_factory=list)
    #: True on the conversation's first run: emit ``session.started`` before ``run.started``.
    start_session: bool = False
    session_title: str | None = None
    #: False for a reload without new input and for continuations: no user message is emitted.
    emit_user_message: bool = True
    #: This provider's per-conversation transcript; mutate it in place, the gateway persists it.
    transcript: dict[str, Any] = field(default_factory=dict)
    #: How long a run may wait on the app (approval, tool result) before it fails.
    wait_timeout_seconds: float | None = 600.0
    #: Commands addressed to this run, already checked by the gateway against the state.
    commands: asyncio.Queue[Command] = field(default_factory=asyncio.Queue)
    on_extension: OnExtension | None = None
    #: Largest single upstream event (bytes) accepted; larger fails with upstream_event_too_large.
    max_upstream_event_bytes: int = 4 * 1024 * 1024
    #: Milliseconds since epoch; injectable for tests.
    now: Callable[[], float] | None = None
    #: The app's tracer of this run (``providers/tracing.py``); None: telemetry off.
    tracing: RunTracing | None = None


@runtime_checkable
class AgentTransport(Protocol):
    """One-method interface plus ``aclose``: open a request, yield upstream chunks.

    Aborting ``signal`` must close the upstream connection at once (not just stop reading).
    Library errors (httpx, websockets) are mapped to ``providers.errors`` types at this boundary.
    """

    kind: str

    def open(self, request: Any, signal: AbortSignal) -> AsyncIterator[Any]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class AgentProvider(Protocol):
    id: str
    protocol: Mapping[str, str]
    capabilities: Capabilities
    transport: AgentTransport

    def create_context(self, options: RunOptions) -> Any: ...

    def start(self, input: Mapping[str, Any], ctx: Any) -> Iterable[AgentEvent]: ...

    async def prepare_request(self, input: Mapping[str, Any], ctx: Any) -> Any: ...

    def transform_chunk(self, chunk: Any, ctx: Any) -> Iterable[AgentEvent]: ...

    def flush(self, ctx: Any) -> Iterable[AgentEvent]: ...

    def transform_error(self, error: BaseException, ctx: Any) -> Iterable[AgentEvent]: ...


@runtime_checkable
class CommandableProvider(AgentProvider, Protocol):
    def execute_command(self, command: Command, ctx: Any) -> AsyncIterator[AgentEvent]: ...


def is_agent_provider(obj: object) -> bool:
    protocol = getattr(obj, "protocol", None)
    return isinstance(protocol, Mapping) and protocol.get("name") == "agent-event"
