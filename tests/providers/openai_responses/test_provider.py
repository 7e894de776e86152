"""The ``openai-responses`` provider's pure parts (request building, event decoding, mapping edge
cases, usage) and, with respx, the request it sends through the SSE transport."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import respx

from providers.contract import AgentEvent, Command
from providers.errors import UpstreamError, UpstreamMalformedChunk
from providers.openai_responses import (
    OpenAIResponsesProvider,
    build_responses_request,
    decode_event,
    history_to_input,
    normalise_responses_usage,
)
from providers.openai_responses.request import remember_response_turn
from providers.registry import create_provider, known_kinds
from providers.testing import make_options, run_collect
from providers.transports import IterableTransport, SSETransport
from providers.validator import validate_agent_provider_events
from tests.providers.support.mock_upstreams import responses_every_item_frames, responses_frames
from tests.providers.support.replay_helpers import (
    assistant_texts,
    frames_to_chunks,
    reasoning_texts,
    submit_next_tool,
    terminal,
    tool_calls,
)

ROOT = Path(__file__).resolve().parents[3]
URL = "https://api.openai.test/v1/responses"


def event(kind: str, **payload: Any) -> dict[str, Any]:
    return {"type": kind, **payload}


def created() -> dict[str, Any]:
    return event("response.created", response={"id": "resp_1", "model": "m", "status": "x"})


def completed(**response: Any) -> dict[str, Any]:
    usage = {"input_tokens": 4, "output_tokens": 2, "total_tokens": 6}
    return event("response.completed", response={"status": "completed", "usage": usage, **response})


def added(index: int, **item: Any) -> dict[str, Any]:
    return event("response.output_item.added", output_index=index, item=item)


def done(index: int, **item: Any) -> dict[str, Any]:
    return event("response.output_item.done", output_index=index, item=item)


async def play(*turns: list[dict[str, Any]], commands: list[Any] | None = None) -> list[AgentEvent]:
    provider = OpenAIResponsesProvider(url=URL)
    remaining = [[orjson.dumps(e).decode() for e in turn] for turn in turns]
    provider.transport = IterableTransport(
        lambda _request, _signal: remaining.pop(0) if remaining else [], kind="sse"
    )
    events = await run_collect(
        provider,
        {"prompt": "hi"},
        options=make_options(wait_timeout_seconds=5),
        commands=commands or [],
    )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    return events


# ---------------------------------------------------------------- request


def test_request_is_stateless_whatever_params_say() -> None:
    body = build_responses_request(
        model="gpt-x",
        history=[],
        transcript={},
        user_content="Hi",
        tools=[{"name": "f", "description": "d"}],
        params={"store": True, "stream": False, "include": ["file_search_call.results"]},
    )
    assert body["store"] is False and body["stream"] is True
    assert body["include"] == ["file_search_call.results", "reasoning.encrypted_content"]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "f",
            "description": "d",
            "parameters": {"type": "object", "properties": {}},
        }
    ]
    assert body["input"] == [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]


def test_user_parts_and_system_entries() -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "data": "AAA", "mediaType": "image/jpeg"},
                {"type": "file", "data": "BBB", "mediaType": "application/pdf", "name": "a.pdf"},
                {"type": "file", "url": "https://x.test/b.pdf"},
                {"type": "audio", "data": "CCC"},
            ],
        },
    ]
    assert history_to_input(history, {}) == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Look:"},
                {"type": "input_image", "image_url": "data:image/jpeg;base64,AAA"},
                {
                    "type": "input_file",
                    "file_data": "data:application/pdf;base64,BBB",
                    "filename": "a.pdf",
                },
                {"type": "input_file", "file_url": "https://x.test/b.pdf"},
            ],
        },
    ]


def test_kept_turns_are_sent_back_once_each_and_in_order() -> None:
    transcript: dict[str, Any] = {}
    reasoning = {"type": "reasoning", "id": "rs_1", "encrypted_content": "E1", "summary": []}
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    message = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "ok"}],
    }
    remember_response_turn(transcript, [reasoning, call])
    remember_response_turn(transcript, [message])
    remember_response_turn(transcript, [dict(message)])  # the same text in a later turn
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "toolCalls": [{"id": "c1", "name": "f", "arguments": "{}"}],
        },
        {"role": "tool", "toolCallId": "c1", "content": "r"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "ok"},
    ]
    items = history_to_input(history, transcript)
    assert items[1:5] == [
        reasoning,
        call,
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
        message,
    ]
    assert items[6] == message and len(items) == 7


def test_transcript_keeps_a_bounded_number_of_turns() -> None:
    transcript: dict[str, Any] = {}
    for n in range(100):
        remember_response_turn(transcript, [{"type": "reasoning", "id": f"rs_{n}"}])
    remember_response_turn(transcript, [])
    turns = transcript["responseTurns"]
    assert len(turns) == 64 and turns[-1]["items"][0]["id"] == "rs_99"


# ---------------------------------------------------------------- decoding and usage


def test_decode_event() -> None:
    assert decode_event("[DONE]") is None
    with pytest.raises(UpstreamMalformedChunk):
        decode_event("{nope")
    with pytest.raises(UpstreamMalformedChunk):
        decode_event("[1]")
    with pytest.raises(UpstreamError) as flat:
        decode_event('{"type":"error","code":"rate_limit_exceeded","message":"Slow down."}')
    assert flat.value.message == "Slow down."
    assert flat.value.details == {"code": "rate_limit_exceeded", "type": "error"}
    with pytest.raises(UpstreamError) as nested:
        decode_event('{"type":"error","error":{"type":"t","code":"c","message":"m","param":null}}')
    assert nested.value.details == {"code": "c", "type": "t"}


def test_usage_normalised() -> None:
    raw = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 40},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 20},
        "total_tokens": 130,
    }
    assert normalise_responses_usage(raw) == {
        "inputTokens": 100,
        "outputTokens": 30,
        "totalTokens": 130,
        "reasoningTokens": 20,
        "cachedInputTokens": 40,
    }
    assert normalise_responses_usage({"input_tokens": True, "output_tokens": 2}) == {
        "inputTokens": 0,
        "outputTokens": 2,
        "totalTokens": 2,
    }


# ---------------------------------------------------------------- mapping edge cases


async def test_done_events_supply_text_the_deltas_did_not_carry() -> None:
    message = {"type": "message", "id": "m", "role": "assistant", "content": []}
    final = {**message, "content": [{"type": "output_text", "text": "Hello world"}]}
    events = await play(
        [
            created(),
            added(0, **message),
            event("response.output_text.delta", output_index=0, content_index=0, delta="Hel"),
            event("response.output_text.done", output_index=0, content_index=0, text="Hello"),
            done(0, **final),
            completed(),
        ]
    )
    assert assistant_texts(events) == ["Hello world"]


@pytest.mark.parametrize("part_added", [True, False])  # servers that skip content_part.added
async def test_refusal_is_content_with_meta_refusal(part_added: bool) -> None:
    message = {"type": "message", "id": "m", "role": "assistant", "content": []}
    part = {"type": "refusal", "refusal": ""}
    added_part = event("response.content_part.added", output_index=0, content_index=0, part=part)
    events = await play(
        [
            created(),
            added(0, **message),
            *([added_part] if part_added else []),
            event("response.refusal.delta", output_index=0, content_index=0, delta="I can't."),
            event("response.refusal.done", output_index=0, content_index=0, refusal="I can't."),
            done(0, **message),
            completed(),
        ]
    )
    assert assistant_texts(events) == ["I can't."]
    started = next(
        e for e in events if e["type"] == "message.started" and e["payload"]["role"] == "assistant"
    )
    finished = [e for e in events if e["type"] == "message.completed"][-1]
    assert started["meta"]["refusal"] is True and finished["meta"] == {"refusal": True}


@pytest.mark.parametrize("parts", [1, "text", {"type": "output_text"}, True])
async def test_done_items_whose_parts_are_not_a_list_keep_the_streamed_text(parts: Any) -> None:
    # Found by test_fuzz_chunks (a done message item with ``content: 1``): iterating it raised
    # TypeError and the run failed with provider_error instead of completing.
    message = {"type": "message", "id": "m", "role": "assistant", "content": []}
    item = {"type": "reasoning", "id": "rs", "summary": []}
    events = await play(
        [
            created(),
            added(0, **item),
            event(
                "response.reasoning_summary_text.delta", output_index=0, summary_index=0, delta="R"
            ),
            done(0, **{**item, "summary": parts, "content": parts}),
            added(1, **message),
            event("response.output_text.delta", output_index=1, content_index=0, delta="Hi"),
            done(1, **{**message, "content": parts}),
            completed(),
        ]
    )
    assert events[-1]["type"] == "run.completed"
    assert assistant_texts(events) == ["Hi"]
    assert reasoning_texts(events) == ["R"]


async def test_summary_parts_are_separated_and_raw_reasoning_too() -> None:
    item = {"type": "reasoning", "id": "rs", "summary": []}

    def summary(index: int, text: str) -> dict[str, Any]:
        return event(
            "response.reasoning_summary_text.delta", output_index=0, summary_index=index, delta=text
        )

    events = await play(
        [
            created(),
            added(0, **item),
            summary(0, "First."),
            summary(1, "Second."),
            done(0, **item, encrypted_content="E"),
            added(1, type="reasoning", id="rs2"),
            event("response.reasoning_text.delta", output_index=1, content_index=0, delta="raw"),
            done(
                1, type="reasoning", id="rs2", content=[{"type": "reasoning_text", "text": "raw!"}]
            ),
            completed(),
        ]
    )
    assert reasoning_texts(events) == ["First.\n\nSecond.", "raw!"]


async def test_builtin_tools_run_on_the_runtime() -> None:
    search = {"type": "web_search_call", "id": "ws_1", "status": "in_progress"}
    code = {"type": "code_interpreter_call", "id": "ci_1", "status": "in_progress"}
    events = await play(
        [
            created(),
            added(0, **search),
            event("response.web_search_call.searching", output_index=0, item_id="ws_1"),
            event("response.web_search_call.completed", output_index=0, item_id="ws_1"),
            done(0, **search | {"status": "completed", "action": {"type": "search", "query": "q"}}),
            added(1, **code),
            done(1, **code | {"status": "failed", "code": "1/0", "outputs": None}),
            added(2, type="file_search_call", id="fs_1"),
            event("response.file_search_call.completed", output_index=2, item_id="fs_1"),
            completed(),
        ]
    )
    assert tool_calls(events) == [
        ("web_search_call", {"action": {"type": "search", "query": "q"}}, "completed"),
        ("code_interpreter_call", {"code": "1/0"}, "failed"),
        ("file_search_call", None, "completed"),
    ]
    requested = [e for e in events if e["type"] == "tool.requested"]
    assert all(e["meta"]["executor"] == "server" for e in requested)
    assert terminal(events)["type"] == "run.completed"


async def test_builtin_tool_never_finished_fails_tool_incomplete() -> None:
    events = await play([created(), added(0, type="web_search_call", id="ws_1"), completed()])
    failed = next(e for e in events if e["type"] == "tool.failed")
    assert failed["payload"]["error"]["code"] == "tool_incomplete"


async def test_invalid_arguments_fail_the_tool_and_the_run_completes() -> None:
    call = {"type": "function_call", "id": "fc", "call_id": "c1", "name": "f", "arguments": ""}
    events = await play(
        [created(), added(0, **call), done(0, **call | {"arguments": "{oops"}), completed()]
    )
    failed = next(e for e in events if e["type"] == "tool.failed")
    assert failed["payload"]["error"]["code"] == "invalid_arguments"
    assert terminal(events)["type"] == "run.completed"


async def test_call_without_arguments_gets_an_empty_object() -> None:
    call = {"type": "function_call", "id": "fc", "call_id": "c1", "name": "now", "arguments": ""}
    events = await play(
        [created(), added(0, **call), done(0, **call), completed()],
        _text_response("It is noon."),
        commands=[_submit("c1")],
    )
    assert tool_calls(events) == [("now", {}, "completed")]
    assert assistant_texts(events) == ["It is noon."]


@pytest.mark.parametrize(
    ("turn", "code"),
    [
        (
            [created(), event("response.output_text.delta", output_index=3, delta="x")],
            "upstream_protocol_error",
        ),
        (
            [created(), added(0, type="message"), added(0, type="message")],
            "upstream_protocol_error",
        ),
        (
            [created(), completed(), event("response.output_text.delta", output_index=0)],
            "upstream_protocol_error",
        ),
        ([created(), added(0, type="function_call", call_id="c")], "upstream_protocol_error"),
        (
            [
                created(),
                added(0, type="reasoning"),
                event("response.output_text.delta", output_index=0, delta="x"),
            ],
            "upstream_protocol_error",
        ),
        ([created()], "upstream_dropped"),
        (
            [
                created(),
                event(
                    "response.failed", response={"error": {"code": "server_error", "message": "x"}}
                ),
            ],
            "upstream_error",
        ),
    ],
    ids=[
        "unknown-item",
        "added-twice",
        "after-terminal",
        "call-without-name",
        "text-for-reasoning",
        "no-terminal",
        "failed",
    ],
)
async def test_bad_streams_fail_cleanly(turn: list[dict[str, Any]], code: str) -> None:
    events = await play(turn)
    assert terminal(events)["type"] == "run.failed"
    assert terminal(events)["payload"]["error"]["code"] == code


async def test_unknown_events_and_items_are_ignored() -> None:
    events = await play(
        [
            created(),
            event("response.audio.delta", delta="AAAA"),
            added(0, type="compaction", id="cmp_1"),
            done(0, type="compaction", id="cmp_1", encrypted_content="Z"),
            *_text_response("ok", index=1)[1:],
        ]
    )
    assert assistant_texts(events) == ["ok"]
    assert tool_calls(events) == []


def _text_response(text: str, index: int = 0) -> list[dict[str, Any]]:
    message = {"type": "message", "id": f"m{index}", "role": "assistant", "content": []}
    return [
        created(),
        added(index, **message),
        event("response.output_text.delta", output_index=index, content_index=0, delta=text),
        done(index, **message),
        completed(),
    ]


def _submit(tool_call_id: str) -> Command:
    return Command("tool.submit_result", {"toolCallId": tool_call_id, "result": "r"})


# ---------------------------------------------------------------- transport (respx)


@respx.mock
async def test_request_through_the_sse_transport() -> None:
    route = respx.post(URL).mock(
        return_value=httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content="".join(responses_frames(text="Hi!", done=True)).replace("\n", "\r\n"),
        )
    )
    provider = OpenAIResponsesProvider(
        url=URL, model="gpt-x", headers={"Authorization": "Bearer sk-x"}, transport=SSETransport()
    )
    events = await run_collect(provider, {"prompt": "Hello"})
    assert assistant_texts(events) == ["Hi!"]
    request = route.calls.last.request
    assert request.headers["authorization"] == "Bearer sk-x"
    assert request.headers["accept"] == "text/event-stream"
    body = orjson.loads(request.content)
    assert body["store"] is False and body["input"][0]["role"] == "user"


@respx.mock
async def test_http_error_body_is_kept_without_the_key() -> None:
    respx.post(URL).mock(
        return_value=httpx.Response(
            401, json={"error": {"message": "Incorrect API key sk-proj-abc123def456"}}
        )
    )
    provider = OpenAIResponsesProvider(
        url=URL, headers={"Authorization": "Bearer sk-proj-abc123def456"}, transport=SSETransport()
    )
    events = await run_collect(provider, {"prompt": "Hello"})
    error = terminal(events)["payload"]["error"]
    assert error["code"] == "upstream_http_error" and error["details"]["status"] == 401
    assert "sk-proj-abc123def456" not in repr(events)


# ---------------------------------------------------------------- registry and config


def test_registered_and_configured_like_the_example() -> None:
    assert "openai-responses" in known_kinds()
    text = (ROOT / "deploy" / "config.example.toml").read_text()
    block = text[text.index("# [providers.openai-reasoning]") :].split("\n\n", 1)[0]
    table = tomllib.loads("\n".join(line.removeprefix("# ") for line in block.splitlines()))
    config = table["providers"]["openai-reasoning"]
    assert config["kind"] == "openai-responses"
    provider = create_provider("openai-reasoning", config["kind"], config)
    assert isinstance(provider, OpenAIResponsesProvider)
    assert provider.url == "https://api.openai.com/v1/responses"
    assert provider.params == {"reasoning": {"effort": "medium", "summary": "auto"}}


async def test_frames_helper_replays_through_the_provider() -> None:
    """The mock's frames are the same wire format the provider reads from a recording."""
    provider = OpenAIResponsesProvider(url=URL)
    chunks = frames_to_chunks(responses_frames(reasoning="r", text="t"))
    provider.transport = IterableTransport(lambda _r, _s: chunks, kind="sse")
    events = await run_collect(provider, {"prompt": "x"})
    assert reasoning_texts(events) == ["r"] and assistant_texts(events) == ["t"]


