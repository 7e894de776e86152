"""Offering appended entries to a waiting reader's sink (``EventReader.read``'s ``sink``)."""

from __future__ import annotations

import logging

from app.backends.types import LogEntry, ReadSink

__all__ = ["offer"]

logger = logging.getLogger("app.backends.sinks")


def offer(sink: ReadSink, entries: list[LogEntry]) -> bool:
    """Whether ``sink`` took ``entries``. A sink that raises did not: it is the reader's
    problem, never the appender's (the reader is woken instead and meets it itself)."""
    try:
        return sink(entries)
    except Exception:
        logger.exception("a read sink failed; the reader is woken instead")
        return False
