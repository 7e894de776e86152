"""Replay every recorded stream of ``openai-chat``, ``anthropic-messages`` and
``openai-responses`` through its provider: one test, parametrized by provider and recording
(how each replays and what each case asserts: ``replay_specs.py``). What only one provider's
recordings show is tested in ``test_<provider>_replay.py``."""

from __future__ import annotations

import pytest

from tests.providers.support.replay_specs import SPECS, replay

CASES = [(provider, name) for provider, spec in SPECS.items() for name in sorted(spec.cases)]


@pytest.mark.parametrize(("provider", "name"), CASES)
async def test_replay(provider: str, name: str) -> None:
    spec = SPECS[provider]
    spec.check(await replay(spec, name), spec.cases[name])
