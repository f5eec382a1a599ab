"""The gateway's decisions about one host call (G1): pure, run by the gateway and the
simulator alike.

Owns: :class:`GatewayOptions` (how the gateway treats hosts); which call node a host
call attaches to or starts (:func:`resolve_call`: the same-call rule of ``repeats`` over
what the ledger holds of the call's nodes, at ``now``); how long a task-unaware host's
call (:func:`early_wait_s`) and a status call (:func:`status_wait_s`) wait for the
upstream; what the host is answered when the wait ends (:func:`answer_for`: the outcome,
or the handle with where to go next); the delivery marks an outcome leaves in the
ledger (:func:`mark_delivered`, which the same-call rule reads back); the call node
a handle names for a principal (:func:`owned_node`, or the refusal); and the gateway's
downtimes, which the rule counts out of its windows (:func:`note_start` when a gateway
process starts, :func:`note_stop` when it stops cleanly).

The gateway (``app``) runs these on its ledger thread with its clock's ``now``; the
simulator's host world (``longcall.sim.hostworld``) runs them on its ledger at virtual
time, so the decisions it checks are these very functions. Must not: read a clock,
await, or touch anything but the ledger it is handed (reads, the write-once delivery
marks, and the downtimes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
from typing import Any, Protocol

from longcall.core import OperationRecord
from longcall.errors import LongcallError
from longcall.gateway.handles import HostCall, node_for, parse_handle
from longcall.gateway.pages import DEFAULT_PAGE_CHARS
from longcall.gateway.repeats import (
    DEFAULT_GRACE_S,
    DEFAULT_UNDELIVERED_S,
    Earlier,
    Span,
    delivery_period,
    last_delivery,
    resolve,
)
from longcall.ledger import WORKER, Downtime, WorkerRow

DELIVERED_BLOB = "gateway:delivered"
"""Written once, when a call's outcome first reaches a host."""
DELIVERED_IN_BLOB = "gateway:delivered-in:"
"""+ a grace period's number: written once per period in which an outcome reached a host
(the repeat rule reads the newest two)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GatewayOptions:
    """How the gateway treats hosts."""

    early_return_s: float = 40.0
    """The early-return window: a task-unaware host gets the real result if the upstream
    finishes within it, a handle otherwise. Keep it below the host's own timeout."""
    page_chars: int = DEFAULT_PAGE_CHARS
    """Characters of model-visible text a result page holds (about 8k tokens)."""
    repeat_grace_s: float = DEFAULT_GRACE_S
    """After an outcome reached a host, a same call this soon is its retry, not a repeat."""
    repeat_window_s: float = DEFAULT_UNDELIVERED_S
    """An ended call whose outcome never reached a host is attached to this long."""
    recent_handles: int = 5
    """How many of a principal's handles a refusal names."""

    @property
    def longest_window_s(self) -> float:
        """No downtime that ended longer ago than this can make a call join."""
        return max(self.repeat_grace_s, self.repeat_window_s)

    def __post_init__(self) -> None:
        for name in ("early_return_s", "repeat_grace_s", "repeat_window_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < 1e9):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if self.page_chars < 100:
            raise ValueError("page_chars must be at least 100")


class LedgerReads(Protocol):
    """What the decisions read of a ledger (the real ledger has all of it)."""

    @property
    def caller_key(self) -> bytes: ...

    def find(self, call_node_id: str) -> OperationRecord | None: ...

    def blob(self, call_node_id: str, name: str) -> bytes | None: ...

    def downtimes(self, *, ending_after: float) -> list[Downtime]: ...


class LedgerMarks(LedgerReads, Protocol):
    """A ledger the delivery marks can be written to."""

    def put_blob(self, call_node_id: str, name: str, payload: bytes) -> bool: ...


class LedgerLife(LedgerReads, Protocol):
    """A ledger a gateway's start and stop are recorded in."""

    def workers(self) -> list[WorkerRow]: ...

    def record_downtime(
        self, started_at: float, ended_at: float | None, *, forget_before: float
    ) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """The call node a host call resolved to: attach to ``existing``, or start it."""

    handle: str
    node: str
    existing: OperationRecord | None
    """The earlier node of the same call it attaches to; None: a new node (run it)."""

    @property
    def attaches_to_open(self) -> bool:
        """A retry of a call still running (the gateway counts these)."""
        return self.existing is not None and not self.existing.is_terminal

    @property
    def repeats_ended(self) -> bool:
        """The outcome of a same call that already ended (the reply says so)."""
        return self.existing is not None and self.existing.is_terminal


def resolve_call(
    ledger: LedgerReads, call: HostCall, *, now: float, options: GatewayOptions
) -> Start:
    """The node a host call names under the same-call rule, from what ``ledger`` holds
    of the call's nodes and of the gateway's downtimes at ``now``; ValueError when it
    was repeated too often."""
    records: dict[str, OperationRecord] = {}
    downtimes = recent_downtimes(ledger, now=now, options=options)

    def find(node: str) -> Earlier | None:
        record = ledger.find(node)
        if record is None:
            return None
        records[node] = record
        if not record.is_terminal:
            return Earlier(is_open=True, ended_at=now, delivered_at=None, ever_delivered=False)

        def marked(period: int) -> bool:
            return ledger.blob(node, f"{DELIVERED_IN_BLOB}{period}") is not None

        return Earlier(
            is_open=False,
            ended_at=record.updated_at,
            delivered_at=last_delivery(marked, now, options.repeat_grace_s, downtimes),
            ever_delivered=ledger.blob(node, DELIVERED_BLOB) is not None,
        )

    found = resolve(
        call,
        key=ledger.caller_key,
        find=find,
        now=now,
        grace_s=options.repeat_grace_s,
        undelivered_s=options.repeat_window_s,
        downtimes=downtimes,
    )
    existing = records[found.node] if found.joined else None
    return Start(handle=found.handle, node=found.node, existing=existing)


def recent_downtimes(ledger: LedgerReads, *, now: float, options: GatewayOptions) -> list[Span]:
    """The gateway's downtimes that may still count in a window at ``now`` (a clean stop
    not settled yet is none: this process is up, so another was meanwhile)."""
    return [
        (downtime.started_at, downtime.ended_at)
        for downtime in ledger.downtimes(ending_after=now - options.longest_window_s)
        if downtime.ended_at is not None
    ]


def downtime_began(last_alive: list[float], *, now: float, heartbeat_s: float) -> float | None:
    """When the downtime that a gateway process starting at ``now`` ends began: the
    latest moment a gateway was known alive (a lease renewal, a clean stop), unless that
    is within one heartbeat (another process is alive); None: no downtime (or the first
    start: nothing known)."""
    latest = max(last_alive, default=None)
    if latest is None or now - latest <= heartbeat_s:
        return None
    return latest


def note_start(
    ledger: LedgerLife,
    *,
    now: float,
    lease_s: float,
    heartbeat_s: float,
    options: GatewayOptions,
) -> Span | None:
    """A gateway process starts, before it renews or claims anything: record the downtime
    it ends (from the worker rows' last renewals, a lease being renewed ``lease_s`` long
    every ``heartbeat_s``, and the clean stops), and return it; None: no downtime."""
    stops = [d.started_at for d in ledger.downtimes(ending_after=now) if d.ended_at is None]
    renewals = [row.lease_until - lease_s for row in ledger.workers() if row.kind == WORKER]
    began = downtime_began(renewals + stops, now=now, heartbeat_s=heartbeat_s)
    if began is None:
        return None
    ledger.record_downtime(began, now, forget_before=now - options.longest_window_s)
    return (began, now)


def note_stop(ledger: LedgerLife, *, now: float) -> None:
    """A gateway process stops cleanly (its lease row goes with it): record when, so that
    the next start knows since when no gateway was alive."""
    ledger.record_downtime(now, None, forget_before=now)


def early_wait_s(options: GatewayOptions, *, started: float, now: float) -> float:
    """How long a task-unaware host's call still waits for the upstream's outcome: what
    is left of the early-return window since the call arrived."""
    return max(0.0, options.early_return_s - (now - started))


def status_wait_s(options: GatewayOptions, wait_s: Any) -> float:
    """How long a status call waits: the host's ``wait_s``, within 0 and the window
    (anything but a number is 0)."""
    if not isinstance(wait_s, int | float) or wait_s != wait_s:
        wait_s = 0
    return min(max(0.0, float(wait_s)), options.early_return_s)


class Answer(enum.Enum):
    """What a host is told when its wait ends."""

    OUTCOME = "outcome"
    """The call ended: its outcome (marked delivered as it is sent)."""
    HANDLE = "handle"
    """Still running (or waiting for an operator): the handle, and ``next`` pointing to
    the status tool."""


def answer_for(record: OperationRecord) -> Answer:
    """What a host waiting on ``record`` is answered now."""
    return Answer.OUTCOME if record.is_terminal else Answer.HANDLE


def delivery_marks(now: float, options: GatewayOptions) -> tuple[str, str]:
    """The marks an outcome given at ``now`` leaves: the first delivery, and this grace
    period's (each written once)."""
    return DELIVERED_BLOB, f"{DELIVERED_IN_BLOB}{delivery_period(now, options.repeat_grace_s)}"


def mark_delivered(ledger: LedgerMarks, node: str, *, now: float, options: GatewayOptions) -> None:
    """Before an outcome is sent: write the marks that are not there yet."""
    stamp = json.dumps({"at": now}).encode()
    for name in delivery_marks(now, options):
        if ledger.blob(node, name) is None:
            with contextlib.suppress(LongcallError):  # another process marked it first
                ledger.put_blob(node, name, stamp)


def owned_node(ledger: LedgerReads, principal: str, handle: object) -> tuple[str, str | None]:
    """(canonical handle, the call node it names for ``principal`` — None when no such
    call is in the ledger); a string that is no handle raises HandleRefused. Another
    principal's handle names another node, so it reads as not found."""
    canonical = parse_handle(handle)
    node = node_for(principal, canonical)
    return canonical, node if ledger.find(node) is not None else None


__all__ = [
    "DELIVERED_BLOB",
    "DELIVERED_IN_BLOB",
    "Answer",
    "GatewayOptions",
    "HostCall",
    "LedgerLife",
    "LedgerMarks",
    "LedgerReads",
    "Start",
    "answer_for",
    "delivery_marks",
    "downtime_began",
    "early_wait_s",
    "mark_delivered",
    "note_start",
    "note_stop",
    "owned_node",
    "recent_downtimes",
    "resolve_call",
    "status_wait_s",
]
