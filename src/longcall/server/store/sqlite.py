"""The SQLite task store: one file in WAL mode, the default for one host (SPEC S2, C5).

Owns the SQLite schema and its forward migrations, the connection and its pragmas, the
``BEGIN IMMEDIATE`` write transaction, the translation of ``sqlite3`` errors, and the
file identity check that makes a running server fail closed when its file is deleted or
replaced. Must not: restate a query (they are :class:`SqlTaskStore`'s).

WAL with ``synchronous=FULL`` (the default) fsyncs each commit, so a task whose id was
returned survives even power loss; ``NORMAL`` survives a process kill (SIGKILL) but an
OS crash may lose the last commits. Several processes on one host may share the file:
each running task is leased to one of them (D1), as on PostgreSQL.

One writer thread groups the task writes that queue up during a commit into the next
one (each in a savepoint, one fsync for all; ``group_commit.py``), and a reader thread
with its own connection answers reads: in WAL mode a reader sees every committed
transaction and never waits for the writer's fsync. A store in memory has one
connection only, so there reads share the writer's thread.

Each process holds the lock of a file of its own in ``PATH-owners/`` for as long as it
lives (:mod:`longcall.server.store.owners`): a takeover that finds a lease holder's lock
free knows that process is gone and claims its tasks at once instead of waiting for the
lease to run out (D1; docs/design/server-task-store.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from longcall.server.errors import StoreError, StoreLost, StoreUnavailable
from longcall.server.store.base import SqlTaskStore

logger = logging.getLogger(__name__)

SYNCHRONOUS_MODES = frozenset({"FULL", "NORMAL"})
"""FULL (default) fsyncs every commit: a created task survives power loss, not only a kill."""
BUSY_TIMEOUT_S = 5.0
"""How long one call waits for another process's write lock before it is "unavailable"."""
MEMORY = ":memory:"

