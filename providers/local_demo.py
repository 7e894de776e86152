"""``local-demo``: an offline, deterministic in-process runtime exercising every event family.

No network, no keys: this is what the demo page and ``make run`` use by default. The reply is
picked by **keywords** in the prompt (case-insensitive, anywhere in the text):

==============  ==========================================================================
keyword         what the run does
==============  ==========================================================================
(always)        streams an assistant text message word by word
``think``       a reasoning block first (``reasoning.*``, with a summary)
``search``      a tool executed by the runtime: ``web_search`` requested, arguments streamed,
                running, completed with a result
``weather``     a tool handed to the app (§9): ``get_weather`` with ``meta.executor = "app"``,
                ``tool.running``, then the run waits for ``tool.submit_result``; the answer
                that follows quotes the result (or reports the tool's error)
``approve``     an approval (``deploy``, risk ``high``, editable) waiting for
                ``approval.resolve``; approved/modified → a runtime tool ``deploy`` runs;
                rejected → the reply says it will not deploy; expired → says it expired
``task``        a task with progress 0 → 25 → 50 → 75 → 100, then completed
``artifact``    an artifact ``report.md`` with versions 1, 2 and 3, then completed
``slow``        a long reply (2 400 words at ≥ 50 ms each, about 2 minutes): time to
                watch, resume and abort it by hand
``fail``        the upstream fails mid-stream (``run.failed`` ``upstream_error``)
``all``         think + search + weather + approve + task + artifact
==============  ==========================================================================

Config (``[providers.NAME]``, kind ``local-demo``): ``delay_ms`` (pause between chunks, default
15), ``pace`` (multiplier on every pause, default 1.0; 0 = as fast as possible).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from providers.base import ProviderBase
from providers.context import RunContext, input_text
from providers.contract import AgentProvider, Command
from providers.errors import UpstreamError
from providers.registry import register_kind
from providers.signal import AbortSignal
from providers.transports import IterableTransport, abortable_sleep

__all__ = ["KEYWORDS", "LocalDemoProvider"]

KEYWORDS = ("think", "search", "weather", "approve", "task", "artifact", "slow", "fail", "all")
_ALL = ("think", "search", "weather", "approve", "task", "artifact")

#: One scripted step: (ctx method name, args, kwargs), or ("sleep", (factor,), {}).
Op = tuple[str, tuple[Any, ...], dict[str, Any]]


def _op(name: str, *args: Any, **kwargs: Any) -> Op:
    return (name, args, kwargs)


def features_of(text: str) -> set[str]:
    lowered = text.lower()
    found = {word for word in KEYWORDS if word in lowered}
    if "all" in found:
        found |= set(_ALL)
    return found


def _words(text: str) -> list[str]:
    parts = text.split(" ")
    return [part + (" " if i < len(parts) - 1 else "") for i, part in enumerate(parts)]


def _message(message_id: str, text: str) -> list[Op]:
    ops = [_op("open_message", message_id)]
    ops += [_op("message_delta", message_id, word) for word in _words(text)]
    ops.append(_op("complete_message", message_id))
    return ops


def first_turn(prompt: str, features: set[str]) -> list[Op]:
    ops: list[Op] = []
    if "think" in features:
        ops.append(_op("open_reasoning", "reasoning-1"))
        for word in _words("Let me work out what is being asked and plan the answer."):
            ops.append(_op("reasoning_delta", "reasoning-1", word))
        ops.append(_op("complete_reasoning", "reasoning-1", None, "Planned the answer."))
    if "task" in features:
        ops.append(_op("create_task", "task-1", "Prepare the answer", "Demo task"))
        for progress in (0, 25, 50, 75, 100):
            ops.append(_op("update_task", "task-1", progress=progress))
        ops.append(_op("complete_task", "task-1", {"steps": 4}))
    if "search" in features:
        ops.append(_op("request_tool", "call-search", "web_search", index=0))
        for piece in ('{"query": ', '"agent events"}'):
            ops.append(_op("tool_arguments", "call-search", piece))
        ops.append(_op("tool_running", "call-search"))
        ops.append(_op("complete_tool", "call-search", [{"title": "Agent Event protocol 0.1"}]))
    if "artifact" in features:
        ops.append(_op("create_artifact", "artifact-1", "report.md", media_type="text/markdown"))
        for version in (1, 2, 3):
            ops.append(_op("update_artifact", "artifact-1", f"# Report v{version}\n", version))
        ops.append(_op("complete_artifact", "artifact-1", version=3))
    text = f"You said: {prompt.strip() or '(nothing)'}. This is the local demo runtime."
    if "slow" in features:
        text = " ".join(["Streaming slowly, word by word."] * 480)
    ops += _message("msg-1", text)
    if "fail" in features:
        ops.append(_op("fail_upstream"))
    if "weather" in features:
        ops.append(_op("request_tool", "call-weather", "get_weather", executor="app", index=1))
        ops.append(_op("tool_arguments", "call-weather", '{"city": "Hangzhou"}'))
        ops.append(_op("tool_running", "call-weather"))
    if "approve" in features:
        ops.append(
            _op(
                "request_approval",
                "approval-1",
                description="Deploy the demo to production?",
                risk="high",
                data={"action": "deploy", "target": "production"},
                editable=True,
                version=1,
            )
        )
    return ops


def continuation_turn(ctx: RunContext) -> list[Op]:
    """The reply once nothing waits any more, from what the app decided."""
    decisions: dict[str, Any] = ctx.scratch.setdefault("decisions", {})
    ops: list[Op] = []
    parts: list[str] = []
    weather = ctx.tool("call-weather")
    if weather is not None:
        if weather.status == "completed":
            answer = json.dumps(ctx.scratch.get("weather"), ensure_ascii=False)
            parts.append(f"The weather tool answered: {answer}.")
        else:
            parts.append("The weather tool failed.")
    decision = decisions.get("approval-1")
    if decision in ("approved", "modified"):
        ops.append(_op("request_tool", "call-deploy", "deploy", '{"target": "production"}'))
        ops.append(_op("tool_running", "call-deploy"))
        ops.append(_op("complete_tool", "call-deploy", {"deployed": True}))
        parts.append("Deployed as approved.")
    elif decision == "rejected":
        parts.append("Understood, I will not deploy.")
    elif decision == "expired":
        parts.append("The approval expired, so nothing was deployed.")
    turn = ctx.scratch.get("turn", 1) + 1
    ctx.scratch["turn"] = turn
    return ops + _message(f"msg-{turn}", " ".join(parts) or "Done.")


class LocalDemoProvider(ProviderBase):
    def __init__(self, id: str = "demo", *, delay_ms: float = 15.0, pace: float = 1.0) -> None:
        self.delay = max(0.0, delay_ms) / 1000.0 * max(0.0, pace)
        super().__init__(id, IterableTransport(self._source))

    async def _source(self, request: Mapping[str, Any], signal: AbortSignal) -> AsyncIterator[Op]:
        ops: list[Op] = request["ops"]
        delay = max(self.delay, 0.05) if request.get("slow") else self.delay
        for op in ops:
            if op[0] == "fail_upstream":
                raise UpstreamError(
                    "The demo upstream failed on purpose.", details={"code": "demo_failure"}
                )
            await abortable_sleep(delay, signal)
            yield op

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> Any:
        prompt = input_text(input)
        features = features_of(prompt)
        ctx.scratch["features"] = features
        return {"ops": first_turn(prompt, features), "slow": "slow" in features}

    def handle_chunk(self, chunk: Op, ctx: RunContext) -> None:
        name, args, kwargs = chunk
        getattr(ctx, name)(*args, **kwargs)

    def on_command(self, command: Command, ctx: RunContext) -> None:
        decisions = ctx.scratch.setdefault("decisions", {})
        payload = command.payload
        if command.type == "approval.resolve":
            decisions[payload["approvalId"]] = payload["decision"]
        elif command.type == "approval.expire":
            decisions[payload["approvalId"]] = "expired"
        elif command.type == "tool.submit_result" and payload.get("toolCallId") == "call-weather":
            ctx.scratch["weather"] = payload.get("result")

    async def prepare_continuation(self, ctx: RunContext) -> Any:
        return {"ops": continuation_turn(ctx)}


def _factory(name: str, config: Mapping[str, Any]) -> AgentProvider:
    return LocalDemoProvider(
        name,
        delay_ms=float(config.get("delay_ms", 15.0)),
        pace=float(config.get("pace", 1.0)),
    )


register_kind("local-demo", _factory)
