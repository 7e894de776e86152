"""The HTTP and WebSocket routes, one module per concern."""

from app.api.routes import ag_ui, commands, conversations, events, system, ws

__all__ = ["ag_ui", "commands", "conversations", "events", "system", "ws"]
