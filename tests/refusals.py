"""Assertions shared by the bad-input tests of every protocol mapping: an answer that
cannot be ours, or that is no result, is refused in the core's words and never accepted
(X6, C3, C4)."""

from __future__ import annotations

from longcall.adapters.base import Outcome
from longcall.core import OperationRecord, ServerStatus, State, handle
from longcall.core import events as e
from longcall.core.retry import FailureKind, RequestKind


def refused(outcome: Outcome, request: RequestKind, failure: FailureKind) -> e.RequestFailed:
    """``outcome`` is a ``RequestFailed`` of ``request`` for ``failure``, carrying nothing."""
    event = outcome.event
    assert isinstance(event, e.RequestFailed), event
    assert event.request is request
    assert event.failure is failure
    assert outcome.payload is None
    return event


def not_accepted(outcome: Outcome, failure: FailureKind | None) -> None:
    """A fetch outcome that accepts nothing: refused for ``failure``, or (None) a fetch
    failure the core escalates at once."""
    if failure is not None:
        refused(outcome, RequestKind.FETCH, failure)
        return
    assert isinstance(outcome.event, e.ResultFetchFailed), outcome.event
    assert outcome.event.retryable is False
    assert outcome.payload is None


def fetching(record: OperationRecord) -> OperationRecord:
    """``record`` after a completed terminal was observed and the result fetch began."""
    observed = handle(
        record, e.TerminalObserved(status=ServerStatus.COMPLETED), now=1.0, jitter=0.5
    ).record
    return handle(observed, e.ResultFetchStarted(), now=2.0, jitter=0.5).record


def escalated_at_once(record: OperationRecord, event: e.Event) -> OperationRecord:
    """The core hands ``record`` to an operator on ``event`` alone (no retry), with the
    reason, and accepts nothing."""
    decided = handle(record, event, now=3.0, jitter=0.5)
    assert decided.record.state is State.RECONCILIATION_REQUIRED
    assert decided.record.result_digest is None
    assert not any(type(c).__name__ == "AcceptTerminal" for c in decided.commands)
    reason = getattr(event, "detail", None) or getattr(event, "reason", "")
    assert reason in (decided.record.reconciliation_reason or "")
    return decided.record
