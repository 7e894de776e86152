"""The HTTP and WebSocket routes, one module per concern."""

from app.api.routes import commands, conversations, events, system, ws

__all__ = ["commands", "conversations", "events", "system", "ws"]