# ---------------------------------------------------------------- client-executed built-in calls


async def test_custom_tool_call_goes_to_the_app_and_back_as_its_own_output() -> None:
    provider = OpenAIResponsesProvider(url=URL)
    call = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_c", "name": "grep"}
    shell = {"type": "local_shell_call", "id": "ls_1", "call_id": "call_s", "status": "x"}
    first = [
        created(),
        added(0, **call, input=""),
        event("response.custom_tool_call_input.delta", output_index=0, delta="needle "),
        event("response.custom_tool_call_input.done", output_index=0, input="needle in *.py"),
        done(0, **call, input="needle in *.py"),
        added(1, **shell),
        done(1, **shell | {"action": {"type": "exec", "command": ["ls"]}, "status": "completed"}),
        completed(),
    ]
    turns = [[orjson.dumps(e).decode() for e in first], _text_chunks("Found it.")]
    bodies: list[dict[str, Any]] = []

    def source(request: Any, _signal: Any) -> list[str]:
        bodies.append(request.json)
        return turns.pop(0)

    provider.transport = IterableTransport(source, kind="sse")
    events = await run_collect(
        provider,
        {"prompt": "find"},
        options=make_options(wait_timeout_seconds=5),
        commands=[
            Command("tool.submit_result", {"toolCallId": "call_c", "result": "a.py:3"}),
            Command("tool.submit_result", {"toolCallId": "call_s", "result": {"stdout": "a.py"}}),
        ],
    )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    assert tool_calls(events) == [
        ("grep", "needle in *.py", "completed"),
        ("local_shell_call", {"action": {"type": "exec", "command": ["ls"]}}, "completed"),
    ]
    requested = [e for e in events if e["type"] == "tool.requested"]
    assert [e["meta"]["executor"] for e in requested] == ["app", "app"]
    outputs = [i for i in bodies[1]["input"] if i.get("type", "").endswith("_output")]
    assert outputs == [
        {"type": "custom_tool_call_output", "call_id": "call_c", "output": "a.py:3"},
        {"type": "local_shell_call_output", "call_id": "call_s", "output": {"stdout": "a.py"}},
    ]
    assert assistant_texts(events) == ["Found it."]


