"""Installing the gateway's log handler on the root logger (and routing uvicorn through it)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import IO, Any, Final, Literal

from app.observability.logs.formatters import JsonFormatter, TextFormatter
from app.observability.logs.redaction import Redactor, collect_secrets, register_secrets

__all__ = ["LogFormat", "configure_logging", "setup_logging"]

LogFormat = Literal["json", "text"]

_HANDLER_MARK: Final = "_agent_gateway_handler"
_PAYLOAD_LOGGERS: Final = ("sse_starlette", "httpcore", "httpx", "websockets", "hpack")


def configure_logging(
    log_format: LogFormat | str = "json",
    *,
    log_content: bool = False,
    level: int | str = logging.INFO,
    secrets: Iterable[str] = (),
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Install the gateway's handler on the root logger (replacing a previous one).

    uvicorn's loggers are routed through it too (their own handlers removed), so its error
    lines are redacted; its access logger is silenced because the middleware logs requests
    without query strings (which may hold ``access_token``). Start uvicorn with
    ``log_config=None`` so it does not reinstall its handlers.
    """
    redactor = Redactor(secrets, log_content=log_content)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(
        TextFormatter(redactor) if log_format == "text" else JsonFormatter(redactor)
    )
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
    access = logging.getLogger("uvicorn.access")
    access.handlers.clear()
    access.propagate = False
    # Libraries whose debug lines carry payloads (SSE chunks, HTTP bodies): content unless
    # log_content, so they stay at WARNING then.
    for name in _PAYLOAD_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if log_content else logging.WARNING)
    return handler


def setup_logging(
    settings: Any, *, level: int | str = logging.INFO, stream: IO[str] | None = None
) -> logging.Handler:
    """:func:`configure_logging` from gateway settings (``log_format``, ``log_content``,
    ``log_stream`` unless ``stream`` is given)."""
    gateway = settings.gateway
    secrets = collect_secrets(settings)
    register_secrets(secrets)
    if isinstance(level, str):
        level = level.upper()
    return configure_logging(
        gateway.log_format,
        log_content=gateway.log_content,
        level=level,
        secrets=secrets,
        stream=stream or (sys.stdout if gateway.log_stream == "stdout" else sys.stderr),
    )
