"""Which changes of a worker's breaker are kept in the ledger (SPEC X9, O2): opening,
opening again after a failed trial, closing; not each failure while it stays closed,
nor the move to half-open."""

from __future__ import annotations

from longcall.core.retry import CircuitBreaker, FailureKind
from longcall.runtime.breakers import worth_keeping

DOWN = FailureKind.UNAVAILABLE


def test_only_opening_and_closing_are_kept() -> None:
    """A closed breaker counting failures is not kept; its opening, a failed trial that
    opens it anew and the closing trial are; letting a trial through is not."""
    closed = CircuitBreaker(failures_max=2, reset_s=1.0)
    counting = closed.on_failure(10.0, DOWN)
    assert not worth_keeping(None, counting)
    opened = counting.on_failure(11.0, DOWN)
    assert worth_keeping(counting, opened)
    trial = opened.on_request(12.5)
    assert not worth_keeping(opened, trial)
    reopened = trial.on_failure(12.6, DOWN)
    assert worth_keeping(trial, reopened)
    assert not worth_keeping(reopened, reopened)
    recovered = reopened.on_request(14.0).on_success()
    assert worth_keeping(reopened.on_request(14.0), recovered)
    assert not worth_keeping(recovered, recovered.on_success())
