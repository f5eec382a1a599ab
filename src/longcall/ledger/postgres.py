"""The PostgreSQL ledger: one database shared by workers on several machines (SPEC L4–L7, D1).

This module owns the PostgreSQL schema, its forward migrations, the connection, the
``FOR UPDATE`` row locks and the locked ``update``; the queries it shares with SQLite
are :class:`~longcall.ledger.sql.SqlLedger`'s (written with ``?`` placeholders and
translated to psycopg's ``%s`` here). The rules that decide whether an update or an
acceptance is allowed are :func:`~longcall.ledger.base.check_update` and
:func:`~longcall.ledger.base.check_acceptance`, shared with the SQLite backend. It
must not decide anything those functions decide, and must not import anything above
``longcall.core`` (docs/design/layers.md).

Every write is one transaction. A transition reads its row ``FOR UPDATE`` (so two
writers of one call node queue up instead of both reading the old version), checks it,
then writes with ``UPDATE ... WHERE version = %s`` as the database-level CAS (L4). The
schema carries the rules that must hold even against a buggy caller: one receipt per
call node, one outbox row per receipt and per call node, and every outbox row
referencing the receipt of its own call node (L5, L6).

All tables live in one PostgreSQL schema (``public`` by default; ``?schema=name`` in
the URL), so several ledgers, or one per test, share a database without touching each
other. Foreign exceptions (``psycopg.errors.*``) are translated here, where they enter.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from longcall.core import OperationRecord, TerminalReceipt
from longcall.errors import LedgerUnavailable
from longcall.ledger import codec
from longcall.ledger.base import check_update, utc_now_iso
from longcall.ledger.owners import WORKER_LOCKS, shared_locks_dir
from longcall.ledger.sql import Params, SqlLedger, keeps_refusals

# Forward-only migrations; index i brings the schema to version i + 1. The tables and
# constraints mirror the SQLite backend's; ``seq`` stands in for SQLite's rowid
# (creation order), and the outbox's composite foreign key ties each row to the
# receipt of its own call node (L6).
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE operations (
        call_node_id   TEXT PRIMARY KEY,
        seq            BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        version        INTEGER NOT NULL CHECK (version >= 1),
        state          TEXT NOT NULL,
        server         TEXT NOT NULL,
        operation_id   TEXT,
        submission_key TEXT NOT NULL UNIQUE,
        record_json    TEXT NOT NULL,
        created_at_utc TEXT NOT NULL,
        updated_at_utc TEXT NOT NULL
    );
    CREATE INDEX operations_by_state ON operations (state, seq);
    CREATE INDEX operations_by_operation_id ON operations (operation_id, server);

    CREATE TABLE receipts (
        receipt_id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        call_node_id    TEXT NOT NULL UNIQUE REFERENCES operations (call_node_id),
        result_digest   TEXT NOT NULL,
        terminal_status TEXT NOT NULL,
        receipt_json    TEXT NOT NULL,
        accepted_at_utc TEXT NOT NULL,
        UNIQUE (receipt_id, call_node_id)
    );

    CREATE TABLE results (
        call_node_id TEXT PRIMARY KEY REFERENCES receipts (call_node_id),
        digest       TEXT NOT NULL,
        payload      BYTEA NOT NULL
    );

    CREATE TABLE outbox (
        outbox_id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        receipt_id       BIGINT NOT NULL UNIQUE REFERENCES receipts (receipt_id),
        call_node_id     TEXT NOT NULL UNIQUE REFERENCES receipts (call_node_id),
        created_at_utc   TEXT NOT NULL,
        delivered_at_utc TEXT,
        FOREIGN KEY (receipt_id, call_node_id) REFERENCES receipts (receipt_id, call_node_id)
    );
    CREATE INDEX outbox_pending ON outbox (outbox_id) WHERE delivered_at_utc IS NULL;

    CREATE TABLE history (
        call_node_id TEXT NOT NULL REFERENCES operations (call_node_id),
        version      INTEGER NOT NULL,
        state        TEXT NOT NULL,
        event        TEXT NOT NULL,
        at           DOUBLE PRECISION NOT NULL,
        at_utc       TEXT NOT NULL,
        PRIMARY KEY (call_node_id, version)
    );
    """,
    """
    CREATE TABLE blobs (
        call_node_id TEXT NOT NULL REFERENCES operations (call_node_id),
        name         TEXT NOT NULL,
        payload      BYTEA NOT NULL,
        PRIMARY KEY (call_node_id, name)
    );
    """,
    # The ledger's identity (C2, C5): one row, made on the first open; its caller key
    # scopes submission keys to this caller. And the protocol sessions stateful servers
    # issued to this caller, so every process of the ledger resumes them (P2): a
    # stateful MCP server binds its tasks to the session that created them.
    """
    CREATE TABLE ledger_identity (
        singleton      INTEGER PRIMARY KEY CHECK (singleton = 1),
        ledger_id      TEXT NOT NULL,
        caller_key     TEXT NOT NULL,
        created_at_utc TEXT NOT NULL
    );
    CREATE TABLE server_sessions (
        server         TEXT PRIMARY KEY,
        session_json   TEXT NOT NULL,
        updated_at_utc TEXT NOT NULL
    );
    """,
    # Leases with fencing (D1), as in the SQLite backend's migration 4.
    """
    ALTER TABLE operations ADD COLUMN owner TEXT;
    ALTER TABLE operations ADD COLUMN execution_epoch INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE operations ADD COLUMN open SMALLINT CHECK (open = 1);
    UPDATE operations SET execution_epoch = (record_json::jsonb ->> 'execution_epoch')::int,
        open = CASE WHEN state IN ('accepted', 'cancelled_accepted') THEN NULL ELSE 1 END;
    CREATE INDEX operations_open_by_owner ON operations (owner, seq) WHERE open = 1;
    ALTER TABLE history ADD COLUMN owner TEXT;
    ALTER TABLE history ADD COLUMN execution_epoch INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE workers (
        owner          TEXT PRIMARY KEY,
        kind           TEXT NOT NULL,
        lease_until    DOUBLE PRECISION NOT NULL,
        started_at_utc TEXT NOT NULL,
        renewed_at_utc TEXT NOT NULL
    );
    CREATE TABLE poll_budget (
        server       TEXT PRIMARY KEY,
        next_free_at DOUBLE PRECISION NOT NULL
    );
    """,
    # The rollout plan (R1-R3, P6): one row per (protocol, adapter version), read by
    # every worker, so all of them route new calls the same way.
    """
    CREATE TABLE rollout (
        protocol        TEXT NOT NULL,
        adapter_version TEXT NOT NULL,
        state           TEXT NOT NULL,
        canary_percent  DOUBLE PRECISION NOT NULL DEFAULT 0,
        note            TEXT NOT NULL DEFAULT '',
        updated_at_utc  TEXT NOT NULL,
        PRIMARY KEY (protocol, adapter_version)
    );
    """,
    # Adapter versions side by side and shadow comparisons, as in the SQLite
    # backend's migration 6.
    """
    ALTER TABLE operations ADD COLUMN protocol TEXT NOT NULL DEFAULT '';
    ALTER TABLE operations ADD COLUMN adapter_version TEXT NOT NULL DEFAULT '';
    ALTER TABLE operations ADD COLUMN shadow_of TEXT;
    UPDATE operations SET protocol = record_json::jsonb ->> 'protocol',
        adapter_version = record_json::jsonb ->> 'adapter_version';
    CREATE INDEX operations_open_by_version ON operations (protocol, adapter_version, seq)
        WHERE open = 1;
    CREATE INDEX operations_by_shadow_of ON operations (shadow_of) WHERE shadow_of IS NOT NULL;
    ALTER TABLE workers ADD COLUMN versions TEXT;
    CREATE TABLE shadow_comparisons (
        shadow_node     TEXT PRIMARY KEY REFERENCES operations (call_node_id),
        primary_node    TEXT NOT NULL REFERENCES operations (call_node_id),
        protocol        TEXT NOT NULL,
        adapter_version TEXT NOT NULL,
        verdict         TEXT NOT NULL CHECK (verdict IN ('match', 'differ')),
        detail          TEXT NOT NULL DEFAULT '',
        compared_at_utc TEXT NOT NULL
    );
    """,
    # The operator's console's indexes, as in the SQLite backend's migration 7.
    """
    ALTER TABLE operations ADD COLUMN tool_name TEXT NOT NULL DEFAULT '';
    ALTER TABLE operations ADD COLUMN failing SMALLINT CHECK (failing = 1);
    UPDATE operations SET tool_name = record_json::jsonb ->> 'tool_name',
        failing = CASE WHEN open = 1
                       AND (record_json::jsonb ->> 'failed_attempts')::int > 0 THEN 1 END;
    CREATE INDEX operations_by_tool ON operations (tool_name, seq);
    CREATE INDEX operations_by_created ON operations (created_at_utc);
    CREATE INDEX operations_by_server ON operations (server, protocol, adapter_version, open);
    CREATE INDEX operations_failing ON operations (server, protocol, adapter_version)
        WHERE failing = 1;
    CREATE INDEX operations_claimed_again ON operations (execution_epoch)
        WHERE execution_epoch >= 2;
    """,
    # Breakers, refused writes, the poll budget's cap and use, failed requests by
    # time, the deadline of a person's answer: as in the SQLite backend's migration 8.
    """
    CREATE TABLE breakers (
        server         TEXT NOT NULL,
        owner          TEXT NOT NULL,
        state          TEXT NOT NULL,
        open_until     DOUBLE PRECISION,
        failures       INTEGER NOT NULL,
        last_error     TEXT NOT NULL DEFAULT '',
        changed_at_utc TEXT NOT NULL,
        PRIMARY KEY (server, owner)
    );
    CREATE TABLE refused_writes (
        refusal_id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        call_node_id     TEXT NOT NULL REFERENCES operations (call_node_id),
        event            TEXT NOT NULL,
        owner            TEXT,
        execution_epoch  INTEGER NOT NULL,
        expected_version INTEGER,
        reason           TEXT NOT NULL CHECK (reason IN ('fenced', 'version_conflict')),
        detail           TEXT NOT NULL,
        at_utc           TEXT NOT NULL
    );
    CREATE INDEX refused_writes_by_node ON refused_writes (call_node_id, refusal_id);
    ALTER TABLE poll_budget ADD COLUMN qps_max DOUBLE PRECISION;
    ALTER TABLE poll_budget ADD COLUMN use_minute BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE poll_budget ADD COLUMN used_this_minute INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE poll_budget ADD COLUMN used_last_minute INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE poll_budget ADD COLUMN granted_at_utc TEXT NOT NULL DEFAULT '';
    CREATE INDEX history_request_failed ON history (at_utc) WHERE event = 'RequestFailed';
    ALTER TABLE operations ADD COLUMN person_deadline DOUBLE PRECISION;
    UPDATE operations SET person_deadline = coalesce(
            (record_json::jsonb ->> 'input_deadline_at')::double precision, 'Infinity')
        WHERE state = 'input_required'
        AND jsonb_array_length(record_json::jsonb -> 'input_keys_pending') > 0;
    CREATE INDEX operations_person ON operations (person_deadline, seq)
        WHERE person_deadline IS NOT NULL;
    """,
    # The gateway's downtimes: when no gateway process of this ledger was alive (its
    # same-call rule counts them out of its windows); ended_at NULL: a clean stop
    # whose end is not known yet.
    """
    CREATE TABLE gateway_downtimes (
        started_at DOUBLE PRECISION NOT NULL,
        ended_at   DOUBLE PRECISION
    );
    CREATE INDEX gateway_downtimes_by_end ON gateway_downtimes (ended_at);
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
DEFAULT_SCHEMA = "public"
CONNECT_TIMEOUT_S = 10


@functools.lru_cache(maxsize=256)
def _psycopg_query(query: str) -> bytes:
    """A ``?``-style query in psycopg's ``%s`` style (the shared SQL has no literal ``?``
    or ``%``)."""
    return query.replace("?", "%s").encode()


class PostgresLedger(SqlLedger):
    """A ledger in one PostgreSQL schema, over one psycopg 3 connection."""

    migrations = MIGRATIONS
    creation_order = "seq"
    json_text = "(record_json::jsonb ->> '{name}')"
    json_number = "((record_json::jsonb ->> '{name}')::double precision)"
    json_fields = (
        "(SELECT jsonb_build_array({names})::text FROM (SELECT record_json::jsonb AS r) AS parsed)"
    )
    json_field_key = "r -> '{name}'"
    # FOR UPDATE: a concurrent writer of this row waits for our commit, then reads the
    # version we wrote, so its check raises VersionConflict (L4).
    row_lock = " FOR UPDATE"
    # SKIP LOCKED: two workers claiming at once take disjoint batches instead of
    # queueing behind each other's locks (D1).
    claim_lock = " FOR UPDATE SKIP LOCKED"
    duplicate_errors = (psycopg.errors.UniqueViolation,)
    integrity_errors = (psycopg.errors.IntegrityError,)

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        utc_now: Callable[[], str] = utc_now_iso,
        connect_timeout_s: int = CONNECT_TIMEOUT_S,
        new_identity: Callable[[], tuple[str, str]] | None = None,
        create: bool = True,
    ) -> None:
        if not schema:
            raise ValueError("the PostgreSQL schema name must not be empty")
        super().__init__(utc_now=utc_now, new_identity=new_identity)
        self.schema = schema
        # A command that only reads must find a ledger, not make an empty one (C5): the
        # schema created below is rolled back with the refusal.
        self.create_missing = create
        # autocommit: a lone read is its own statement; every write opens an explicit
        # transaction through _write().
        self._conn = psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout_s)
        try:
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    # --- schema ----------------------------------------------------------------------

    def _table_names(self, conn: Any) -> set[str]:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (self.schema,),
        ).fetchall()
        return {str(row[0]) for row in rows}

    def _where(self) -> str:
        info = self._conn.info
        return f"the PostgreSQL schema {self.schema!r} at {info.host}:{info.port}/{info.dbname}"

    def worker_locks_dir(self) -> Path | None:
        # A ledger shared by hosts: the workers of one user on this host find each
        # other's files in a private directory named by the ledger's identity.
        return shared_locks_dir(self.ledger_id, WORKER_LOCKS)

    def _migrate(self) -> None:
        with self._write() as conn:
            # Two workers starting together must not both run migration 1: the advisory
            # lock serialises them per schema, for this transaction only.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"longcall.ledger:{self.schema}",)
            )
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(self._schema_id))
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(self._schema_id))
            self._upgrade(conn)
        # Every later statement of this connection names the ledger's tables unqualified.
        self._conn.execute(sql.SQL("SET search_path TO {}").format(self._schema_id))

    @property
    def _schema_id(self) -> sql.Identifier:
        return sql.Identifier(self.schema)

    def _too_new(self, current: int) -> str:
        return f"schema {self.schema!r}: version {current} is newer than {SCHEMA_VERSION}"

    # --- the driver ------------------------------------------------------------------

    _RUNTIME_ERRORS = (psycopg.OperationalError,)

    @contextlib.contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        """One write transaction; the lock serialises threads sharing this connection."""
        try:
            with self._lock, self._conn.transaction():
                yield self._conn
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Exception) -> LedgerUnavailable:
        """A run-time failure of the server (the connection lost, the server shutting
        down), translated where it enters; the schema is named, never the DSN (it may
        hold a password)."""
        return LedgerUnavailable(f"the ledger in schema {self.schema!r} failed: {exc}")

    def _execute(
        self, conn: psycopg.Connection[Any], query: str, params: Params | None = None
    ) -> psycopg.Cursor[Any]:
        return conn.execute(_psycopg_query(query), params)

    def _executemany(
        self, conn: psycopg.Connection[Any], query: str, rows: Sequence[Params]
    ) -> None:
        # psycopg pipelines executemany: a claim of thousands of rows is a few round
        # trips, not two per row.
        if rows:
            with conn.cursor() as cursor:
                cursor.executemany(_psycopg_query(query), rows)

    def _insert_receipt(
        self, conn: psycopg.Connection[Any], receipt: TerminalReceipt, now_utc: str
    ) -> int:
        inserted = conn.execute(
            "INSERT INTO receipts (call_node_id, result_digest, terminal_status,"
            " receipt_json, accepted_at_utc) VALUES (%s, %s, %s, %s, %s)"
            " RETURNING receipt_id",
            (
                receipt.call_node_id,
                receipt.result_digest,
                receipt.terminal_status.value,
                codec.dumps(receipt),
                now_utc,
            ),
        ).fetchone()
        assert inserted is not None  # RETURNING of a one-row INSERT
        return int(inserted[0])

    # --- operations ------------------------------------------------------------------

    def _prefix(self, text: str) -> tuple[str, tuple[object, ...]]:
        # A database collation need not order text by code point, so a key range
        # would not be exactly the prefix: ask for the prefix itself.
        return "starts_with(call_node_id, ?)", (text,)

    @keeps_refusals
    def update(
        self,
        record: OperationRecord,
        *,
        expected_version: int,
        event: str,
        owner: str | None = None,
    ) -> None:
        now_utc = self._utc_now()
        with self._write() as conn:
            row = self._locked_row(conn, record.call_node_id, owner=owner)
            check_update(row, record, expected_version)
            self._store(conn, record, expected_version, now_utc, owner)
            self._history(conn, record, event, now_utc, owner)
