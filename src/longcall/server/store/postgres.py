"""The PostgreSQL task store: one database shared by server processes on several hosts (D1).

Owns the PostgreSQL schema and its forward migrations (mirroring SQLite's), the psycopg 3
connections (one per worker thread, autocommit with explicit transactions), the advisory
locks that serialise migrations and one principal's creations (the open-task quota),
``FOR UPDATE SKIP LOCKED`` claims of expired leases, and the translation of ``psycopg``
errors. Owners of this host prove their deaths by the kernel's locks, in a directory
named by the store's id; another host's owner is freed by its lease's expiry (D1;
docs/design/server-task-store.md). Must not: restate a query (they are
:class:`SqlTaskStore`'s), nor import the caller-side ledger.

All tables live in one PostgreSQL schema (``public`` by default; ``?schema=name`` in the
URL), so several stores, or one per test, share a database without touching each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from longcall.server.errors import StoreError, StoreUnavailable
from longcall.server.store.base import ACTIVE_IN, SqlTaskStore, to_pyformat
from longcall.server.store.owners import shared_locks_dir

DEFAULT_SCHEMA = "public"
CONNECT_TIMEOUT_S = 10
WORKERS = 4

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        arguments TEXT NOT NULL,
        arguments_digest TEXT NOT NULL,
        protocol TEXT NOT NULL,
        submission_key TEXT,
        status TEXT NOT NULL,
        status_message TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        last_updated_at DOUBLE PRECISION NOT NULL,
        ttl_ms BIGINT,
        expires_at DOUBLE PRECISION,
        poll_interval_ms INTEGER NOT NULL,
        execution_epoch INTEGER NOT NULL DEFAULT 1,
        client_can_elicit INTEGER NOT NULL DEFAULT 1,
        result TEXT,
        error TEXT,
        version INTEGER NOT NULL DEFAULT 1
    );
    CREATE UNIQUE INDEX tasks_submission_key
        ON tasks (principal, submission_key) WHERE submission_key IS NOT NULL;
    CREATE INDEX tasks_active ON tasks (status) WHERE status IN ('working', 'input_required');
    CREATE INDEX tasks_principal ON tasks (principal, protocol, created_at);
    CREATE TABLE task_status_history (
        task_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        status TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        reason TEXT,
        PRIMARY KEY (task_id, sequence)
    );
    CREATE TABLE task_input_requests (
        task_id TEXT NOT NULL,
        key TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        method TEXT NOT NULL,
        params TEXT NOT NULL,
        response TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        answered_at DOUBLE PRECISION,
        PRIMARY KEY (task_id, key),
        UNIQUE (task_id, sequence)
    )
    """,
    """
    CREATE TABLE store_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
    ALTER TABLE tasks ADD COLUMN owner TEXT;
    ALTER TABLE tasks ADD COLUMN lease_until DOUBLE PRECISION;
    ALTER TABLE tasks ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN run_timeout_s DOUBLE PRECISION;
    ALTER TABLE tasks ADD COLUMN progress_token TEXT;
    ALTER TABLE tasks ADD COLUMN abort_at DOUBLE PRECISION;
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
        created_at DOUBLE PRECISION NOT NULL,
        disabled_at DOUBLE PRECISION,
        disabled_reason TEXT,
        throttled_until DOUBLE PRECISION,
        UNIQUE (principal, url)
    );
    CREATE TABLE webhook_deliveries (
        delivery_id BIGSERIAL PRIMARY KEY,
        endpoint_id TEXT NOT NULL,
        event_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        status TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at DOUBLE PRECISION,
        last_attempt_at DOUBLE PRECISION,
        last_outcome TEXT,
        last_http_status INTEGER,
        delivered_at DOUBLE PRECISION,
        owner TEXT,
        lease_until DOUBLE PRECISION,
        UNIQUE (endpoint_id, event_id)
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
        WHERE state = 'pending';
    CREATE INDEX webhook_deliveries_task ON webhook_deliveries (task_id)
    """,
)


