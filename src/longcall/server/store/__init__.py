"""The durable tool-side task store (SPEC S2, S4, C5, D1): SQLite for one host, PostgreSQL
for several.

Owns: choosing a backend from a store URL. Must not: hold queries (``base``) or a
driver (``sqlite``, ``postgres``). psycopg is imported only when a PostgreSQL URL is
opened, so the SQLite default needs no PostgreSQL driver.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

from longcall.server.errors import StoreError
from longcall.server.store.base import (
    EXPIRED_ROW_RETENTION_S,
    RERUN_MESSAGE,
    SqlTaskStore,
    TaskStore,
)
from longcall.server.store.sqlite import SqliteTaskStore

if TYPE_CHECKING:
    from longcall.server.store.postgres import PostgresTaskStore

__all__ = [
    "DEFAULT_STORE_PATH",
    "EXPIRED_ROW_RETENTION_S",
    "RERUN_MESSAGE",
    "PostgresTaskStore",
    "SqlTaskStore",
    "SqliteTaskStore",
    "TaskStore",
    "open_store",
]

logger = logging.getLogger(__name__)

DEFAULT_STORE_PATH = "longcall-tasks.db"


def open_store(url: str | None) -> SqlTaskStore:
    """A store from ``sqlite:///PATH[?synchronous=normal]``, a bare path, or
    ``postgresql://…[?schema=name]`` (every other query option goes to libpq)."""
    if url is None:
        return _sqlite(DEFAULT_STORE_PATH, "FULL")
    parts = urlsplit(url)
    options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    if parts.scheme in ("postgresql", "postgres"):
        from longcall.server.store.postgres import DEFAULT_SCHEMA, PostgresTaskStore

        libpq = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
        dsn = urlunsplit(parts._replace(query=urlencode(libpq)))
        return PostgresTaskStore(dsn, schema=options.get("schema", DEFAULT_SCHEMA))
    synchronous = options.get("synchronous", "FULL")
    path = None
    if parts.scheme in ("", "file"):
        path = parts.path or url
    elif parts.scheme == "sqlite":
        # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute/path.db
        path = parts.path.removeprefix("/")
    if path is not None:
        if not path.strip():
            raise StoreError(f"the task store URL {url!r} names no file")
        return _sqlite(path, synchronous)
    raise StoreError(
        f"unsupported task store URL {url!r} (expected sqlite:///PATH or postgresql://…)"
    )


def _sqlite(path: str, synchronous: str) -> SqliteTaskStore:
    existed = path == ":memory:" or os.path.exists(path)
    store = SqliteTaskStore(path, synchronous=synchronous)
    if not existed:
        # A new store has a new identity: lookups cannot mistake it for the old one (C5).
        logger.warning("created a new task store %s (store id %s)", path, store.store_id)
    return store


def __getattr__(name: str) -> object:
    if name == "PostgresTaskStore":
        from longcall.server.store.postgres import PostgresTaskStore

        return PostgresTaskStore
    raise AttributeError(name)
