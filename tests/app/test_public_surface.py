"""The public surface of ``app`` and ``app.backends`` is pinned."""

from __future__ import annotations

import app
import app.backends


def test_app_surface() -> None:
    assert set(app.__all__) == {
        "Backend",
        "ConfigError",
        "ConversationRef",
        "Gateway",
        "GatewayServer",
        "MemoryBackend",
        "Settings",
        "create_app",
        "load_settings",
    }
    for name in app.__all__:
        assert getattr(app, name) is not None
    assert callable(app.create_app)


def test_backends_surface() -> None:
    assert set(app.backends.__all__) == {
        "EMPTY_CURSOR",
        "Backend",
        "ConversationMeta",
        "ConversationRef",
        "IdempotencyRecord",
        "LogEntry",
        "LogItem",
        "MemoryBackend",
        "ReadResult",
        "RunControl",
        "Snapshot",
        "create_backend",
    }
