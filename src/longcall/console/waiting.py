"""What an operation waits on, its two clocks, its folded timeline, and what an operator
may do with it — decided from stored rows alone.

Owns: :func:`waiting_on` (the banner of every non-terminal state: the same first-match
rule as the ledger's ``waiting`` filter, :data:`~longcall.ledger.WAITING_REASONS`),
:func:`clocks` (working time apart from time spent waiting for a person or an
operator), :func:`timeline` (history with repeated rows folded), and
:func:`resolutions` (the reconciliations the evidence allows, the checks the client
makes before it writes one). Must not: read a clock (``now`` is given), touch the
ledger, or render HTML.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

from longcall.core import OperationRecord, State
from longcall.core.events import Resolution
from longcall.ledger import HistoryRow

PERSON_STATES = frozenset({State.INPUT_REQUIRED, State.RECONCILIATION_REQUIRED})
"""Time in these states is time waiting for a person, not work."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """The banner of one operation: what it waits on, in words, and until when."""

    reason: str
    """One of ``WAITING_REASONS``."""
    headline: str
    details: tuple[str, ...] = ()
    until: float | None = None
    """When the next thing is due (a poll, a retry, a deadline), if known."""


def waiting_on(
    record: OperationRecord, *, owner: str | None, live_owners: Collection[str], now: float
) -> Waiting:
    """What ``record`` waits on now (the ledger's rule, first match wins)."""
    if record.is_terminal:
        return Waiting(reason="nothing", headline="nothing: the outcome is accepted")
    if record.state is State.RECONCILIATION_REQUIRED:
        return Waiting(
            reason="operator",
            headline="an operator: nobody can prove the outcome automatically",
            details=(f"why: {record.reconciliation_reason or record.last_error or 'unknown'}",),
        )
    if record.state is State.INPUT_REQUIRED and record.input_keys_pending:
        deadline = record.input_deadline_at
        return Waiting(
            reason="person",
            headline="a person's answer to " + ", ".join(record.input_keys_pending),
            details=(f"input round {record.input_round}",),
            until=deadline,
        )
    if owner is None or owner not in live_owners:
        held = "nobody holds it" if owner is None else f"the lease of {owner} has lapsed"
        return Waiting(
            reason="worker",
            headline=f"a worker to drive it: {held}",
            details=(
                "a running `longcall worker` on this ledger claims it within a second",
                _last_status(record),
            ),
        )
    lease = f"held by {owner} at execution epoch {record.execution_epoch}"
    if record.failed_attempts > 0:
        return Waiting(
            reason="backoff",
            headline=f"a retry: the last request failed ({record.failed_attempts} in a row)",
            details=(f"last error: {record.last_error or 'unknown'}", lease),
            until=record.next_poll_at,
        )
    return Waiting(
        reason="server",
        headline=_server_headline(record),
        details=(
            _last_status(record),
            f"polls so far: {record.poll_count}",
            lease,
        ),
        until=record.next_poll_at,
    )


def _last_status(record: OperationRecord) -> str:
    status = record.server_status_raw or _value(record.server_status)
    return f"last status: {status}" + (
        f" — {record.status_message}" if record.status_message else ""
    )


def _value(status: object) -> str:
    return getattr(status, "value", None) or "none yet"


def _server_headline(record: OperationRecord) -> str:
    match record.state:
        case State.SUBMITTING | State.NOT_FOUND_SAFE:
            return "the server: the create request is being sent"
        case State.SUBMISSION_UNKNOWN:
            return "the server: a lookup by submission key (the create's answer was lost)"
        case State.CANCEL_REQUESTED:
            return f"the server: cancellation (generation {record.cancel_generation}) is asked"
        case State.TERMINAL_OBSERVED | State.FETCHING_RESULT:
            return "the server: the result is being fetched"
        case State.INPUT_REQUIRED:
            return "the server: the answer is being delivered"
        case _:
            return "the server: the tool is working"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Clocks:
    working_s: float
    waiting_s: float
    """Time in input rounds and reconciliation: waiting for a person."""


def clocks(history: Sequence[HistoryRow], *, now: float) -> Clocks:
    """Working time and waiting-for-a-person time, from each version's state until the
    next version (the last until ``now``, or until its acceptance)."""
    working = waiting = 0.0
    for row, following in zip(history, [*history[1:], None], strict=True):
        if row.state in (State.ACCEPTED, State.CANCELLED_ACCEPTED):
            break
        end = following.at if following is not None else now
        span = max(0.0, end - row.at)
        if row.state in PERSON_STATES:
            waiting += span
        else:
            working += span
    return Clocks(working_s=working, waiting_s=waiting)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Fold:
    """One timeline row: a run of history rows with the same event and state."""

    first: HistoryRow
    last: HistoryRow
    count: int

    @property
    def epoch_changed(self) -> bool:
        return self.first.event == "ExecutionClaimed"


def timeline(history: Sequence[HistoryRow]) -> list[Fold]:
    """History with runs of the same (event, state) folded (repeated polls)."""
    folds: list[Fold] = []
    for row in history:
        if folds and (folds[-1].first.event, folds[-1].first.state) == (row.event, row.state):
            folds[-1] = dataclasses.replace(folds[-1], last=row, count=folds[-1].count + 1)
        else:
            folds.append(Fold(first=row, last=row, count=1))
    return folds


def resolutions(record: OperationRecord, *, now: float) -> tuple[Resolution, ...]:
    """The reconciliations the evidence allows: ``resume`` only with a remote id and
    while polling would not stop again at once; ``never_created`` only while no remote
    id is recorded; completed / failed / cancelled (the operator's evidence) always."""
    if record.state is not State.RECONCILIATION_REQUIRED:
        return ()
    allowed: list[Resolution] = []
    if record.operation_id is not None and record.polling_ended_by(now) is None:
        allowed.append(Resolution.RESUME)
    if record.operation_id is None:
        allowed.append(Resolution.NEVER_CREATED)
    allowed += [Resolution.COMPLETED, Resolution.FAILED, Resolution.CANCELLED]
    return tuple(allowed)


def duration(seconds: float) -> str:
    """``2 h 05 min``, ``3 min 07 s``, ``4.2 s``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours // 24} d {hours % 24} h"
