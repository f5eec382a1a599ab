"""The SQLite ledger: the embedded default, one file in WAL mode (SPEC L4–L7).

Owns the SQLite schema and migrations, the connection and its pragmas, the
``BEGIN IMMEDIATE`` write transaction and the guarded single-statement ``update`` and
acceptance; the queries it shares with PostgreSQL are
:class:`~longcall.ledger.sql.SqlLedger`'s, and the update and acceptance rules are
:mod:`longcall.ledger.base`'s (a guarded statement carries them as its WHERE clause,
but a refused one is judged by base's checks, which alone word the errors).

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
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from longcall.core import (
    TERMINAL_STATES,
    OperationRecord,
    ServerStatus,
    State,
    TerminalReceipt,
)
from longcall.core.keys import digest_bytes
from longcall.errors import LedgerRefused, LedgerUnavailable, VersionConflict
from longcall.ledger import codec
from longcall.ledger.base import STATES_WITH_OBSERVED_TERMINAL, check_update, utc_now_iso
from longcall.ledger.sql import (
    TERMINAL_VALUES,
    Params,
    SqlLedger,
    failing_flag,
    keeps_refusals,
    marks,
    person_deadline,
)

_TERMINAL_AT_V4 = ("accepted", "cancelled_accepted")
"""The terminal states when migration 4 ran (a migration never changes after it ships)."""

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
    # Leases with fencing (D1): who holds an open operation, at which execution epoch
    # (mirrored from the record so a write can be conditioned on it in SQL), and
    # whether it is still open (1) or accepted (NULL); the lease holders; one poll
    # budget per server for every worker (X3).
    f"""
    ALTER TABLE operations ADD COLUMN owner TEXT;
    ALTER TABLE operations ADD COLUMN execution_epoch INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE operations ADD COLUMN open INTEGER CHECK (open = 1);
    UPDATE operations SET execution_epoch = json_extract(record_json, '$.execution_epoch'),
        open = CASE WHEN state IN ({", ".join(repr(v) for v in _TERMINAL_AT_V4)}) THEN NULL
                    ELSE 1 END;
    CREATE INDEX operations_open_by_owner ON operations (owner) WHERE open = 1;
    ALTER TABLE history ADD COLUMN owner TEXT;
    ALTER TABLE history ADD COLUMN execution_epoch INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE workers (
        owner          TEXT PRIMARY KEY,
        kind           TEXT NOT NULL,
        lease_until    REAL NOT NULL,
        started_at_utc TEXT NOT NULL,
        renewed_at_utc TEXT NOT NULL
    );
    CREATE TABLE poll_budget (
        server       TEXT PRIMARY KEY,
        next_free_at REAL NOT NULL
    );
    """,
    # The rollout plan (R1-R3, P6): one row per (protocol, adapter version), read by
    # every worker, so all of them route new calls the same way.
    """
    CREATE TABLE rollout (
        protocol        TEXT NOT NULL,
        adapter_version TEXT NOT NULL,
        state           TEXT NOT NULL,
        canary_percent  REAL NOT NULL DEFAULT 0,
        note            TEXT NOT NULL DEFAULT '',
        updated_at_utc  TEXT NOT NULL,
        PRIMARY KEY (protocol, adapter_version)
    );
    """,
    # Adapter versions side by side (R1-R3, P6): each operation's (protocol, adapter
    # version) in columns, so a worker claims only what it runs, filled from the
    # records; the versions each worker runs (NULL: every one); the primary call node
    # a shadow operation copies (R1), and what comparing the two found.
    """
    ALTER TABLE operations ADD COLUMN protocol TEXT NOT NULL DEFAULT '';
    ALTER TABLE operations ADD COLUMN adapter_version TEXT NOT NULL DEFAULT '';
    ALTER TABLE operations ADD COLUMN shadow_of TEXT;
    UPDATE operations SET protocol = json_extract(record_json, '$.protocol'),
        adapter_version = json_extract(record_json, '$.adapter_version');
    CREATE INDEX operations_open_by_version ON operations (protocol, adapter_version)
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
    # The operator's console (O2) reads the list of 100,000 operations by index: the
    # tool in a column (written once, at creation); whether an open operation's last
    # request failed (1, else NULL), written with each record; indexes on what never
    # or seldom changes (creation stamp, server and version, a second claim) and on
    # the few failing operations.
    """
    ALTER TABLE operations ADD COLUMN tool_name TEXT NOT NULL DEFAULT '';
    ALTER TABLE operations ADD COLUMN failing INTEGER CHECK (failing = 1);
    UPDATE operations SET tool_name = json_extract(record_json, '$.tool_name'),
        failing = CASE WHEN open = 1 AND json_extract(record_json, '$.failed_attempts') > 0
                       THEN 1 END;
    CREATE INDEX operations_by_tool ON operations (tool_name);
    CREATE INDEX operations_by_created ON operations (created_at_utc);
    CREATE INDEX operations_by_server ON operations (server, protocol, adapter_version, open);
    CREATE INDEX operations_failing ON operations (server, protocol, adapter_version)
        WHERE failing = 1;
    CREATE INDEX operations_claimed_again ON operations (execution_epoch)
        WHERE execution_epoch >= 2;
    """,
    # What an operator sees of the workers (O2, X3, X9, D1): each worker's circuit
    # breaker per server as it last opened or closed; the writes refused as stale
    # (kept after their own transaction rolled back); the cap and use of each shared
    # poll budget; failed requests found by time (a partial index: only they are in it).
    # And the inbox by index: the deadline of an operation waiting for a person's
    # answer (infinity: none; NULL for every other operation), written with each record.
    """
    CREATE TABLE breakers (
        server         TEXT NOT NULL,
        owner          TEXT NOT NULL,
        state          TEXT NOT NULL,
        open_until     REAL,
        failures       INTEGER NOT NULL,
        last_error     TEXT NOT NULL DEFAULT '',
        changed_at_utc TEXT NOT NULL,
        PRIMARY KEY (server, owner)
    );
    CREATE TABLE refused_writes (
        refusal_id       INTEGER PRIMARY KEY,
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
    ALTER TABLE poll_budget ADD COLUMN qps_max REAL;
    ALTER TABLE poll_budget ADD COLUMN use_minute INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE poll_budget ADD COLUMN used_this_minute INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE poll_budget ADD COLUMN used_last_minute INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE poll_budget ADD COLUMN granted_at_utc TEXT NOT NULL DEFAULT '';
    CREATE INDEX history_request_failed ON history (at_utc) WHERE event = 'RequestFailed';
    ALTER TABLE operations ADD COLUMN person_deadline REAL;
    UPDATE operations SET person_deadline =
        coalesce(json_extract(record_json, '$.input_deadline_at'), 9e999)
        WHERE state = 'input_required'
        AND json_array_length(record_json, '$.input_keys_pending') > 0;
    CREATE INDEX operations_person ON operations (person_deadline)
        WHERE person_deadline IS NOT NULL;
    """,
    # The gateway's downtimes: when no gateway process of this ledger was alive (its
    # same-call rule counts them out of its windows); ended_at NULL: a clean stop
    # whose end is not known yet.
    """
    CREATE TABLE gateway_downtimes (
        started_at REAL NOT NULL,
        ended_at   REAL
    );
    CREATE INDEX gateway_downtimes_by_end ON gateway_downtimes (ended_at);
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)

# The fast path's guard on the state (L4): a terminal state may be written only over
# itself, any other state only over a non-terminal one.
_STATE_IS = "state = ?"
_STATE_NOT_TERMINAL = f"state NOT IN ({marks(len(TERMINAL_VALUES))})"
# A worker's write also names the (owner, epoch) it holds the row at (D1); an
# operator's write (no owner) leaves the epoch as it is.
_FENCE = " AND owner = ? AND execution_epoch = ?"
_SET = (
    "version = ?1, state = ?2, record_json = ?3, updated_at_utc = ?4, execution_epoch = ?5,"
    " failing = ?6, person_deadline = ?7"
)


def _guarded_update(*, terminal: bool, fenced: bool, sets_id: bool) -> str:
    """The guarded UPDATE of an operation; both forms take the same values (numbered:
    ?14 is the operation id).

    ``sets_id``: whether it sets the operation id, or keeps it and names it in its
    guard. An UPDATE that sets the id rewrites its index entry even when the value
    stays (SQLite picks the indexes an UPDATE touches from the statement, not the
    values), and the id changes once in an operation's life. So a write keeps the id
    when the last record this ledger wrote for the node had it: a row that holds
    another (written elsewhere) matches nothing, and the write then sets it. That is
    about one page in thirteen of what a lifecycle commits (L4)."""
    return (
        f"UPDATE operations SET {_SET}{', operation_id = ?14' if sets_id else ''}"
        " WHERE call_node_id = ?8 AND version = ?9 AND version + 1 = ?10"
        " AND request_digest = ?11 AND tool_digest = ?12 AND submission_key = ?13"
        f"{'' if sets_id else ' AND operation_id IS ?14'}"
        f" AND {_STATE_IS if terminal else _STATE_NOT_TERMINAL}{_FENCE if fenced else ''}"
    )


_GUARDED_UPDATES = {
    (terminal, fenced, sets_id): _guarded_update(terminal=terminal, fenced=fenced, sets_id=sets_id)
    for terminal in (False, True)
    for fenced in (False, True)
    for sets_id in (False, True)
}
"""Each guarded UPDATE by (to a terminal state, fenced by an owner, setting the id)."""

# An acceptance's guarded write (L5): every rule of check_acceptance that needs the
# stored row, in the WHERE clause. The version, state, identity and epoch are columns;
# the cancel generation, the server status and the operation id are read from the
# stored record (the epoch too: the fence compares the column, the receipt the record).
# The rules that need no row are checked in Python before it. A stored record that is
# not JSON matches nothing (json_extract would raise, and SQLite's error would read as
# an unavailable ledger): the checked path then reads it and reports the damage.
_ACCEPTING_UPDATE = (
    "UPDATE operations SET version = ?, state = ?, operation_id = ?, record_json = ?,"
    " updated_at_utc = ?, execution_epoch = ?, open = NULL, failing = ?,"
    " person_deadline = ? WHERE call_node_id = ? AND version = ?"
    f" AND {_STATE_NOT_TERMINAL}"
    " AND request_digest = ? AND tool_digest = ? AND submission_key = ?"
    " AND execution_epoch = ?"
    " AND CASE WHEN json_valid(record_json) THEN"
    " json_extract(record_json, '$.execution_epoch') = ?"
    " AND json_extract(record_json, '$.cancel_generation') = ?"
    " AND coalesce(json_extract(record_json, '$.operation_id') = ?,"
    " json_extract(record_json, '$.operation_id') IS NULL)"
    f" AND (state NOT IN ({marks(len(STATES_WITH_OBSERVED_TERMINAL))})"
    " OR json_extract(record_json, '$.server_status') = ?)"
    " ELSE 0 END"
)
_FENCED_ACCEPTING_UPDATE = _ACCEPTING_UPDATE + " AND owner = ?"
_OBSERVED_TERMINAL_VALUES = tuple(state._value_ for state in STATES_WITH_OBSERVED_TERMINAL)


SQLITE_SYNCHRONOUS = ("full", "normal", "extra", "off")
"""The ``PRAGMA synchronous`` levels a ledger may be opened with."""


class _WriteTransaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` under the connection's lock, ``ROLLBACK`` on any
    exception. A plain class rather than a generator context manager: every ledger
    write passes here, and the generator's set-up and teardown were a measurable share
    of a write's Python (L4's CPU path)."""

    __slots__ = ("_conn", "_lock", "_path")

    def __init__(
        self, conn: sqlite3.Connection, lock: contextlib.AbstractContextManager[Any], path: str
    ):
        self._conn = conn
        self._lock = lock
        self._path = path

    def __enter__(self) -> sqlite3.Connection:
        self._lock.__enter__()
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            self._lock.__exit__(None, None, None)
            raise unavailable(self._path, exc) from exc
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        return self._conn

    def __exit__(self, kind: type[BaseException] | None, value: object, _tb: object) -> None:
        try:
            if kind is None:
                try:
                    self._conn.execute("COMMIT")
                except BaseException as exc:
                    # A failed COMMIT may leave the transaction open; the next BEGIN
                    # on this connection would fail with it.
                    self._rollback()
                    if isinstance(exc, sqlite3.OperationalError):
                        raise unavailable(self._path, exc) from exc
                    raise
            else:
                self._rollback()
                if isinstance(value, sqlite3.OperationalError):
                    # Raised here, it replaces the driver's error (translated at the edge).
                    raise unavailable(self._path, value) from value
        finally:
            self._lock.__exit__(None, None, None)

    def _rollback(self) -> None:
        if self._conn.in_transaction:  # an error may have ended it already
            self._conn.execute("ROLLBACK")


