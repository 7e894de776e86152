"""``GET /v1/conversations`` with a database that does not answer: the archive's part of the
page is given up after the read timeout (then skipped for the backoff), and the page holds the
live conversations. On PostgreSQL, whose reads wait for a table lock; SQLite (WAL) reads never
wait for a writer, so a locked SQLite archive still answers the listing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from app.archive.reader import READ_BACKOFF_SECONDS, READ_TIMEOUT_SECONDS
from tests.app.archive.support import (
    SERVE_PROCESSES_ON_MEMORY,
    Database,
    PostgresServer,
    ServeProcess,
    config_toml,
    run_turn,
    wait_for,
)
from tests.providers.support.mock_upstreams import MockUpstream, openai_frames

pytestmark = SERVE_PROCESSES_ON_MEMORY


@pytest.fixture
async def pg_database(postgres: PostgresServer) -> AsyncIterator[Database]:
    name = await postgres.create_database()
    try:
        yield Database(postgres.url(name), postgres, name)
    finally:
        await postgres.drop_database(name)


async def _keys(gateway: ServeProcess) -> list[str]:
    async with gateway.client() as client:
        client.timeout = READ_TIMEOUT_SECONDS + 5  # a listing waiting for the database fails
        answer = await client.get("/v1/conversations")
    assert answer.status_code == 200, answer.text
    return [item["conversationKey"] for item in answer.json()["conversations"]]


async def test_listing_answers_from_the_live_backend_while_the_database_hangs(
    pg_database: Database, upstream: MockUpstream
) -> None:
    gateway = ServeProcess(config_toml(pg_database.url, upstream.url))
    await gateway.start()
    try:
        upstream.responses += [openai_frames(text="ok"), openai_frames(text="ok")]
        async with gateway.client() as client:
            await run_turn(client, "archived", "from before the restart")
        await gateway.restart()  # "archived" lives only in the archive now
        async with gateway.client() as client:
            await run_turn(client, "live", "after the restart")

        async def written() -> bool:
            rows = await pg_database.query(
                "SELECT last_run_status FROM archived_conversations WHERE conversation_key = $1",
                "live",
            )
            return rows == [("completed",)]

        await wait_for(written, what="the live conversation archived")  # no write is pending
        assert await _keys(gateway) == ["live", "archived"]

        async with pg_database.down():  # every read of the archive waits for the lock
            started = time.monotonic()
            assert await _keys(gateway) == ["live"]
            assert time.monotonic() - started < READ_TIMEOUT_SECONDS + 3
            started = time.monotonic()
            assert await _keys(gateway) == ["live"]  # within the backoff: not even tried
            assert time.monotonic() - started < 1.0

        async def archive_back() -> bool:
            return await _keys(gateway) == ["live", "archived"]

        await wait_for(archive_back, within=READ_BACKOFF_SECONDS + 20, what="the archive back")
    finally:
        gateway.close()
