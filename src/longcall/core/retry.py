"""Retry classification, backoff with full jitter, and a circuit breaker (SPEC X9).

All pure: the jitter draw (a float in [0, 1)) and ``now`` are arguments. Adapters map
their wire errors (HTTP status, JSON-RPC code, exception type) onto
:class:`FailureKind`; the decisions below never see a wire code.
"""

from __future__ import annotations

import dataclasses
import enum


class FailureKind(enum.Enum):
    """Why a request failed, in the core's words."""

    CONNECT_FAILED = "connect_failed"
    """The request never reached the server (refused, DNS): it was certainly not processed."""
    TRANSPORT = "transport"
    """The connection broke mid-request: it may or may not have been processed."""
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    SERVER_ERROR = "server_error"
    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    VALIDATION = "validation"
    MALFORMED_RESPONSE = "malformed_response"
    REFUSED_UNREAD = "refused_unread"
    """The server refused the request itself before reading it as one (a body over its
    size limit, a body it cannot parse): nothing was created, and the same request
    would be refused the same way again, so it is never resent."""
    TOO_LARGE = "too_large"
    """The answer exceeded a size or line cap (C4): asking again would bring it again."""
    REDIRECT_REFUSED = "redirect_refused"
    """The server redirected us where we do not follow (another origin, too many hops,
    a redirect that would drop the method or body): asking again brings it again."""
    FOREIGN_IDENTITY = "foreign_identity"
    """The answer names another operation than the one asked about (C3): never trusted,
    never retried into acceptance; an operator looks."""

    def __repr__(self) -> str:
        return f"FailureKind.{self.name}"


class RequestKind(enum.Enum):
    """Which of our requests failed."""

    SUBMIT = "submit"
    LOOKUP = "lookup"
    POLL = "poll"
    CANCEL = "cancel"
    FETCH = "fetch"
    INPUT = "input"

    def __repr__(self) -> str:
        return f"RequestKind.{self.name}"


RETRYABLE: frozenset[FailureKind] = frozenset(
    {
        FailureKind.CONNECT_FAILED,
        FailureKind.TRANSPORT,
        FailureKind.TIMEOUT,
        FailureKind.RATE_LIMITED,
        FailureKind.UNAVAILABLE,
        FailureKind.SERVER_ERROR,
        # A garbled body is a transport-level accident until proven otherwise.
        FailureKind.MALFORMED_RESPONSE,
    }
)


def is_retryable(failure: FailureKind) -> bool:
    """429/5xx/transport: retry. 400/401/403/validation: never (X9)."""
    return failure in RETRYABLE


def settles_create(request: RequestKind, failure: FailureKind) -> bool:
    """Whether a failed request is itself the call's outcome: a create refused unread
    proves that no operation exists and that sending it again changes nothing, so it
    ends the call (a terminal error), never an operator's task (X2, X9)."""
    return request is RequestKind.SUBMIT and failure is FailureKind.REFUSED_UNREAD


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Exponential backoff with full jitter: ``U(0, min(cap, base * 2**attempt))``."""

    base_s: float = 0.5
    cap_s: float = 30.0
    attempts_max: int = 8
    """Consecutive failed attempts of one request before an operator is asked."""


def backoff_delay_s(policy: RetryPolicy, attempt: int, jitter: float) -> float:
    """Full-jitter delay before retry number ``attempt`` (1-based)."""
    _check_jitter(jitter)
    ceiling = min(policy.cap_s, policy.base_s * 2.0 ** max(0, attempt - 1))
    return jitter * ceiling


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"

    def __repr__(self) -> str:
        return f"BreakerState.{self.name}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CircuitBreaker:
    """A per-server breaker as a value: ``failures_max`` in a row opens it for ``reset_s``.

    After ``reset_s`` one trial request is let through (half-open); its success closes
    the breaker, its failure opens it again.
    """

    failures_max: int = 5
    reset_s: float = 30.0
    state: BreakerState = BreakerState.CLOSED
    consecutive_failures: int = 0
    opened_at: float | None = None

    def allows(self, now: float) -> bool:
        """May a request go to this server now?"""
        if self.state is BreakerState.OPEN:
            assert self.opened_at is not None
            return now >= self.opened_at + self.reset_s
        return True

    def retry_at(self) -> float | None:
        """When an open breaker lets the next trial through."""
        if self.state is BreakerState.OPEN and self.opened_at is not None:
            return self.opened_at + self.reset_s
        return None

    def on_request(self, now: float) -> CircuitBreaker:
        """Note that a request is being sent (moves OPEN → HALF_OPEN when due)."""
        if self.state is BreakerState.OPEN and self.allows(now):
            return dataclasses.replace(self, state=BreakerState.HALF_OPEN)
        return self

    def on_success(self) -> CircuitBreaker:
        if self.state is BreakerState.CLOSED and self.consecutive_failures == 0:
            return self  # already healthy: every successful reply lands here
        return dataclasses.replace(
            self, state=BreakerState.CLOSED, consecutive_failures=0, opened_at=None
        )

    def on_failure(self, now: float, failure: FailureKind) -> CircuitBreaker:
        """Only server-health failures count; a 400 says nothing about the server."""
        if not is_retryable(failure):
            return self
        failures = self.consecutive_failures + 1
        if self.state is BreakerState.HALF_OPEN or failures >= self.failures_max:
            return dataclasses.replace(
                self, state=BreakerState.OPEN, consecutive_failures=failures, opened_at=now
            )
        return dataclasses.replace(self, consecutive_failures=failures)


def _check_jitter(jitter: float) -> None:
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter draw must be in [0, 1], got {jitter!r}")
