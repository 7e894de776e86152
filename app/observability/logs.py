"""Structured logging: one line per record (JSON or text), with request context, redacted.

- Context: ``request_id``, ``conversation``, ``run_id``, ``provider`` live in context variables
  (:func:`log_context`), so every record logged inside a request or a run carries them; asyncio
  tasks inherit them from where they were created.
- Redaction happens in the formatter, on the final record: values under secret-looking keys
  (``Authorization``, ``api_key``, ``access_token``, ``*token``, ``secret``, ``password``,
  ``cookie``) become ``[REDACTED]``; every registered secret value (collected from the config
  with :func:`collect_secrets`) and ``Bearer …`` / ``access_token=…`` / ``api_key=…`` patterns
  are scrubbed from every string, the message and tracebacks included. Message content (keys
  such as ``content``, ``prompt``, ``delta``, ``arguments``, ``result``) is replaced by
  ``[content omitted]`` unless ``log_content`` is on. Put content in ``extra`` fields, never in
  the message text.
- :class:`RequestContextMiddleware` (pure ASGI) gives each HTTP/WebSocket request an id
  (``X-Request-ID`` if the client sent a sane one), binds the conversation key from the path,
  echoes ``X-Request-ID`` and logs one access line without the query string.
"""

from __future__ import annotations

import logging
import re
import sys
import time
import traceback
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import IO, Any, Final, Literal
from urllib.parse import urlsplit

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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

LogFormat = Literal["json", "text"]

REDACTED: Final = "[REDACTED]"
OMITTED: Final = "[content omitted]"
CONTEXT_FIELDS: Final = ("request_id", "conversation", "run_id", "provider")

_CONTEXT: Final[dict[str, ContextVar[str | None]]] = {
    name: ContextVar(f"agent_gateway_log_{name}", default=None) for name in CONTEXT_FIELDS
}

_SECRET_KEYS: Final = frozenset(
    {
        "authorization",
        "proxyauthorization",
        "apikey",
        "xapikey",
        "accesstoken",
        "refreshtoken",
        "idtoken",
        "token",
        "tokens",
        "bearer",
        "secret",
        "clientsecret",
        "webhooksecret",
        "password",
        "passwd",
        "cookie",
        "setcookie",
        "xgoogapikey",
        "anthropicapikey",
        "openaiapikey",
    }
)
_CONTENT_KEYS: Final = frozenset(
    {
        "content",
        "prompt",
        "delta",
        "text",
        "arguments",
        "result",
        "input",
        "output",
        "messages",
        "history",
        "summary",
        "title",
        "body",
        "data",
    }
)
_PATTERNS: Final = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"),
    re.compile(
        r"(?i)\b(access_token|api[_-]?key|token|secret|password)=[^&\s\"']+",
    ),
    re.compile(r"(?i)\b(authorization|x-api-key|api-key)(\"?\s*[:=]\s*\"?)[^\s\",}]+"),
)
_STANDARD_ATTRS: Final = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys()
    | {"message", "asctime", "taskName", "color_message"}
    | set(CONTEXT_FIELDS)
)


def _norm(key: str) -> str:
    return re.sub(r"[^a-z]", "", key.lower())


def _is_secret_key(key: str) -> bool:
    k = _norm(key)
    return k in _SECRET_KEYS or (k.endswith(("token", "secret", "apikey", "password")))


