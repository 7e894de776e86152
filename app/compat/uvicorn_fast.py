"""uvicorn's HTTP connection internals, for an SSE stream that writes without waiting.

The internals touched (uvicorn ``==`` pinned in ``pyproject.toml``):

- the ASGI ``send`` is a bound method (``send.__self__``) of the connection's
  ``RequestResponseCycle`` (``uvicorn.protocols.http.h11_impl`` / ``httptools_impl``), built
  with ``transport`` and ``flow`` arguments and holding them as attributes of those names;
- ``flow`` is a ``uvicorn.protocols.http.flow_control.FlowControl`` whose ``write_paused``
  (bool) is true while the transport is paused for writing;
- ``RequestResponseCycle.send(message)`` suspends only while ``flow.write_paused``: otherwise
  its coroutine writes and finishes at its first step (``send_now`` steps it by hand);
- ``transport`` is the connection's ``asyncio.Transport`` (``is_closing``, ``abort``): a
  stalled subscriber is aborted at once instead of closed gracefully behind its unread buffer.

:func:`available` checks them once (names and signatures) and logs one warning when one does
not match; :func:`connection_of` also checks each connection's objects. Where either fails, or
with ``[gateway] fast_paths = false``, the callers use the public path: every send awaited with
its timeout, the follower writes its batches itself, a dropped subscriber is closed by the
server. An upgrade of uvicorn may make the gateway slower, never broken. Why the fast path is
kept: ``BENCHMARKS.md``, section "Fast paths (issue 50)".
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, cast

from starlette.types import Message, Send

__all__ = ["Connection", "Flow", "available", "connection_of", "send_now", "transport_of"]

logger = logging.getLogger("app.compat.uvicorn_fast")

#: The modules of uvicorn's HTTP protocols whose ``RequestResponseCycle`` is checked (the ones
#: that import: httptools is optional).
CYCLE_MODULES = ("uvicorn.protocols.http.h11_impl", "uvicorn.protocols.http.httptools_impl")
FLOW_MODULE = "uvicorn.protocols.http.flow_control"


class Flow(Protocol):
    """uvicorn's ``FlowControl`` as used here."""

    write_paused: bool


@dataclass(frozen=True, slots=True)
class Connection:
    """One connection's internals: its transport and its flow control."""

    transport: asyncio.Transport
    flow: Flow


def _problems() -> list[str]:
    found: list[str] = []
    try:
        flow_control = importlib.import_module(FLOW_MODULE)
        flow_class = flow_control.FlowControl
        if list(inspect.signature(flow_class.__init__).parameters) != ["self", "transport"]:
            found.append("FlowControl.__init__(self, transport)")
        else:
            probe = flow_class(cast(asyncio.Transport, None))
            if not isinstance(getattr(probe, "write_paused", None), bool):
                found.append("FlowControl().write_paused (bool)")
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        found.append(f"{FLOW_MODULE}.FlowControl ({exc})")
    cycles = 0
    for name in CYCLE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        cycle = getattr(module, "RequestResponseCycle", None)
        if cycle is None:
            found.append(f"{name}.RequestResponseCycle")
            continue
        cycles += 1
        params = inspect.signature(cycle.__init__).parameters
        if not {"transport", "flow"} <= params.keys():
            found.append(f"{name}.RequestResponseCycle(transport=, flow=)")
        send = getattr(cycle, "send", None)
        if not inspect.iscoroutinefunction(send) or list(inspect.signature(send).parameters) != [
            "self",
            "message",
        ]:
            found.append(f"{name}.RequestResponseCycle.send(self, message)")
    if not cycles:
        found.append("uvicorn.protocols.http.*.RequestResponseCycle")
    return found


@functools.cache
def available() -> bool:
    """uvicorn's internals are as this module expects (checked once; one warning if not)."""
    try:
        problems = _problems()
    except Exception as exc:  # an internal changed in a way the checks did not foresee
        problems = [repr(exc)]
    if problems:
        logger.warning(
            "uvicorn's internals differ from what app/compat/uvicorn_fast.py expects (%s): "
            "SSE uses the public ASGI path",
            "; ".join(problems),
        )
        return False
    return True


def transport_of(send: Send) -> asyncio.Transport | None:
    """The transport of the connection whose server ``send`` this is (None: not uvicorn's)."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if callable(getattr(transport, "abort", None)) and callable(
        getattr(transport, "is_closing", None)
    ):
        return cast(asyncio.Transport, transport)
    return None


def connection_of(send: Send) -> Connection | None:
    """The transport and flow control behind the server's ``send`` (None: not as expected)."""
    transport = transport_of(send)
    flow = getattr(getattr(send, "__self__", None), "flow", None)
    if transport is None or not isinstance(getattr(flow, "write_paused", None), bool):
        return None
    return Connection(transport, cast(Flow, flow))


#: What uvicorn's ``send`` returns, as cast once here (a ``Coroutine[...]`` written in the
#: ``cast`` would be built at every push).
_Sending = Coroutine[Any, Any, None]


def send_now(send: Send, message: Message) -> bool:
    """Send ``message`` through the server's ``send`` without awaiting it: True when it was
    written; False (nothing written) when the send would have waited.

    Only for a connection whose flow is not paused (see :func:`connection_of`).
    """
    sending = cast(_Sending, send(message))
    try:
        sending.send(None)
    except StopIteration:
        return True
    sending.close()  # it would have waited, and uvicorn waits before writing anything
    return False
