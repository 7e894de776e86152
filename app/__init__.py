"""The gateway service (FastAPI). Public surface, imported lazily so the CLI starts fast:

- ``create_app(settings=None, *, providers=None, backend=None) -> FastAPI``
- ``Settings``, ``load_settings(path=None)``, ``ConfigError``
- ``Gateway`` (``app.state.gateway``), ``GatewayServer`` (uvicorn with the gateway's drain)
- ``Backend``, ``MemoryBackend``, ``ConversationRef`` (the backend interface: ``app.backends``)
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Backend",
    "ConfigError",
    "ConversationRef",
    "Gateway",
    "GatewayServer",
    "MemoryBackend",
    "Settings",
    "create_app",
    "load_settings",
]

_HOMES = {
    "Backend": "app.backends",
    "ConfigError": "app.config",
    "ConversationRef": "app.backends",
    "Gateway": "app.gateway",
    "GatewayServer": "app.server",
    "MemoryBackend": "app.backends",
    "Settings": "app.config",
    "create_app": "app.factory",
    "load_settings": "app.config",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'app' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
