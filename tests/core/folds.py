"""Three ways to fold events into a state; conformance tests run against each of them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core import AgentStore, create_agent_state, reduce_agent_state

Fold = Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]


def fold_pure(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return functools.reduce(reduce_agent_state, events, create_agent_state())


def fold_dispatch(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    store = AgentStore()
    for event in events:
        store.dispatch(event)
    return store.get_snapshot()


def fold_batch(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    store = AgentStore()
    store.batch(events)
    return store.get_snapshot()


FOLDS: dict[str, Fold] = {"pure": fold_pure, "dispatch": fold_dispatch, "batch": fold_batch}
