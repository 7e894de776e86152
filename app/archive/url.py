"""The archive's database URL: ``sqlite:///PATH`` or ``postgresql://…`` to an async driver URL."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url

__all__ = ["database_url", "is_sqlite", "safe_url"]

_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}


def database_url(url: str) -> URL:
    """The SQLAlchemy URL with its asyncio driver (aiosqlite, asyncpg)."""
    parsed = make_url(url)
    driver = _DRIVERS.get(parsed.drivername)
    return parsed.set(drivername=driver) if driver else parsed


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def safe_url(url: URL) -> str:
    """The URL as it may be logged: the password hidden."""
    return url.render_as_string(hide_password=True)
