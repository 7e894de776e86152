"""Structured logging: one line per record (JSON or text), with request context, redacted.

- :mod:`.context`: the context fields every record carries (:func:`log_context`).
- :mod:`.redaction`: secrets and message content scrubbed from every record (:class:`Redactor`).
- :mod:`.formatters`: the JSON and text line formats.
- :mod:`.setup`: the root handler (:func:`setup_logging` from the settings).
- :mod:`.middleware`: a request id and one access line per request.

Put content in ``extra`` fields, never in the message text: the redactor omits it by key.
"""

from __future__ import annotations

from app.observability.logs.context import CONTEXT_FIELDS, current_log_context, log_context
from app.observability.logs.formatters import JsonFormatter, TextFormatter
from app.observability.logs.middleware import RequestContextMiddleware
from app.observability.logs.redaction import Redactor, collect_secrets, register_secrets
from app.observability.logs.setup import configure_logging, setup_logging

__all__ = [
    "CONTEXT_FIELDS",
    "JsonFormatter",
    "Redactor",
    "RequestContextMiddleware",
    "TextFormatter",
    "collect_secrets",
    "configure_logging",
    "current_log_context",
    "log_context",
    "register_secrets",
    "setup_logging",
]