def unavailable(path: str, exc: sqlite3.OperationalError) -> LedgerUnavailable:
    """A run-time failure of the SQLite file (locked past the busy timeout, a full disk,
    an I/O error), translated where it enters: the ledger, not the driver, is named."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return LedgerUnavailable(f"the ledger {path} is locked by another process: {text}")
    return LedgerUnavailable(f"the ledger {path} failed: {text}")


class SQLiteLedger(SqlLedger):
    """A ledger in one SQLite file (or ``:memory:`` for the simulator)."""

    migrations = MIGRATIONS
    creation_order = "rowid"
    json_text = "json_extract(record_json, '$.{name}')"
    json_number = "json_extract(record_json, '$.{name}')"
    # With two paths or more json_extract answers one JSON array of their values.
    json_fields = "json_extract(record_json, {names})"
    json_field_key = "'$.{name}'"
    duplicate_errors = (sqlite3.IntegrityError,)
    integrity_errors = (sqlite3.IntegrityError,)

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        utc_now: Callable[[], str] = utc_now_iso,
        new_identity: Callable[[], tuple[str, str]] | None = None,
    ) -> None:
        if synchronous.lower() not in SQLITE_SYNCHRONOUS:
            raise ValueError(f"synchronous must be full, normal, extra or off, not {synchronous!r}")
        super().__init__(utc_now=utc_now, new_identity=new_identity)
        self.path = str(path)
        if self.path != ":memory:" and os.path.isfile(self.path) and not os.path.getsize(self.path):
            # C5: a ledger truncated to nothing would open as a new, empty one and every
            # call node would be submitted again. Only removing the file starts afresh.
            raise LedgerRefused(
                f"the ledger {self.path} is an empty file (truncated?): its receipts are "
                "gone; move it away to start a new ledger"
            )
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            self._conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute("PRAGMA busy_timeout=10000")
            self._migrate()
            # After the migration, which refuses another program's database: WAL is a
            # property of the file, and a refused file must be left as it was found.
            self._conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise LedgerRefused(f"the ledger {self.path} is damaged: {exc}") from exc
            raise
        except BaseException:
            self._conn.close()
            raise

    # --- schema ----------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._write() as conn:
            self._upgrade(conn)

    def _too_new(self, current: int) -> str:
        return f"{self.path}: schema version {current} is newer than {SCHEMA_VERSION}"

    def _table_names(self, conn: sqlite3.Connection) -> set[str]:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {str(row[0]) for row in rows if not str(row[0]).startswith("sqlite_")}

    def _where(self) -> str:
        return self.path

    def worker_locks_dir(self) -> Path | None:
        # Beside the ledger file: every worker of this ledger on this host finds it.
        return None if self.path == ":memory:" else Path(f"{self.path}-workers")

    # --- the driver ------------------------------------------------------------------

    _RUNTIME_ERRORS = (sqlite3.OperationalError,)

    def _unavailable(self, exc: Exception) -> LedgerUnavailable:
        assert isinstance(exc, sqlite3.OperationalError)
        return unavailable(self.path, exc)

    def _write(self) -> _WriteTransaction:
        """One write transaction; the lock serialises threads sharing this connection."""
        return _WriteTransaction(self._conn, self._lock, self.path)

    def _execute(
        self, conn: sqlite3.Connection, query: str, params: Params | None = None
    ) -> sqlite3.Cursor:
        return conn.execute(query, () if params is None else params)

    def _executemany(self, conn: sqlite3.Connection, query: str, rows: Sequence[Params]) -> None:
        conn.executemany(query, rows)

    def _insert_receipt(
        self, conn: sqlite3.Connection, receipt: TerminalReceipt, now_utc: str
    ) -> int:
        cursor = conn.execute(
            "INSERT INTO receipts (call_node_id, result_digest, terminal_status,"
            " receipt_json, accepted_at_utc) VALUES (?, ?, ?, ?, ?)",
            (
                receipt.call_node_id,
                receipt.result_digest,
                receipt.terminal_status._value_,
                codec.dumps(receipt),
                now_utc,
            ),
        )
        return int(cursor.lastrowid or 0)

    # --- operations ------------------------------------------------------------------

    def _operation_columns(
        self, record: OperationRecord, now_utc: str, owner: str | None
    ) -> dict[str, object]:
        # The identity digests have their own columns so the guarded update can check
        # them without decoding the record.
        return {
            **super()._operation_columns(record, now_utc, owner),
            "request_digest": record.request_digest,
            "tool_digest": record.tool_descriptor_digest,
        }

    def _accept_row(
        self,
        conn: sqlite3.Connection,
        record: OperationRecord,
        receipt: TerminalReceipt,
        expected_version: int,
        result_payload: bytes,
        now_utc: str,
        owner: str | None,
    ) -> None:
        # Fast path, as in update: what needs no row is checked here, the rest is the
        # UPDATE's guard, so the row is neither read nor decoded. Anything else (a rule
        # broken here, or an update the guard refused) takes the checked path, which
        # reads the row and raises exactly the error it always raised.
        try:
            described = receipt == TerminalReceipt.for_record(record)
        except ValueError:  # not terminal, or no result: check_acceptance says which
            described = False
        if (
            not described
            or record.version != expected_version + 1
            or (receipt.terminal_status is ServerStatus.CANCELLED)
            != (record.state is State.CANCELLED_ACCEPTED)
            or digest_bytes(result_payload) != receipt.result_digest
        ):
            super()._accept_row(
                conn, record, receipt, expected_version, result_payload, now_utc, owner
            )
            return
        epoch = record.execution_epoch
        cursor = conn.execute(
            _ACCEPTING_UPDATE if owner is None else _FENCED_ACCEPTING_UPDATE,
            (
                record.version,
                record.state._value_,
                record.operation_id,
                self._texts.dumps(record),
                now_utc,
                epoch,
                failing_flag(record),
                person_deadline(record),
                record.call_node_id,
                expected_version,
                *TERMINAL_VALUES,
                record.request_digest,
                record.tool_descriptor_digest,
                record.submission_key,
                epoch,
                epoch,
                record.cancel_generation,
                record.operation_id,
                *_OBSERVED_TERMINAL_VALUES,
                receipt.terminal_status._value_,
                *((owner,) if owner is not None else ()),
            ),
        )
        if cursor.rowcount != 1:
            super()._accept_row(
                conn, record, receipt, expected_version, result_payload, now_utc, owner
            )

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
        # Fast path: every rule of check_update, and the fence, is in the UPDATE's
        # guard (L4, D1), so the row is neither read nor decoded; only a refused update
        # reads the row, to raise the precise error (Fenced before a version conflict).
        terminal = record.state in TERMINAL_STATES
        # ``_value_``, not ``.value``: the same text without the enum property's Python
        # call, on the path of every write.
        state = record.state._value_
        guard_values = (state,) if terminal else TERMINAL_VALUES
        fenced = owner is not None
        operation_id = record.operation_id
        last = self._texts.last(record.call_node_id)
        keeps_id = last is not None and last.operation_id == operation_id
        params = (
            record.version,
            state,
            self._texts.dumps(record),
            now_utc,
            record.execution_epoch,
            failing_flag(record),
            person_deadline(record),
            record.call_node_id,
            expected_version,
            record.version,
            record.request_digest,
            record.tool_descriptor_digest,
            record.submission_key,
            operation_id,
            *guard_values,
            *((owner, record.execution_epoch) if fenced else ()),
        )
        with self._write() as conn:
            cursor = conn.execute(_GUARDED_UPDATES[terminal, fenced, not keeps_id], params)
            if cursor.rowcount != 1 and keeps_id:
                # The row holds another id than the last record written here (or the
                # write is refused): set it.
                cursor = conn.execute(_GUARDED_UPDATES[terminal, fenced, True], params)
            if cursor.rowcount != 1:
                row = self._locked_row(conn, record.call_node_id, owner=owner)
                check_update(row, record, expected_version)
                raise VersionConflict(f"operation {record.call_node_id!r}: version moved")
            self._history(conn, record, event, now_utc, owner)
