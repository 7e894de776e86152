"""``fixture``: replays a recorded AgentEvent JSONL file as a run of the gateway.

Each line is one AgentEvent envelope; it is re-stamped into the gateway's session and run (the
recorded ids go to ``meta.upstream``, see :mod:`providers.restamp`). Config: ``path`` (the
JSONL file), ``timed`` (replay with recorded timing: lines ``{"atMs", "chunk"}``), ``speed``.
A recording that ends without its run terminal fails the run with ``upstream_dropped``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from providers.base import ProviderBase
from providers.context import RunContext
from providers.contract import AgentProvider
from providers.errors import UpstreamDropped
from providers.registry import register_kind
from providers.restamp import Restamper
from providers.transports import ReplayTransport

__all__ = ["FixtureProvider"]


class FixtureProvider(ProviderBase):
    def __init__(
        self, id: str, path: str | Path, *, timed: bool = False, speed: float = 1.0
    ) -> None:
        super().__init__(id, ReplayTransport(path, fmt="jsonl", timed=timed, speed=speed))
        self.path = Path(path)

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> Any:
        ctx.scratch["restamp"] = Restamper()
        return None

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        restamper: Restamper = ctx.scratch["restamp"]
        restamper.apply(chunk, ctx)

    def on_upstream_end(self, ctx: RunContext) -> None:
        if not ctx.ended and not ctx.is_waiting():
            raise UpstreamDropped("The recording ended without its run terminal.")


def _factory(name: str, config: Mapping[str, Any]) -> AgentProvider:
    path = config.get("path")
    if not isinstance(path, str) or not path:
        raise ValueError(f'Provider "{name}" (kind fixture) needs a "path".')
    return FixtureProvider(
        name, path, timed=bool(config.get("timed", False)), speed=float(config.get("speed", 1.0))
    )


register_kind("fixture", _factory)