def test_builtin_tools_of_openai_never_travel_as_function_calls() -> None:
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}}
    message = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "News."}],
    }
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "news?"},
        {
            "role": "assistant",
            "content": "",
            "toolCalls": [{"id": "ws_1", "name": "web_search_call"}],
        },
        {"role": "tool", "toolCallId": "ws_1", "content": '{"status":"completed"}'},
        {"role": "assistant", "content": "News."},
    ]
    user = {"role": "user", "content": [{"type": "input_text", "text": "news?"}]}
    transcript: dict[str, Any] = {}
    remember_response_turn(transcript, [search, message])
    assert history_to_input(history, transcript) == [user, search, message]
    # without the kept turn the search cannot be rebuilt: the text alone goes back
    assert history_to_input(history, {}) == [user, {"role": "assistant", "content": "News."}]


def _text_chunks(text: str) -> list[str]:
    return [orjson.dumps(e).decode() for e in _text_response(text)]


async def test_every_item_kind_in_one_response() -> None:
    """The fuzzer's seed stream, unmutated: what each item kind becomes."""
    provider = OpenAIResponsesProvider(url=URL)
    turns = [frames_to_chunks(responses_every_item_frames()), _text_chunks("Done.")]
    provider.transport = IterableTransport(lambda _r, _s: turns.pop(0), kind="sse")
    events = await run_collect(
        provider,
        {"prompt": "x"},
        options=make_options(wait_timeout_seconds=5),
        commands=[submit_next_tool("ok") for _ in range(4)],
    )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    assert [(name, status) for name, _, status in tool_calls(events)] == [
        ("f", "completed"),
        ("g", "completed"),
        ("grep", "completed"),
        ("web_search_call", "completed"),
        ("local_shell_call", "completed"),
    ]
    assert assistant_texts(events) == ["Text.", "No.", "Done."]
    refused = [e for e in events if e["type"] == "message.completed" and e.get("meta")]
    assert [e["meta"] for e in refused] == [{"refusal": True}]
    assert reasoning_texts(events) == ["Think."]
    assert terminal(events)["type"] == "run.completed"


async def test_citations_of_the_final_text_go_into_meta() -> None:
    citation = {"type": "url_citation", "url": "https://x.test/", "start_index": 0, "end_index": 4}
    message = {"type": "message", "id": "m", "role": "assistant", "content": []}
    text = {"type": "output_text", "text": "News", "annotations": [citation]}
    events = await play(
        [created(), added(0, **message), done(0, **message | {"content": [text]}), completed()]
    )
    finished = next(e for e in events if e["type"] == "message.completed" and e.get("meta"))
    assert finished["meta"] == {"annotations": [citation]}
    assert assistant_texts(events) == ["News"]
