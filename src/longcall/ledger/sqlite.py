"""The SQLite ledger: the embedded default, one file in WAL mode (SPEC L4–L7).

Every write is one ``BEGIN IMMEDIATE`` transaction, so a process killed at any point
leaves either the whole step or none of it. The schema carries the rules that must
hold even against a buggy caller: one receipt per call node, one outbox row per
receipt and per call node (UNIQUE constraints), outbox rows that reference their
receipt (a foreign key), and a version column for compare-and-set.

``synchronous`` defaults to FULL (a commit survives power loss, not only a killed
process); ``sqlite:///path?synchronous=normal`` trades that for speed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

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

# Forward-only migrations; index i brings the schema to version i + 1.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE operations (
        call_node_id   TEXT PRIMARY KEY,
        version        INTEGER NOT NULL CHECK (version >= 1),
        state          TEXT NOT NULL,
        server         TEXT NOT NULL,
        operation_id   TEXT,
        submission_key TEXT NOT NULL UNIQUE,
        request_digest TEXT NOT NULL,
        tool_digest    TEXT NOT NULL,
        record_json    TEXT NOT NULL,
        created_at_utc TEXT NOT NULL,
        updated_at_utc TEXT NOT NULL
    );
    CREATE INDEX operations_by_state ON operations (state);
    CREATE INDEX operations_by_operation_id ON operations (operation_id, server);

    CREATE TABLE receipts (
        receipt_id      INTEGER PRIMARY KEY,
        call_node_id    TEXT NOT NULL UNIQUE REFERENCES operations (call_node_id),
        result_digest   TEXT NOT NULL,
        terminal_status TEXT NOT NULL,
        receipt_json    TEXT NOT NULL,
        accepted_at_utc TEXT NOT NULL
    );

    CREATE TABLE results (
        call_node_id TEXT PRIMARY KEY REFERENCES receipts (call_node_id),
        digest       TEXT NOT NULL,
        payload      BLOB NOT NULL
    );

    CREATE TABLE outbox (
        outbox_id        INTEGER PRIMARY KEY,
        receipt_id       INTEGER NOT NULL UNIQUE REFERENCES receipts (receipt_id),
        call_node_id     TEXT NOT NULL UNIQUE REFERENCES receipts (call_node_id),
        created_at_utc   TEXT NOT NULL,
        delivered_at_utc TEXT
    );

    CREATE TABLE history (
        call_node_id TEXT NOT NULL REFERENCES operations (call_node_id),
        version      INTEGER NOT NULL,
        state        TEXT NOT NULL,
        event        TEXT NOT NULL,
        at           REAL NOT NULL,
        at_utc       TEXT NOT NULL,
        PRIMARY KEY (call_node_id, version)
    );
    """,
    """
    CREATE TABLE blobs (
        call_node_id TEXT NOT NULL REFERENCES operations (call_node_id),
        name         TEXT NOT NULL,
        payload      BLOB NOT NULL,
        PRIMARY KEY (call_node_id, name)
    );
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
_TERMINAL_VALUES = tuple(sorted(state.value for state in TERMINAL_STATES))


class SQLiteLedger(Ledger):
    """A ledger in one SQLite file (or ``:memory:`` for the simulator)."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        utc_now: Callable[[], str] = utc_now_iso,
    ) -> None:
        if synchronous.lower() not in ("full", "normal", "extra", "off"):
            raise ValueError(f"synchronous must be full, normal, extra or off, not {synchronous!r}")
        self.path = str(path)
        self._utc_now = utc_now
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA busy_timeout=10000")
        self._migrate()

    # --- schema ----------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._write() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            current = row[0] or 0
            if current > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"{self.path}: schema version {current} is newer than {SCHEMA_VERSION}"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _statements(MIGRATIONS[version - 1]):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))

    def schema_version(self) -> int:
        row = self._conn.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0])

    # --- transactions ----------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; the lock serialises threads sharing this connection."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

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
                    " submission_key, request_digest, tool_digest, record_json, created_at_utc,"
                    " updated_at_utc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.call_node_id,
                        record.version,
                        record.state.value,
                        record.server,
                        record.operation_id,
                        record.submission_key,
                        record.request_digest,
                        record.tool_descriptor_digest,
                        codec.dumps(record),
                        now_utc,
                        now_utc,
                    ),
                )
                for name, payload in (blobs or {}).items():
                    conn.execute(
                        "INSERT INTO blobs (call_node_id, name, payload) VALUES (?, ?, ?)",
                        (record.call_node_id, name, payload),
                    )
                self._history(conn, record, "Created", now_utc)
        except sqlite3.IntegrityError as exc:
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
            "SELECT record_json FROM operations WHERE call_node_id = ?", (call_node_id,)
        )
        return codec.loads_record(str(rows[0][0])) if rows else None

    def find_by_operation_id(
        self, operation_id: str, *, server: str | None = None
    ) -> list[OperationRecord]:
        if server is None:
            rows = self._read(
                "SELECT record_json FROM operations WHERE operation_id = ? ORDER BY rowid",
                (operation_id,),
            )
        else:
            rows = self._read(
                "SELECT record_json FROM operations WHERE operation_id = ? AND server = ?"
                " ORDER BY rowid",
                (operation_id, server),
            )
        return [codec.loads_record(str(row[0])) for row in rows]

    def find_by_submission_key(self, submission_key: str) -> OperationRecord | None:
        rows = self._read(
            "SELECT record_json FROM operations WHERE submission_key = ?", (submission_key,)
        )
        return codec.loads_record(str(rows[0][0])) if rows else None

    def list_by_state(self, *states: State) -> list[OperationRecord]:
        if states:
            marks = ", ".join("?" for _ in states)
            rows = self._read(
                f"SELECT record_json FROM operations WHERE state IN ({marks}) ORDER BY rowid",
                tuple(s.value for s in states),
            )
        else:
            rows = self._read("SELECT record_json FROM operations ORDER BY rowid")
        return [codec.loads_record(str(row[0])) for row in rows]

    def update(self, record: OperationRecord, *, expected_version: int, event: str) -> None:
        now_utc = self._utc_now()
        # Fast path: every rule of check_update is in the UPDATE's guard (L4), so the
        # row is neither read nor decoded; only a refused update reads the row, to
        # raise the precise error.
        guard_values: tuple[str, ...]
        if record.state in TERMINAL_STATES:
            state_guard, guard_values = "state = ?", (record.state.value,)
        else:
            state_guard, guard_values = "state NOT IN (?, ?)", _TERMINAL_VALUES
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE operations SET version = ?, state = ?, operation_id = ?,"
                " record_json = ?, updated_at_utc = ?"
                " WHERE call_node_id = ? AND version = ? AND version + 1 = ?"
                " AND request_digest = ? AND tool_digest = ? AND submission_key = ?"
                f" AND {state_guard}",
                (
                    record.version,
                    record.state.value,
                    record.operation_id,
                    codec.dumps(record),
                    now_utc,
                    record.call_node_id,
                    expected_version,
                    record.version,
                    record.request_digest,
                    record.tool_descriptor_digest,
                    record.submission_key,
                    *guard_values,
                ),
            )
            if cursor.rowcount != 1:
                check_update(self._locked_row(conn, record.call_node_id), record, expected_version)
                raise ConflictError(f"operation {record.call_node_id!r}: version moved")
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
                cursor = conn.execute(
                    "INSERT INTO receipts (call_node_id, result_digest, terminal_status,"
                    " receipt_json, accepted_at_utc) VALUES (?, ?, ?, ?, ?)",
                    (
                        receipt.call_node_id,
                        receipt.result_digest,
                        receipt.terminal_status.value,
                        codec.dumps(receipt),
                        now_utc,
                    ),
                )
                receipt_id = int(cursor.lastrowid or 0)
                conn.execute(
                    "INSERT INTO results (call_node_id, digest, payload) VALUES (?, ?, ?)",
                    (receipt.call_node_id, receipt.result_digest, result_payload),
                )
                conn.execute(
                    "INSERT INTO outbox (receipt_id, call_node_id, created_at_utc)"
                    " VALUES (?, ?, ?)",
                    (receipt_id, receipt.call_node_id, now_utc),
                )
                self._history(conn, record, event, now_utc)
        except sqlite3.IntegrityError as exc:
            raise ConflictError(
                f"operation {record.call_node_id!r}: a receipt or outbox row already exists"
            ) from exc
        return receipt_id

    def _locked_row(self, conn: sqlite3.Connection, call_node_id: str) -> OperationRecord:
        row = conn.execute(
            "SELECT record_json FROM operations WHERE call_node_id = ?", (call_node_id,)
        ).fetchone()
        if row is None:
            raise UnknownCallNode(f"no operation is recorded for call node {call_node_id!r}")
        return codec.loads_record(str(row[0]))

    def _store(
        self, conn: sqlite3.Connection, record: OperationRecord, expected: int, now_utc: str
    ) -> None:
        cursor = conn.execute(
            "UPDATE operations SET version = ?, state = ?, operation_id = ?, record_json = ?,"
            " updated_at_utc = ? WHERE call_node_id = ? AND version = ?",
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
        self, conn: sqlite3.Connection, record: OperationRecord, event: str, now_utc: str
    ) -> None:
        conn.execute(
            "INSERT INTO history (call_node_id, version, state, event, at, at_utc)"
            " VALUES (?, ?, ?, ?, ?, ?)",
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
                "SELECT payload FROM blobs WHERE call_node_id = ? AND name = ?",
                (call_node_id, name),
            ).fetchone()
            if row is not None:
                if bytes(row[0]) != payload:
                    raise BlobConflict(f"{call_node_id!r}: {name!r} was already written")
                return False
            conn.execute(
                "INSERT INTO blobs (call_node_id, name, payload) VALUES (?, ?, ?)",
                (call_node_id, name, payload),
            )
            return True

    def blob(self, call_node_id: str, name: str) -> bytes | None:
        rows = self._read(
            "SELECT payload FROM blobs WHERE call_node_id = ? AND name = ?", (call_node_id, name)
        )
        return bytes(rows[0][0]) if rows else None

    def open_versions(self) -> dict[str, int]:
        rows = self._read(
            "SELECT call_node_id, version FROM operations WHERE state NOT IN (?, ?)",
            _TERMINAL_VALUES,
        )
        return {str(node): int(version) for node, version in rows}

    # --- receipts, results, outbox ---------------------------------------------------

    def receipt(self, call_node_id: str) -> TerminalReceipt | None:
        rows = self._read(
            "SELECT receipt_json FROM receipts WHERE call_node_id = ?", (call_node_id,)
        )
        return codec.loads_receipt(str(rows[0][0])) if rows else None

    def receipts(self) -> list[TerminalReceipt]:
        rows = self._read("SELECT receipt_json FROM receipts ORDER BY receipt_id")
        return [codec.loads_receipt(str(row[0])) for row in rows]

    def result_payload(self, call_node_id: str) -> bytes | None:
        rows = self._read("SELECT payload FROM results WHERE call_node_id = ?", (call_node_id,))
        return bytes(rows[0][0]) if rows else None

    def outbox_pending(self, *, limit: int = 100) -> list[OutboxRow]:
        rows = self._read(
            "SELECT outbox_id, receipt_id, call_node_id, created_at_utc, delivered_at_utc"
            " FROM outbox WHERE delivered_at_utc IS NULL ORDER BY outbox_id LIMIT ?",
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
                "SELECT delivered_at_utc FROM outbox WHERE outbox_id = ?", (outbox_id,)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"no outbox row {outbox_id}")
            if row[0] is not None:
                return False
            conn.execute(
                "UPDATE outbox SET delivered_at_utc = ? WHERE outbox_id = ?",
                (self._utc_now(), outbox_id),
            )
            return True

    def history(self, call_node_id: str) -> list[HistoryRow]:
        rows = self._read(
            "SELECT call_node_id, version, state, event, at, at_utc FROM history"
            " WHERE call_node_id = ? ORDER BY version",
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
