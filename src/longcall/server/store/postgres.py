"""The PostgreSQL task store: one database shared by server processes on several hosts (D1).

Owns the PostgreSQL schema and its forward migrations (mirroring SQLite's), the psycopg 3
connections (one per worker thread, autocommit with explicit transactions), the advisory
locks that serialise migrations and one principal's creations (the open-task quota),
``FOR UPDATE SKIP LOCKED`` claims of expired leases, each process's session-level
advisory lock whose being free proves it gone (D1), and the translation of ``psycopg``
errors. Must not: restate a query (they are :class:`SqlTaskStore`'s), nor
import the caller-side ledger.

All tables live in one PostgreSQL schema (``public`` by default; ``?schema=name`` in the
URL), so several stores, or one per test, share a database without touching each other.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import sql

from longcall.server.errors import StoreError, StoreUnavailable
from longcall.server.store.base import ACTIVE_IN, SqlTaskStore, to_pyformat

logger = logging.getLogger(__name__)

DEFAULT_SCHEMA = "public"
OWNER_META_PREFIX = "owner-lock:"
"""``store_meta`` names of the owners holding a liveness lock (value: when, in UNIX
seconds of the database's clock, the owner took it)."""
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
        self._owner_key: int | None = None
        self._owner_name = ""
        self._owner_conn: psycopg.Connection[Any] | None = None
        """The session holding this process's advisory lock for its whole life (D1)."""
        self._owner_lock = threading.Lock()
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

    _skip_locked = " FOR UPDATE SKIP LOCKED"

    def _hold_owner(self, conn: Any, owner: str) -> None:
        with self._owner_lock:
            if self._owner_conn is not None:
                return
            self._sweep_owners(conn)
            self._owner_key = owner_lock_key(owner)
            self._owner_name = OWNER_META_PREFIX + owner
            self._take_owner_lock()

    def _sweep_owners(self, conn: Any) -> None:
        """Forget the dead owners that hold no task any more (their rows would pile up)."""
        rows = conn.execute(
            "SELECT name FROM store_meta WHERE name LIKE %s", (OWNER_META_PREFIX + "%",)
        ).fetchall()
        for (name,) in rows:
            owner = str(name)[len(OWNER_META_PREFIX) :]
            with conn.transaction():
                held = conn.execute(
                    f"SELECT 1 FROM tasks WHERE owner = %s AND {ACTIVE_IN} LIMIT 1", (owner,)
                ).fetchone()
                if held is None and self._lock_free(conn, owner):
                    conn.execute("DELETE FROM store_meta WHERE name = %s", (name,))

    def _lock_free(self, conn: Any, owner: str) -> bool:
        """Take ``owner``'s lock for this transaction if nobody holds it."""
        row = conn.execute(
            "SELECT pg_try_advisory_xact_lock(%s)", (owner_lock_key(owner),)
        ).fetchone()
        return bool(row and row[0] is True)

    def _take_owner_lock(self) -> None:
        """Open the owner's own session and take its lock (the caller holds _owner_lock)."""
        assert self._owner_key is not None
        session = self._connect()
        row = session.execute("SELECT pg_try_advisory_lock(%s)", (self._owner_key,)).fetchone()
        if not row or row[0] is not True:
            session.close()
            # Someone holds it: a claimer proving this owner dead right now. Its
            # claims are seen at the next renewal, which stops the runs it took.
            raise StoreUnavailable("this process's liveness lock is held by another session")
        # Named once the lock is held, before any task is ours (and again after a lost
        # session, whose name a claimer may have removed): only an owner named here
        # ever held a lock, so only its lock being free proves anything (a process of
        # an older version, or a row written by hand, holds none).
        # The value is when (database clock) the lock was taken: see _prove_dead.
        session.execute(
            "INSERT INTO store_meta (name, value)"
            " VALUES (%s, extract(epoch FROM clock_timestamp())::text)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (self._owner_name,),
        )
        self._owner_conn = session

    def _keep_owner(self) -> None:
        """A lost session lost the lock with it: take it again before renewing."""
        with self._owner_lock:
            session = self._owner_conn
            if self._owner_key is None:
                return
            if session is not None:
                try:
                    session.execute("SELECT 1")
                    return
                except psycopg.Error:
                    with contextlib.suppress(Exception):
                        session.close()
                    self._owner_conn = None
            logger.warning("the task store session holding this process's lock was lost")
            self._take_owner_lock()

    def _prove_dead(self, conn: Any, owner: str, now: float, until: float) -> bool:
        # A database restart ends every session, the live processes' too, until they
        # reconnect (each does before its next renewal, and notes the time again): a
        # free lock proves a death only if its owner took it since the database
        # started, so its session ended while this database ran.
        name = OWNER_META_PREFIX + owner
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM store_meta WHERE name = %s"
            " AND value::double precision > extract(epoch FROM pg_postmaster_start_time()))",
            (name,),
        ).fetchone()
        if not row or row[0] is not True:
            return False
        # A transaction-level lock: held until the claim commits, so the owner cannot
        # take it back meanwhile, and released by the commit, which also forgets it.
        if not self._lock_free(conn, owner):
            return False
        conn.execute("DELETE FROM store_meta WHERE name = %s", (name,))
        return True

    def close(self) -> None:
        """Release the connections, the worker threads and this process's lock session."""
        super().close()
        with self._owner_lock:
            session, self._owner_conn = self._owner_conn, None
        if session is not None:
            with contextlib.suppress(Exception):
                # A clean stop hands its leases back: nothing to prove about it any more.
                session.execute("DELETE FROM store_meta WHERE name = %s", (self._owner_name,))
            with contextlib.suppress(Exception):
                session.close()

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


def owner_lock_key(owner: str) -> int:
    """The advisory lock key of ``owner`` (a signed 64-bit digest of its id)."""
    digest = hashlib.sha256(f"longcall.task-owner:{owner}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
