"""The model-API providers' request body: the run's history derived once per request, this
run's user turn in it exactly once (from the run's own events, or added when they lack it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

import providers.history as history_module
from providers.anthropic_messages.provider import AnthropicMessagesProvider
from providers.model_calls import ModelApiProvider
from providers.openai_chat import OpenAIChatProvider
from providers.openai_responses.provider import OpenAIResponsesProvider
from providers.testing import make_options

PROVIDERS: list[Callable[[], ModelApiProvider[Any]]] = [
    lambda: OpenAIChatProvider(model="m"),
    lambda: AnthropicMessagesProvider(model="m"),
    lambda: OpenAIResponsesProvider(model="m"),
]
EARLIER = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "before"}]


@pytest.mark.parametrize("make", PROVIDERS, ids=["openai-chat", "anthropic", "responses"])
@pytest.mark.parametrize("emit_user_message", [True, False], ids=["user-event", "reload"])
@pytest.mark.parametrize("messages", [None, EARLIER], ids=["derived", "explicit"])
def test_a_request_derives_the_run_history_once_with_the_user_turn_once(
    make: Callable[[], ModelApiProvider[Any]],
    emit_user_message: bool,
    messages: list[dict[str, Any]] | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    derived: list[int] = []
    real = history_module.derive_run_history

    def counted(events: Any) -> list[dict[str, Any]]:
        derived.append(1)
        return real(events)

    monkeypatch.setattr(history_module, "derive_run_history", counted)
    provider = make()
    ctx = provider.create_context(make_options(emit_user_message=emit_user_message))
    ctx.begin({"prompt": "now"} | ({"messages": messages} if messages else {}))
    derived.clear()
    body = orjson.dumps(provider.build_body(ctx))
    assert len(derived) == 1
    # In the history (the run's user message event) or added as the user turn: never both.
    assert body.count(b'"now"') == 1
    assert body.count(b'"earlier"') == (1 if messages else 0)
