"""The SQL both ledger backends share: one schema shape, one set of queries (SPEC L4–L7).

Owns: :class:`SqlLedger`, the ledger contract written once over a DB-API connection —
the readers (records, receipts, results, outbox, history, blobs), row decoding, the
version-CAS store, the history and blob writes, the acceptance transaction, the
writes refused as stale kept beside the timeline (:func:`keeps_refusals`), what the
operator's console reads (breakers, poll budgets, holdings, failed requests) and the
forward-migration loop. Queries are written with ``?`` placeholders; a backend whose
driver wants another style translates them in :meth:`SqlLedger._execute`.

Each backend keeps what is really its own: the connection and its setup, how a write
transaction begins, how a row is locked for a transition (``row_lock``), how a new
receipt reports its id, which driver errors mean a duplicate, its migrations, and its
own ``update`` (SQLite's single guarded statement; PostgreSQL's ``FOR UPDATE`` read),
wrapped in :func:`keeps_refusals`.

Must not: decide whether an update or an acceptance is allowed (that is
:func:`~longcall.ledger.base.check_update` and
:func:`~longcall.ledger.base.check_acceptance`, written once), import a database
driver (PostgreSQL's stays optional), or import anything above ``longcall.core``.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import json
import math
import secrets
import threading
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, TypeVar, cast

from longcall.core import (
    TERMINAL_STATES,
    NotFoundError,
    OperationRecord,
    ResultKind,
    ServerStatus,
    State,
    TerminalReceipt,
    UnknownCallNode,
)
from longcall.core.retry import BreakerState
from longcall.errors import (
    BlobConflict,
    ConflictError,
    CorruptRow,
    DuplicateCallNode,
    Fenced,
    LedgerMissing,
    LedgerRefused,
    LedgerUnavailable,
    LocalProtocolError,
    SchemaTooNew,
    VersionConflict,
)
from longcall.ledger import codec
from longcall.ledger.base import (
    REFUSALS_KEPT_PER_NODE,
    WORKER,
    AcceptedFigures,
    AdapterPlan,
    BreakerRow,
    Census,
    Claim,
    ClaimDecision,
    Downtime,
    Fence,
    HistoryRow,
    Holding,
    Ledger,
    ListedOperation,
    OperationQuery,
    OutboxRow,
    PollBudgetRow,
    RefusedWrite,
    ServerRetries,
    ServerUse,
    ShadowComparison,
    VersionSet,
    WorkerRow,
    check_acceptance,
    check_fence,
    check_update,
)
from longcall.ledger.budget import BudgetUse, PollGrant, grant_slots

Row = tuple[Any, ...]
Params = Sequence[object]

TERMINAL_VALUES = tuple(sorted(state.value for state in TERMINAL_STATES))
"""The terminal states as stored, in a fixed order (query parameters)."""


def fresh_identity() -> tuple[str, str]:
    """A new ledger's id and caller key (hex): random, made once per ledger (C2)."""
    return uuid.uuid4().hex, secrets.token_hex(32)


def marks(count: int) -> str:
    """``count`` placeholders for an ``IN (...)`` list."""
    return ", ".join("?" for _ in range(count))


def statements(script: str) -> list[str]:
    """The statements of a migration script, one per ``;``."""
    return [s.strip() for s in script.split(";") if s.strip()]


def outbox_row(row: Row) -> OutboxRow:
    return OutboxRow(
        outbox_id=int(row[0]),
        receipt_id=int(row[1]),
        call_node_id=str(row[2]),
        created_at_utc=str(row[3]),
        delivered_at_utc=None if row[4] is None else str(row[4]),
    )


def history_row(row: Row) -> HistoryRow:
    return HistoryRow(
        call_node_id=str(row[0]),
        version=int(row[1]),
        state=State(row[2]),
        event=str(row[3]),
        at=float(row[4]),
        at_utc=str(row[5]),
        owner=None if row[6] is None else str(row[6]),
        execution_epoch=int(row[7]),
    )


def worker_row(row: Row) -> WorkerRow:
    return WorkerRow(
        owner=str(row[0]),
        kind=str(row[1]),
        lease_until=float(row[2]),
        started_at_utc=str(row[3]),
        renewed_at_utc=str(row[4]),
    )


@functools.cache
def insert_operation(columns: tuple[str, ...]) -> str:
    """The INSERT of a new operations row with these columns (built once per shape)."""
    return f"INSERT INTO operations ({', '.join(columns)}) VALUES ({marks(len(columns))})"


OUTBOX_COLUMNS = "outbox_id, receipt_id, call_node_id, created_at_utc, delivered_at_utc"
WORKER_COLUMNS = "owner, kind, lease_until, started_at_utc, renewed_at_utc"

# An open row is claimable when nobody holds it or its holder's lease lapsed. Every
# owner of an open row has a workers row (retire_worker releases before it deletes,
# and a lapsed worker is forgotten only once it holds nothing), so "lapsed" is a
# short list of owners, and the claim walks the (owner, creation) index.
_LAPSED_OWNERS = "SELECT owner FROM workers WHERE lease_until <= ?"


def _census_counts() -> str:
    """A census's counts over the open rows it reads (parameters: the asking owner, now):
    all, the asker's, unowned, and held by a worker whose lease lapsed (claimable). Built
    at each read from :data:`_LAPSED_OWNERS`, the one definition of a lapsed holder that
    claims use too."""
    return (
        "count(*), coalesce(sum(CASE WHEN owner = ? THEN 1 ELSE 0 END), 0),"
        " coalesce(sum(CASE WHEN owner IS NULL THEN 1 ELSE 0 END), 0),"
        f" coalesce(sum(CASE WHEN owner IN ({_LAPSED_OWNERS}) THEN 1 ELSE 0 END), 0)"
    )


_CLAIMED_UPDATE = (
    "UPDATE operations SET owner = ?, execution_epoch = ?, version = ?, state = ?,"
    " record_json = ?, updated_at_utc = ?, person_deadline = ?"
    " WHERE call_node_id = ? AND version = ?"
)
# A rollback's rewrite (R3): released, at a higher epoch, bound to the old version.
_REBOUND_UPDATE = (
    "UPDATE operations SET owner = NULL, adapter_version = ?, execution_epoch = ?, version = ?,"
    " state = ?, record_json = ?, updated_at_utc = ?, person_deadline = ?"
    " WHERE call_node_id = ? AND version = ?"
)


def failing_flag(record: OperationRecord) -> int | None:
    """The ``failing`` column: 1 for an open operation whose last request failed (claims
    and rollbacks keep ``failed_attempts``, so only the writes of a new record set it)."""
    return 1 if record.failed_attempts > 0 and not record.is_terminal else None


def person_deadline(record: OperationRecord) -> float | None:
    """The ``person_deadline`` column: for an operation waiting for a person's answer
    (input asked, some keys unanswered), its round's deadline (infinity: none); NULL for
    every other. The inbox and the waiting-on rule read it by index."""
    if record.state is State.INPUT_REQUIRED and record.input_keys_pending:
        return math.inf if record.input_deadline_at is None else record.input_deadline_at
    return None


