"""The task store's contract and the SQL both backends share (SPEC S2, S3, S4, S5, C5, D1).

Owns: the async :class:`TaskStore` interface the task manager uses; the schema rules
common to SQLite and PostgreSQL (task rows, the append-only status history, input
requests, the submission-key index, store identity, schema versions); every query,
written once with ``?`` placeholders; and the thread pool that keeps store I/O off the
event loop. Must not: run tools, speak a wire protocol, or read a clock (callers pass
``now``); a backend owns only its connection, its transactions and its error types.

Why a thread pool: a store call can wait (another process holds the SQLite write lock,
a PostgreSQL round trip, an fsync); on the event loop that wait would stall every
request of the process (a ``ping`` took 10–15 s behind a held lock). Each worker thread
has its own connection, so a call never shares one with another thread. A backend may
add reader threads (reads then never queue behind a commit) and group commit (the task
writes that arrive together share one commit: ``group_commit.py``); either way a call's
result is handed back only after its transaction committed.

Fencing (D1): every write made on behalf of a running execution names the execution
epoch it belongs to; a claim by another process raises the epoch first, so a stale
owner's writes match no row and change nothing — the database refuses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from longcall.server.errors import (
    QuotaExceeded,
    StoreError,
    StoreUnavailable,
    SubmissionKeyConflict,
)
from longcall.server.model import (
    InputRequest,
    NewTask,
    ProtocolVersion,
    StatusChange,
    TaskRecord,
    TaskStatus,
)
from longcall.server.states import Cause, sources, target
from longcall.server.store.group_commit import Failed, GroupCommit, Work
from longcall.server.store.outbox import OutboxQueries
from longcall.server.store.owners import OwnerLocks

logger = logging.getLogger(__name__)

T = TypeVar("T")

RERUN_MESSAGE = "The previous run stopped; the operation is running again from the start."
EXPIRED_ROW_RETENTION_S = 7 * 24 * 3600.0
"""Expired rows are kept (answering "not found") this long so lookups by key stay proofs (S3)."""
CLAIM_BATCH = 100
DEAD_OWNER_NOTE = " (its process is gone: its lock was free)"
"""The end of a takeover's history reason when the owner was proven dead, not timed out."""

TASK_COLUMNS = (
    "task_id, principal, tool_name, arguments, arguments_digest, protocol, submission_key,"
    " status, status_message, created_at, last_updated_at, ttl_ms, poll_interval_ms,"
    " execution_epoch, result, error, version, client_can_elicit, owner, lease_until,"
    " deleted, run_timeout_s, abort_at, progress_token"
)
INPUT_COLUMNS = "task_id, key, sequence, method, params, response, created_at"
ACTIVE_IN = "status IN ('input_required', 'working')"


