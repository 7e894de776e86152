"""Helpers of the archive tests: real databases (PostgreSQL, SQLite), a gateway process
(``agent-gateway serve``, memory live backend, archive on) and reading its HTTP answers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse

from app.archive.records import ConversationWrite
from app.backends import ConversationMeta, ConversationRef
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[3]
TOKENS = {"alice": "token-a", "bob": "token-b"}
#: The tests of ``ServeProcess`` without a Redis prefix: gateway processes (the backend guard
#: cannot see their backend) on the memory live backend of ``config_toml``.
SERVE_PROCESSES_ON_MEMORY = pytest.mark.only_backend(
    "memory",
    reason="agent-gateway serve processes on the memory live backend, restarted: what outlives"
    " them is the archive's (the archive under a Redis live backend: test_redis.py)",
)
PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"


async def wait_for(
    check: Callable[[], Awaitable[bool]], within: float = 30.0, what: str = "condition"
) -> None:
    """Poll ``check`` until it is true (bounded: fails after ``within`` s)."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


# --- PostgreSQL ------------------------------------------------------------------------------


async def _answers(host: str, port: int) -> bool:
    try:
        connection = await asyncpg.connect(
            host=host, port=port, user=PG_USER, database="postgres", timeout=3
        )
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await connection.close()
    return True


class PrivatePostgres:
    """A server of the test session's own (``initdb`` + ``pg_ctl``, trust auth, a free port),
    run as a non-root user since ``initdb`` refuses root."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="agw-pg-"))
        self._user: list[str] = []

    def _bin(self, name: str) -> str:
        found = shutil.which(name)
        if found:
            return found
        versions = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
        if not versions:
            raise RuntimeError(f"{name} not found: install PostgreSQL (make test installs it)")
        return str(versions[-1])

    def _run(self, *args: str) -> None:
        subprocess.run([*self._user, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if os.geteuid() == 0:  # initdb refuses root: run the server as nobody
            shutil.chown(self.dir, "nobody")
            self._user = ["runuser", "-u", "nobody", "--"]
        data = str(self.dir / "data")
        self._run(self._bin("initdb"), "-D", data, "-U", PG_USER, "--auth=trust")
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        # The server's output goes to a file (-l): a server inheriting pg_ctl's pipes would
        # keep them open, and capturing pg_ctl's output would then wait for the server's exit.
        log = str(self.dir / "server.log")
        try:
            self._run(self._bin("pg_ctl"), "-D", data, "-o", options, "-l", log, "-w", "start")
        except Exception:
            self.stop()
            raise

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(self._bin("pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class PostgresServer:
    """The server on 127.0.0.1:5432 when it answers, else a private one."""

    def __init__(self) -> None:
        self.host, self.port = PG_HOST, PG_PORT
        self._private: PrivatePostgres | None = None

    async def start(self) -> None:
        if await _answers(PG_HOST, PG_PORT):
            return
        self._private = PrivatePostgres()
        await asyncio.to_thread(self._private.start)
        self.port = self._private.port

    def stop(self) -> None:
        if self._private is not None:
            self._private.stop()

    async def _admin(self, sql: str) -> None:
        connection = await asyncpg.connect(
            host=self.host, port=self.port, user=PG_USER, database="postgres"
        )
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    async def create_database(self) -> str:
        name = f"agw_archive_{uuid.uuid4().hex[:12]}"
        await self._admin(f'CREATE DATABASE "{name}"')
        return name

    async def drop_database(self, name: str) -> None:
        await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def url(self, database: str) -> str:
        return f"postgresql://{PG_USER}@{self.host}:{self.port}/{database}"


# --- a database as the tests see it ----------------------------------------------------------


class Database:
    """One fresh archive database, queried directly (as the tests' witness)."""

    def __init__(self, url: str, postgres: PostgresServer | None = None, name: str = "") -> None:
        self.url = url
        self.postgres = postgres
        self.name = name

    @property
    def kind(self) -> str:
        return "postgresql" if self.postgres is not None else "sqlite"

    async def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        if self.postgres is not None:
            connection = await asyncpg.connect(
                host=self.postgres.host,
                port=self.postgres.port,
                user=PG_USER,
                database=self.name,
            )
            try:
                rows = await connection.fetch(sql, *args)
            finally:
                await connection.close()
            return [tuple(row) for row in rows]
        import sqlite3

        path = self.url.removeprefix("sqlite:///")
        connection = sqlite3.connect(path, timeout=10)
        try:
            sql = sql.replace("$1", "?").replace("$2", "?")
            rows = connection.execute(sql, args).fetchall()
            connection.commit()
        finally:
            connection.close()
        return rows

    @contextlib.asynccontextmanager
    async def down(self) -> AsyncIterator[None]:
        """The archive cannot be written while inside: its tables are locked by another client
        (PostgreSQL: ACCESS EXCLUSIVE; SQLite: an exclusive transaction on the file)."""
        if self.postgres is not None:
            connection = await asyncpg.connect(
                host=self.postgres.host,
                port=self.postgres.port,
                user=PG_USER,
                database=self.name,
            )
            transaction = connection.transaction()
            await transaction.start()
            await connection.execute(
                "LOCK TABLE archived_conversations, archive_tombstones IN ACCESS EXCLUSIVE MODE"
            )
            try:
                yield
            finally:
                await transaction.rollback()
                await connection.close()
            return
        import sqlite3

        connection = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=10)
        connection.isolation_level = None
        connection.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            connection.execute("ROLLBACK")
            connection.close()