# Forward-only migrations; index i brings the schema to version i + 1. Version 1 is the
# schema of stores made before versions were recorded (hence IF NOT EXISTS): such a
# store is adopted as version 1 and migrated forward.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS tasks (
        task_id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        arguments TEXT NOT NULL,
        arguments_digest TEXT NOT NULL,
        protocol TEXT NOT NULL,
        submission_key TEXT,
        status TEXT NOT NULL,
        status_message TEXT,
        created_at REAL NOT NULL,
        last_updated_at REAL NOT NULL,
        ttl_ms INTEGER,
        expires_at REAL,
        poll_interval_ms INTEGER NOT NULL,
        execution_epoch INTEGER NOT NULL DEFAULT 1,
        client_can_elicit INTEGER NOT NULL DEFAULT 1,
        result TEXT,
        error TEXT,
        version INTEGER NOT NULL DEFAULT 1
    );
    CREATE UNIQUE INDEX IF NOT EXISTS tasks_submission_key
        ON tasks (principal, submission_key) WHERE submission_key IS NOT NULL;
    CREATE INDEX IF NOT EXISTS tasks_active ON tasks (status)
        WHERE status IN ('working', 'input_required');
    CREATE INDEX IF NOT EXISTS tasks_principal ON tasks (principal, protocol, created_at);
    CREATE TABLE IF NOT EXISTS task_status_history (
        task_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        status TEXT NOT NULL,
        at REAL NOT NULL,
        reason TEXT,
        PRIMARY KEY (task_id, sequence)
    );
    CREATE TABLE IF NOT EXISTS task_input_requests (
        task_id TEXT NOT NULL,
        key TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        method TEXT NOT NULL,
        params TEXT NOT NULL,
        response TEXT,
        created_at REAL NOT NULL,
        answered_at REAL,
        PRIMARY KEY (task_id, key),
        UNIQUE (task_id, sequence)
    )
    """,
    """
    CREATE TABLE store_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
    ALTER TABLE tasks ADD COLUMN owner TEXT;
    ALTER TABLE tasks ADD COLUMN lease_until REAL;
    ALTER TABLE tasks ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN run_timeout_s REAL;
    ALTER TABLE tasks ADD COLUMN progress_token TEXT;
    ALTER TABLE tasks ADD COLUMN abort_at REAL;
    CREATE INDEX tasks_open_by_principal ON tasks (principal)
        WHERE status IN ('working', 'input_required');
    CREATE INDEX tasks_lease ON tasks (owner, lease_until)
        WHERE status IN ('working', 'input_required')
    """,
    # 3: the webhook outbox (docs/design/webhooks.md).
    """
    CREATE TABLE webhook_endpoints (
        endpoint_id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        url TEXT NOT NULL,
        keys TEXT NOT NULL,
        statuses TEXT NOT NULL,
        created_at REAL NOT NULL,
        disabled_at REAL,
        disabled_reason TEXT,
        throttled_until REAL,
        UNIQUE (principal, url)
    );
    CREATE TABLE webhook_deliveries (
        delivery_id INTEGER PRIMARY KEY AUTOINCREMENT,
        endpoint_id TEXT NOT NULL,
        event_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        status TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at REAL NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL,
        last_attempt_at REAL,
        last_outcome TEXT,
        last_http_status INTEGER,
        delivered_at REAL,
        owner TEXT,
        lease_until REAL,
        UNIQUE (endpoint_id, event_id)
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
        WHERE state = 'pending';
    CREATE INDEX webhook_deliveries_task ON webhook_deliveries (task_id)
    """,
)
OUR_TABLES = frozenset(
    {
        "tasks",
        "task_status_history",
        "task_input_requests",
        "schema_version",
        "store_meta",
        "webhook_endpoints",
        "webhook_deliveries",
    }
)


class SqliteTaskStore(SqlTaskStore):
    """The default store: one SQLite file in WAL mode (S2)."""

    migrations = MIGRATIONS
    workers = 1
    """One writer thread: SQLite serialises writers anyway, and writes keep their order."""
    group_commit = True
    readers = 1
    """Reads need no lock in WAL mode; one thread keeps them out of the writer's queue."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS_MODES:
            raise StoreError(f"synchronous must be one of {sorted(SYNCHRONOUS_MODES)}")
        super().__init__(readers=0 if str(path) == MEMORY else self.readers)
        self.path = str(path)
        self._synchronous = synchronous.upper()
        self._busy_timeout_s = busy_timeout_s
        self._identity: tuple[int, int] | None = None
        self._lost = False
        try:
            self.run_sync(self._open)
        except BaseException:
            self.close()
            raise

    # ---- opening -------------------------------------------------------------------------

    def _open(self, conn: sqlite3.Connection) -> None:
        self._refuse_foreign(conn)
        with self._transaction(conn):
            self._upgrade(conn, where=self.path)
        if self.path != MEMORY:
            self._identity = _file_identity(self.path)

    def _refuse_foreign(self, conn: sqlite3.Connection) -> None:
        """C5: an existing file that is not a task store is refused, never taken over."""
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        tables = {str(row[0]) for row in rows}
        if tables and "tasks" not in tables:
            raise StoreError(
                f"{self.path} is an SQLite database but not a longcall task store"
                f" (tables: {', '.join(sorted(tables))}); name another file"
            )

    def _connect(self) -> sqlite3.Connection:
        if self.path != MEMORY and self._identity is None:
            _refuse_empty(self.path)
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_timeout_s,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open task store {self.path!r}: {exc}") from exc
        return conn

    # ---- proof of an owner's death (D1) -------------------------------------------------------

    def _owner_locks_dir(self) -> Path | None:
        """Each process's lock file lives beside the store's file (none in memory)."""
        return None if self.path == MEMORY else Path(f"{self.path}-owners")

    # ---- driver ------------------------------------------------------------------------------

    def _transaction(
        self, conn: sqlite3.Connection
    ) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; inside an open transaction (a group commit's),
        a savepoint: the part rolls back alone, and commits with the whole."""
        if conn.in_transaction:
            return _savepoint(conn)
        return _immediate(conn)

    def _transaction_open(self, conn: sqlite3.Connection) -> bool:
        return conn.in_transaction

    def _execute(
        self, conn: sqlite3.Connection, query: str, params: Sequence[Any] = ()
    ) -> sqlite3.Cursor:
        return conn.execute(query, tuple(params))

    def _translate(self, exc: Exception) -> StoreError | None:
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc)
            if "locked" in text or "busy" in text:
                return StoreUnavailable(
                    f"the task store {self.path} is locked by another process; retry"
                )
            return StoreUnavailable(f"the task store {self.path} failed: {text}")
        if isinstance(exc, sqlite3.Error):
            return StoreError(f"the task store {self.path} failed: {exc}")
        return None

    def _check_alive(self, conn: sqlite3.Connection) -> None:
        """Fail closed if the file was deleted or replaced: never write into a ghost (C5).

        An unlinked SQLite file stays writable through open handles, so without this a
        server would acknowledge creations that no restart can find, and a later lookup
        by key would wrongly answer "never created".
        """
        if self._lost:
            raise StoreLost(f"the task store {self.path} was deleted or replaced; restart")
        if self._identity is None:
            return
        try:
            current = _file_identity(self.path)
        except FileNotFoundError:
            current = None
        if current != self._identity:
            self._lost = True
            logger.critical(
                "task store %s was deleted or replaced under the running server;"
                " refusing every request until restart",
                self.path,
            )
            raise StoreLost(f"the task store {self.path} was deleted or replaced; restart")


@contextlib.contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        # A failed COMMIT too: the connection must not stay in a transaction, where the
        # next call's writes would become a savepoint that nothing commits.
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def _savepoint(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute("SAVEPOINT part")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK TO part")
            conn.execute("RELEASE part")
        raise
    conn.execute("RELEASE part")


def _file_identity(path: str) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def _refuse_empty(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if os.path.getsize(path) == 0:
            raise StoreError(
                f"{path} is an empty file, not a task store; remove it or name another"
            )
