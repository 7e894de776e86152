"""The tracing hook of a run (``RunOptions.tracing``): the app traces, providers only report.

``providers`` may not import ``app``, so the app hands a run a :class:`RunTracing` (or None:
telemetry off, and no tracing code runs). Each upstream request is one model call: the runner
(the first request) and ``ProviderBase.stream`` (each continuation) call :func:`start_call`
before they open the transport, which may add the ``traceparent`` header to the request, and
:meth:`RunTracing.end_call` once its stream and flush are done or it failed. A model-API
provider describes the call it just read (:meth:`RunTracing.describe_call`: response id and
model, finish reasons, token usage) before the call ends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from providers.transports.request import UpstreamRequest

__all__ = ["CallDescription", "RunTracing", "start_call"]


@dataclasses.dataclass(frozen=True, slots=True)
class CallDescription:
    """What the provider read of one model call's answer (every field may be unknown)."""

    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: Sequence[str] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None


class RunTracing(Protocol):
    """The app's tracer of one run."""

    def start_call(self, request: Any) -> Mapping[str, str]:
        """A model call of this run opens ``request`` (an :class:`UpstreamRequest`, or a
        provider's own request object) now; answers the headers to send with it."""
        ...

    def describe_call(self, description: CallDescription) -> None:
        """The provider read the current call's answer (before :meth:`end_call`)."""
        ...

    def end_call(self, error: BaseException | None = None) -> None:
        """The current call's stream is over (``error``: how it failed); no-op without one."""
        ...


def start_call(tracing: RunTracing, request: Any) -> Any:
    """``request`` as it goes upstream: an :class:`UpstreamRequest` gains the headers
    ``tracing`` answers (``traceparent``); other request objects go as they are."""
    headers = tracing.start_call(request)
    if headers and isinstance(request, UpstreamRequest):
        return dataclasses.replace(request, headers={**request.headers, **headers})
    return request
