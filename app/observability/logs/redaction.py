"""Redaction of log data: secrets never reach a log line, message content only on request.

Values under secret-looking keys (``Authorization``, ``api_key``, ``access_token``, ``*token``,
``secret``, ``password``, ``cookie``) become ``[REDACTED]``; every registered secret value
(collected from the config with :func:`collect_secrets`) and ``Bearer …`` / ``access_token=…`` /
``api_key=…`` patterns are scrubbed from every string, the message and tracebacks included.
Message content (keys such as ``content``, ``prompt``, ``delta``, ``arguments``, ``result``) is
replaced by ``[content omitted]`` unless ``log_content`` is on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = ["OMITTED", "REDACTED", "Redactor", "collect_secrets", "register_secrets"]

REDACTED: Final = "[REDACTED]"
OMITTED: Final = "[content omitted]"
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


def _norm(key: str) -> str:
    return re.sub(r"[^a-z]", "", key.lower())


def _is_secret_key(key: str) -> bool:
    k = _norm(key)
    return k in _SECRET_KEYS or (k.endswith(("token", "secret", "apikey", "password")))


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
