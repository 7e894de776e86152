"""Log formatters: one line per record, JSON or text, redacted on the final record."""

from __future__ import annotations

import logging
import traceback
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from app.observability.logs.context import CONTEXT_FIELDS, CONTEXT_VARS
from app.observability.logs.redaction import Redactor

__all__ = ["JsonFormatter", "TextFormatter"]

_STANDARD_ATTRS: Final = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys()
    | {"message", "asctime", "taskName", "color_message"}
    | set(CONTEXT_FIELDS)
)


def _record_fields(record: logging.LogRecord, redactor: Redactor) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in CONTEXT_FIELDS:
        value = getattr(record, name, None)
        if value is None:
            value = CONTEXT_VARS[name].get()
        if value is not None:
            fields[name] = redactor.text(str(value))
    for key, value in record.__dict__.items():
        if key not in _STANDARD_ATTRS and not key.startswith("_"):
            fields[key] = redactor.value(value, key)
    return fields


def _exception_text(record: logging.LogRecord, redactor: Redactor) -> str | None:
    if record.exc_info and record.exc_info[0] is not None:
        return redactor.text("".join(traceback.format_exception(*record.exc_info)).rstrip())
    return None


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, context fields, extra fields, exc."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": self.redactor.text(record.getMessage()),
        }
        data.update(_record_fields(record, self.redactor))
        exc = _exception_text(record, self.redactor)
        if exc:
            data["exc"] = exc
        return orjson.dumps(data, default=lambda o: self.redactor.text(repr(o))).decode()


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger msg key=value …`` on one line (tracebacks on the following lines)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        parts = [ts, record.levelname, record.name, self.redactor.text(record.getMessage())]
        for key, value in _record_fields(record, self.redactor).items():
            rendered = value if isinstance(value, str) else orjson.dumps(value, default=str)
            if isinstance(rendered, bytes):
                rendered = rendered.decode()
            parts.append(f"{key}={rendered}")
        line = " ".join(parts)
        exc = _exception_text(record, self.redactor)
        return f"{line}\n{exc}" if exc else line
