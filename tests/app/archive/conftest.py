"""Fixtures of the archive tests: one fresh database per test, on PostgreSQL and on SQLite."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.app.archive.support import Database, PostgresServer
from tests.providers.support.mock_upstreams import MockUpstream, serve_mock


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    # Its own loop, in a thread: the fixture may be set up from a running test's loop.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, server.start()).result()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        yield Database(f"sqlite:///{tmp_path / 'archive.db'}")
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    name = await server.create_database()
    try:
        yield Database(server.url(name), server, name)
    finally:
        await server.drop_database(name)


@pytest.fixture
async def upstream() -> AsyncIterator[MockUpstream]:
    """An OpenAI Chat mock; tests append its scripted responses."""
    async with serve_mock([]) as mock:
        yield mock


@pytest.fixture
def tmp_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="agw-archive-") as path:
        yield Path(path)
