"""The PostgreSQL ledger: one database shared by workers on several machines (SPEC L4–L7, D1).

This module owns the PostgreSQL schema, its forward migrations and the SQL of the
ledger contract; the rules that decide whether an update or an acceptance is allowed
are :func:`~longcall.ledger.base.check_update` and
:func:`~longcall.ledger.base.check_acceptance`, shared with the SQLite backend. It must
not decide anything those functions decide, and must not import anything above
``longcall.core`` (DESIGN.md import direction).

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
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import psycopg
from psycopg import sql

from longcall.core import (
    TERMINAL_STATES,
    ConflictError,
    NotFoundError,
    OperationRecord,
    State,
    TerminalReceipt,
    UnknownCallNode,
)
from longcall.ledger import codec
from longcall.ledger.base import (
    BlobConflict,
    DuplicateCallNode,
    HistoryRow,
    Ledger,
    OutboxRow,
    SchemaTooNew,
    check_acceptance,
    check_update,
    utc_now_iso,
)

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
)

SCHEMA_VERSION = len(MIGRATIONS)
DEFAULT_SCHEMA = "public"
CONNECT_TIMEOUT_S = 10


class PostgresLedger(Ledger):
    """A ledger in one PostgreSQL schema, over one psycopg 3 connection."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        utc_now: Callable[[], str] = utc_now_iso,
        connect_timeout_s: int = CONNECT_TIMEOUT_S,
    ) -> None:
        if not schema:
            raise ValueError("the PostgreSQL schema name must not be empty")
        self.schema = schema
        self._utc_now = utc_now
        self._lock = threading.RLock()
        # autocommit: a lone read is its own statement; every write opens an explicit
        # transaction through _write().
        self._conn = psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout_s)
        try:
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    # --- schema ----------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._write() as conn:
            # Two workers starting together must not both run migration 1: the advisory
            # lock serialises them per schema, for this transaction only.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"longcall.ledger:{self.schema}",)
            )
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(self._schema_id))
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(self._schema_id))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            current = int(row[0] or 0) if row else 0
            if current > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"schema {self.schema!r}: version {current} is newer than {SCHEMA_VERSION}"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _statements(MIGRATIONS[version - 1]):
                    conn.execute(statement.encode())
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        # Every later statement of this connection names the ledger's tables unqualified.
        self._conn.execute(sql.SQL("SET search_path TO {}").format(self._schema_id))

    @property
    def _schema_id(self) -> sql.Identifier:
        return sql.Identifier(self.schema)

    def schema_version(self) -> int:
        rows = self._read("SELECT max(version) FROM schema_version")
        return int(rows[0][0])

    # --- transactions ----------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        """One write transaction; the lock serialises threads sharing this connection."""
        with self._lock, self._conn.transaction():
            yield self._conn

    def _read(self, query: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(query.encode(), params).fetchall()

    # --- operations ------------------------------------------------------------------

    def create(
        self, record: OperationRecord, *, blobs: Mapping[str, bytes] | None = None
    ) -> OperationRecord:
        if record.version != 1:
            raise ValueError("a new record starts at version 1")
        now_utc = self._utc_now()
        try:
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO operations (call_node_id, version, state, server, operation_id,"
                    " submission_key, record_json, created_at_utc, updated_at_utc)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        record.call_node_id,
                        record.version,
                        record.state.value,
                        record.server,
                        record.operation_id,
                        record.submission_key,
                        codec.dumps(record),
                        now_utc,
                        now_utc,
                    ),
                )
                for name, payload in (blobs or {}).items():
                    conn.execute(
                        "INSERT INTO blobs (call_node_id, name, payload) VALUES (%s, %s, %s)",
                        (record.call_node_id, name, payload),
                    )
                self._history(conn, record, "Created", now_utc)
        except psycopg.errors.UniqueViolation as exc:
            raise DuplicateCallNode(
                f"call node {record.call_node_id!r} (or its submission key) already exists"
            ) from exc
        return record

    def get(self, call_node_id: str) -> OperationRecord:
        record = self.find(call_node_id)
        if record is None:
            raise UnknownCallNode(f"no operation is recorded for call node {call_node_id!r}")
        return record

    def find(self, call_node_id: str) -> OperationRecord | None:
        rows = self._read(
            "SELECT record_json FROM operations WHERE call_node_id = %s", (call_node_id,)
        )
        return codec.loads_record(str(rows[0][0])) if rows else None

    def find_by_operation_id(
        self, operation_id: str, *, server: str | None = None
    ) -> list[OperationRecord]:
        if server is None:
            rows = self._read(
                "SELECT record_json FROM operations WHERE operation_id = %s ORDER BY seq",
                (operation_id,),
            )
        else:
            rows = self._read(
                "SELECT record_json FROM operations WHERE operation_id = %s AND server = %s"
                " ORDER BY seq",
                (operation_id, server),
            )
        return [codec.loads_record(str(row[0])) for row in rows]

    def find_by_submission_key(self, submission_key: str) -> OperationRecord | None:
        rows = self._read(
            "SELECT record_json FROM operations WHERE submission_key = %s", (submission_key,)
        )
        return codec.loads_record(str(rows[0][0])) if rows else None

    def list_by_state(self, *states: State) -> list[OperationRecord]:
        if states:
            rows = self._read(
                "SELECT record_json FROM operations WHERE state = ANY(%s) ORDER BY seq",
                ([s.value for s in states],),
            )
        else:
            rows = self._read("SELECT record_json FROM operations ORDER BY seq")
        return [codec.loads_record(str(row[0])) for row in rows]

    def update(self, record: OperationRecord, *, expected_version: int, event: str) -> None:
        now_utc = self._utc_now()
        with self._write() as conn:
            row = self._locked_row(conn, record.call_node_id)
            check_update(row, record, expected_version)
            self._store(conn, record, expected_version, now_utc)
            self._history(conn, record, event, now_utc)

    def accept_terminal(
        self,
        record: OperationRecord,
        receipt: TerminalReceipt,
        *,
        expected_version: int,
        result_payload: bytes,
        event: str,
    ) -> int:
        now_utc = self._utc_now()
        try:
            with self._write() as conn:
                row = self._locked_row(conn, record.call_node_id)
                check_acceptance(row, record, receipt, expected_version, result_payload)
                self._store(conn, record, expected_version, now_utc)
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
                receipt_id = int(inserted[0])
                conn.execute(
                    "INSERT INTO results (call_node_id, digest, payload) VALUES (%s, %s, %s)",
                    (receipt.call_node_id, receipt.result_digest, result_payload),
                )
                conn.execute(
                    "INSERT INTO outbox (receipt_id, call_node_id, created_at_utc)"
                    " VALUES (%s, %s, %s)",
                    (receipt_id, receipt.call_node_id, now_utc),
                )
                self._history(conn, record, event, now_utc)
        except psycopg.errors.IntegrityError as exc:
            raise ConflictError(
                f"operation {record.call_node_id!r}: a receipt or outbox row already exists"
            ) from exc
        return receipt_id

    def _locked_row(self, conn: psycopg.Connection[Any], call_node_id: str) -> OperationRecord:
        # FOR UPDATE: a concurrent writer of this row waits for our commit, then reads
        # the version we wrote, so its check raises ConflictError (L4).
        row = conn.execute(
            "SELECT record_json FROM operations WHERE call_node_id = %s FOR UPDATE",
            (call_node_id,),
        ).fetchone()
        if row is None:
            raise UnknownCallNode(f"no operation is recorded for call node {call_node_id!r}")
        return codec.loads_record(str(row[0]))

    def _store(
        self, conn: psycopg.Connection[Any], record: OperationRecord, expected: int, now_utc: str
    ) -> None:
        cursor = conn.execute(
            "UPDATE operations SET version = %s, state = %s, operation_id = %s,"
            " record_json = %s, updated_at_utc = %s WHERE call_node_id = %s AND version = %s",
            (
                record.version,
                record.state.value,
                record.operation_id,
                codec.dumps(record),
                now_utc,
                record.call_node_id,
                expected,
            ),
        )
        if cursor.rowcount != 1:  # the SQL-level CAS (L4), beside the checked one
            raise ConflictError(f"operation {record.call_node_id!r}: version moved")

    def _history(
        self, conn: psycopg.Connection[Any], record: OperationRecord, event: str, now_utc: str
    ) -> None:
        conn.execute(
            "INSERT INTO history (call_node_id, version, state, event, at, at_utc)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (
                record.call_node_id,
                record.version,
                record.state.value,
                event,
                record.updated_at,
                now_utc,
            ),
        )

    def put_blob(self, call_node_id: str, name: str, payload: bytes) -> bool:
        with self._write() as conn:
            self._locked_row(conn, call_node_id)
            row = conn.execute(
                "SELECT payload FROM blobs WHERE call_node_id = %s AND name = %s",
                (call_node_id, name),
            ).fetchone()
            if row is not None:
                if bytes(row[0]) != payload:
                    raise BlobConflict(f"{call_node_id!r}: {name!r} was already written")
                return False
            conn.execute(
                "INSERT INTO blobs (call_node_id, name, payload) VALUES (%s, %s, %s)",
                (call_node_id, name, payload),
            )
            return True

    def blob(self, call_node_id: str, name: str) -> bytes | None:
        rows = self._read(
            "SELECT payload FROM blobs WHERE call_node_id = %s AND name = %s",
            (call_node_id, name),
        )
        return bytes(rows[0][0]) if rows else None

    def open_versions(self) -> dict[str, int]:
        rows = self._read(
            "SELECT call_node_id, version FROM operations WHERE NOT (state = ANY(%s))",
            ([state.value for state in TERMINAL_STATES],),
        )
        return {str(node): int(version) for node, version in rows}

    # --- receipts, results, outbox ---------------------------------------------------

    def receipt(self, call_node_id: str) -> TerminalReceipt | None:
        rows = self._read(
            "SELECT receipt_json FROM receipts WHERE call_node_id = %s", (call_node_id,)
        )
        return codec.loads_receipt(str(rows[0][0])) if rows else None

    def receipts(self) -> list[TerminalReceipt]:
        rows = self._read("SELECT receipt_json FROM receipts ORDER BY receipt_id")
        return [codec.loads_receipt(str(row[0])) for row in rows]

    def result_payload(self, call_node_id: str) -> bytes | None:
        rows = self._read("SELECT payload FROM results WHERE call_node_id = %s", (call_node_id,))
        return bytes(rows[0][0]) if rows else None

    def outbox_pending(self, *, limit: int = 100) -> list[OutboxRow]:
        rows = self._read(
            "SELECT outbox_id, receipt_id, call_node_id, created_at_utc, delivered_at_utc"
            " FROM outbox WHERE delivered_at_utc IS NULL ORDER BY outbox_id LIMIT %s",
            (limit,),
        )
        return [_outbox_row(row) for row in rows]

    def outbox(self) -> list[OutboxRow]:
        rows = self._read(
            "SELECT outbox_id, receipt_id, call_node_id, created_at_utc, delivered_at_utc"
            " FROM outbox ORDER BY outbox_id"
        )
        return [_outbox_row(row) for row in rows]

    def mark_delivered(self, outbox_id: int) -> bool:
        with self._write() as conn:
            row = conn.execute(
                "SELECT delivered_at_utc FROM outbox WHERE outbox_id = %s FOR UPDATE",
                (outbox_id,),
            ).fetchone()
            if row is None:
                raise NotFoundError(f"no outbox row {outbox_id}")
            if row[0] is not None:
                return False
            conn.execute(
                "UPDATE outbox SET delivered_at_utc = %s WHERE outbox_id = %s",
                (self._utc_now(), outbox_id),
            )
            return True

    def history(self, call_node_id: str) -> list[HistoryRow]:
        rows = self._read(
            "SELECT call_node_id, version, state, event, at, at_utc FROM history"
            " WHERE call_node_id = %s ORDER BY version",
            (call_node_id,),
        )
        return [
            HistoryRow(
                call_node_id=str(r[0]),
                version=int(r[1]),
                state=State(r[2]),
                event=str(r[3]),
                at=float(r[4]),
                at_utc=str(r[5]),
            )
            for r in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def _outbox_row(row: tuple[Any, ...]) -> OutboxRow:
    return OutboxRow(
        outbox_id=int(row[0]),
        receipt_id=int(row[1]),
        call_node_id=str(row[2]),
        created_at_utc=str(row[3]),
        delivered_at_utc=None if row[4] is None else str(row[4]),
    )