def dumps_versions(versions: VersionSet | None) -> str | None:
    """The versions a worker runs, as stored (None: every one)."""
    return None if versions is None else json.dumps(sorted([p, v] for p, v in versions))


def loads_versions(text: object) -> VersionSet | None:
    """The versions a worker runs, as read back (None: every one)."""
    if text is None:
        return None
    return frozenset((str(p), str(v)) for p, v in json.loads(str(text)))


def runs_any(runs: VersionSet | None, wanted: VersionSet) -> bool:
    """Whether a worker that runs ``runs`` can drive an operation of one of ``wanted``."""
    return runs is None or not runs.isdisjoint(wanted)


def version_filter(versions: VersionSet | None) -> tuple[str, tuple[str, ...]]:
    """The ``AND (...)`` that keeps operations bound to one of ``versions``, and its
    parameters (nothing when every version is wanted)."""
    if versions is None:
        return "", ()
    pairs = sorted(versions)
    clause = " OR ".join("(protocol = ? AND adapter_version = ?)" for _ in pairs)
    return f" AND ({clause or '1 = 0'})", tuple(x for pair in pairs for x in pair)


_Write = TypeVar("_Write", bound=Callable[..., Any])


def keeps_refusals(write: _Write) -> _Write:
    """Wrap a ledger write of one record (``update``, ``accept_terminal``: the record
    first, then ``expected_version``, ``event`` and ``owner`` by keyword) so that a
    refusal as stale (Fenced, a version conflict) is kept by ``_note_refused`` after its
    transaction rolled back, then raised as it was."""

    @functools.wraps(write)
    def kept(self: SqlLedger, record: OperationRecord, *args: Any, **kwargs: Any) -> Any:
        try:
            return write(self, record, *args, **kwargs)
        except (Fenced, VersionConflict) as refusal:
            event, owner = kwargs["event"], kwargs.get("owner")
            self._note_refused(record, event, owner, kwargs["expected_version"], refusal)
            raise

    return cast(_Write, kept)


