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
        "AppendDone",
        "Backend",
        "ConversationMeta",
        "ConversationRef",
        "IdempotencyRecord",
        "LogEntry",
        "LogItem",
        "MemoryBackend",
        "ReadResult",
        "ReadSink",
        "RunControl",
        "Snapshot",
        "create_backend",
        *ROLES,
    }


ROLES = (
    "ConversationStore",
    "EventAppender",
    "EventReader",
    "IdempotencyStore",
    "Lifecycle",
    "QueuedRuns",
    "RunSignals",
    "RunSlots",
    "Snapshots",
    "WebhookSupport",
)


def test_backend_is_the_composition_of_its_roles() -> None:
    roles = {getattr(app.backends, name) for name in ROLES}
    assert roles <= set(app.backends.Backend.__mro__)
    for backend in (app.backends.MemoryBackend, *_redis_backend()):
        assert app.backends.Backend in backend.__mro__
        assert not getattr(backend, "__abstractmethods__", None), backend


def _redis_backend() -> tuple[type, ...]:
    from app.backends.redis import RedisBackend

    return (RedisBackend,)
