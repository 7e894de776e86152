"""Cursors on Redis: ``"<incarnation>.<stream id>"``, the incarnation with its epoch."""

from __future__ import annotations

from app.backends.base import EMPTY_CURSOR
from app.backends.redis.cursors import make_cursor, parse_cursor, same_incarnation


def test_a_cursor_keeps_its_incarnation_and_epoch_and_the_empty_one_stays_empty() -> None:
    assert make_cursor("abc~n1", "0-0") == EMPTY_CURSOR
    cursor = make_cursor("abc~n1", "17-3")
    assert parse_cursor(cursor) == ("abc~n1", "17-3")
    assert parse_cursor(make_cursor("abc", "17-3")) == ("abc", "17-3")  # before any epoch
    assert parse_cursor("abc.17") is None and parse_cursor("17-3") is None


def test_epochs_of_one_incarnation_are_told_from_another_incarnation() -> None:
    assert same_incarnation("abc", "abc~n1")
    assert same_incarnation("abc~n1", "abc~n2")
    assert not same_incarnation("abc~n1", "abd~n1")
