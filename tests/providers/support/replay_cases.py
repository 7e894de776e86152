"""What the replay tests replay: every recorded file of a dialect with a provider, and what
each must give. The replay test modules assert these; the fixture coverage test checks that no
recorded file is left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from providers.contract import Command
from tests.providers.support.replay_helpers import FIXTURES, submit_next_tool

OPENAI_CHAT = FIXTURES / "openai-chat"
OPENAI_RESPONSES = FIXTURES / "openai-responses"
ANTHROPIC = FIXTURES / "anthropic"

# ---------------------------------------------------------------- openai-chat/

WEATHER_EDINBURGH = {"city": "Edinburgh", "country": "UK", "units": "c"}

#: file -> (first assistant text prefix, [(tool name, arguments)], reasoning prefix, stopReason)
OPENAI_CHAT_CASES: dict[str, tuple[str | None, list[tuple[str, Any]], str | None, str]] = {
    "e2aad469b71d1d4894ff833ea147020a9d875eb7ce644a0ff355581690a4cbfd.bin": (
        "I'm unable to provide real-time weather updates",
        [],
        None,
        "stop",
    ),
    "f82268f2fefd5cfbc7eeb59c297688be2f6ca0849a6e4f17851b517310841d9b.bin": (
        None,
        [
            ("GetWeatherArgs", {"city": "Edinburgh", "country": "GB", "units": "c"}),
            ("get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
        ],
        None,
        "stop",
    ),
    "c6aa7e397b7123c3501f25df3a05d4daf7e8ad6d61ffa406ab5361fe36a8d5b1.bin": (
        None,
        [("GetWeatherArgs", WEATHER_EDINBURGH)],
        None,
        "stop",
    ),
    "a491adda08c3d4fde95f5b2ee3f60f7f745f1a56d82e62f58031cc2add502380.bin": (
        '{"city":"San Francisco","temperature":65',
        [],
        None,
        "stop",
    ),
    "4cc50a6135d254573a502310e6af1246f55edb6ad95fa24059f160996b68866d.bin": (
        '{"',
        [],
        None,
        "length",
    ),
    "173417d553406f034f643e5db3f8d591fb691ebac56f5ae39a22cc7d455c5353.bin": (
        "I'm sorry, I can't assist with that request.",
        [],
        None,
        "stop",
    ),
    "openai-text.chunks.txt": ("**Holiday Name:** Harmony Day", [], None, "stop"),
    "azure-model-router.1.chunks.txt": ("Capital of Denmark.", [], None, "stop"),
    "anthropic-fallback-tool-call.sse": (
        "Reading it.",
        [("read_file", {"path": "a.txt"})],
        None,
        "stop",
    ),
    "deepseek-reasoning.chunks.txt": (
        'The word "strawberry" contains three "r"s.',
        [],
        "We need to count the number of",
        "stop",
    ),
    "deepseek-tool-call.chunks.txt": (
        None,
        [("weather", {"location": "San Francisco"})],
        "The user is asking for the wea",
        "stop",
    ),
    "xai-tool-call.chunks.txt": (
        None,
        [("weather", {"location": "San Francisco"})],
        "First, the user is",
        "stop",
    ),
    "groq-reasoning.chunks.txt": ('The word **"strawberry"**', [], "Okay, let me try", "stop"),
    "groq-tool-call.chunks.txt": (None, [("weather", {})], None, "stop"),
    "mistral-incremental-tool-call.chunks.txt": (
        None,
        [("webSearchTool", {"query": "current Berlin weather"})],
        None,
        "stop",
    ),
    "mistral-reasoning.chunks.txt": ("2 + 2 = 4", [], "The user is asking for 2+2.", "stop"),
}


# ---------------------------------------------------------------- openai-responses/

#: file -> (first assistant text prefix, [(tool name, arguments, status)], reasoning prefixes,
#: stopReason). Tool recordings end in a hand-off: their result is submitted and a synthetic
#: text response answers the continuation. The error recording ends the run ``run.failed``.
OPENAI_RESPONSES_CASES: dict[
    str, tuple[str | None, list[tuple[str, Any, str]], list[str], str | None]
] = {
    "openai-shell-local-multiturn.1.chunks.txt": ("`arm64` (Apple Silicon).", [], [], "completed"),
    "openai-reasoning-encrypted-content.1.chunks.txt": (
        "The final result is **570**.",
        [
            ("calculator", {"a": 12, "b": 7, "op": "add"}, "completed"),
            ("calculator", {"a": 19, "b": 3, "op": "multiply"}, "completed"),
            ("calculator", {"a": 57, "b": 10, "op": "multiply"}, "completed"),
        ],
        ["**Calculating step-by-step using calculator**"],
        "completed",
    ),
    "openai-client-tool-search.2.chunks.txt": (
        None,
        [("get_weather", {"location": "San Francisco, CA", "unit": "fahrenheit"}, "completed")],
        [],
        "completed",
    ),
    "openai-phase.1.chunks.txt": ("Got it", [], [], "completed"),
    "openai-error.1.chunks.txt": (None, [], [], None),
    "github-copilot-id-rotation.1.chunks.txt": (
        "There are **3** letter",
        [],
        ["**Counting character occurrences**"],
        "completed",
    ),
    "openai-node-ResponseStream.standard-text.sse": ("Hello world", [], [], "completed"),
    "openai-node-ResponseStream.reasoning.sse": (
        "The answer is ",
        [],
        ["Chain: Step 1. Step 2."],
        "completed",
    ),
}

#: recordings that concatenate the responses of one tool loop: split at each response.created
OPENAI_RESPONSES_CONCATENATED = ("openai-reasoning-encrypted-content.1.chunks.txt",)

# ---------------------------------------------------------------- anthropic/

NOTE = "d10aa585-982b-4bd9-984e-420f9b3717f7"

#: file -> (first text prefix, [(name, arguments, status)], reasoning prefixes, stopReason)
ANTHROPIC_CASES: dict[str, tuple[str | None, list[tuple[str, Any, str]], list[str], str]] = {
    "basic_response.txt": ("Hello there!", [], [], "end_turn"),
    "tool_use_response.txt": (
        "I'll check the current weather in Paris",
        [("get_weather", {"location": "Paris"}, "completed")],
        [],
        "end_turn",
    ),
    "incomplete_partial_json_response.txt": (
        "I'll create a comprehensive tax guide",
        [("make_file", None, "failed")],
        [],
        "max_tokens",
    ),
    "refusal_response.txt": ("", [], [], "refusal"),
    "stream-a-refusal.sse": ("Hi", [], ["Simple educational question"], "refusal"),
    "anthropic-text.chunks.txt": ("Hello! I'm doing well", [], [], "end_turn"),
    "anthropic-json-tool.2.chunks.txt": (
        "I'll invoke the JSON response tool.",
        [("json", None, "completed")],
        [],
        "end_turn",
    ),
    "anthropic-tool-no-args.chunks.txt": (
        "I'll update the issue list for you.",
        [("updateIssueList", {}, "completed")],
        [],
        "end_turn",
    ),
    "anthropic-clear-thinking.1.chunks.txt": (
        "925 ÷ 5 = 185",
        [],
        ["The previous result was 925."],
        "end_turn",
    ),
    "anthropic-combined-context-editing.1.chunks.txt": (
        "# 25 × 37",
        [],
        ["I need to calculate 25 * 37"],
        "end_turn",
    ),
    "anthropic-tool-search-deferred-bm25.chunks.txt": (
        "I'll help you with this task.",
        [
            ("readNoteTree", {"noteId": NOTE}, "completed"),
            (
                "tool_search_tool_bm25",
                {"query": "add bullet point insert text editor", "limit": 5},
                "completed",
            ),
            ("executeEditorOperation", None, "completed"),
        ],
        [],
        "end_turn",
    ),
    "anthropic-web-search-tool.1.chunks.txt": (
        "Based on my search results",
        [("web_search", {"query": "tech news today September 26 2025"}, "completed")],
        [],
        "end_turn",
    ),
    "anthropic-message-delta-input-tokens.chunks.txt": ("pong", [], [], "end_turn"),
    "anthropic-refusal.chunks.txt": (None, [], [], "refusal"),
    "duplicate-message-start.chunks.txt": ("Hello, World!", [], [], "end_turn"),
    "spliced-message-start.chunks.txt": (
        None,
        [("test-tool", None, "failed"), ("test-tool", {"value": "Sparkle Day"}, "completed")],
        ["I will call the tool.", "Let me call the tool."],
        "end_turn",
    ),
}


# ---------------------------------------------------------------- ag-ui/

AGUI = FIXTURES / "ag-ui"
VALIDATE = AGUI / "ag-ui-validate"
SDKS = AGUI / "ag-ui" / "sdks"
DART = SDKS / "community" / "dart" / "test" / "fixtures"
DOTNET = SDKS / "dotnet" / "tests" / "AGUI.Abstractions.UnitTests" / "Compatibility" / "Fixtures"

RUN_STARTED = {"type": "RUN_STARTED", "threadId": "thread_x", "runId": "run_x"}
RUN_FINISHED = {"type": "RUN_FINISHED", "threadId": "thread_x", "runId": "run_x"}


def closing_turn(text: str = "Done.") -> list[dict[str, Any]]:
    return [
        RUN_STARTED,
        {"type": "TEXT_MESSAGE_START", "messageId": "msg_done", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "msg_done", "delta": text},
        {"type": "TEXT_MESSAGE_END", "messageId": "msg_done"},
        RUN_FINISHED,
    ]


def approve(approval_id: str) -> Command:
    return Command("approval.resolve", {"approvalId": approval_id, "decision": "approved"})


HAIKU = {"name": "generate_haiku", "description": "Show a haiku", "parameters": {}}

VALID: dict[str, dict[str, Any]] = {
    "agentic-chat.jsonl": {
        "texts": ["Hello! How can I help you today?", "Chunked messages work too."],
        "reasoning": ["The user greeted me; respond warmly."],
    },
    "agentic-generative-ui.jsonl": {"tasks": ["plan", "execute"], "state": {"steps": 2}},
    "backend-tool-rendering.jsonl": {"tools": [("get_weather", {"city": "Berlin"}, "completed")]},
    "human-in-the-loop.jsonl": {
        "tools": [("confirm_action", {"action": "delete", "count": 3}, "completed")],
        "texts": ["I need your approval to delete 3 files.", "Done — 3 files deleted."],
        "commands": [approve("int_001")],
    },
    "predictive-state-updates.jsonl": {
        "tools": [("write_document", {"document": "Hello world."}, "failed")],
        "state": {"document": "Hello world."},
    },
    "shared-state.jsonl": {
        "state": {"recipe": {"title": "Garlic Pasta", "ingredients": ["tomato", "garlic"]}}
    },
    "tool-based-generative-ui.jsonl": {
        "tools": [("generate_haiku", {"topic": "conformance"}, "completed")],
        "input_tools": [HAIKU],
        "commands": [submit_next_tool({"shown": True})],
        "extra_turns": [closing_turn()],
        "texts": ["Done."],
    },
}


def rule_dirs() -> list[Path]:
    return sorted(p for p in (VALIDATE / "invalid").iterdir() if p.is_dir())


DOTNET_WRAPPED = ("activity-events.json", "custom-and-raw-events.json")
DOTNET_EVENT_BY_EVENT = (
    "forward-compatibility.json",
    "message-events.json",
    "run-events.json",
    "state-events.json",
    "tool-call-events.json",
)


def agui_replayed_files() -> list[Path]:
    files = [VALIDATE / "valid" / name for name in VALID]
    files.append(VALIDATE / "valid" / "predictive-state-updates.expected.json")
    for case in rule_dirs():
        files.extend(case.iterdir())
    files += [
        DART / "sse_streams.txt",
        DART / "events.json",
        SDKS / "fixtures" / "null-omission.json",
    ]
    files += [DOTNET / name for name in DOTNET_WRAPPED + DOTNET_EVENT_BY_EVENT]
    return files


def replayed_files() -> set[Path]:
    """Every recorded file some replay test replays."""
    files = {OPENAI_CHAT / name for name in OPENAI_CHAT_CASES}
    files |= {OPENAI_RESPONSES / name for name in OPENAI_RESPONSES_CASES}
    files |= {ANTHROPIC / name for name in ANTHROPIC_CASES}
    files |= set(agui_replayed_files())
    return {p.resolve() for p in files}
