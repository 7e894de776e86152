"""Alembic migrations of the archive: from an empty database (several at once), an upgrade
from the first revision keeping the rows it holds, and ``agent-gateway migrate``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from app.archive.engine import create_engine
from app.archive.migrate import current_revision, migrate
from app.archive.url import database_url
from tests.app.archive.support import ROOT, Database


async def test_from_empty_with_several_instances_at_once(database: Database) -> None:
    engines = [create_engine(database_url(database.url)) for _ in range(3)]
    try:
        await asyncio.gather(*(migrate(engine) for engine in engines))
        assert await current_revision(engines[0]) == "0003"
    finally:
        for engine in engines:
            await engine.dispose()
    rows = await database.query("SELECT count(*) FROM archive_tombstones")
    assert rows == [(0,)]


async def test_upgrade_from_the_first_revision_keeps_the_rows(database: Database) -> None:
    engine = create_engine(database_url(database.url))
    try:
        await migrate(engine, "0001")
        assert await current_revision(engine) == "0001"
        await database.query(
            "INSERT INTO archived_conversations (principal, conversation_key, session_id,"
            " created_at, updated_at, meta, state, extensions, cursor, event_count, archived_at)"
            " VALUES ('alice', 'k', 's', 1, 2, '{}', '{}', '{}', '0', 0, 3)"
        )
        await migrate(engine)
        assert await current_revision(engine) == "0003"
    finally:
        await engine.dispose()
    assert await database.query(
        "SELECT session_id, updated_at FROM archived_conversations WHERE principal = 'alice'"
    ) == [("s", 2.0)]
    assert await database.query("SELECT count(*) FROM archive_tombstones") == [(0,)]


async def migrate_command(config: Path) -> subprocess.CompletedProcess[str]:
    """``agent-gateway migrate --config CONFIG`` as a real process."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli", "migrate", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_migrate_command_brings_an_empty_database_to_the_newest_revision(
    database: Database, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[archive]\nurl = "{database.url}"\n')
    done = await migrate_command(config)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("at revision 0003")
    assert await database.query("SELECT count(*) FROM archived_conversations") == [(0,)]

    config.write_text('[archive]\nurl = ""\n')  # the archive off: nothing to migrate
    refused = await migrate_command(config)
    assert refused.returncode == 2
    assert "[archive] url is not set" in refused.stderr