# --- the gateway process ---------------------------------------------------------------------


def _toml(values: dict[str, Any]) -> str:
    return "".join(f"{key} = {orjson.dumps(value).decode()}\n" for key, value in values.items())


def config_toml(
    archive_url: str, upstream_url: str, gateway: dict[str, Any] | None = None, **archive: Any
) -> str:
    """The gateway's TOML: ``gateway`` adds keys to ``[gateway]``, ``archive`` to ``[archive]``."""
    extra = _toml(archive)
    return f"""
[gateway]
default_provider = "chat"
shutdown_grace_seconds = 2
log_format = "text"
{_toml(gateway or {})}
[archive]
url = "{archive_url}"
retry_max_seconds = 0.5
{extra}
[auth]
mode = "bearer"
tokens = {{ "{TOKENS["alice"]}" = "alice", "{TOKENS["bob"]}" = "bob" }}

[providers.chat]
kind = "openai-chat"
url = "{upstream_url}"
model = "mock-model"
"""


class ServeProcess:
    """``agent-gateway serve --config FILE`` as a real process; with ``redis_prefix``, the
    gateway of ``FILE`` on Redis with its keys under that prefix (``redis_serve.py``)."""

    def __init__(self, config: str, redis_prefix: str | None = None) -> None:
        self.redis_prefix = redis_prefix
        handle, path = tempfile.mkstemp(prefix="agw-archive-", suffix=".toml")
        os.close(handle)
        self.config_path = Path(path)
        self.config_path.write_text(config)
        self.log_path = self.config_path.with_suffix(".log")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> None:
        self.port = free_port()
        if self.redis_prefix is None:
            args = [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port)]
        else:
            args = [sys.executable, "-m", "tests.app.archive.redis_serve", "--port", str(self.port)]
            args += ["--prefix", self.redis_prefix]
        args += ["--config", str(self.config_path), "--log-level", "warning"]
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    async def start(self, within: float = 30.0) -> None:
        self.spawn()
        assert self.proc is not None
        deadline = time.monotonic() + within
        headers = {"Authorization": f"Bearer {TOKENS['alice']}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=2.0, headers=headers) as client:
            while True:
                assert self.proc.poll() is None, self.output()
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        return
                assert time.monotonic() < deadline, f"gateway not ready:\n{self.output()}"
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM: the gateway drains and writes what the archive has queued."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL: no drain, nothing written any more."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    async def restart(self) -> None:
        self.stop()
        await self.start()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def close(self) -> None:
        self.stop()
        self.config_path.unlink(missing_ok=True)
        self.log_path.unlink(missing_ok=True)

    def client(self, principal: str = "alice") -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {TOKENS[principal]}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30.0)


async def run_turn(client: httpx.AsyncClient, key: str, prompt: str) -> list[dict[str, Any]]:
    """POST a run with ``?stream=true`` and read its events to the end."""
    events: list[dict[str, Any]] = []
    body = {"input": {"prompt": prompt}}
    async with aconnect_sse(
        client, "POST", f"/v1/conversations/{key}/runs?stream=true", json=body
    ) as source:
        assert source.response.status_code == 200, await source.response.aread()
        async for sse in source.aiter_sse():
            if sse.event == "message" and sse.data:
                events.append(orjson.loads(sse.data))
    assert events and events[-1]["type"] == "run.completed", events[-3:]
    return events


def without_cursor(snapshot: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in snapshot.items() if key != "cursor"}


#: The conversation :func:`write` archives.
ARCHIVED_REF = ConversationRef("alice", "k")


def write(
    events: int, updated_at: float, *, session: str = "ses_1", created_at: float = 1.0
) -> ConversationWrite:
    state = {"processedEventIds": {f"e{n}": True for n in range(events)}}
    meta = ConversationMeta(session, created_at, updated_at)
    return ConversationWrite(
        ref=ARCHIVED_REF,
        session_id=session,
        title=f"after {events} events at {updated_at}",
        created_at=created_at,
        updated_at=updated_at,
        last_run_id=f"run{events}",
        last_run_status="completed",
        meta_json=orjson.dumps(meta.to_dict()).decode(),
        state_json=orjson.dumps(state).decode(),
        extensions_json="{}",
        cursor=f"c{events}",
        event_count=events,
    )
