"""The poll schedule and the per-server token bucket (SPEC X3), as pure functions.

Rules, in order:

1. The server's suggested interval (``pollIntervalMs``, AIP-151 hints) is a floor:
   we never poll an operation sooner than that after the last poll.
2. While the server gives an interval and answers normally, we poll at the floor plus
   a jitter of at most ``jitter_fraction`` of it, counted from the reply — so a
   completion is seen within ``floor * (1 + jitter_fraction)`` plus a poll's round trip
   and its commits (the executor uses 0.1, leaving room for those within X3's
   1.25× target; the default 0.2 is the simulator's).
3. Without a server interval, or after errors, the delay backs off exponentially
   (``floor * factor**step``, capped), with full jitter on the part above the floor.
4. ``Retry-After`` pushes the next poll out, never below the floor.
5. The operation's expiry and our total wait budget cap the schedule (the caller
   escalates when the budget is spent).

The token bucket shares one QPS limit among all operations of one server.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PollPolicy:
    interval_s_default: float = 2.0
    """The floor when the server suggests none."""
    interval_s_min: float = 0.05
    """We never poll faster than this, whatever a server suggests."""
    jitter_fraction: float = 0.2
    backoff_factor: float = 1.5
    backoff_cap_s: float = 60.0


def poll_delay_s(
    policy: PollPolicy,
    *,
    server_interval_s: float | None,
    backoff_step: int,
    jitter: float,
    retry_after_s: float | None = None,
) -> float:
    """Seconds from now to the next poll of one operation."""
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter draw must be in [0, 1], got {jitter!r}")
    floor = max(policy.interval_s_min, server_interval_s or policy.interval_s_default)
    # One ceiling for every step: the jitter band (rule 2) at step 0, growing with the
    # step (rule 3) but never below that band, so backing off never polls sooner than a
    # normal poll might; the cap bounds both, never below the floor (rule 1).
    growth = 1.0 + policy.jitter_fraction
    if backoff_step > 0:
        growth = max(growth, policy.backoff_factor**backoff_step)
    ceiling = max(floor, min(policy.backoff_cap_s, floor * growth))
    delay = floor + jitter * (ceiling - floor)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    return delay


def cap_at_limits(at: float, *limits: float | None) -> float:
    """Clamp a planned time to the earliest of the given limits (None = no limit)."""
    present = [limit for limit in limits if limit is not None]
    return min([at, *present])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TokenBucket:
    """A token bucket as a value: ``rate_per_s`` tokens a second, at most ``burst`` saved.

    ``take(now)`` answers when the caller may send: immediately (wait 0) when a token
    is there, else after the time the next token needs. Tokens are reserved when
    taken, so concurrent callers queue up behind each other instead of all waking at
    once. Over any window of length ``w`` at most ``burst + rate_per_s * w`` requests
    pass.
    """

    rate_per_s: float
    burst: float = 1.0
    tokens: float = 1.0
    updated_at: float = 0.0

    @classmethod
    def full(cls, rate_per_s: float, *, burst: float = 1.0, now: float = 0.0) -> TokenBucket:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        return cls(rate_per_s=rate_per_s, burst=burst, tokens=burst, updated_at=now)

    def take(self, now: float) -> tuple[TokenBucket, float]:
        """Reserve one token; return the new bucket and the seconds to wait before sending."""
        # A caller whose ``now`` lags behind the bucket's clock (read before an earlier
        # take) is measured from the bucket's clock, else its send could jump the queue.
        start = max(now, self.updated_at)
        elapsed = start - self.updated_at
        tokens = min(self.burst, self.tokens + elapsed * self.rate_per_s) - 1.0
        wait_s = (start - now) + (0.0 if tokens >= 0 else -tokens / self.rate_per_s)
        # Built directly rather than with dataclasses.replace, which reads the fields
        # anew at every call: a poll takes a token each time it leaves.
        bucket = TokenBucket(
            rate_per_s=self.rate_per_s, burst=self.burst, tokens=tokens, updated_at=start
        )
        return bucket, wait_s


WINDOW_WAIT_S_MIN = 0.001


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WindowLimit:
    """At most ``limit`` sends in any window of ``window_s`` (a sliding log of send times).

    The token bucket spreads reservations; this is the strict guarantee at the moment a
    request actually leaves, even when the driver dispatches a reserved slot late
    (X3: "the highest poll rate in any one-second window <= the configured QPS").
    """

    limit: int
    window_s: float = 1.0
    sent: tuple[float, ...] = ()

    def admit(self, now: float) -> tuple[WindowLimit, float]:
        """Record a send at ``now`` if the window allows it (wait 0), else say how long to wait."""
        recent = tuple(t for t in self.sent if now - t < self.window_s)
        if len(recent) >= self.limit:
            # Never a zero or vanishing wait when refused: at UNIX-epoch magnitudes a
            # sub-microsecond wait rounds back to ``now`` and the caller would spin.
            wait_s = max(self.window_s - (now - recent[0]), WINDOW_WAIT_S_MIN)
            return WindowLimit(limit=self.limit, window_s=self.window_s, sent=recent), wait_s
        return WindowLimit(limit=self.limit, window_s=self.window_s, sent=(*recent, now)), 0.0
