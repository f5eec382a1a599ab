"""One poll budget per server for every worker of a ledger (SPEC X3, D1): the slot arithmetic.

Every worker that polls a server draws *send slots* from one sequence per server
stored in the ledger (``poll_budget.next_free_at``). A slot is a moment at which one
poll may leave; consecutive slots are ``spacing_s`` apart, whoever holds them. A poll
leaves at its slot or up to ``SLOT_VALID_S`` later, never before and never after (a
late slot is dropped and the poll waits for a new one).

Why the spacing is ``(1 + SLOT_VALID_S + ARRIVAL_JITTER_S) / qps_max`` and not
``1 / qps_max``: a poll that reaches the server in a one-second window ``[t, t + 1)``
left at most ``SLOT_VALID_S`` after its slot and travelled for a time that varies by
at most ``ARRIVAL_JITTER_S``, so its slot lies in an open interval of length
``1 + SLOT_VALID_S + ARRIVAL_JITTER_S``; at that spacing such an interval holds at
most ``qps_max`` slots. The cap therefore holds *as measured at the server*, for the
sum of all workers, whatever each worker's event-loop lag, at the price of using
``1 / (1 + SLOT_VALID_S + ARRIVAL_JITTER_S)`` of the cap (80 % with the numbers
below). The moments are the workers' own clocks: workers whose clocks disagree by
``d`` seconds can exceed the cap by ``d * qps_max`` polls in a window (the
simulator's clock-skew worlds measure this).

The same row counts the slots granted per whole minute (:class:`BudgetUse`), so an
operator sees the cap beside its recent use (the console's servers page).

This module is pure (no clock, no I/O): the SQL backends run :func:`grant_slots`
inside a transaction on the server's row, and an engine without a shared ledger runs
it on its own in-memory value. It must not import anything above ``longcall.core``.
"""

from __future__ import annotations

import dataclasses
import math

SLOT_VALID_S = 0.15
"""How late after its slot a poll may still leave (covers event-loop lag)."""
ARRIVAL_JITTER_S = 0.1
"""How much the time from that check to the server's door may vary between two polls:
the adapter's own work and the connection pool on a loaded worker, then the network."""
GRANT_HORIZON_S = 0.5
"""One grant covers at most this much of the server's schedule: a worker cannot hoard
slots that another worker's due polls need."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PollGrant:
    """``count`` send slots for one server: ``first_at``, ``first_at + spacing_s``, ..."""

    server: str
    first_at: float
    spacing_s: float
    count: int
    valid_s: float = SLOT_VALID_S

    def slots(self) -> list[float]:
        return [self.first_at + i * self.spacing_s for i in range(self.count)]


def slot_spacing_s(qps_max: float) -> float:
    """The distance between two consecutive slots of one server (see the module note)."""
    if qps_max <= 0:
        raise ValueError(f"qps_max must be > 0, got {qps_max!r}")
    return (1.0 + SLOT_VALID_S + ARRIVAL_JITTER_S) / qps_max


def grant_size_max(qps_max: float) -> int:
    """The most slots one grant may hold (``GRANT_HORIZON_S`` worth, at least one)."""
    return max(1, math.floor(GRANT_HORIZON_S / slot_spacing_s(qps_max)))


def grant_slots(
    server: str, next_free_at: float | None, *, now: float, count: int, qps_max: float
) -> tuple[PollGrant, float]:
    """Take up to ``count`` slots from the server's sequence; return them and the new
    ``next_free_at``. A sequence that fell behind ``now`` starts again at ``now``
    (unused time is not saved up: no bursts after a quiet spell)."""
    if count < 1:
        raise ValueError(f"a grant needs count >= 1, got {count!r}")
    spacing = slot_spacing_s(qps_max)
    count = min(count, grant_size_max(qps_max))
    first = now if next_free_at is None else max(now, next_free_at)
    grant = PollGrant(server=server, first_at=first, spacing_s=spacing, count=count)
    return grant, first + count * spacing


USE_MINUTE_S = 60.0
"""The budget's use is counted per whole minute of the granting workers' clocks."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BudgetUse:
    """Send slots granted from one server's budget in the minute ``minute`` (whole
    minutes since the epoch) and in the minute before it."""

    minute: int = 0
    this_minute: int = 0
    last_minute: int = 0

    def add(self, slots: int, *, now: float) -> BudgetUse:
        """The use after ``slots`` more were granted at ``now``. A grant stamped before
        ``minute`` (a worker whose clock is behind) counts in the current minute: the
        counts never go back in time."""
        minute = math.floor(now / USE_MINUTE_S)
        if minute <= self.minute:
            return dataclasses.replace(self, this_minute=self.this_minute + slots)
        last = self.this_minute if minute == self.minute + 1 else 0
        return BudgetUse(minute=minute, this_minute=slots, last_minute=last)

    def seen_at(self, now: float) -> tuple[int, int]:
        """(slots granted in the last whole minute, slots granted so far in this one)
        as of ``now``: a count of an older minute is zero by then."""
        minute = math.floor(now / USE_MINUTE_S)
        if minute <= self.minute:
            return self.last_minute, self.this_minute
        if minute == self.minute + 1:
            return self.this_minute, 0
        return 0, 0


def slots_per_minute_max(qps_max: float) -> float:
    """How many send slots one minute of a server's budget holds at this cap."""
    return USE_MINUTE_S / slot_spacing_s(qps_max)
