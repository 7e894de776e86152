"""Property: whatever a provider on ProviderBase opened, every way a run can end (flush, error,
abort, wait timeout, commands) leaves zero contract issues and exactly one run terminal."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from providers.errors import UpstreamDropped
from providers.testing import assert_provider_contract, make_options
from tests.providers.support.helpers import ScriptProvider

KINDS = ("message", "reasoning", "tool", "app_tool", "approval", "task", "artifact")


def plan(steps: list[tuple[int, int]]) -> tuple[list[Any], list[tuple[str, str]]]:
    """Turn (action, pick) pairs into valid context calls; return them and what is open."""
    chunks: list[Any] = []
    open_: list[tuple[str, str]] = []
    for n, (action, pick) in enumerate(steps):
        if action < len(KINDS) or not open_:
            kind = KINDS[action % len(KINDS)]
            ident = f"{kind}-{n}"
            chunks.append(
                {
                    "message": ("open_message", ident),
                    "reasoning": ("open_reasoning", ident),
                    "tool": ("request_tool", ident, "t"),
                    "app_tool": ("kw", "request_tool", (ident, "t"), {"executor": "app"}),
                    "approval": ("kw", "request_approval", (ident,), {}),
                    "task": ("create_task", ident, "T"),
                    "artifact": ("create_artifact", ident, "a.txt"),
                }[kind]
            )
            open_.append((kind, ident))
            continue
        kind, ident = open_[pick % len(open_)]
        progress = {
            "message": ("message_delta", ident, "x"),
            "reasoning": ("reasoning_delta", ident, "y"),
            "tool": ("tool_arguments", ident, "{"),
            "app_tool": ("tool_arguments", ident, "{"),
            "task": ("kw", "update_task", (ident,), {"progress": 10}),
            "artifact": ("update_artifact", ident, "v", 1),
        }
        finish = {
            "message": ("complete_message", ident),
            "reasoning": ("complete_reasoning", ident),
            "tool": ("complete_tool", ident, 1),
            "approval": ("resolve_approval", ident, "approved"),
            "task": ("complete_task", ident),
            "artifact": ("complete_artifact", ident),
        }
        if action % 2 == 0 and kind in progress:
            chunks.append(progress[kind])
        elif kind in finish:
            chunks.append(finish[kind])
            open_.remove((kind, ident))
        else:  # an app tool whose arguments are complete: hand it over
            chunks.append(("tool_running", ident))
    return chunks, open_


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 20)), max_size=25),
    ending=st.sampled_from(["flush", "error", "abort", "wait_timeout", "commands"]),
)
async def test_every_ending_is_clean(steps: list[tuple[int, int]], ending: str) -> None:
    chunks, open_ = plan(steps)
    commands: list[Any] = []
    options = make_options(wait_timeout_seconds=0.01 if ending == "wait_timeout" else 5)
    abort_when = None
    if ending == "error":
        chunks.append(("raise", UpstreamDropped()))
    elif ending == "abort":
        abort_when = _abort_after(len(chunks))
    elif ending in ("flush", "commands"):
        for kind, ident in open_:
            if kind == "approval":
                commands.append(("approval.resolve", {"approvalId": ident, "decision": "rejected"}))
            elif kind == "app_tool":
                commands.append(("tool.submit_result", {"toolCallId": ident, "result": "ok"}))
    events = await assert_provider_contract(
        ScriptProvider(),
        *chunks,
        input={"prompt": "p"},
        options=options,
        commands=commands,
        abort_when=abort_when,
    )
    terminals = [
        e["type"] for e in events if e["type"].startswith("run.") and e["type"] != "run.started"
    ]
    assert len(terminals) == 1
    expected = {
        "flush": "run.completed",
        "commands": "run.completed",
        "error": "run.failed",
        "wait_timeout": "run.failed" if _waits(open_) else "run.completed",
        "abort": "run.cancelled",
    }[ending]
    assert terminals == [expected]


def _waits(open_: list[tuple[str, str]]) -> bool:
    return any(kind in ("approval", "app_tool") for kind, _ in open_)


def _abort_after(count: int) -> Any:
    # run.started + the user message (2 events) + one event per chunk
    def check(events: list[dict[str, Any]]) -> bool:
        return len(events) >= 3 + count

    return check