class TaskStore(Protocol):
    """What the task manager needs from a durable store (SQLite or PostgreSQL)."""

    store_id: str
    """This store's identity, created with it and never changed (C5, the lookup's proof)."""
    secret: bytes
    """A key made with the store and shared by every process on it (signs ``requestState``)."""

    async def create(
        self,
        new: NewTask,
        *,
        owner: str,
        lease_until: float,
        max_open: int | None = None,
        answered: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = (),
    ) -> tuple[TaskRecord, bool]:
        """Insert a task owned by ``owner``, or return the one holding the same key (S3).

        ``answered`` are (key, request, answer) settled before the task existed (SEP-2322
        rounds): they are stored as its first input requests, already answered."""
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
        cause: Cause,
        *,
        now: float,
        status_message: str | None = None,
        result: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
        epoch: int | None = None,
    ) -> TaskRecord | None:
        """Compare-and-set by the status table; ``None`` when the cause does not apply (S4)."""
        ...

    async def set_status_message(
        self, task_id: str, message: str, *, now: float, epoch: int
    ) -> bool:
        """Update the message of an active task of the given execution epoch."""
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
        epoch: int,
    ) -> InputRequest | None:
        """Input request ``sequence`` (stored, or new); ``None`` if the epoch was fenced off."""
        ...

    async def answer_inputs(
        self, task_id: str, answers: Mapping[str, Mapping[str, Any]], *, now: float
    ) -> list[str]:
        """Store answers for outstanding keys only; return the keys answered now (S6)."""
        ...

    async def input_requests(self, task_id: str) -> list[InputRequest]:
        """All input requests of a task, in issue order."""
        ...

    async def renew_leases(self, owner: str, *, until: float) -> dict[str, int]:
        """Extend ``owner``'s leases; the tasks it still holds (id → epoch) (D1)."""
        ...

    async def claim_expired(
        self, owner: str, *, clock: Callable[[], float], lease_s: float, limit: int = CLAIM_BATCH
    ) -> list[TaskRecord]:
        """Take over active tasks whose lease expired (another owner's): epoch + 1 (D1).
        ``clock`` is the caller's, read when the claim is made (after the write waited
        its turn, and after an owner is proven dead)."""
        ...

    async def release(self, owner: str) -> int:
        """Give up ``owner``'s leases at once (a graceful stop), so others need not wait."""
        ...

    async def hold_owner(self, owner: str) -> None:
        """Take ``owner``'s proof of life, held until :meth:`close` (or the process dies):
        while it is held no other process can prove ``owner`` dead (D1)."""
        ...

    async def set_abort_at(self, task_id: str, at: float) -> None:
        """Persist an Apify-style graceful abort's deadline (the first one asked for holds)."""
        ...

    async def mark_deleted(self, task_id: str) -> bool:
        """AIP-151 ``DeleteOperation``: hide the task for good (the row stays for key proofs)."""
        ...

    async def history(self, task_id: str) -> list[StatusChange]:
        """The append-only status history of a task (S4)."""
        ...

    async def purge(self, now: float) -> int:
        """Delete rows expired for longer than the retention window."""
        ...

    def close(self) -> None:
        """Release the connections and the worker threads."""
        ...


def dumps(value: Any) -> str | None:
    """Compact JSON text of a stored document (``None`` stays ``NULL``)."""
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def task_from_row(row: Sequence[Any]) -> TaskRecord:
    """A ``tasks`` row (``TASK_COLUMNS`` order) as a record."""
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
        owner=row[18],
        lease_until=row[19],
        deleted=bool(row[20]),
        run_timeout_s=row[21],
        abort_at=row[22],
        progress_token=_loads(row[23]),
    )


def input_from_row(row: Sequence[Any]) -> InputRequest:
    """A ``task_input_requests`` row (``INPUT_COLUMNS`` order) as a record."""
    return InputRequest(
        task_id=row[0],
        key=row[1],
        sequence=row[2],
        method=row[3],
        params=json.loads(row[4]),
        response=_loads(row[5]),
        created_at=row[6],
    )


def _in(values: Sequence[str]) -> str:
    return "(" + ",".join("?" for _ in values) + ")"


