"""Durable conversations in PostgreSQL or SQLite (http-api.md "Archive: durable conversations").

- :mod:`.url`, :mod:`.engine`: the ``[archive] url`` and its async engine.
- :mod:`.schema`, :mod:`.migrate` (+ ``migrations/``): tables and Alembic migrations.
- :mod:`.writer`, :mod:`.backend`: writes off the stream's path, hooked on the live backend
  (a run's start) and on a run's end (``Archive.run_ended``, a hook of ``app/runs/ending.py``).
- :mod:`.store`: the SQL; :mod:`.reader`: read-through and restore; :mod:`.retention`.
- :mod:`.keys`: the archived keys in memory (memory backend): new conversations read nothing.
- :mod:`.service`: :class:`Archive`, what the gateway holds.
"""

from __future__ import annotations

from app.archive.service import Archive

__all__ = ["Archive"]