class PostgresTaskStore(SqlTaskStore):
    """A task store in one PostgreSQL schema; several server processes may share it (D1)."""

    migrations = MIGRATIONS
    workers = WORKERS

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        connect_timeout_s: int = CONNECT_TIMEOUT_S,
    ) -> None:
        if not schema:
            raise StoreError("the PostgreSQL schema name must not be empty")
        super().__init__()
        self._dsn = dsn
        self.schema = schema
        self._connect_timeout_s = connect_timeout_s
        try:
            self.run_sync(self._open)
        except BaseException:
            self.close()
            raise

    def _open(self, conn: psycopg.Connection[Any]) -> None:
        with self._transaction(conn):
            # Servers starting together must not both run migration 1.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"longcall.tasks:{self.schema}",)
            )
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(self._schema_id))
            self._refuse_foreign(conn)
            self._upgrade(conn, where=f"schema {self.schema!r}")

    def _refuse_foreign(self, conn: psycopg.Connection[Any]) -> None:
        """C5: a schema holding other tables and no task store is refused, never taken over."""
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (self.schema,),
        ).fetchall()
        tables = {str(row[0]) for row in rows}
        if tables and "schema_version" not in tables:
            raise StoreError(
                f"schema {self.schema!r} holds tables but no longcall task store"
                f" ({', '.join(sorted(tables))}); name another schema"
            )

    @property
    def _schema_id(self) -> sql.Identifier:
        return sql.Identifier(self.schema)

    # ---- driver ------------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=self._connect_timeout_s
            )
            conn.execute(sql.SQL("SET search_path TO {}").format(self._schema_id))
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot reach the PostgreSQL task store: {exc}") from exc
        return conn

    @contextlib.contextmanager
    def _transaction(self, conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
        with conn.transaction():
            yield conn

    def _execute(
        self, conn: psycopg.Connection[Any], query: str, params: Sequence[Any] = ()
    ) -> psycopg.Cursor[Any]:
        return conn.execute(to_pyformat(query).encode(), tuple(params))

    def _translate(self, exc: Exception) -> StoreError | None:
        if isinstance(exc, psycopg.OperationalError):
            return StoreUnavailable(f"the PostgreSQL task store failed: {exc}")
        if isinstance(exc, psycopg.Error):
            return StoreError(f"the PostgreSQL task store failed: {exc}")
        return None

    # ---- proof of an owner's death (D1) -------------------------------------------------------
    # The database holds no proof: a free advisory lock proves only that one session is
    # gone, not its process (idle_session_timeout, a NAT's idle drop or
    # pg_terminate_backend end a session while its process lives; a promoted standby
    # holds no lock; PgBouncer in transaction mode shares backends). The processes of
    # this host prove their deaths to each other by the kernel's locks, as on SQLite;
    # another host's are left to their leases (docs/design/server-task-store.md).

    def _owner_locks_dir(self) -> Path | None:
        return shared_locks_dir(self.store_id)

    _skip_locked = " FOR UPDATE SKIP LOCKED"

    def _lock_principal(self, conn: Any, principal: str) -> None:
        # The quota counts open tasks then inserts: one principal's creations queue here.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"longcall.quota:{principal}",))

    def _expired_ids(self, conn: Any, owner: str, now: float, limit: int) -> list[tuple[str, int]]:
        # SKIP LOCKED: two claimers split the expired rows instead of queueing on them.
        rows = conn.execute(
            f"SELECT task_id, execution_epoch FROM tasks WHERE {ACTIVE_IN}"
            " AND (lease_until IS NULL OR lease_until < %s) AND (owner IS NULL OR owner <> %s)"
            " ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED",
            (now, owner, limit),
        ).fetchall()
        return [(str(row[0]), int(row[1])) for row in rows]
