"""What an operation waits on, its two clocks, its folded timeline, and what an operator
may do with it — decided from stored rows alone.

Owns: :func:`waiting_on` (the banner of every non-terminal state: the same first-match
rule as the ledger's ``waiting`` filter, :data:`~longcall.ledger.WAITING_REASONS`, told
in full: the last status read and the next, the holder's circuit breaker when it is
open), :func:`clocks` (working time apart from time spent waiting for a person or an
operator), :func:`timeline` (history with repeated rows folded, and the refused stale
writes in their place), :func:`resolutions` (the reconciliations the evidence allows,
the checks the client makes before it writes one), and how times read (:func:`stamp`,
:func:`relative`, :func:`duration`). Must not: read a clock (``now`` is given), touch
the ledger, or render HTML.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from datetime import UTC, datetime

from longcall.core import OperationRecord, State
from longcall.core.events import SETTLING, Resolution
from longcall.core.retry import BreakerState
from longcall.core.states import NOT_POLLING_STATES
from longcall.ledger import BreakerRow, HistoryRow, RefusedWrite

PERSON_STATES = frozenset({State.INPUT_REQUIRED, State.RECONCILIATION_REQUIRED})
"""Time in these states is time waiting for a person, not work."""
STATUS_READS = frozenset(
    {
        "SubmitAcknowledged",
        "SubmissionFound",
        "WorkingObserved",
        "InputRequestObserved",
        "TerminalObserved",
        "OperationNotFound",
    }
)
"""History events written when the server's answer told the operation's status: the
last of them is when its status was last read (a poll, or the create's answer)."""


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
    record: OperationRecord,
    *,
    owner: str | None,
    live_owners: Collection[str],
    now: float,
    history: Sequence[HistoryRow] = (),
    breaker: BreakerRow | None = None,
) -> Waiting:
    """What ``record`` waits on now (the ledger's rule, first match wins). ``history``
    tells when the status was last read; ``breaker`` is the holder's breaker for the
    record's server, if one is kept: an open one holds every request to that server."""
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
    open_breaker = _open_breaker(breaker, record.server, owner)
    until = _later(record.next_poll_at, open_breaker.open_until if open_breaker else None)
    cut_off = _breaker_line(open_breaker, now) if open_breaker else None
    if record.failed_attempts > 0:
        return Waiting(
            reason="backoff",
            headline=f"a retry: the last request failed ({record.failed_attempts} in a row)"
            + (" and the server's circuit breaker is open" if cut_off else ""),
            details=_present(f"last error: {record.last_error or 'unknown'}", cut_off, lease),
            until=until,
        )
    return Waiting(
        reason="server",
        headline=_server_headline(record)
        + (" — its circuit breaker is open, no request leaves before then" if cut_off else ""),
        details=_present(
            _last_status(record),
            _last_read(history, record, now),
            _next_request(record, now),
            cut_off,
            lease,
        ),
        until=until,
    )


def _next_request(record: OperationRecord, now: float) -> str:
    """When the next request is due: a poll where the state polls, else the create, the
    lookup or the fetch the state names."""
    what = "request" if record.state in NOT_POLLING_STATES else "poll"
    if record.next_poll_at is None:
        return f"no {what} planned"
    return f"next {what} at {stamp(record.next_poll_at)} ({relative(record.next_poll_at, now)})"


def _present(*lines: str | None) -> tuple[str, ...]:
    return tuple(line for line in lines if line)


def _later(first: float | None, second: float | None) -> float | None:
    present = [t for t in (first, second) if t is not None]
    return max(present) if present else None


def _open_breaker(breaker: BreakerRow | None, server: str, owner: str) -> BreakerRow | None:
    """The holder's breaker for ``server`` if it is open (None otherwise)."""
    if breaker is None or (breaker.server, breaker.owner) != (server, owner):
        return None
    return breaker if breaker.state is BreakerState.OPEN else None


def _breaker_line(breaker: BreakerRow, now: float) -> str:
    return (
        f"circuit breaker of {breaker.owner} for this server: {breaker_until(breaker, now)},"
        f" after {breaker.failures} failures in a row; last error:"
        f" {breaker.last_error or 'unknown'}"
    )


def breaker_until(breaker: BreakerRow, now: float) -> str:
    """How long an open breaker holds requests back, or that its trial is due."""
    until = breaker.open_until
    if until is None or until > now:
        return f"open until {stamp(until)} ({relative(until, now)})"
    return f"open; its trial request was due at {stamp(until)} ({relative(until, now)})"


def last_status_read(history: Sequence[HistoryRow]) -> HistoryRow | None:
    """The history row written when the server's answer last told the status."""
    return next((row for row in reversed(history) if row.event in STATUS_READS), None)


def _last_read(history: Sequence[HistoryRow], record: OperationRecord, now: float) -> str:
    row = last_status_read(history)
    if row is None:
        return "no status read yet"
    return (
        f"last status read at {stamp(row.at)} ({relative(row.at, now)}),"
        f" {record.poll_count} poll(s) so far"
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
    following_rows: list[HistoryRow | None] = [*history[1:], None] if history else []
    for row, following in zip(history, following_rows, strict=True):
        if row.state in (State.ACCEPTED, State.CANCELLED_ACCEPTED):
            break
        end = following.at if following is not None else now
        span = max(0.0, end - row.at)
        if row.state in PERSON_STATES:
            waiting += span
        else:
            working += span
    return Clocks(working_s=working, waiting_s=waiting)


def stamp(at: float | None) -> str:
    """A moment as the pages show it (UTC, to the second)."""
    if at is None:
        return "—"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(at: float | None, now: float) -> str:
    """``in 3.0 s`` or ``2 min 05 s ago``."""
    if at is None:
        return "—"
    delta = at - now
    return f"in {duration(delta)}" if delta >= 0 else f"{duration(-delta)} ago"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Fold:
    """One timeline row: a run of history rows with the same event and state, written
    by the same holder at the same epoch."""

    first: HistoryRow
    last: HistoryRow
    count: int

    @property
    def epoch_changed(self) -> bool:
        return self.first.event == "ExecutionClaimed"


def timeline(
    history: Sequence[HistoryRow], refused: Sequence[RefusedWrite] = ()
) -> list[Fold | RefusedWrite]:
    """History with runs of the same event and state by the same writer at the same
    epoch folded (repeated polls), and each refused write in its place by the ledger's
    stamps (a refusal ends a run, as a change of holder or epoch does)."""
    entries: list[Fold | RefusedWrite] = []
    waiting = sorted(refused, key=lambda r: r.at_utc)
    for row in history:
        while waiting and waiting[0].at_utc < row.at_utc:
            entries.append(waiting.pop(0))
        last = entries[-1] if entries else None
        if isinstance(last, Fold) and _run_key(last.first) == _run_key(row):
            entries[-1] = dataclasses.replace(last, last=row, count=last.count + 1)
        else:
            entries.append(Fold(first=row, last=row, count=1))
    return entries + waiting


def _run_key(row: HistoryRow) -> tuple[str, State, str | None, int]:
    return row.event, row.state, row.owner, row.execution_epoch


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
    allowed += SETTLING
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