class SqlTaskStore(OutboxQueries):
    """The queries of both backends over per-thread connections; subclasses add the driver.

    The webhook outbox's queries are :class:`OutboxQueries`' (``outbox.py``); a status
    change enqueues its deliveries in its own transaction."""

    migrations: tuple[str, ...] = ()
    workers = 1
    """Threads (each with its own connection) serving this store's calls."""
    group_commit = False
    """Whether task writes that arrive together share one transaction (needs one worker:
    the batches are that thread's, and nested ``_transaction`` calls become savepoints)."""

    def __init__(self, *, readers: int = 0) -> None:
        """``readers``: threads with connections of their own for the reads (0: reads
        share the workers' threads and wait in their queue)."""
        self._local = threading.local()
        self._connections: list[Any] = []
        self._connections_lock = threading.Lock()
        name = f"longcall-{type(self).__name__}"
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=name)
        self._readers = (
            ThreadPoolExecutor(max_workers=readers, thread_name_prefix=f"{name}-read")
            if readers
            else None
        )
        self._group = (
            GroupCommit(self._executor.submit, self._commit_group) if self.group_commit else None
        )
        self._closed = False
        self._owner_locks: OwnerLocks | None = None
        self.store_id = ""
        self.secret = b""

    # ---- driver hooks --------------------------------------------------------------------

    def _connect(self) -> Any:
        raise NotImplementedError

    def _transaction(self, conn: Any) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _execute(self, conn: Any, query: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def _translate(self, exc: Exception) -> StoreError | None:
        """The store error for a driver exception (``None``: not the driver's)."""
        raise NotImplementedError

    def _check_alive(self, conn: Any) -> None:
        """Refuse to work on a store that vanished under us (fail closed, C5)."""

    def _transaction_open(self, conn: Any) -> bool:
        """Whether ``conn`` is inside a transaction (group commit asks after a failed write:
        some driver errors end the whole transaction, not only the write's savepoint)."""
        raise NotImplementedError

    # ---- proof of an owner's death (D1; docs/design/server-task-store.md) --------------------

    _skip_locked = ""
    """Appended to a claim's read of rows (PostgreSQL: claimers split the rows)."""

    def _owner_locks_dir(self) -> Path | None:
        """Where this store's server processes of this host keep their lock files
        (None: this store proves no death, and leases decide alone)."""
        return None

    @property
    def owner_locks(self) -> OwnerLocks | None:
        """This store's proofs of life and death on this host (made on first use: a
        shared store's directory is named by its id, read when it opened)."""
        if self._owner_locks is None:
            directory = self._owner_locks_dir()
            if directory is not None:
                self._owner_locks = OwnerLocks(directory)
        return self._owner_locks

    def _hold_owner(self, conn: Any, owner: str) -> None:
        """Take the lock whose being free proves ``owner``'s process is gone."""
        locks = self.owner_locks
        if locks is not None:
            locks.hold(owner, lambda other: self._holds_tasks(conn, other))

    def _prove_dead(self, conn: Any, owner: str) -> bool:
        """True only when ``owner``'s process is provably gone; its lock is then held by
        us until :meth:`_proofs_done`, so it cannot come back meanwhile. False when the
        lock is held or cannot be checked: the owner's lease decides."""
        locks = self.owner_locks
        return locks is not None and locks.prove_dead(owner)

    def _proofs_done(self, conn: Any, owners: Sequence[str], *, committed: bool) -> None:
        """After the claim's transaction: drop what proving these owners dead held.
        A proof is spent (``committed``) only for an owner that holds no active task
        any more; one claim takes at most its batch, so an owner with more keeps its
        proof for the next round instead of leaving the rest to their leases."""
        locks = self.owner_locks
        if locks is not None:
            locks.done(owners, lambda other: self._holds_tasks(conn, other), committed=committed)

    def _holds_tasks(self, conn: Any, owner: str) -> bool:
        row = self._execute(
            conn, f"SELECT 1 FROM tasks WHERE owner = ? AND {ACTIVE_IN} LIMIT 1", (owner,)
        ).fetchone()
        return row is not None

    def _keep_owner(self) -> None:
        """Before a renewal: make sure this process still holds its proof of life."""

    def _forget_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    # ---- the thread pool -----------------------------------------------------------------

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    def _in_thread(self, work: Callable[[Any], T]) -> T:
        try:
            conn = self._connection()
            self._check_alive(conn)
            return work(conn)
        except StoreError:
            raise
        except Exception as exc:
            translated = self._translate(exc)
            if translated is None:
                raise
            if isinstance(translated, StoreUnavailable):
                self._forget_connection()  # a broken connection is reopened next time
            raise translated from exc

    async def _run(self, work: Callable[[Any], T]) -> T:
        """``work(conn)`` on a worker thread, alone in the worker's queue."""
        if self._closed:
            raise StoreUnavailable("the task store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._in_thread, work)

    async def _read(self, work: Callable[[Any], T]) -> T:
        """A read: on a reader thread when the store has them (it sees every commit that
        returned before it started), else as :meth:`_run`."""
        if self._readers is None:
            return await self._run(work)
        if self._closed:
            raise StoreUnavailable("the task store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._in_thread, work)

    async def _write(self, work: Callable[[Any], T]) -> T:
        """A task write: committed with the writes queued beside it when the store
        groups commits, else as :meth:`_run`. Either way ``work`` is atomic on its own
        (a savepoint in the group) and its result returns only after the commit."""
        if self._group is None:
            return await self._run(work)
        if self._closed:
            raise StoreUnavailable("the task store is closed")
        return await self._group.write(work)

    def _commit_group(self, works: Sequence[Work]) -> list[Any]:
        """On the writer thread: one transaction, each write in a savepoint of its own."""
        return self._in_thread(lambda conn: self._commit_batch(conn, works))

    def _commit_batch(self, conn: Any, works: Sequence[Work]) -> list[Any]:
        if self._transaction_open(conn):
            # The batch's own transaction must be the top one, or its commit would not be:
            # a connection left inside one is dropped (rolled back) and opened anew.
            self._forget_connection()
            raise StoreUnavailable("the task store's connection was left in a transaction")
        outcomes: list[Any] = []
        with self._transaction(conn):
            for work in works:
                try:
                    with self._transaction(conn):  # nested: a savepoint
                        outcomes.append(work(conn))
                except Exception as exc:
                    if not self._transaction_open(conn):
                        raise  # the driver ended the whole transaction: none of it commits
                    outcomes.append(Failed(self._translated(exc)))
        return outcomes

    def _translated(self, exc: Exception) -> Exception:
        """The error a caller sees for ``exc`` raised by its own write."""
        if isinstance(exc, StoreError):
            return exc
        translated = self._translate(exc)
        if translated is None:
            return exc
        translated.__cause__ = exc
        return translated

    def run_sync(self, work: Callable[[Any], T]) -> T:
        """Run ``work(conn)`` on a store thread and wait (setup code outside any loop)."""
        return self._executor.submit(self._in_thread, work).result()

    def close(self) -> None:
        """Release the connections and the worker threads."""
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True)
        if self._readers is not None:
            self._readers.shutdown(wait=True)
        with self._connections_lock:
            for conn in self._connections:
                with contextlib.suppress(Exception):
                    conn.close()
            self._connections.clear()
        if self._owner_locks is not None:
            self._owner_locks.close()

    # ---- schema ------------------------------------------------------------------------------

    def _schema_version(self, conn: Any) -> int:
        row = self._execute(conn, "SELECT max(version) FROM schema_version").fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def _upgrade(self, conn: Any, *, where: str) -> None:
        """Run the missing forward migrations, then make sure the store has its identity."""
        self._execute(conn, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        current = self._schema_version(conn)
        if current > len(self.migrations):
            raise StoreError(
                f"{where}: task store schema version {current} is newer than this server"
                f" knows ({len(self.migrations)}); upgrade longcall, or check that it is a"
                " task store (a longcall ledger has a schema version too)"
            )
        for version in range(current + 1, len(self.migrations) + 1):
            for statement in _statements(self.migrations[version - 1]):
                self._execute(conn, statement)
            self._execute(conn, "INSERT INTO schema_version (version) VALUES (?)", (version,))
        for name, value in (("store_id", uuid.uuid4().hex), ("state_key", secrets.token_hex(32))):
            self._execute(
                conn,
                "INSERT INTO store_meta (name, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (name, value),
            )
        rows = dict(self._execute(conn, "SELECT name, value FROM store_meta").fetchall())
        self.store_id = str(rows["store_id"])
        self.secret = bytes.fromhex(str(rows["state_key"]))

    # ---- reads -------------------------------------------------------------------------------

    def _select_task(self, conn: Any, task_id: str) -> TaskRecord | None:
        row = self._execute(
            conn, f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?", (task_id,)
        ).fetchone()
        return None if row is None else task_from_row(row)

    async def get(self, task_id: str) -> TaskRecord | None:
        """One task by id, expired or not (the caller decides visibility)."""
        return await self._read(lambda conn: self._select_task(conn, task_id))

    async def list_for_principal(
        self, principal: str, protocol: ProtocolVersion, *, after: str | None, limit: int
    ) -> list[TaskRecord]:
        """A principal's tasks of one protocol version, ordered by creation (S5)."""
        base = f"SELECT {TASK_COLUMNS} FROM tasks WHERE principal = ? AND protocol = ?"
        if after is None:
            query, params = base, [principal, protocol.value]
        else:
            query = (
                base + " AND (created_at, task_id) > (SELECT created_at, task_id FROM tasks"
                " WHERE task_id = ?)"
            )
            params = [principal, protocol.value, after]
        query += " ORDER BY created_at, task_id LIMIT ?"

        def read(conn: Any) -> list[TaskRecord]:
            rows = self._execute(conn, query, (*params, limit)).fetchall()
            return [task_from_row(row) for row in rows]

        return await self._read(read)

    async def lookup_submission(self, principal: str, key: str) -> str | None:
        """The id of the task created under a submission key, if any (S3)."""

        def read(conn: Any) -> str | None:
            row = self._execute(
                conn,
                "SELECT task_id FROM tasks WHERE principal = ? AND submission_key = ?",
                (principal, key),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._read(read)

    async def input_requests(self, task_id: str) -> list[InputRequest]:
        """All input requests of a task, in issue order."""

        def read(conn: Any) -> list[InputRequest]:
            rows = self._execute(
                conn,
                f"SELECT {INPUT_COLUMNS} FROM task_input_requests WHERE task_id = ?"
                " ORDER BY sequence",
                (task_id,),
            ).fetchall()
            return [input_from_row(row) for row in rows]

        return await self._read(read)

    async def history(self, task_id: str) -> list[StatusChange]:
        """The append-only status history of a task (S4)."""

        def read(conn: Any) -> list[StatusChange]:
            rows = self._execute(
                conn,
                "SELECT task_id, sequence, status, at, reason FROM task_status_history"
                " WHERE task_id = ? ORDER BY sequence",
                (task_id,),
            ).fetchall()
            return [
                StatusChange(
                    task_id=r[0], sequence=r[1], status=TaskStatus(r[2]), at=r[3], reason=r[4]
                )
                for r in rows
            ]

        return await self._read(read)

    # ---- writes ------------------------------------------------------------------------------

    def _append_history(
        self, conn: Any, task_id: str, status: TaskStatus, now: float, reason: str | None
    ) -> None:
        # The task row was written (and, on PostgreSQL, locked) first in the same
        # transaction, so two writers of one task never compute the same sequence.
        self._execute(
            conn,
            "INSERT INTO task_status_history (task_id, sequence, status, at, reason)"
            " SELECT ?, COALESCE(MAX(sequence), 0) + 1, ?, ?, ? FROM task_status_history"
            " WHERE task_id = ?",
            (task_id, status.value, now, reason, task_id),
        )

    def _lock_principal(self, conn: Any, principal: str) -> None:
        """Serialise creations of one principal (the open-task quota); SQLite needs nothing."""

    async def create(
        self,
        new: NewTask,
        *,
        owner: str,
        lease_until: float,
        max_open: int | None = None,
        answered: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = (),
    ) -> tuple[TaskRecord, bool]:
        """Insert a task owned by ``owner``, or return the one holding the same key (S3)."""
        expires_at = None if new.ttl_ms is None else new.created_at + new.ttl_ms / 1000.0

        def write(conn: Any) -> tuple[TaskRecord, bool]:
            with self._transaction(conn):
                self._lock_principal(conn, new.principal)
                existing = self._existing_submission(conn, new)
                if existing is not None:
                    return existing, False
                if max_open is not None:
                    self._check_quota(conn, new.principal, max_open)
                self._execute(
                    conn,
                    "INSERT INTO tasks (task_id, principal, tool_name, arguments,"
                    " arguments_digest, protocol, submission_key, status, status_message,"
                    " created_at, last_updated_at, ttl_ms, expires_at, poll_interval_ms,"
                    " client_can_elicit, owner, lease_until, progress_token, run_timeout_s)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        new.task_id,
                        new.principal,
                        new.tool_name,
                        dumps(new.arguments),
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
                        owner,
                        lease_until,
                        dumps(new.progress_token),
                        new.run_timeout_s,
                    ),
                )
                self._append_history(
                    conn, new.task_id, TaskStatus.WORKING, new.created_at, f"created by {owner}"
                )
                for sequence, (key, request, answer) in enumerate(answered, start=1):
                    self._execute(
                        conn,
                        "INSERT INTO task_input_requests (task_id, key, sequence, method, params,"
                        " response, created_at, answered_at) VALUES (?,?,?,?,?,?,?,?)",
                        (
                            new.task_id,
                            key,
                            sequence,
                            str(request["method"]),
                            dumps(request["params"]),
                            dumps(answer),
                            new.created_at,
                            new.created_at,
                        ),
                    )
                record = self._select_task(conn, new.task_id)
                if record is not None:
                    self._enqueue_events(conn, record)
            if record is None:  # pragma: no cover - inserted above in this transaction
                raise StoreError(f"task {new.task_id!r} vanished after its creation")
            return record, True

        return await self._write(write)

    def _existing_submission(self, conn: Any, new: NewTask) -> TaskRecord | None:
        if new.submission_key is None:
            return None
        row = self._execute(
            conn,
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE principal = ? AND submission_key = ?",
            (new.principal, new.submission_key),
        ).fetchone()
        if row is None:
            return None
        existing = task_from_row(row)
        if existing.tool_name != new.tool_name or existing.arguments_digest != new.arguments_digest:
            raise SubmissionKeyConflict(
                f"submission key {new.submission_key!r} was already used for another call"
                f" (tool {existing.tool_name!r}, different arguments)"
            )
        return existing

    def _check_quota(self, conn: Any, principal: str, max_open: int) -> None:
        row = self._execute(
            conn, f"SELECT count(*) FROM tasks WHERE principal = ? AND {ACTIVE_IN}", (principal,)
        ).fetchone()
        if int(row[0]) >= max_open:
            raise QuotaExceeded(
                f"this caller already has {int(row[0])} open tasks (the limit is {max_open});"
                " wait for some to finish or cancel them"
            )

    async def transition(
        self,
        task_id: str,
        cause: Cause,
        *,
        now: float,
        status_message: str | None = None,
        result: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
        epoch: int | None = None,
    ) -> TaskRecord | None:
        """Compare-and-set by the status table; ``None`` when the cause does not apply (S4)."""
        allowed = sorted(status.value for status in sources(cause))
        to = target(cause)
        epoch_clause = "" if epoch is None else " AND execution_epoch = ?"
        epoch_args: tuple[Any, ...] = () if epoch is None else (epoch,)
        # A terminal task holds no lease: nobody runs it any more.
        release = ", owner = NULL, lease_until = NULL" if to.is_terminal else ""

        def write(conn: Any) -> TaskRecord | None:
            with self._transaction(conn):
                cursor = self._execute(
                    conn,
                    "UPDATE tasks SET status = ?, status_message = COALESCE(?, status_message),"
                    " result = COALESCE(?, result), error = COALESCE(?, error),"
                    f" last_updated_at = ?, version = version + 1{release}"
                    f" WHERE task_id = ? AND status IN {_in(allowed)}{epoch_clause}",
                    (
                        to.value,
                        status_message,
                        dumps(result),
                        dumps(error),
                        now,
                        task_id,
                        *allowed,
                        *epoch_args,
                    ),
                )
                if cursor.rowcount != 1:
                    return None
                self._append_history(conn, task_id, to, now, cause.value)
                changed = self._select_task(conn, task_id)
                if changed is not None:
                    self._enqueue_events(conn, changed)
                return changed

        return await self._write(write)

    async def set_status_message(
        self, task_id: str, message: str, *, now: float, epoch: int
    ) -> bool:
        """Update the message of an active task of the given execution epoch."""

        def write(conn: Any) -> bool:
            cursor = self._execute(
                conn,
                "UPDATE tasks SET status_message = ?, last_updated_at = ?, version = version + 1"
                f" WHERE task_id = ? AND execution_epoch = ? AND {ACTIVE_IN}",
                (message, now, task_id, epoch),
            )
            return bool(cursor.rowcount == 1)

        return await self._write(write)

    async def open_input_request(
        self,
        task_id: str,
        *,
        sequence: int,
        key: str,
        method: str,
        params: Mapping[str, Any],
        now: float,
        epoch: int,
    ) -> InputRequest | None:
        """Input request ``sequence`` (stored, or new); ``None`` if the epoch was fenced off."""

        def write(conn: Any) -> InputRequest | None:
            with self._transaction(conn):
                # Lock the task row at our epoch first: a fenced run may not add requests.
                fenced = self._execute(
                    conn,
                    "UPDATE tasks SET version = version WHERE task_id = ? AND execution_epoch = ?",
                    (task_id, epoch),
                )
                if fenced.rowcount != 1:
                    return None
                self._execute(
                    conn,
                    "INSERT INTO task_input_requests (task_id, key, sequence, method, params,"
                    " created_at) VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                    (task_id, key, sequence, method, dumps(params), now),
                )
                row = self._execute(
                    conn,
                    f"SELECT {INPUT_COLUMNS} FROM task_input_requests"
                    " WHERE task_id = ? AND sequence = ?",
                    (task_id, sequence),
                ).fetchone()
            if row is None:  # pragma: no cover - inserted or present above
                raise StoreError(f"input request {sequence} of task {task_id!r} vanished")
            return input_from_row(row)

        return await self._write(write)

    async def answer_inputs(
        self, task_id: str, answers: Mapping[str, Mapping[str, Any]], *, now: float
    ) -> list[str]:
        """Store answers for outstanding keys only; return the keys answered now (S6)."""

        def write(conn: Any) -> list[str]:
            answered: list[str] = []
            with self._transaction(conn):
                for key, response in answers.items():
                    cursor = self._execute(
                        conn,
                        "UPDATE task_input_requests SET response = ?, answered_at = ?"
                        " WHERE task_id = ? AND key = ? AND response IS NULL",
                        (dumps(response), now, task_id, key),
                    )
                    if cursor.rowcount == 1:
                        answered.append(key)
            return answered

        return await self._write(write)

    # ---- leases (D1) -------------------------------------------------------------------------

    async def renew_leases(self, owner: str, *, until: float) -> dict[str, int]:
        """Extend ``owner``'s leases; the tasks it still holds (id → epoch) (D1)."""

        def write(conn: Any) -> dict[str, int]:
            self._keep_owner()
            with self._transaction(conn):
                self._execute(
                    conn,
                    f"UPDATE tasks SET lease_until = ? WHERE owner = ? AND {ACTIVE_IN}",
                    (until, owner),
                )
                rows = self._execute(
                    conn,
                    f"SELECT task_id, execution_epoch FROM tasks WHERE owner = ? AND {ACTIVE_IN}",
                    (owner,),
                ).fetchall()
            return {str(row[0]): int(row[1]) for row in rows}

        return await self._run(write)

    def _expired_ids(self, conn: Any, owner: str, now: float, limit: int) -> list[tuple[str, int]]:
        rows = self._execute(
            conn,
            f"SELECT task_id, execution_epoch FROM tasks WHERE {ACTIVE_IN}"
            " AND (lease_until IS NULL OR lease_until < ?) AND (owner IS NULL OR owner <> ?)"
            " ORDER BY created_at LIMIT ?",
            (now, owner, limit),
        ).fetchall()
        return [(str(row[0]), int(row[1])) for row in rows]

    async def claim_expired(
        self, owner: str, *, clock: Callable[[], float], lease_s: float, limit: int = CLAIM_BATCH
    ) -> list[TaskRecord]:
        """Take over active tasks whose lease expired (another owner's): epoch + 1 (D1).

        Each claim is a compare-and-set on the epoch it read, so two claimers of one task
        cannot both win; the history records who took it over from whom, and when: the
        caller's ``clock`` is read once the write has its turn, and again once an owner
        is proven dead, so no claim is dated before what allowed it.
        """

        def write(conn: Any) -> list[TaskRecord]:
            claimed: list[TaskRecord] = []
            proven: list[str] = []
            try:
                with self._transaction(conn):
                    now = clock()
                    for task_id, epoch in self._expired_ids(conn, owner, now, limit):
                        self._claim_one(
                            conn, owner, task_id, epoch, now, now + lease_s, claimed, ""
                        )
                    # A lease that has not run out yet, of an owner proven dead: taken
                    # over now instead of when the lease ends (D1).
                    for dead in self._leaseholders(conn, owner, now):
                        if len(claimed) >= limit or not self._prove_dead(conn, dead):
                            continue
                        proven.append(dead)
                        at = clock()
                        for task_id, epoch in self._owned_ids(conn, dead, limit - len(claimed)):
                            self._claim_one(
                                conn, owner, task_id, epoch, at, at + lease_s, claimed,
                                DEAD_OWNER_NOTE,
                            )  # fmt: skip
            except BaseException:
                self._proofs_done(conn, proven, committed=False)
                raise
            self._proofs_done(conn, proven, committed=True)
            return claimed

        return await self._run(write)

    def _claim_one(
        self,
        conn: Any,
        owner: str,
        task_id: str,
        epoch: int,
        now: float,
        until: float,
        claimed: list[TaskRecord],
        note: str,
    ) -> None:
        """Compare-and-set one task to ``owner`` at the next epoch, with its history row."""
        previous = self._execute(
            conn, "SELECT owner FROM tasks WHERE task_id = ?", (task_id,)
        ).fetchone()
        cursor = self._execute(
            conn,
            "UPDATE tasks SET owner = ?, lease_until = ?,"
            " execution_epoch = execution_epoch + 1, status_message = ?,"
            " last_updated_at = ?, version = version + 1"
            f" WHERE task_id = ? AND execution_epoch = ? AND {ACTIVE_IN}",
            (owner, until, RERUN_MESSAGE, now, task_id, epoch),
        )
        if cursor.rowcount != 1:
            return
        record = self._select_task(conn, task_id)
        assert record is not None
        reason = f"claimed by {owner} from {previous[0] if previous else None}{note}"
        self._append_history(conn, task_id, record.status, now, reason)
        claimed.append(record)

    def _leaseholders(self, conn: Any, owner: str, now: float) -> list[str]:
        """The other owners holding leases that have not run out."""
        rows = self._execute(
            conn,
            f"SELECT DISTINCT owner FROM tasks WHERE {ACTIVE_IN}"
            " AND owner IS NOT NULL AND owner <> ? AND lease_until >= ?",
            (owner, now),
        ).fetchall()
        return sorted(str(row[0]) for row in rows)

    def _owned_ids(self, conn: Any, owner: str, limit: int) -> list[tuple[str, int]]:
        rows = self._execute(
            conn,
            f"SELECT task_id, execution_epoch FROM tasks WHERE {ACTIVE_IN} AND owner = ?"
            f" ORDER BY created_at LIMIT ?{self._skip_locked}",
            (owner, limit),
        ).fetchall()
        return [(str(row[0]), int(row[1])) for row in rows]

    async def hold_owner(self, owner: str) -> None:
        """Take ``owner``'s proof of life, held until :meth:`close` (D1)."""
        await self._run(lambda conn: self._hold_owner(conn, owner))

    async def release(self, owner: str) -> int:
        """Give up ``owner``'s leases at once (a graceful stop), so others need not wait."""

        def write(conn: Any) -> int:
            cursor = self._execute(
                conn, f"UPDATE tasks SET lease_until = 0 WHERE owner = ? AND {ACTIVE_IN}", (owner,)
            )
            return int(cursor.rowcount)

        return await self._run(write)

    # ---- facade state ------------------------------------------------------------------------

    async def set_abort_at(self, task_id: str, at: float) -> None:
        """Persist an Apify-style graceful abort's deadline (the first one asked for holds)."""

        def write(conn: Any) -> None:
            self._execute(
                conn,
                "UPDATE tasks SET abort_at = COALESCE(abort_at, ?) WHERE task_id = ?",
                (at, task_id),
            )

        await self._write(write)

    async def mark_deleted(self, task_id: str) -> bool:
        """AIP-151 ``DeleteOperation``: hide the task for good (the row stays for key proofs)."""

        def write(conn: Any) -> bool:
            cursor = self._execute(
                conn, "UPDATE tasks SET deleted = 1 WHERE task_id = ? AND deleted = 0", (task_id,)
            )
            return bool(cursor.rowcount == 1)

        return await self._write(write)

    async def purge(self, now: float) -> int:
        """Delete rows expired for longer than the retention window."""
        cutoff = now - EXPIRED_ROW_RETENTION_S
        doomed = "SELECT task_id FROM tasks WHERE expires_at IS NOT NULL AND expires_at < ?"

        def write(conn: Any) -> int:
            with self._transaction(conn):
                self._execute(
                    conn, f"DELETE FROM task_input_requests WHERE task_id IN ({doomed})", (cutoff,)
                )
                self._execute(
                    conn, f"DELETE FROM task_status_history WHERE task_id IN ({doomed})", (cutoff,)
                )
                self._purge_deliveries(conn, doomed, cutoff)
                cursor = self._execute(
                    conn,
                    "DELETE FROM tasks WHERE expires_at IS NOT NULL AND expires_at < ?",
                    (cutoff,),
                )
            return int(cursor.rowcount)

        return await self._run(write)


def _statements(script: str) -> Iterator[str]:
    for statement in script.split(";"):
        if statement.strip():
            yield statement.strip()


@functools.lru_cache(maxsize=512)
def to_pyformat(query: str) -> str:
    """A ``?``-placeholder query in psycopg's ``%s`` style (the shared SQL has no ``%``)."""
    return query.replace("?", "%s")