# -- context -----------------------------------------------------------------------------------


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Bind context fields (``request_id``, ``conversation``, ``run_id``, ``provider``)."""
    tokens: list[tuple[ContextVar[str | None], Token[str | None]]] = []
    for name, value in fields.items():
        var = _CONTEXT.get(name)
        if var is None:
            raise TypeError(f"unknown log context field {name!r}")
        tokens.append((var, var.set(value)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current_log_context() -> dict[str, str]:
    """The bound context fields that have a value."""
    out: dict[str, str] = {}
    for name, var in _CONTEXT.items():
        value = var.get()
        if value is not None:
            out[name] = value
    return out


# -- redaction ---------------------------------------------------------------------------------

#: Secrets every Redactor scrubs (filled by ``create_app`` from the settings).
_GLOBAL_SECRETS: list[str] = []


def register_secrets(secrets: Iterable[str]) -> None:
    """Add secret values that every log handler of the process must scrub."""
    known = set(_GLOBAL_SECRETS)
    for secret in secrets:
        if isinstance(secret, str) and len(secret) >= 6 and secret not in known:
            known.add(secret)
            _GLOBAL_SECRETS.append(secret)
    _GLOBAL_SECRETS.sort(key=len, reverse=True)


class Redactor:
    """Scrubs secrets (and, unless ``log_content``, message content) from log data."""

    def __init__(self, secrets: Iterable[str] = (), *, log_content: bool = False) -> None:
        self.log_content = log_content
        self._secrets: list[str] = []
        self.add_secrets(secrets)

    def add_secrets(self, secrets: Iterable[str]) -> None:
        known = set(self._secrets)
        for secret in secrets:
            # Very short values would scrub ordinary words; they are not credentials anyway.
            if isinstance(secret, str) and len(secret) >= 6 and secret not in known:
                known.add(secret)
                self._secrets.append(secret)
        self._secrets.sort(key=len, reverse=True)

    def text(self, value: str) -> str:
        for secrets in (self._secrets, _GLOBAL_SECRETS):
            for secret in secrets:
                if secret in value:
                    value = value.replace(secret, REDACTED)
        value = _PATTERNS[0].sub(lambda m: f"{m.group(1)} {REDACTED}", value)
        value = _PATTERNS[1].sub(lambda m: f"{m.group(1)}={REDACTED}", value)
        return _PATTERNS[2].sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", value)

    def value(self, value: Any, key: str | None = None, depth: int = 0) -> Any:
        if key is not None:
            if _is_secret_key(key):
                return REDACTED
            if not self.log_content and _norm(key) in _CONTENT_KEYS:
                return OMITTED
        if isinstance(value, str):
            return self.text(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        if depth > 8:
            return "…"
        if isinstance(value, Mapping):
            return {str(k): self.value(v, str(k), depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self.value(v, None, depth + 1) for v in value]
        return self.text(repr(value))


def collect_secrets(config: Any) -> list[str]:
    """Secret values found in a settings object or mapping, to register with the redactor.

    Collects values under secret-looking keys, every value of ``headers`` mappings (and the
    token after ``Bearer``), and the keys of an auth ``tokens`` mapping (token -> principal).
    """
    found: list[str] = []

    def add(value: Any) -> None:
        if isinstance(value, str) and value:
            found.append(value)
            parts = value.split(None, 1)
            if len(parts) == 2 and parts[0].lower() in ("bearer", "basic", "token"):
                found.append(parts[1])
        elif hasattr(value, "get_secret_value"):
            add(value.get_secret_value())

    def walk(node: Any, key: str = "", depth: int = 0) -> None:
        if depth > 12:
            return
        if hasattr(node, "model_dump") and not isinstance(node, type):
            node = node.model_dump()
        if isinstance(node, Mapping):
            in_headers = _norm(key) == "headers"
            for k, v in node.items():
                name = _norm(str(k))
                if name == "tokens" and isinstance(v, Mapping):
                    for token in v:  # token -> principal
                        add(token)
                    continue
                if in_headers or _is_secret_key(str(k)):
                    if isinstance(v, Mapping):
                        for item in v.values():
                            add(item)
                    else:
                        add(v)
                elif name.endswith("url") and isinstance(v, str):
                    password = urlsplit(v).password if "@" in v else None
                    if password:
                        add(password)
                walk(v, str(k), depth + 1)
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item, key, depth + 1)
        elif hasattr(node, "get_secret_value"):
            add(node.get_secret_value())

    walk(config)
    return list(dict.fromkeys(found))


# -- formatters --------------------------------------------------------------------------------


def _record_fields(record: logging.LogRecord, redactor: Redactor) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in CONTEXT_FIELDS:
        value = getattr(record, name, None)
        if value is None:
            value = _CONTEXT[name].get()
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
    """:func:`configure_logging` from gateway settings (``log_format``, ``log_content``)."""
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
        stream=stream,
    )


# -- request context middleware -------------------------------------------------------------

_REQUEST_ID_RE: Final = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_CONVERSATION_RE: Final = re.compile(r"^/v1/conversations/([A-Za-z0-9._:-]{1,128})(?:/|$)")
_access_log = logging.getLogger("agent_gateway.access")


class RequestContextMiddleware:
    """Binds ``request_id`` and ``conversation`` for the request and logs one access line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = None
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                candidate = value.decode("latin-1")
                if _REQUEST_ID_RE.match(candidate):
                    request_id = candidate
                break
        request_id = request_id or uuid.uuid4().hex
        path: str = scope.get("path", "")
        match = _CONVERSATION_RE.match(path)
        status: list[int] = []

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "websocket.accept":
                status.append(101)
            await send(message)

        start = time.perf_counter()
        with log_context(request_id=request_id, conversation=match.group(1) if match else None):
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                _access_log.info(
                    "%s %s %s",
                    scope.get("method", "WS"),
                    path,
                    status[0] if status else "-",
                    extra={
                        "method": scope.get("method", "WS"),
                        "path": path,
                        "status": status[0] if status else None,
                        "duration_ms": round((time.perf_counter() - start) * 1000, 2),
                    },
                )
