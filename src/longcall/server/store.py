"""The durable tool-side task store: the interface and its SQLite implementation (S2, S4).

Owns: task rows, the append-only status history, input requests and the
submission-key index, with compare-and-set on every status transition. Must not:
run tools, speak any wire protocol, or read a clock (callers pass ``now``).

Why synchronous sqlite3 calls inside ``async`` methods: each call is one short
transaction on a local WAL file (tens of microseconds), far cheaper than a thread
hop; the interface is ``async`` so a PostgreSQL store can await its driver.
WAL with ``synchronous=FULL`` (the default) fsyncs each commit, so a task whose id was
returned survives even power loss; ``NORMAL`` survives a process kill (SIGKILL) but an
OS crash may lose the last commits.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

from longcall.server.errors import StoreError, SubmissionKeyConflict
from longcall.server.model import (
    ACTIVE_STATUSES,
    InputRequest,
    NewTask,
    ProtocolVersion,
    StatusChange,
    TaskRecord,
    TaskStatus,
)

SYNCHRONOUS_MODES = frozenset({"FULL", "NORMAL"})
"""FULL (default) fsyncs every commit: a created task survives power loss, not only a kill."""

RERUN_MESSAGE = "The server restarted; the operation is running again from the start."

EXPIRED_ROW_RETENTION_S = 7 * 24 * 3600.0
"""Expired rows are kept (answering "not found") this long so lookups by key stay proofs (S3)."""


class TaskStore(Protocol):
    """What the task manager needs from a durable store; SQLite now, PostgreSQL later."""

    async def create(self, new: NewTask) -> tuple[TaskRecord, bool]:
        """Insert a task, or return the one holding the same submission key (S3)."""
        ...

    async def get(self, task_id: str) -> TaskRecord | None:
        """One task by id, expired or not (the caller decides visibility)."""
        ...

    async def list_for_principal(
        self, principal: str, protocol: ProtocolVersion, *, after: str | None, limit: int
    ) -> list[TaskRecord]:
        """A principal's tasks of one protocol version, ordered by creation (S5)."""
        ...

    async def lookup_submission(self, principal: str, key: str) -> str | None:
        """The id of the task created under a submission key, if any (S3)."""
        ...

    async def transition(
        self,
        task_id: str,
        *,
        allowed_from: Iterable[TaskStatus],
        to: TaskStatus,
        now: float,
        reason: str | None = None,
        status_message: str | None = None,
        result: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
        epoch: int | None = None,
    ) -> TaskRecord | None:
        """Compare-and-set a status; ``None`` when the row was not in ``allowed_from`` (S4)."""
        ...

    async def set_status_message(
        self, task_id: str, message: str, *, now: float, epoch: int
    ) -> bool:
        """Update the message of an active task of the given execution epoch."""
        ...

    async def begin_execution(self, task_id: str, *, now: float) -> TaskRecord | None:
        """Raise the execution epoch of an active task (a re-run after restart)."""
        ...

    async def open_input_request(
        self,
        task_id: str,
        *,
        sequence: int,
        key: str,
        method: str,
        params: Mapping[str, Any],
        now: float,
    ) -> InputRequest:
        """The input request at ``sequence``: the stored one if present, else a new one (S6)."""
        ...

    async def answer_inputs(
        self, task_id: str, answers: Mapping[str, Mapping[str, Any]], *, now: float
    ) -> list[str]:
        """Store answers for outstanding keys only; return the keys answered now (S6)."""
        ...

    async def input_requests(self, task_id: str) -> list[InputRequest]:
        """All input requests of a task, in issue order."""
        ...

    async def active_tasks(self) -> list[TaskRecord]:
        """Tasks still ``working`` / ``input_required`` (restart recovery, S2)."""
        ...

    async def history(self, task_id: str) -> list[StatusChange]:
        """The append-only status history of a task (S4)."""
        ...

    async def purge(self, now: float) -> int:
        """Delete rows expired for longer than the retention window."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


_SCHEMA = """
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
);
"""

_TASK_COLUMNS = (
    "task_id, principal, tool_name, arguments, arguments_digest, protocol, submission_key,"
    " status, status_message, created_at, last_updated_at, ttl_ms, poll_interval_ms,"
    " execution_epoch, result, error, version, client_can_elicit"
)


def _dumps(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _task_from_row(row: Sequence[Any]) -> TaskRecord:
    return TaskRecord(
        task_id=row[0],
        principal=row[1],
        tool_name=row[2],
        arguments=json.loads(row[3]),
        arguments_digest=row[4],
        protocol=ProtocolVersion(row[5]),
        submission_key=row[6],
        status=TaskStatus(row[7]),
        status_message=row[8],
        created_at=row[9],
        last_updated_at=row[10],
        ttl_ms=row[11],
        poll_interval_ms=row[12],
        execution_epoch=row[13],
        result=_loads(row[14]),
        error=_loads(row[15]),
        version=row[16],
        client_can_elicit=bool(row[17]),
    )


def _input_from_row(row: Sequence[Any]) -> InputRequest:
    return InputRequest(
        task_id=row[0],
        key=row[1],
        sequence=row[2],
        method=row[3],
        params=json.loads(row[4]),
        response=_loads(row[5]),
        created_at=row[6],
    )


class SqliteTaskStore:
    """The default store: one SQLite file in WAL mode (S2)."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        if synchronous.upper() not in SYNCHRONOUS_MODES:
            raise StoreError(f"synchronous must be one of {sorted(SYNCHRONOUS_MODES)}")
        self._path = str(path)
        try:
            self._db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open task store {self._path!r}: {exc}") from exc

    def close(self) -> None:
        """Release the connection."""
        self._db.close()

    def _select_task(self, task_id: str) -> TaskRecord | None:
        row = self._db.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE task_id = ?", (task_id,)
        ).fetchone()
        return None if row is None else _task_from_row(row)

    def _append_history(
        self, task_id: str, status: TaskStatus, now: float, reason: str | None
    ) -> None:
        self._db.execute(
            "INSERT INTO task_status_history (task_id, sequence, status, at, reason)"
            " SELECT ?, COALESCE(MAX(sequence), 0) + 1, ?, ?, ? FROM task_status_history"
            " WHERE task_id = ?",
            (task_id, status.value, now, reason, task_id),
        )

    async def create(self, new: NewTask) -> tuple[TaskRecord, bool]:
        """Insert a task, or return the one holding the same submission key (S3)."""
        expires_at = None if new.ttl_ms is None else new.created_at + new.ttl_ms / 1000.0
        self._db.execute("BEGIN IMMEDIATE")
        try:
            existing = self._existing_submission(new)
            if existing is not None:
                self._db.execute("COMMIT")
                return existing, False
            self._db.execute(
                "INSERT INTO tasks (task_id, principal, tool_name, arguments, arguments_digest,"
                " protocol, submission_key, status, status_message, created_at, last_updated_at,"
                " ttl_ms, expires_at, poll_interval_ms, client_can_elicit)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    new.task_id,
                    new.principal,
                    new.tool_name,
                    json.dumps(new.arguments, separators=(",", ":")),
                    new.arguments_digest,
                    new.protocol.value,
                    new.submission_key,
                    TaskStatus.WORKING.value,
                    new.status_message,
                    new.created_at,
                    new.created_at,
                    new.ttl_ms,
                    expires_at,
                    new.poll_interval_ms,
                    int(new.client_can_elicit),
                ),
            )
            self._append_history(new.task_id, TaskStatus.WORKING, new.created_at, "created")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        record = self._select_task(new.task_id)
        if record is None:  # pragma: no cover - the insert above committed
            raise StoreError(f"task {new.task_id!r} vanished after its creation")
        return record, True

    def _existing_submission(self, new: NewTask) -> TaskRecord | None:
        if new.submission_key is None:
            return None
        row = self._db.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE principal = ? AND submission_key = ?",
            (new.principal, new.submission_key),
        ).fetchone()
        if row is None:
            return None
        existing = _task_from_row(row)
        if existing.tool_name != new.tool_name or existing.arguments_digest != new.arguments_digest:
            raise SubmissionKeyConflict(
                f"submission key {new.submission_key!r} was already used for another call"
                f" (tool {existing.tool_name!r}, different arguments)"
            )
        return existing

    async def get(self, task_id: str) -> TaskRecord | None:
        """One task by id, expired or not (the caller decides visibility)."""
        return self._select_task(task_id)

    async def list_for_principal(
        self, principal: str, protocol: ProtocolVersion, *, after: str | None, limit: int
    ) -> list[TaskRecord]:
        """A principal's tasks of one protocol version, ordered by creation (S5)."""
        if after is None:
            rows = self._db.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE principal = ? AND protocol = ?"
                " ORDER BY created_at, task_id LIMIT ?",
                (principal, protocol.value, limit),
            ).fetchall()
        else:
            rows = self._db.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE principal = ? AND protocol = ?"
                " AND (created_at, task_id) > (SELECT created_at, task_id FROM tasks"
                " WHERE task_id = ?) ORDER BY created_at, task_id LIMIT ?",
                (principal, protocol.value, after, limit),
            ).fetchall()
        return [_task_from_row(row) for row in rows]

    async def lookup_submission(self, principal: str, key: str) -> str | None:
        """The id of the task created under a submission key, if any (S3)."""
        row = self._db.execute(
            "SELECT task_id FROM tasks WHERE principal = ? AND submission_key = ?", (principal, key)
        ).fetchone()
        return None if row is None else str(row[0])

    async def transition(
        self,
        task_id: str,
        *,
        allowed_from: Iterable[TaskStatus],
        to: TaskStatus,
        now: float,
        reason: str | None = None,
        status_message: str | None = None,
        result: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
        epoch: int | None = None,
    ) -> TaskRecord | None:
        """Compare-and-set a status; ``None`` when the row was not in ``allowed_from`` (S4)."""
        sources = sorted(status.value for status in allowed_from)
        placeholders = ",".join("?" for _ in sources)
        epoch_clause = "" if epoch is None else " AND execution_epoch = ?"
        epoch_args: tuple[Any, ...] = () if epoch is None else (epoch,)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            cursor = self._db.execute(
                "UPDATE tasks SET status = ?, status_message = COALESCE(?, status_message),"
                " result = COALESCE(?, result), error = COALESCE(?, error),"
                " last_updated_at = ?, version = version + 1"
                f" WHERE task_id = ? AND status IN ({placeholders}){epoch_clause}",
                (
                    to.value,
                    status_message,
                    _dumps(result),
                    _dumps(error),
                    now,
                    task_id,
                    *sources,
                    *epoch_args,
                ),
            )
            if cursor.rowcount != 1:
                self._db.execute("ROLLBACK")
                return None
            self._append_history(task_id, to, now, reason)
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return self._select_task(task_id)

    async def set_status_message(
        self, task_id: str, message: str, *, now: float, epoch: int
    ) -> bool:
        """Update the message of an active task of the given execution epoch."""
        cursor = self._db.execute(
            "UPDATE tasks SET status_message = ?, last_updated_at = ?, version = version + 1"
            " WHERE task_id = ? AND execution_epoch = ?"
            " AND status IN ('working', 'input_required')",
            (message, now, task_id, epoch),
        )
        return cursor.rowcount == 1

    async def begin_execution(self, task_id: str, *, now: float) -> TaskRecord | None:
        """Raise the execution epoch of an active task (a re-run after restart)."""
        # A new run starts with a message of its own: the last run's progress is stale (S4).
        cursor = self._db.execute(
            "UPDATE tasks SET execution_epoch = execution_epoch + 1, last_updated_at = ?,"
            " status_message = ?, version = version + 1"
            " WHERE task_id = ? AND status IN ('working', 'input_required')",
            (now, RERUN_MESSAGE, task_id),
        )
        return self._select_task(task_id) if cursor.rowcount == 1 else None

    async def open_input_request(
        self,
        task_id: str,
        *,
        sequence: int,
        key: str,
        method: str,
        params: Mapping[str, Any],
        now: float,
    ) -> InputRequest:
        """The input request at ``sequence``: the stored one if present, else a new one (S6)."""
        self._db.execute(
            "INSERT OR IGNORE INTO task_input_requests (task_id, key, sequence, method, params,"
            " created_at) VALUES (?,?,?,?,?,?)",
            (task_id, key, sequence, method, json.dumps(params, separators=(",", ":")), now),
        )
        row = self._db.execute(
            "SELECT task_id, key, sequence, method, params, response, created_at"
            " FROM task_input_requests WHERE task_id = ? AND sequence = ?",
            (task_id, sequence),
        ).fetchone()
        if row is None:  # pragma: no cover - inserted or present above
            raise StoreError(f"input request {sequence} of task {task_id!r} vanished")
        return _input_from_row(row)

    async def answer_inputs(
        self, task_id: str, answers: Mapping[str, Mapping[str, Any]], *, now: float
    ) -> list[str]:
        """Store answers for outstanding keys only; return the keys answered now (S6)."""
        answered: list[str] = []
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for key, response in answers.items():
                cursor = self._db.execute(
                    "UPDATE task_input_requests SET response = ?, answered_at = ?"
                    " WHERE task_id = ? AND key = ? AND response IS NULL",
                    (json.dumps(response, separators=(",", ":")), now, task_id, key),
                )
                if cursor.rowcount == 1:
                    answered.append(key)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return answered

    async def input_requests(self, task_id: str) -> list[InputRequest]:
        """All input requests of a task, in issue order."""
        rows = self._db.execute(
            "SELECT task_id, key, sequence, method, params, response, created_at"
            " FROM task_input_requests WHERE task_id = ? ORDER BY sequence",
            (task_id,),
        ).fetchall()
        return [_input_from_row(row) for row in rows]

    async def active_tasks(self) -> list[TaskRecord]:
        """Tasks still ``working`` / ``input_required`` (restart recovery, S2)."""
        statuses = tuple(status.value for status in ACTIVE_STATUSES)
        rows = self._db.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE status IN (?, ?) ORDER BY created_at",
            statuses,
        ).fetchall()
        return [_task_from_row(row) for row in rows]

    async def history(self, task_id: str) -> list[StatusChange]:
        """The append-only status history of a task (S4)."""
        rows = self._db.execute(
            "SELECT task_id, sequence, status, at, reason FROM task_status_history"
            " WHERE task_id = ? ORDER BY sequence",
            (task_id,),
        ).fetchall()
        return [
            StatusChange(task_id=r[0], sequence=r[1], status=TaskStatus(r[2]), at=r[3], reason=r[4])
            for r in rows
        ]

    async def purge(self, now: float) -> int:
        """Delete rows expired for longer than the retention window."""
        cutoff = now - EXPIRED_ROW_RETENTION_S
        self._db.execute("BEGIN IMMEDIATE")
        try:
            doomed = "SELECT task_id FROM tasks WHERE expires_at IS NOT NULL AND expires_at < ?"
            self._db.execute(
                f"DELETE FROM task_input_requests WHERE task_id IN ({doomed})", (cutoff,)
            )
            self._db.execute(
                f"DELETE FROM task_status_history WHERE task_id IN ({doomed})", (cutoff,)
            )
            cursor = self._db.execute(
                "DELETE FROM tasks WHERE expires_at IS NOT NULL AND expires_at < ?", (cutoff,)
            )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return cursor.rowcount


def open_store(url: str | None) -> TaskStore:
    """A store from ``sqlite:///PATH[?synchronous=normal]`` or a bare path (default file)."""
    if url is None:
        return SqliteTaskStore("longcall-tasks.db")
    parsed = urlparse(url)
    synchronous = parse_qs(parsed.query).get("synchronous", ["FULL"])[-1]
    if parsed.scheme in ("", "file"):
        return SqliteTaskStore(parsed.path or url, synchronous=synchronous)
    if parsed.scheme == "sqlite":
        # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute/path.db
        path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        return SqliteTaskStore(path, synchronous=synchronous)
    raise StoreError(f"unsupported task store URL {url!r} (expected sqlite:///PATH)")
