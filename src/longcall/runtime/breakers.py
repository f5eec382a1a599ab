"""Each worker's circuit breakers, kept in the ledger as they open and close (SPEC X9, O2).

Owns: whether a change of one server's breaker is worth a row (:func:`worth_keeping`:
it opened, opened again after a failed trial, or closed; not each failure while it
stays closed, nor the move to half-open, which the row's until-time already tells) and
the row written (:func:`keep_breaker`). The breaker itself is
:class:`~longcall.core.retry.CircuitBreaker` (pure); the engine keeps one per server in
memory. Must not: decide anything about sending, or run on the event loop (the executor
calls it on its ledger thread, beside the reply it applied).
"""

from __future__ import annotations

import logging

from longcall.core.events import Event, RequestFailed
from longcall.core.retry import BreakerState, CircuitBreaker
from longcall.errors import LedgerUnavailable
from longcall.ledger import BreakerRow, Ledger

log = logging.getLogger(__name__)

LAST_ERROR_CHARS_MAX = 300
"""Characters of the failure that opened a breaker kept in its row."""


def worth_keeping(before: CircuitBreaker | None, after: CircuitBreaker | None) -> bool:
    """Whether the breaker moved between closed and open, or opened anew (None: a server
    this process has not met yet, a closed breaker)."""
    was = (BreakerState.CLOSED, None) if before is None else (before.state, before.opened_at)
    now = (BreakerState.CLOSED, None) if after is None else (after.state, after.opened_at)
    if now[0] is BreakerState.HALF_OPEN:
        return False  # only a request was let through: the row's until-time says so
    if was[0] is BreakerState.HALF_OPEN:
        was = (BreakerState.OPEN, was[1])
    return was != now


def failure_text(event: Event) -> str:
    """What went wrong, from the reply that changed the breaker ('' for a success)."""
    if not isinstance(event, RequestFailed):
        return ""
    text = f"{event.request.value}: {event.failure.value}"
    if event.detail:
        text += f" — {event.detail}"
    return text[:LAST_ERROR_CHARS_MAX]


def keep_breaker(
    ledger: Ledger,
    *,
    server: str,
    owner: str,
    before: CircuitBreaker | None,
    after: CircuitBreaker | None,
    event: Event,
) -> None:
    """Write the row of ``owner``'s breaker for ``server`` if it opened or closed. A
    ledger that fails here is logged, not raised: the reply is applied already, and the
    row only shows an operator what the worker decided."""
    if after is None or not worth_keeping(before, after):
        return
    row = BreakerRow(
        server=server,
        owner=owner,
        state=after.state,
        open_until=after.retry_at(),
        failures=after.consecutive_failures,
        last_error=failure_text(event),
    )
    try:
        ledger.put_breaker(row)
    except LedgerUnavailable:
        log.warning("could not keep the breaker of %s for %s in the ledger", owner, server)