class SqlLedger(Ledger):
    """The ledger contract over one DB-API connection, shared by the SQL backends.

    A subclass sets ``_conn`` (and calls :meth:`_migrate` from its constructor) and
    fills in the class attributes and abstract methods below.
    """

    migrations: ClassVar[tuple[str, ...]]
    """Forward-only migrations; index i brings the schema to version i + 1."""
    creation_order: ClassVar[str]
    """The column that orders operations by creation."""
    row_lock: ClassVar[str] = ""
    """Appended to the read of a row a write transaction is about to change."""
    claim_lock: ClassVar[str] = ""
    """Appended to the read of the rows a claim is about to take (PostgreSQL: skip the
    rows another claimer holds locked; SQLite: the write transaction already excludes
    every other writer)."""
    json_text: ClassVar[str]
    """SQL reading the text of the stored record's field ``{name}``."""
    json_number: ClassVar[str]
    """SQL reading the stored record's numeric field ``{name}``."""
    json_fields: ClassVar[str]
    """SQL reading the stored record's fields ``{names}`` (comma-separated, each as
    ``json_field_key`` writes it) as the text of one JSON array: the record is parsed
    once, not once per field."""
    json_field_key: ClassVar[str]
    """How one field ``{name}`` is written in ``json_fields``."""
    failing: ClassVar[str] = "failing = 1"
    """An open operation whose last request failed (the column ``failing_flag`` writes,
    and the condition of the partial index ``operations_failing``)."""
    duplicate_errors: ClassVar[tuple[type[BaseException], ...]]
    """Driver errors that mean a create met an existing call node or submission key."""
    integrity_errors: ClassVar[tuple[type[BaseException], ...]]
    """Driver errors that mean an acceptance met an existing receipt or outbox row."""

    create_missing = True
    """Whether opening makes the ledger's tables where there are none (a backend whose
    ledger can be missing in some other way, a SQLite file, checks before opening)."""

    _conn: Any

    def __init__(
        self,
        *,
        utc_now: Callable[[], str],
        new_identity: Callable[[], tuple[str, str]] | None = None,
    ) -> None:
        self._utc_now = utc_now
        self._new_identity = new_identity or fresh_identity
        self._lock = threading.RLock()
        # Each record's text is made from the last one written for its call node.
        self._texts = codec.RecordTexts()

    # --- what each backend supplies -------------------------------------------------

    _RUNTIME_ERRORS: ClassVar[tuple[type[Exception], ...]]
    """The driver's errors of a database that fails while in use (translated at the edge)."""

    @abc.abstractmethod
    def _write(self) -> AbstractContextManager[Any]:
        """One write transaction, yielding its connection; serialised by ``_lock``. A
        run-time failure of the database leaves it as :class:`LedgerUnavailable`."""

    @abc.abstractmethod
    def _unavailable(self, exc: Exception) -> LedgerUnavailable:
        """The driver's run-time failure ``exc`` as the ledger's own error."""

    @abc.abstractmethod
    def _execute(self, conn: Any, query: str, params: Params | None = None) -> Any:
        """Run one ``?``-style query on ``conn`` and return the driver's cursor."""

    @abc.abstractmethod
    def _insert_receipt(self, conn: Any, receipt: TerminalReceipt, now_utc: str) -> int:
        """Insert the receipt row and return its id."""

    @abc.abstractmethod
    def _too_new(self, current: int) -> str:
        """Why a schema at ``current`` cannot be opened by this code."""

    # --- schema ----------------------------------------------------------------------

    @abc.abstractmethod
    def _table_names(self, conn: Any) -> set[str]:
        """The tables of the ledger's database (SQLite) or schema (PostgreSQL)."""

    def _upgrade(self, conn: Any) -> None:
        """Bring the schema to the latest version, inside the caller's transaction, and
        read the ledger's identity. Another program's tables are refused, never built
        upon (C5)."""
        tables = self._table_names(conn)
        if not tables and not self.create_missing:
            raise LedgerMissing(f"no ledger in {self._where()}")
        if tables and "schema_version" not in tables:
            shown = ", ".join(sorted(tables)[:5])
            raise LedgerRefused(
                f"{self._where()} is not a longcall ledger (it holds other tables: {shown})"
            )
        self._execute(conn, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = self._execute(conn, "SELECT max(version) FROM schema_version").fetchone()
        current = int(row[0] or 0) if row else 0
        if current and "operations" not in tables:
            shown = ", ".join(sorted(tables)[:5])
            raise LedgerRefused(
                f"{self._where()} is not a longcall ledger (it holds {shown}: a task store?)"
            )
        latest = len(self.migrations)
        if current > latest:
            raise SchemaTooNew(self._too_new(current))
        for version in range(current + 1, latest + 1):
            for statement in statements(self.migrations[version - 1]):
                self._execute(conn, statement)
            self._execute(conn, "INSERT INTO schema_version (version) VALUES (?)", (version,))
        self._identity(conn)

    def _identity(self, conn: Any) -> None:
        """Read the ledger's identity, making it on the ledger's first open (C2)."""
        query = "SELECT ledger_id, caller_key FROM ledger_identity WHERE singleton = 1"
        row = self._execute(conn, query).fetchone()
        if row is None:
            row = self._new_identity()
            self._execute(
                conn,
                "INSERT INTO ledger_identity (singleton, ledger_id, caller_key, created_at_utc)"
                " VALUES (1, ?, ?, ?)",
                (row[0], row[1], self._utc_now()),
            )
        self.ledger_id = str(row[0])
        self.caller_key = bytes.fromhex(str(row[1]))

    def _where(self) -> str:
        """Where this ledger lives, for messages (never a password)."""
        return type(self).__name__

    def schema_version(self) -> int:
        rows = self._read("SELECT max(version) FROM schema_version")
        return int(rows[0][0])

    # --- reads -----------------------------------------------------------------------

    def _read(self, query: str, params: Params = ()) -> list[Row]:
        with self._lock:
            try:
                rows: list[Row] = self._execute(self._conn, query, params).fetchall()
            except self._RUNTIME_ERRORS as exc:
                raise self._unavailable(exc) from exc
            return rows

    def _records(self, query: str, params: Params = ()) -> list[OperationRecord]:
        return [codec.loads_record(str(row[0])) for row in self._read(query, params)]

    def _one_record(self, query: str, params: Params) -> OperationRecord | None:
        rows = self._read(query, params)
        return codec.loads_record(str(rows[0][0])) if rows else None

    def get(self, call_node_id: str) -> OperationRecord:
        record = self.find(call_node_id)
        if record is None:
            raise UnknownCallNode(f"no operation is recorded for call node {call_node_id!r}")
        return record

    def find(self, call_node_id: str) -> OperationRecord | None:
        return self._one_record(
            "SELECT record_json FROM operations WHERE call_node_id = ?", (call_node_id,)
        )

    def find_by_operation_id(
        self, operation_id: str, *, server: str | None = None
    ) -> list[OperationRecord]:
        order = self.creation_order
        if server is None:
            return self._records(
                f"SELECT record_json FROM operations WHERE operation_id = ? ORDER BY {order}",
                (operation_id,),
            )
        return self._records(
            "SELECT record_json FROM operations WHERE operation_id = ? AND server = ?"
            f" ORDER BY {order}",
            (operation_id, server),
        )

    def find_by_submission_key(self, submission_key: str) -> OperationRecord | None:
        return self._one_record(
            "SELECT record_json FROM operations WHERE submission_key = ?", (submission_key,)
        )

    def list_by_state(self, *states: State) -> list[OperationRecord]:
        order = self.creation_order
        if not states:
            return self._records(f"SELECT record_json FROM operations ORDER BY {order}")
        return self._records(
            f"SELECT record_json FROM operations WHERE state IN ({marks(len(states))})"
            f" ORDER BY {order}",
            tuple(s.value for s in states),
        )

    def recent_open_by_prefix(self, prefix: str, *, limit: int) -> list[OperationRecord]:
        # substr, not LIKE: a prefix holding % or _ needs no escaping.
        return self._records(
            "SELECT record_json FROM operations WHERE open = 1"
            f" AND substr(call_node_id, 1, ?) = ? ORDER BY {self.creation_order} DESC LIMIT ?",
            (len(prefix), prefix, max(0, limit)),
        )

    def open_versions(self) -> dict[str, int]:
        rows = self._read("SELECT call_node_id, version FROM operations WHERE open = 1")
        return {str(node): int(version) for node, version in rows}

    def server_session(self, server: str) -> dict[str, Any] | None:
        rows = self._read("SELECT session_json FROM server_sessions WHERE server = ?", (server,))
        if not rows:
            return None
        session = json.loads(str(rows[0][0]))
        return session if isinstance(session, dict) else None

    def put_server_session(self, server: str, session: Mapping[str, Any] | None) -> None:
        with self._write() as conn:
            self._execute(conn, "DELETE FROM server_sessions WHERE server = ?", (server,))
            if session is not None:
                self._execute(
                    conn,
                    "INSERT INTO server_sessions (server, session_json, updated_at_utc)"
                    " VALUES (?, ?, ?)",
                    (server, json.dumps(dict(session), sort_keys=True), self._utc_now()),
                )

    def blob(self, call_node_id: str, name: str) -> bytes | None:
        rows = self._read(
            "SELECT payload FROM blobs WHERE call_node_id = ? AND name = ?", (call_node_id, name)
        )
        return bytes(rows[0][0]) if rows else None

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
            f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE delivered_at_utc IS NULL"
            " ORDER BY outbox_id LIMIT ?",
            (limit,),
        )
        return [outbox_row(row) for row in rows]

    def outbox(self) -> list[OutboxRow]:
        rows = self._read(f"SELECT {OUTBOX_COLUMNS} FROM outbox ORDER BY outbox_id")
        return [outbox_row(row) for row in rows]

    def history(self, call_node_id: str) -> list[HistoryRow]:
        rows = self._read(
            "SELECT call_node_id, version, state, event, at, at_utc, owner, execution_epoch"
            " FROM history WHERE call_node_id = ? ORDER BY version",
            (call_node_id,),
        )
        return [history_row(row) for row in rows]

    # --- writes ----------------------------------------------------------------------

    def _operation_columns(
        self, record: OperationRecord, now_utc: str, owner: str | None
    ) -> dict[str, object]:
        """The columns of a new operations row (a backend may store more)."""
        return {
            "call_node_id": record.call_node_id,
            "version": record.version,
            "state": record.state._value_,  # the value, without the property's call
            "server": record.server,
            "operation_id": record.operation_id,
            "submission_key": record.submission_key,
            "record_json": self._texts.dumps(record),
            "created_at_utc": now_utc,
            "updated_at_utc": now_utc,
            "owner": owner,
            "execution_epoch": record.execution_epoch,
            "open": None if record.is_terminal else 1,
            "protocol": record.protocol,
            "adapter_version": record.adapter_version,
            "shadow_of": record.shadow_of,
            "tool_name": record.tool_name,
            "failing": failing_flag(record),
            "person_deadline": person_deadline(record),
        }

    def create(
        self,
        record: OperationRecord,
        *,
        blobs: Mapping[str, bytes] | None = None,
        owner: str | None = None,
    ) -> OperationRecord:
        if record.version != 1:
            raise ValueError("a new record starts at version 1")
        now_utc = self._utc_now()
        columns = self._operation_columns(record, now_utc, owner)
        try:
            with self._write() as conn:
                self._execute(conn, insert_operation(tuple(columns)), tuple(columns.values()))
                for name, payload in (blobs or {}).items():
                    self._insert_blob(conn, record.call_node_id, name, payload)
                self._history(conn, record, "Created", now_utc, owner)
        except self.duplicate_errors as exc:
            raise DuplicateCallNode(
                f"call node {record.call_node_id!r} (or its submission key) already exists"
            ) from exc
        return record

    def _note_refused(
        self,
        record: OperationRecord,
        event: str,
        owner: str | None,
        expected_version: int | None,
        refusal: ConflictError,
    ) -> None:
        """Keep a row saying this write was refused, in a transaction of its own after
        the refused one rolled back (nothing of the write itself is kept). A failure
        here is swallowed: the refusal raised to the writer is what counts."""
        reason = "fenced" if isinstance(refusal, Fenced) else "version_conflict"
        node = record.call_node_id
        values = (node, event, owner, record.execution_epoch, expected_version, reason,
                  str(refusal)[:_REFUSAL_DETAIL_MAX], self._utc_now(), node,
                  REFUSALS_KEPT_PER_NODE)  # fmt: skip
        with contextlib.suppress(LedgerUnavailable, *self.integrity_errors), self._write() as conn:
            self._execute(conn, _REFUSAL_INSERT, values)

    @keeps_refusals
    def accept_terminal(
        self,
        record: OperationRecord,
        receipt: TerminalReceipt,
        *,
        expected_version: int,
        result_payload: bytes,
        event: str,
        owner: str | None = None,
    ) -> int:
        now_utc = self._utc_now()
        try:
            with self._write() as conn:
                self._accept_row(
                    conn, record, receipt, expected_version, result_payload, now_utc, owner
                )
                receipt_id = self._insert_receipt(conn, receipt, now_utc)
                self._execute(
                    conn,
                    "INSERT INTO results (call_node_id, digest, payload) VALUES (?, ?, ?)",
                    (receipt.call_node_id, receipt.result_digest, result_payload),
                )
                if record.shadow_of is None:  # a shadow advances nothing downstream (R1)
                    self._execute(
                        conn,
                        "INSERT INTO outbox (receipt_id, call_node_id, created_at_utc)"
                        " VALUES (?, ?, ?)",
                        (receipt_id, receipt.call_node_id, now_utc),
                    )
                self._history(conn, record, event, now_utc, owner)
        except self.integrity_errors as exc:
            raise VersionConflict(
                f"operation {record.call_node_id!r}: a receipt or outbox row already exists"
            ) from exc
        return receipt_id

    def _accept_row(
        self,
        conn: Any,
        record: OperationRecord,
        receipt: TerminalReceipt,
        expected_version: int,
        result_payload: bytes,
        now_utc: str,
        owner: str | None,
    ) -> None:
        """Check an acceptance against the stored row (L5) and write the terminal record."""
        row = self._locked_row(conn, record.call_node_id, owner=owner)
        check_acceptance(row, record, receipt, expected_version, result_payload)
        self._store(conn, record, expected_version, now_utc, owner)

    def _locked_row(
        self, conn: Any, call_node_id: str, *, owner: str | None = None, epoch: int | None = None
    ) -> OperationRecord:
        """The stored record, locked for this transaction; with ``owner``, Fenced unless
        the row is still held by it at ``epoch`` (default: the stored record's)."""
        row = self._execute(
            conn,
            "SELECT record_json, owner, execution_epoch FROM operations"
            f" WHERE call_node_id = ?{self.row_lock}",
            (call_node_id,),
        ).fetchone()
        if row is None:
            raise UnknownCallNode(f"no operation is recorded for call node {call_node_id!r}")
        record = codec.loads_record(str(row[0]))
        if owner is not None:
            wanted = record.execution_epoch if epoch is None else epoch
            check_fence(call_node_id, row[1], int(row[2]), owner, wanted)
        return record

    def _store(
        self,
        conn: Any,
        record: OperationRecord,
        expected: int,
        now_utc: str,
        owner: str | None = None,
    ) -> None:
        """The CAS write of a checked transition; a worker's write also names its
        (owner, epoch) in the statement, so the database itself refuses a stale one."""
        fenced = " AND owner = ? AND execution_epoch = ?" if owner is not None else ""
        cursor = self._execute(
            conn,
            "UPDATE operations SET version = ?, state = ?, operation_id = ?, record_json = ?,"
            " updated_at_utc = ?, execution_epoch = ?, open = ?, failing = ?, person_deadline = ?"
            f" WHERE call_node_id = ? AND version = ?{fenced}",
            (
                record.version,
                record.state._value_,
                record.operation_id,
                self._texts.dumps(record),
                now_utc,
                record.execution_epoch,
                None if record.is_terminal else 1,
                failing_flag(record),
                person_deadline(record),
                record.call_node_id,
                expected,
                *((owner, record.execution_epoch) if owner is not None else ()),
            ),
        )
        if cursor.rowcount != 1:  # the SQL-level CAS (L4), beside the checked one
            raise VersionConflict(f"operation {record.call_node_id!r}: version moved")

    def _history(
        self,
        conn: Any,
        record: OperationRecord,
        event: str,
        now_utc: str,
        owner: str | None = None,
    ) -> None:
        self._execute(conn, _HISTORY_INSERT, _history_values(record, event, now_utc, owner))

    def _insert_blob(self, conn: Any, call_node_id: str, name: str, payload: bytes) -> None:
        self._execute(
            conn,
            "INSERT INTO blobs (call_node_id, name, payload) VALUES (?, ?, ?)",
            (call_node_id, name, payload),
        )

    def put_blob(
        self, call_node_id: str, name: str, payload: bytes, *, fence: Fence | None = None
    ) -> bool:
        try:
            return self._put_blob(call_node_id, name, payload, fence=fence)
        except Fenced as refusal:
            assert fence is not None  # only a fenced write is refused as Fenced
            record = self.find(call_node_id)
            if record is not None:
                stale = dataclasses.replace(record, execution_epoch=fence.execution_epoch)
                self._note_refused(stale, f"store {name}", fence.owner, None, refusal)
            raise

    def _put_blob(
        self, call_node_id: str, name: str, payload: bytes, *, fence: Fence | None = None
    ) -> bool:
        with self._write() as conn:
            if fence is None:
                self._locked_row(conn, call_node_id)
            else:
                self._locked_row(conn, call_node_id, owner=fence.owner, epoch=fence.execution_epoch)
            row = self._execute(
                conn,
                "SELECT payload FROM blobs WHERE call_node_id = ? AND name = ?",
                (call_node_id, name),
            ).fetchone()
            if row is not None:
                if bytes(row[0]) != payload:
                    raise BlobConflict(f"{call_node_id!r}: {name!r} was already written")
                return False
            self._insert_blob(conn, call_node_id, name, payload)
            return True

    def mark_delivered(self, outbox_id: int) -> bool:
        with self._write() as conn:
            row = self._execute(
                conn,
                f"SELECT delivered_at_utc FROM outbox WHERE outbox_id = ?{self.row_lock}",
                (outbox_id,),
            ).fetchone()
            if row is None:
                raise NotFoundError(f"no outbox row {outbox_id}")
            if row[0] is not None:
                return False
            self._execute(
                conn,
                "UPDATE outbox SET delivered_at_utc = ? WHERE outbox_id = ?",
                (self._utc_now(), outbox_id),
            )
            return True

    # --- leases (D1) ------------------------------------------------------------------

    def register_worker(
        self,
        owner: str,
        *,
        kind: str,
        now: float,
        lease_s: float,
        versions: VersionSet | None = None,
    ) -> None:
        now_utc = self._utc_now()
        with self._write() as conn:
            self._execute(
                conn,
                f"INSERT INTO workers ({WORKER_COLUMNS}, versions) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (owner) DO UPDATE SET kind = excluded.kind,"
                " lease_until = excluded.lease_until, renewed_at_utc = excluded.renewed_at_utc,"
                " versions = excluded.versions",
                (owner, kind, now + lease_s, now_utc, now_utc, dumps_versions(versions)),
            )

    def renew_worker(self, owner: str, *, now: float, lease_s: float) -> bool:
        with self._write() as conn:
            # The common case in one statement: the lease still runs, and is extended.
            # A heartbeat comes every few seconds from every worker; a lapsed or
            # forgotten lease is rare and takes the reads below.
            renewed = self._execute(
                conn,
                "UPDATE workers SET lease_until = ?, renewed_at_utc = ?"
                " WHERE owner = ? AND lease_until > ?",
                (now + lease_s, self._utc_now(), owner, now),
            ).rowcount
            if renewed == 1:
                return True
            row = self._execute(
                conn, f"SELECT 1 FROM workers WHERE owner = ?{self.row_lock}", (owner,)
            ).fetchone()
            if row is None:
                return False  # forgotten: the caller registers again and re-reads
            # Lapsed: renewed all the same, and the caller re-reads what it still holds.
            self._execute(
                conn,
                "UPDATE workers SET lease_until = ?, renewed_at_utc = ? WHERE owner = ?",
                (now + lease_s, self._utc_now(), owner),
            )
            return False

    def retire_worker(self, owner: str) -> int:
        with self._write() as conn:
            released = self._execute(
                conn, "UPDATE operations SET owner = NULL WHERE owner = ? AND open = 1", (owner,)
            ).rowcount
            self._execute(conn, "DELETE FROM workers WHERE owner = ?", (owner,))
            self._execute(conn, "DELETE FROM breakers WHERE owner = ?", (owner,))
            return int(released)

    def workers(self) -> list[WorkerRow]:
        rows = self._read(f"SELECT {WORKER_COLUMNS} FROM workers ORDER BY owner")
        return [worker_row(row) for row in rows]

    def end_lease(self, owner: str, *, lease_until: float, now: float) -> bool:
        with self._write() as conn:
            # The lease as read is the fence: a holder that renewed since is alive (a
            # new process under the same id), and keeps its lease.
            ended = self._execute(
                conn,
                "UPDATE workers SET lease_until = ? WHERE owner = ? AND lease_until = ?"
                " AND lease_until > ?",
                (now, owner, lease_until, now),
            ).rowcount
            return bool(ended == 1)

    # --- the gateway's downtimes ------------------------------------------------------

    def record_downtime(
        self, started_at: float, ended_at: float | None, *, forget_before: float
    ) -> None:
        with self._write() as conn:
            if ended_at is not None:
                self._execute(conn, "DELETE FROM gateway_downtimes WHERE ended_at IS NULL")
                self._execute(
                    conn, "DELETE FROM gateway_downtimes WHERE ended_at < ?", (forget_before,)
                )
            self._execute(
                conn,
                "INSERT INTO gateway_downtimes (started_at, ended_at) VALUES (?, ?)",
                (started_at, ended_at),
            )

    def downtimes(self, *, ending_after: float) -> list[Downtime]:
        rows = self._read(
            "SELECT started_at, ended_at FROM gateway_downtimes"
            " WHERE ended_at IS NULL OR ended_at > ? ORDER BY started_at",
            (ending_after,),
        )
        return [Downtime(started_at=row[0], ended_at=row[1]) for row in rows]

    def census(self, owner: str, *, now: float, versions: VersionSet | None = None) -> Census:
        # One statement, so one consistent snapshot and one round trip per claim round
        # (every worker runs one each claim interval). Live workers are counted in SQL
        # unless a version set must be matched against each worker's stored set.
        bound, bound_params = version_filter(versions)
        live_sql = "(SELECT count(*) FROM workers WHERE kind = ? AND lease_until > ?)"
        row = self._read(
            f"SELECT {live_sql if versions is None else '0'}, {_census_counts()}"
            f" FROM operations WHERE open = 1{bound}",
            ((WORKER, now) if versions is None else ()) + (owner, now, *bound_params),
        )[0]
        live, total, held, unowned, lapsed_held = (int(v) for v in row)
        if versions is not None:
            live = sum(1 for runs in self._live_worker_versions(now) if runs_any(runs, versions))
        return Census(
            open_operations=total,
            live_workers=live,
            held=held,
            claimable=unowned + lapsed_held,
        )

    def census_by_version(
        self, owner: str, *, now: float, versions: VersionSet
    ) -> dict[tuple[str, str], Census]:
        bound, bound_params = version_filter(versions)
        rows = self._read(
            f"SELECT protocol, adapter_version, {_census_counts()}"
            f" FROM operations WHERE open = 1{bound} GROUP BY protocol, adapter_version",
            (owner, now, *bound_params),
        )
        counts = {(str(r[0]), str(r[1])): tuple(int(v) for v in r[2:]) for r in rows}
        live_runs = self._live_worker_versions(now)
        out: dict[tuple[str, str], Census] = {}
        for pair in versions:
            total, held, unowned, lapsed_held = counts.get(pair, (0, 0, 0, 0))
            out[pair] = Census(
                open_operations=total,
                live_workers=sum(1 for runs in live_runs if runs_any(runs, frozenset({pair}))),
                held=held,
                claimable=unowned + lapsed_held,
            )
        return out

    def _live_worker_versions(self, now: float) -> list[VersionSet | None]:
        """What each live worker runs (None: every version)."""
        rows = self._read(
            "SELECT versions FROM workers WHERE kind = ? AND lease_until > ?", (WORKER, now)
        )
        return [loads_versions(text) for (text,) in rows]

    def claim(
        self,
        owner: str,
        *,
        now: float,
        limit: int,
        decide: ClaimDecision,
        nodes: Collection[str] | None = None,
        versions: VersionSet | None = None,
    ) -> list[Claim]:
        if (
            limit < 1
            or (nodes is not None and not nodes)
            or (versions is not None and not versions)
        ):
            return []
        bound, bound_params = version_filter(versions)
        now_utc = self._utc_now()
        claimed: list[Claim] = []
        with self._write() as conn:
            lapsed = [
                str(r[0])
                for r in self._execute(conn, _LAPSED_OWNERS, (now,)).fetchall()
                if r[0] != owner
            ]
            holders = "owner IS NULL" + (f" OR owner IN ({marks(len(lapsed))})" if lapsed else "")
            only = f" AND call_node_id IN ({marks(len(nodes))})" if nodes is not None else ""
            rows = self._execute(
                conn,
                f"SELECT record_json, owner FROM operations WHERE open = 1 AND ({holders}){only}"
                f"{bound} ORDER BY {self.creation_order} LIMIT ?{self.claim_lock}",
                (*lapsed, *(nodes or ()), *bound_params, limit),
            ).fetchall()
            for text, holder in rows:
                before = codec.loads_record(str(text))
                after = decide(before)
                check_update(before, after, before.version)
                if after.execution_epoch <= before.execution_epoch:
                    raise LocalProtocolError(
                        f"operation {before.call_node_id!r}: a claim must raise the epoch"
                    )
                claimed.append(Claim(record=after, taken_from=holder))
            self._executemany(
                conn,
                _CLAIMED_UPDATE,
                [
                    (
                        owner,
                        c.record.execution_epoch,
                        c.record.version,
                        c.record.state.value,
                        self._texts.dumps(c.record),
                        now_utc,
                        person_deadline(c.record),
                        c.record.call_node_id,
                        c.record.version - 1,
                    )
                    for c in claimed
                ],
            )
            self._executemany(
                conn,
                _HISTORY_INSERT,
                [_history_values(c.record, "ExecutionClaimed", now_utc, owner) for c in claimed],
            )
            if lapsed and len(claimed) < limit:
                # A lapsed worker that holds nothing any more is forgotten.
                self._execute(
                    conn,
                    f"DELETE FROM workers WHERE owner IN ({marks(len(lapsed))}) AND NOT EXISTS"
                    " (SELECT 1 FROM operations o WHERE o.owner = workers.owner AND o.open = 1)",
                    lapsed,
                )
        return claimed

    def release(self, owner: str, call_node_ids: Collection[str]) -> int:
        if not call_node_ids:
            return 0
        with self._write() as conn:
            released = 0
            for chunk in _chunks(list(call_node_ids)):
                released += self._execute(
                    conn,
                    "UPDATE operations SET owner = NULL WHERE owner = ? AND open = 1"
                    f" AND call_node_id IN ({marks(len(chunk))})",
                    (owner, *chunk),
                ).rowcount
            return released

    def held_versions(self, owner: str) -> dict[str, int]:
        rows = self._read(
            "SELECT call_node_id, version FROM operations WHERE open = 1 AND owner = ?",
            (owner,),
        )
        return {str(node): int(version) for node, version in rows}

    def take_poll_slots(self, server: str, *, now: float, count: int, qps_max: float) -> PollGrant:
        select = (
            "SELECT next_free_at, use_minute, used_this_minute, used_last_minute"
            f" FROM poll_budget WHERE server = ?{self.row_lock}"
        )
        with self._write() as conn:
            row = self._execute(conn, select, (server,)).fetchone()
            if row is None:  # the server's first grant (another worker may race to it)
                self._execute(
                    conn,
                    "INSERT INTO poll_budget (server, next_free_at) VALUES (?, ?)"
                    " ON CONFLICT (server) DO NOTHING",
                    (server, now),
                )
                row = self._execute(conn, select, (server,)).fetchone()
            grant, next_free_at = grant_slots(
                server, float(row[0]), now=now, count=count, qps_max=qps_max
            )
            used = BudgetUse(minute=int(row[1]), this_minute=int(row[2]), last_minute=int(row[3]))
            used = used.add(grant.count, now=now)
            self._execute(
                conn,
                "UPDATE poll_budget SET next_free_at = ?, qps_max = ?, use_minute = ?,"
                " used_this_minute = ?, used_last_minute = ?, granted_at_utc = ?"
                " WHERE server = ?",
                (next_free_at, qps_max, used.minute, used.this_minute, used.last_minute,
                 self._utc_now(), server),
            )  # fmt: skip
        return grant

    def poll_budgets(self) -> list[PollBudgetRow]:
        rows = self._read(
            "SELECT server, qps_max, use_minute, used_this_minute, used_last_minute,"
            " granted_at_utc FROM poll_budget ORDER BY server"
        )
        return [
            PollBudgetRow(
                server=str(r[0]),
                qps_max=None if r[1] is None else float(r[1]),
                use=BudgetUse(minute=int(r[2]), this_minute=int(r[3]), last_minute=int(r[4])),
                granted_at_utc=str(r[5]),
            )
            for r in rows
        ]

    # --- breakers (X9): each holder's, as it last changed ------------------------------

    def put_breaker(self, row: BreakerRow) -> None:
        with self._write() as conn:
            self._execute(
                conn,
                "INSERT INTO breakers (server, owner, state, open_until, failures, last_error,"
                " changed_at_utc) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (server, owner)"
                " DO UPDATE SET state = excluded.state, open_until = excluded.open_until,"
                " failures = excluded.failures, last_error = excluded.last_error,"
                " changed_at_utc = excluded.changed_at_utc",
                (row.server, row.owner, row.state.value, row.open_until, row.failures,
                 row.last_error, self._utc_now()),
            )  # fmt: skip
            # The breakers of holders forgotten since (a lapsed worker that held
            # nothing any more) go: nobody sends under them.
            self._execute(
                conn, "DELETE FROM breakers WHERE owner NOT IN (SELECT owner FROM workers)"
            )

    def breakers(self) -> list[BreakerRow]:
        rows = self._read(
            "SELECT server, owner, state, open_until, failures, last_error, changed_at_utc"
            " FROM breakers WHERE owner IN (SELECT owner FROM workers) ORDER BY server, owner"
        )
        return [
            BreakerRow(
                server=str(r[0]),
                owner=str(r[1]),
                state=BreakerState(r[2]),
                open_until=None if r[3] is None else float(r[3]),
                failures=int(r[4]),
                last_error=str(r[5]),
                changed_at_utc=str(r[6]),
            )
            for r in rows
        ]

    # --- rollout (R1-R3, P6) -----------------------------------------------------------

    def rollout_plan(self) -> list[AdapterPlan]:
        rows = self._read(
            "SELECT protocol, adapter_version, state, canary_percent, note, updated_at_utc"
            " FROM rollout ORDER BY protocol, adapter_version"
        )
        return [
            AdapterPlan(
                protocol=str(r[0]),
                adapter_version=str(r[1]),
                state=str(r[2]),
                canary_percent=float(r[3]),
                note=str(r[4]),
                updated_at_utc=str(r[5]),
            )
            for r in rows
        ]

    def set_rollout(self, plan: AdapterPlan) -> None:
        with self._write() as conn:
            self._execute(
                conn,
                "INSERT INTO rollout (protocol, adapter_version, state, canary_percent, note,"
                " updated_at_utc) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (protocol,"
                " adapter_version) DO UPDATE SET state = excluded.state, canary_percent ="
                " excluded.canary_percent, note = excluded.note,"
                " updated_at_utc = excluded.updated_at_utc",
                (
                    plan.protocol,
                    plan.adapter_version,
                    plan.state,
                    plan.canary_percent,
                    plan.note,
                    self._utc_now(),
                ),
            )

    def rebind_open(
        self, protocol: str, from_version: str, *, decide: ClaimDecision
    ) -> list[OperationRecord]:
        now_utc = self._utc_now()
        rebound: list[OperationRecord] = []
        with self._write() as conn:
            rows = self._execute(
                conn,
                "SELECT record_json FROM operations WHERE open = 1 AND protocol = ?"
                f" AND adapter_version = ? ORDER BY {self.creation_order}{self.row_lock}",
                (protocol, from_version),
            ).fetchall()
            for (text,) in rows:
                before = codec.loads_record(str(text))
                after = decide(before)
                check_update(before, after, before.version)
                if after.execution_epoch <= before.execution_epoch:
                    raise LocalProtocolError(
                        f"operation {before.call_node_id!r}: a rebind must raise the epoch"
                    )
                if after.protocol != before.protocol:
                    raise LocalProtocolError(
                        f"operation {before.call_node_id!r}: a rebind keeps the protocol"
                    )
                self._execute(conn, _REBOUND_UPDATE, (
                    after.adapter_version,
                    after.execution_epoch,
                    after.version,
                    after.state.value,
                    self._texts.dumps(after),
                    now_utc,
                    person_deadline(after),
                    after.call_node_id,
                    before.version,
                ))  # fmt: skip
                self._history(conn, after, "ExecutionClaimed", now_utc, None)
                rebound.append(after)
        return rebound

    # --- shadow operations (R1) ----------------------------------------------------------

    def shadow_pairs(self) -> list[tuple[str, str]]:
        rows = self._read(
            "SELECT call_node_id, shadow_of FROM operations WHERE shadow_of IS NOT NULL"
            f" ORDER BY {self.creation_order}"
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    def put_shadow_comparison(self, comparison: ShadowComparison) -> bool:
        with self._write() as conn:
            cursor = self._execute(
                conn,
                "INSERT INTO shadow_comparisons (shadow_node, primary_node, protocol,"
                " adapter_version, verdict, detail, compared_at_utc) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (shadow_node) DO NOTHING",
                (
                    comparison.shadow_node,
                    comparison.primary_node,
                    comparison.protocol,
                    comparison.adapter_version,
                    comparison.verdict,
                    comparison.detail,
                    self._utc_now(),
                ),
            )
            return int(cursor.rowcount) == 1

    def shadow_comparisons(self) -> list[ShadowComparison]:
        rows = self._read(
            "SELECT shadow_node, primary_node, protocol, adapter_version, verdict, detail,"
            " compared_at_utc FROM shadow_comparisons ORDER BY shadow_node"
        )
        return [
            ShadowComparison(
                shadow_node=str(r[0]),
                primary_node=str(r[1]),
                protocol=str(r[2]),
                adapter_version=str(r[3]),
                verdict=str(r[4]),
                detail=str(r[5]),
                compared_at_utc=str(r[6]),
            )
            for r in rows
        ]

    # --- the operator's view (the console) ------------------------------------------

    def _waiting_on(self) -> str:
        """The CASE naming what an operation waits on (``WAITING_REASONS``, first match
        wins); its one parameter is ``now`` (whose leases are live). A person is asked
        exactly when ``person_deadline`` is set (:func:`person_deadline`)."""
        return (
            "CASE WHEN open IS NULL THEN 'nothing'"
            " WHEN state = 'reconciliation_required' THEN 'operator'"
            " WHEN person_deadline IS NOT NULL THEN 'person'"
            " WHEN owner IS NULL OR owner NOT IN"
            " (SELECT owner FROM workers WHERE lease_until > ?) THEN 'worker'"
            f" WHEN {self.failing} THEN 'backoff'"
            " ELSE 'server' END"
        )

    _WAITING_EXACT: ClassVar[dict[str, str]] = {
        "nothing": "open IS NULL",
        "operator": "state = 'reconciliation_required'",
        "person": "person_deadline IS NOT NULL",
    }
    """An indexed condition that holds exactly when the CASE names the reason (each
    selects open or accepted rows of one kind the CASE's earlier branches never take),
    so the rows need not be read: the inbox's count reads only its index."""

    def _prefix(self, text: str) -> tuple[str, tuple[object, ...]]:
        """Call node ids beginning with ``text``: a range of the primary key (SQLite
        compares text by code point, so the range is exactly the prefix)."""
        return "(call_node_id >= ? AND call_node_id < ?)", (text, text + "\U0010ffff")

    def _query_where(self, query: OperationQuery) -> tuple[str, list[object]]:
        """The WHERE clause (without the page bounds) of ``query`` and its parameters."""
        clauses: list[str] = []
        params: list[object] = []
        if query.states:
            clauses.append(f"state IN ({marks(len(query.states))})")
            params.extend(s.value for s in query.states)
        if query.server is not None:
            clauses.append("server = ?")
            params.append(query.server)
        if query.tool is not None:
            clauses.append("tool_name = ?")
            params.append(query.tool)
        if query.server_status is not None:
            clauses.append(f"{self.json_text.format(name='server_status')} = ?")
            params.append(query.server_status.value)
        if query.created_after_utc is not None:
            clauses.append("created_at_utc >= ?")
            params.append(query.created_after_utc)
        if query.created_before_utc is not None:
            clauses.append("created_at_utc < ?")
            params.append(query.created_before_utc)
        if query.search:
            prefix, prefix_params = self._prefix(query.search)
            clauses.append(f"(call_node_id = ? OR operation_id = ? OR {prefix})")
            params.extend((query.search, query.search, *prefix_params))
        if query.min_epoch is not None:
            clauses.append("execution_epoch >= ?")
            params.append(query.min_epoch)
        if query.waiting in self._WAITING_EXACT:
            clauses.append(self._WAITING_EXACT[query.waiting])
        elif query.waiting is not None:
            clauses.append("open = 1")
            if query.waiting == "backoff":
                clauses.append(self.failing)  # the partial index's condition
            clauses.append(f"{self._waiting_on()} = ?")
            params.extend((query.now, query.waiting))
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def browse(self, query: OperationQuery) -> list[ListedOperation]:
        order = self.creation_order
        where, params = self._query_where(query)
        if query.after_seq is not None:
            bound = f"{order} > ?" if query.oldest_first else f"{order} < ?"
            where = f"{where} AND {bound}" if where else f" WHERE {bound}"
            params.append(query.after_seq)
        direction = "ASC" if query.oldest_first else "DESC"
        ordering = f"{order} {direction}"
        if query.nearest_input_deadline_first:
            ordering = f"person_deadline, {ordering}"  # the partial index's order
        rows = self._read(
            f"SELECT {order}, record_json, owner, created_at_utc FROM operations{where}"
            f" ORDER BY {ordering} LIMIT ?",
            (*params, query.limit),
        )
        return [
            ListedOperation(
                seq=int(row[0]),
                record=codec.loads_record(str(row[1])),
                owner=None if row[2] is None else str(row[2]),
                created_at_utc=str(row[3]),
            )
            for row in rows
        ]

    def outbox_of(self, call_node_id: str) -> OutboxRow | None:
        rows = self._read(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE call_node_id = ?", (call_node_id,)
        )
        return outbox_row(rows[0]) if rows else None

    def count(self, query: OperationQuery) -> int:
        where, params = self._query_where(query)
        rows = self._read(f"SELECT count(*) FROM operations{where}", params)
        return int(rows[0][0])

    def count_by_state(self) -> dict[State, int]:
        rows = self._read("SELECT state, count(*) FROM operations GROUP BY state")
        return {State(state): int(n) for state, n in rows}

    def server_use(self) -> list[ServerUse]:
        # Two index-only reads: every operation by server and version, and the few
        # open ones whose last request failed (the partial index).
        rows = self._read(
            "SELECT server, protocol, adapter_version, count(*), count(open) FROM operations"
            " GROUP BY server, protocol, adapter_version ORDER BY server, protocol, adapter_version"
        )
        failed = self.failing_by_server()
        return [
            ServerUse(
                server=str(row[0]),
                protocol=str(row[1]),
                adapter_version=str(row[2]),
                operations=int(row[3]),
                open=int(row[4]),
                failing=failed.get((str(row[0]), str(row[1]), str(row[2])), 0),
            )
            for row in rows
        ]

    def failing_by_server(self) -> dict[tuple[str, str, str], int]:
        rows = self._read(
            "SELECT server, protocol, adapter_version, count(*) FROM operations"
            f" WHERE {self.failing} GROUP BY server, protocol, adapter_version"
        )
        return {(str(r[0]), str(r[1]), str(r[2])): int(r[3]) for r in rows}

    def recent_accepted(self, *, limit: int) -> list[AcceptedFigures]:
        names = ", ".join(self.json_field_key.format(name=n) for n in _FIGURE_FIELDS)
        rows = self._read(
            f"SELECT call_node_id, {self.json_fields.format(names=names)} FROM operations"
            f" WHERE state IN ({marks(len(TERMINAL_VALUES))})"
            f" ORDER BY {self.creation_order} DESC LIMIT ?",
            (*TERMINAL_VALUES, limit),
        )
        return [_figures(str(node), str(text)) for node, text in rows]

    def holdings(self) -> list[Holding]:
        held = self._read(
            "SELECT owner, count(*) FROM operations WHERE open = 1 AND owner IS NOT NULL"
            " GROUP BY owner ORDER BY owner"
        )
        # Only the few rows claimed again (the partial index operations_claimed_again);
        # "open IS NOT NULL" rather than "open = 1", or the holders' partial index is
        # chosen and every held row is read for its epoch.
        again = self._read(
            "SELECT owner, count(*), max(execution_epoch) FROM operations"
            " WHERE execution_epoch >= 2 AND open IS NOT NULL AND owner IS NOT NULL"
            " GROUP BY owner"
        )
        taken = {str(r[0]): (int(r[1]), int(r[2])) for r in again}
        return [
            Holding(
                owner=str(owner),
                operations=int(count),
                taken_over=taken.get(str(owner), (0, 0))[0],
                epoch_max=taken[str(owner)][1] if str(owner) in taken else None,
            )
            for owner, count in held
        ]

    def retries_by_server(self, *, since_utc: str) -> list[ServerRetries]:
        # The literal event name lets the partial index history_request_failed serve
        # the read: only failed requests are in it.
        given_up = marks(len(_GIVEN_UP_VALUES))
        rows = self._read(
            f"SELECT o.server, sum(CASE WHEN h.state IN ({given_up}) THEN 0 ELSE 1 END),"
            f" sum(CASE WHEN h.state IN ({given_up}) THEN 1 ELSE 0 END)"
            " FROM history h JOIN operations o ON o.call_node_id = h.call_node_id"
            " WHERE h.event = 'RequestFailed' AND h.at_utc >= ?"
            " GROUP BY o.server ORDER BY o.server",
            (*_GIVEN_UP_VALUES, *_GIVEN_UP_VALUES, since_utc),
        )
        return [
            ServerRetries(server=str(r[0]), retried=int(r[1]), given_up=int(r[2])) for r in rows
        ]

    def refused_writes(self, call_node_id: str) -> list[RefusedWrite]:
        rows = self._read(
            "SELECT call_node_id, event, owner, execution_epoch, expected_version, reason,"
            " detail, at_utc FROM refused_writes WHERE call_node_id = ? ORDER BY refusal_id",
            (call_node_id,),
        )
        return [
            RefusedWrite(
                call_node_id=str(r[0]),
                event=str(r[1]),
                owner=None if r[2] is None else str(r[2]),
                execution_epoch=int(r[3]),
                expected_version=None if r[4] is None else int(r[4]),
                reason=str(r[5]),
                detail=str(r[6]),
                at_utc=str(r[7]),
            )
            for r in rows
        ]

    def _executemany(self, conn: Any, query: str, rows: Sequence[Params]) -> None:
        """Run one ``?``-style statement for each parameter row (a backend may send them
        all in one round trip)."""
        for params in rows:
            self._execute(conn, query, params)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


_HISTORY_INSERT = (
    "INSERT INTO history (call_node_id, version, state, event, at, at_utc, owner,"
    " execution_epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def _history_values(
    record: OperationRecord, event: str, now_utc: str, owner: str | None
) -> tuple[object, ...]:
    return (
        record.call_node_id,
        record.version,
        record.state._value_,  # as .value, without the enum property's call (every write)
        event,
        record.updated_at,
        now_utc,
        owner,
        record.execution_epoch,
    )


_REFUSAL_INSERT = (
    "INSERT INTO refused_writes (call_node_id, event, owner, execution_epoch,"
    " expected_version, reason, detail, at_utc) SELECT ?, ?, ?, ?, ?, ?, ?, ?"
    " WHERE (SELECT count(*) FROM refused_writes WHERE call_node_id = ?) < ?"
)
_REFUSAL_DETAIL_MAX = 500
"""Characters of a refusal's message kept (it names the node, holders and epochs)."""
_GIVEN_UP_VALUES = tuple(sorted({State.RECONCILIATION_REQUIRED.value, *TERMINAL_VALUES}))
"""States a failed request leaves an operation in when it is not retried."""

_FIGURE_FIELDS = ("state", "result_kind", "server_status", "created_at", "updated_at",
                  "cancel_requested_at", "cancel_acknowledged_at")  # fmt: skip
"""The record fields :meth:`SqlLedger.recent_accepted` reads, in this order."""


def _figures(call_node_id: str, text: str) -> AcceptedFigures:
    """One row of :meth:`SqlLedger.recent_accepted`; a damaged one is CorruptRow."""
    try:
        state, kind, status, created, updated, asked, acked = json.loads(text)
        return AcceptedFigures(
            state=State(state),
            result_kind=None if kind is None else ResultKind(kind),
            server_status=None if status is None else ServerStatus(status),
            created_at=float(created),
            updated_at=float(updated),
            cancel_requested_at=None if asked is None else float(asked),
            cancel_acknowledged_at=None if acked is None else float(acked),
        )
    except (TypeError, ValueError) as exc:
        raise CorruptRow(f"operation {call_node_id!r}: its record cannot be read: {exc}") from exc


_CHUNK = 500
"""Parameters per ``IN (...)`` list (SQLite's default limit is far above; PostgreSQL's too)."""


def _chunks(items: list[str]) -> list[list[str]]:
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]
