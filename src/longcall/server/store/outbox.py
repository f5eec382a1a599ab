"""The webhook outbox in the task store: endpoints and deliveries (SPEC S7; D1 for sharing).

Owns: the queries of the two webhook tables, written once with ``?`` placeholders for
both backends: registering a principal's endpoints, enqueueing one delivery per
(endpoint, status change) *in the same transaction as the change* (so a change that
is stored has its deliveries stored, and a crash loses neither), claiming due
deliveries under a lease (several processes on one store send each once, mostly; a
receiver dedups the rest by event id), recording an attempt's outcome, reporting
deliveries, and replays. Must not: send anything, sign anything, read a clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from longcall.server.errors import QuotaExceeded
from longcall.server.model import TaskRecord
from longcall.server.webhooks.model import (
    ENDPOINT_ID_PREFIX,
    Delivery,
    DeliveryState,
    Endpoint,
    Outcome,
    event_id,
    payload,
    statuses_of,
    statuses_text,
)

T = TypeVar("T")

ENDPOINT_COLUMNS = (
    "endpoint_id, principal, url, keys, statuses, created_at, disabled_at, disabled_reason,"
    " throttled_until"
)
DELIVERY_COLUMNS = (
    "delivery_id, endpoint_id, event_id, task_id, status, payload, created_at, state, attempts,"
    " next_attempt_at, last_attempt_at, last_outcome, last_http_status, delivered_at"
)
PENDING = DeliveryState.PENDING.value


def endpoint_from_row(row: Sequence[Any]) -> Endpoint:
    return Endpoint(
        endpoint_id=row[0],
        principal=row[1],
        url=row[2],
        keys=tuple(row[3].split()),
        statuses=statuses_of(row[4]),
        created_at=row[5],
        disabled_at=row[6],
        disabled_reason=row[7],
        throttled_until=row[8],
    )


def delivery_from_row(row: Sequence[Any]) -> Delivery:
    return Delivery(
        delivery_id=int(row[0]),
        endpoint_id=row[1],
        event_id=row[2],
        task_id=row[3],
        status=row[4],
        payload=row[5],
        created_at=row[6],
        state=DeliveryState(row[7]),
        attempts=int(row[8]),
        next_attempt_at=row[9],
        last_attempt_at=row[10],
        last_outcome=None if row[11] is None else Outcome(row[11]),
        last_http_status=row[12],
        delivered_at=row[13],
    )


def _prefixed(columns: str, prefix: str) -> str:
    return ", ".join(f"{prefix}.{name.strip()}" for name in columns.split(","))


class OutboxQueries:
    """The webhook half of :class:`~longcall.server.store.base.SqlTaskStore`."""

    _skip_locked: str

    if TYPE_CHECKING:

        async def _run(self, work: Callable[[Any], T]) -> T: ...

        def _execute(self, conn: Any, query: str, params: Sequence[Any] = ()) -> Any: ...

        def _transaction(self, conn: Any) -> contextlib.AbstractContextManager[Any]: ...

    # ---- written with each status change (same transaction) ------------------------------------

    def _enqueue_events(self, conn: Any, record: TaskRecord) -> None:
        """One pending delivery per enabled endpoint of the task's principal that wants
        this status. Called inside the transaction that made the change: both or neither.

        Most principals register no endpoint: for them one indexed look-up (in the same
        transaction, so it sees what the insert would) replaces rendering the payload and
        the insert, which cost a status change about 25 times as much."""
        if not self._has_endpoints(conn, record.principal):
            return
        text = json.dumps(payload(record), separators=(",", ":"))
        self._execute(
            conn,
            "INSERT INTO webhook_deliveries (endpoint_id, event_id, task_id, status, payload,"
            " created_at, state, attempts, next_attempt_at)"
            " SELECT endpoint_id, ?, ?, ?, ?, ?, ?, 0, ? FROM webhook_endpoints"
            " WHERE principal = ? AND disabled_at IS NULL AND (statuses = '*' OR statuses LIKE ?)"
            " ON CONFLICT DO NOTHING",
            (
                event_id(record.task_id, record.version),
                record.task_id,
                record.status.value,
                text,
                record.last_updated_at,
                PENDING,
                record.last_updated_at,
                record.principal,
                f"%,{record.status.value},%",
            ),
        )

    def _has_endpoints(self, conn: Any, principal: str) -> bool:
        row = self._execute(
            conn,
            "SELECT 1 FROM webhook_endpoints WHERE principal = ? AND disabled_at IS NULL LIMIT 1",
            (principal,),
        ).fetchone()
        return row is not None

    # ---- endpoints ----------------------------------------------------------------------------

    async def register_endpoint(
        self,
        *,
        principal: str,
        url: str,
        keys: Sequence[str],
        statuses: frozenset[str] | None,
        now: float,
        max_per_principal: int,
    ) -> Endpoint:
        """Add ``url`` for ``principal``, or update its keys and events (and enable it
        again) when it is registered already: re-registering is how keys rotate."""

        def write(conn: Any) -> Endpoint:
            with self._transaction(conn):
                row = self._execute(
                    conn,
                    "SELECT endpoint_id FROM webhook_endpoints WHERE principal = ? AND url = ?",
                    (principal, url),
                ).fetchone()
                if row is None:
                    count = self._execute(
                        conn, "SELECT count(*) FROM webhook_endpoints WHERE principal = ?",
                        (principal,),
                    ).fetchone()  # fmt: skip
                    if int(count[0]) >= max_per_principal:
                        raise QuotaExceeded(
                            f"this caller already has {int(count[0])} webhook endpoints"
                            f" (the limit is {max_per_principal}); delete one first"
                        )
                    endpoint_id = ENDPOINT_ID_PREFIX + secrets.token_urlsafe(12)
                    self._execute(
                        conn,
                        "INSERT INTO webhook_endpoints (endpoint_id, principal, url, keys,"
                        " statuses, created_at) VALUES (?,?,?,?,?,?)",
                        (endpoint_id, principal, url, " ".join(keys), statuses_text(statuses), now),
                    )
                else:
                    endpoint_id = str(row[0])
                    self._execute(
                        conn,
                        "UPDATE webhook_endpoints SET keys = ?, statuses = ?, disabled_at = NULL,"
                        " disabled_reason = NULL, throttled_until = NULL WHERE endpoint_id = ?",
                        (" ".join(keys), statuses_text(statuses), endpoint_id),
                    )
                found = self._select_endpoint(conn, endpoint_id)
            assert found is not None
            return found

        return await self._run(write)

    def _select_endpoint(self, conn: Any, endpoint_id: str) -> Endpoint | None:
        row = self._execute(
            conn,
            f"SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE endpoint_id = ?",
            (endpoint_id,),
        ).fetchone()
        return None if row is None else endpoint_from_row(row)

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        return await self._run(lambda conn: self._select_endpoint(conn, endpoint_id))

    async def list_endpoints(self, principal: str) -> list[Endpoint]:
        def read(conn: Any) -> list[Endpoint]:
            rows = self._execute(
                conn,
                f"SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE principal = ?"
                " ORDER BY created_at, endpoint_id",
                (principal,),
            ).fetchall()
            return [endpoint_from_row(row) for row in rows]

        return await self._run(read)

    async def delete_endpoint(self, principal: str, endpoint_id: str) -> bool:
        """Remove one of ``principal``'s endpoints and its deliveries."""

        def write(conn: Any) -> bool:
            with self._transaction(conn):
                cursor = self._execute(
                    conn,
                    "DELETE FROM webhook_endpoints WHERE endpoint_id = ? AND principal = ?",
                    (endpoint_id, principal),
                )
                if cursor.rowcount != 1:
                    return False
                self._execute(
                    conn, "DELETE FROM webhook_deliveries WHERE endpoint_id = ?", (endpoint_id,)
                )
            return True

        return await self._run(write)

    # ---- the sender ------------------------------------------------------------------------------

    async def claim_deliveries(
        self, owner: str, *, now: float, until: float, limit: int
    ) -> list[tuple[Delivery, Endpoint]]:
        """Take up to ``limit`` due deliveries (pending, due, lease free, endpoint enabled
        and not throttled) for ``owner`` until ``until``: another process takes them only
        once that lease ran out (an attempt that never reported back is made again)."""

        def write(conn: Any) -> list[tuple[Delivery, Endpoint]]:
            with self._transaction(conn):
                rows = self._execute(
                    conn,
                    f"SELECT {_prefixed(DELIVERY_COLUMNS, 'd')}, {_prefixed(ENDPOINT_COLUMNS, 'e')}"
                    " FROM webhook_deliveries d JOIN webhook_endpoints e"
                    " ON e.endpoint_id = d.endpoint_id"
                    " WHERE d.state = ? AND d.next_attempt_at <= ?"
                    " AND (d.lease_until IS NULL OR d.lease_until < ?)"
                    " AND e.disabled_at IS NULL"
                    " AND (e.throttled_until IS NULL OR e.throttled_until <= ?)"
                    " ORDER BY d.next_attempt_at, d.delivery_id LIMIT ?"
                    + self._skip_locked_of("d"),
                    (PENDING, now, now, now, limit),
                ).fetchall()
                claimed = []
                width = len(DELIVERY_COLUMNS.split(","))
                for row in rows:
                    delivery = delivery_from_row(row[:width])
                    cursor = self._execute(
                        conn,
                        "UPDATE webhook_deliveries SET owner = ?, lease_until = ?"
                        " WHERE delivery_id = ? AND state = ?"
                        " AND (lease_until IS NULL OR lease_until < ?)",
                        (owner, until, delivery.delivery_id, PENDING, now),
                    )
                    if cursor.rowcount == 1:
                        held = dataclasses.replace(delivery, held_until=until)
                        claimed.append((held, endpoint_from_row(row[width:])))
            return claimed

        return await self._run(write)

    def _skip_locked_of(self, table: str) -> str:
        return f" FOR UPDATE OF {table} SKIP LOCKED" if self._skip_locked else ""

    async def next_delivery_due(self, now: float) -> float | None:
        """When the earliest pending delivery may be attempted (``None``: nothing pending)."""

        def read(conn: Any) -> float | None:
            free = self._execute(
                conn,
                "SELECT min(d.next_attempt_at) FROM webhook_deliveries d JOIN webhook_endpoints e"
                " ON e.endpoint_id = d.endpoint_id WHERE d.state = ? AND e.disabled_at IS NULL"
                " AND (e.throttled_until IS NULL OR e.throttled_until <= ?)",
                (PENDING, now),
            ).fetchone()
            held = self._execute(
                conn,
                "SELECT min(e.throttled_until) FROM webhook_endpoints e WHERE e.throttled_until > ?"
                " AND e.disabled_at IS NULL AND EXISTS (SELECT 1 FROM webhook_deliveries d"
                " WHERE d.endpoint_id = e.endpoint_id AND d.state = ?)",
                (now, PENDING),
            ).fetchone()
            times = [float(r[0]) for r in (free, held) if r is not None and r[0] is not None]
            return min(times) if times else None

        return await self._run(read)

    async def record_attempt(
        self,
        delivery: Delivery,
        *,
        owner: str,
        now: float,
        outcome: Outcome,
        http_status: int | None,
        state: DeliveryState,
        next_attempt_at: float | None,
        disable_reason: str | None = None,
        throttled_until: float | None = None,
    ) -> bool:
        """Store one attempt's outcome (only while ``owner`` still holds the delivery under
        the claim it was sent under: a replay meanwhile made it pending again, and that
        newer attempt's outcome is the one to keep), and what it means for the endpoint:
        disabled (410), or throttled until a time."""

        def write(conn: Any) -> bool:
            with self._transaction(conn):
                cursor = self._execute(
                    conn,
                    "UPDATE webhook_deliveries SET state = ?, attempts = attempts + 1,"
                    " next_attempt_at = ?, last_attempt_at = ?, last_outcome = ?,"
                    " last_http_status = ?, delivered_at = ?, owner = NULL, lease_until = NULL"
                    " WHERE delivery_id = ? AND owner = ? AND state = ? AND lease_until = ?",
                    (
                        state.value,
                        next_attempt_at,
                        now,
                        outcome.value,
                        http_status,
                        now if state is DeliveryState.DELIVERED else None,
                        delivery.delivery_id,
                        owner,
                        PENDING,
                        delivery.held_until,
                    ),
                )
                if cursor.rowcount != 1:
                    return False
                if disable_reason is not None:
                    self._execute(
                        conn,
                        "UPDATE webhook_endpoints SET disabled_at = ?, disabled_reason = ?"
                        " WHERE endpoint_id = ? AND disabled_at IS NULL",
                        (now, disable_reason, delivery.endpoint_id),
                    )
                    self._execute(
                        conn,
                        "UPDATE webhook_deliveries SET state = ?, next_attempt_at = NULL"
                        " WHERE endpoint_id = ? AND state = ?",
                        (DeliveryState.DISABLED.value, delivery.endpoint_id, PENDING),
                    )
                elif throttled_until is not None:
                    self._execute(
                        conn,
                        "UPDATE webhook_endpoints SET throttled_until = ? WHERE endpoint_id = ?"
                        " AND (throttled_until IS NULL OR throttled_until < ?)",
                        (throttled_until, delivery.endpoint_id, throttled_until),
                    )
            return True

        return await self._run(write)

    # ---- status and replay -------------------------------------------------------------------

    async def list_deliveries(
        self,
        principal: str,
        *,
        endpoint_id: str | None = None,
        task_id: str | None = None,
        after: int | None = None,
        limit: int = 100,
    ) -> list[Delivery]:
        """A principal's deliveries in id order (by endpoint, by task, after an id)."""
        clauses: list[str] = ["e.principal = ?"]
        params: list[Any] = [principal]
        if endpoint_id is not None:
            clauses.append("d.endpoint_id = ?")
            params.append(endpoint_id)
        if task_id is not None:
            clauses.append("d.task_id = ?")
            params.append(task_id)
        if after is not None:
            clauses.append("d.delivery_id > ?")
            params.append(after)
        query = (
            f"SELECT {_prefixed(DELIVERY_COLUMNS, 'd')} FROM webhook_deliveries d"
            " JOIN webhook_endpoints e ON e.endpoint_id = d.endpoint_id"
            f" WHERE {' AND '.join(clauses)} ORDER BY d.delivery_id LIMIT ?"
        )

        def read(conn: Any) -> list[Delivery]:
            rows = self._execute(conn, query, (*params, limit)).fetchall()
            return [delivery_from_row(row) for row in rows]

        return await self._run(read)

    async def replay_deliveries(
        self, principal: str, endpoint_id: str, *, first: int, last: int, now: float
    ) -> list[int]:
        """Send deliveries ``first``..``last`` of one of ``principal``'s endpoints again
        (each is signed afresh when sent): pending from now, attempts counted anew."""

        def write(conn: Any) -> list[int]:
            with self._transaction(conn):
                rows = self._execute(
                    conn,
                    "SELECT d.delivery_id FROM webhook_deliveries d JOIN webhook_endpoints e"
                    " ON e.endpoint_id = d.endpoint_id WHERE e.principal = ? AND d.endpoint_id = ?"
                    " AND d.delivery_id >= ? AND d.delivery_id <= ? ORDER BY d.delivery_id",
                    (principal, endpoint_id, first, last),
                ).fetchall()
                ids = [int(row[0]) for row in rows]
                for delivery_id in ids:
                    self._execute(
                        conn,
                        "UPDATE webhook_deliveries SET state = ?, attempts = 0,"
                        " next_attempt_at = ?, owner = NULL, lease_until = NULL"
                        " WHERE delivery_id = ?",
                        (PENDING, now, delivery_id),
                    )
            return ids

        return await self._run(write)

    def _purge_deliveries(self, conn: Any, doomed: str, cutoff: float) -> None:
        """Deliveries of tasks being purged go with them."""
        self._execute(
            conn, f"DELETE FROM webhook_deliveries WHERE task_id IN ({doomed})", (cutoff,)
        )
