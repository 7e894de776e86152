"""A provider for the app tests, driven by the prompt; built on the real ProviderBase.

Prompt words (space separated, in order):
- ``text:N`` — N text deltas ``w0 w1 …`` (``text:N:SIZE`` pads each delta to SIZE bytes)
- ``sleep:S`` — wait S seconds (abort cuts it short)
- ``gate:NAME`` — wait until the test calls ``provider.gates[NAME].set()`` (abort cuts it short)
- ``approval:ID`` / ``approval:ID:editable`` / ``approval:ID:expired`` — an approval that waits
  (``expired``: its ``expiresAt`` already past; ``approval:ID:ttl=S``: it expires S seconds after
  it is requested)
- ``apptool:ID`` — a tool handed to the app (waits for its result)
- ``oktool:ID`` / ``failtool:ID`` — a runtime tool that completes / fails with a retryable error
- ``ext:KEY`` — an extension value ``{"n": 1}`` under KEY
- ``boom`` — the upstream fails
Anything else is ignored. ``histories`` records the history each run received.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from typing import Any

from providers.base import ProviderBase, standard_capabilities
from providers.context import RunContext
from providers.contract import Command, RunOptions
from providers.errors import UpstreamError
from providers.signal import AbortSignal
from providers.transports.iterable import IterableTransport

__all__ = ["ScriptedProvider"]


async def _script(
    request: Any, signal: AbortSignal, gates: Mapping[str, asyncio.Event]
) -> AsyncIterator[dict[str, Any]]:
    for word in str(request.get("prompt", "")).split():
        name, _, arg = word.partition(":")
        if name == "text":
            count, _, size = arg.partition(":")
            for i in range(int(count)):
                text = f"w{i} "
                if size:
                    text = text.ljust(int(size), "x")
                yield {"text": text}
                await asyncio.sleep(0)
        elif name == "sleep":
            await asyncio.sleep(float(arg))
        elif name == "gate":
            await gates[arg].wait()
        elif name in ("approval", "apptool", "oktool", "failtool", "ext", "boom"):
            yield {name: arg}


class ScriptedProvider(ProviderBase):
    def __init__(self, id: str = "demo") -> None:
        self.gates: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

        def script(request: Any, signal: AbortSignal) -> AsyncIterator[dict[str, Any]]:
            return _script(request, signal, self.gates)

        super().__init__(
            id,
            IterableTransport(script),
            standard_capabilities(["async-iterable"], extensions=["test.ext"]),
        )
        self.histories: list[list[dict[str, Any]]] = []
        self.commands: list[Command] = []

    def create_context(self, options: RunOptions) -> RunContext:
        self.histories.append(list(options.history))
        return super().create_context(options)

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> Any:
        return dict(input)

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        if "text" in chunk:
            if not ctx.is_open("message", "m1"):
                ctx.open_message("m1")
            ctx.message_delta("m1", chunk["text"])
        elif "approval" in chunk:
            ident, _, flag = chunk["approval"].partition(":")
            expires_at = None
            if flag == "expired":
                expires_at = 1.0
            elif flag.startswith("ttl="):
                expires_at = (time.time() + float(flag.removeprefix("ttl="))) * 1000
            ctx.request_approval(
                ident,
                description="ok?",
                editable=flag == "editable",
                expires_at=expires_at,
                version=1,
            )
        elif "apptool" in chunk:
            ctx.request_tool(chunk["apptool"], "lookup", '{"q":1}', executor="app")
        elif "oktool" in chunk or "failtool" in chunk:
            ident = chunk.get("oktool") or chunk["failtool"]
            ctx.request_tool(ident, "lookup", '{"q":1}')
            ctx.tool_running(ident)
            if "oktool" in chunk:
                ctx.complete_tool(ident, {"ok": True})
            else:
                ctx.fail_tool(ident, {"code": "flaky", "message": "try again", "retryable": True})
        elif "ext" in chunk:
            ctx.extension(chunk["ext"], {"n": 1})
        elif "boom" in chunk:
            raise UpstreamError("upstream exploded")

    def on_command(self, command: Command, ctx: RunContext) -> None:
        self.commands.append(command)
