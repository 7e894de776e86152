"""The archive as the gateway uses it: built from ``[archive]``, started, read, closed."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry

from app.archive.backend import ArchivingBackend
from app.archive.engine import create_engine, create_sync_engine
from app.archive.keys import ArchivedKeys
from app.archive.migrate import migrate
from app.archive.reader import ArchiveReader
from app.archive.records import ArchivedSummary
from app.archive.retention import RetentionTask
from app.archive.store import ArchiveStore
from app.archive.url import database_url, safe_url
from app.archive.writer import ArchiveWriter
from app.backends import Backend, ConversationMeta, ConversationRef, Snapshot
from app.config import ArchiveSection
from app.observability.logs import register_secrets

__all__ = ["Archive"]

logger = logging.getLogger("app.archive")


class Archive:
    """Durable conversations: wrap the live backend with :meth:`wrap`, then :meth:`start`."""

    def __init__(self, section: ArchiveSection, registry: CollectorRegistry | None = None) -> None:
        url = database_url(section.url)
        if url.password:
            register_secrets([str(url.password)])  # never in a log line
        self.url = url
        self.section = section
        self.engine = create_engine(url)
        self._sync_engine = create_sync_engine(url)
        self.store = ArchiveStore(self.engine, self._sync_engine)
        self._registry = registry
        self._writer: ArchiveWriter | None = None
        self._reader: ArchiveReader | None = None
        self._keys: ArchivedKeys | None = None
        self.retention = RetentionTask(
            self.store, section.retention_days, section.retention_interval_seconds
        )

    @property
    def writer(self) -> ArchiveWriter:
        if self._writer is None:
            raise RuntimeError("Archive.wrap(backend) was not called")
        return self._writer

    @property
    def reader(self) -> ArchiveReader:
        if self._reader is None:
            raise RuntimeError("Archive.wrap(backend) was not called")
        return self._reader

    def wrap(self, live: Backend) -> Backend:
        """The live backend with the archive's hooks (what the gateway uses)."""
        # A live backend of this instance's own (memory) makes it the archive's one writer of
        # its conversations: the keys it archived are known without asking (see keys.py).
        if live.limit_store() is None:
            self._keys = ArchivedKeys(self.store.keys)
        self._writer = ArchiveWriter(
            self.store,
            live,
            retry_max_seconds=self.section.retry_max_seconds,
            registry=self._registry,
            on_written=self._keys.written if self._keys is not None else None,
        )
        self._reader = ArchiveReader(self.store, self._writer, self._keys)
        return ArchivingBackend(live, self._writer)

    async def start(self) -> None:
        await migrate(self.engine)
        logger.info("archive: %s", safe_url(self.url))
        self.writer.start()
        self.retention.start()

    async def close(self, grace: float) -> None:
        await self.retention.close()
        await self.writer.close(grace)
        if self._keys is not None:
            await self._keys.close()
        await self.engine.dispose()
        if self._sync_engine is not None:
            self._sync_engine.dispose()

    def run_ended(self, ref: ConversationRef) -> None:
        """The run-end hook (``app/runs/ending.py``): a run of ``ref`` ended and its end is
        logged (by its owner, or by the instance that ended it for a lost owner): write the
        conversation now, with its end (a start still deferred is written with it, once)."""
        self.writer.flush(ref)

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        return await self.reader.snapshot(ref)

    async def restore(self, ref: ConversationRef, backend: Backend) -> ConversationMeta | None:
        return await self.reader.restore(ref, backend)

    async def list_page(
        self, principal: str, after: tuple[float, str] | None, limit: int
    ) -> list[ArchivedSummary] | None:
        """A page of archived conversations; None when the archive cannot answer now."""
        return await self.reader.list_page(principal, after, limit)
