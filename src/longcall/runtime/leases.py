"""A worker's lease as decisions: when to renew, when to claim, what to take, what to shed.

Owns: the lease numbers (:class:`LeasePolicy`), the deadlines of one worker's lease in
its driver's time (:class:`LeaseClock`: registered, renewed, lapsed, still long enough
to send), and the fair-share arithmetic over a :class:`~longcall.ledger.Census` — how
many operations a claim round may take, and which held ones to hand back (D1;
docs/design/leases-and-fencing.md says why these numbers).

Must not: read a clock, touch the ledger or hold operations: ``now``, the census and
what is held come in, decisions go out; the engine carries them out through the
ledger shell (:mod:`longcall.runtime.step`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from longcall.ledger import Census

SURPLUS_MIN = 2
"""A worker keeps at least this many operations above its fair share before shedding."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeasePolicy:
    """The lease numbers of a worker (docs/design/leases-and-fencing.md says why)."""

    lease_s: float = 30.0
    """How long a lease lasts without renewal: a worker that stops (killed, paused,
    cut off) loses its operations to the others this long after its last renewal."""
    renew_every_s: float = 10.0
    """Two renewals may fail in a row before the lease runs out."""
    send_margin_s: float = 5.0
    """No new request leaves when the lease has less than this left."""
    claim_every_s: float = 1.0
    """How often the worker looks for operations to take (and for operator writes)."""
    claim_batch: int = 500
    """At most this many operations are taken in one claim transaction."""
    surplus_slack: float = 0.25
    """A worker sheds operations only when it holds more than its fair share plus this
    fraction of it (and at least ``SURPLUS_MIN`` more), and claims only below its share:
    between the two each worker stays put, so operations do not ping-pong."""

    def __post_init__(self) -> None:
        if not 0 < self.renew_every_s < self.lease_s - self.send_margin_s:
            raise ValueError("need 0 < renew_every_s < lease_s - send_margin_s")

    @classmethod
    def of(cls, lease_s: float, **changes: Any) -> LeasePolicy:
        """A lease of ``lease_s`` with the default proportions: renewed every third of
        it, no new request in its last sixth, claim rounds at most every second."""
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s!r}")
        return cls(
            lease_s=lease_s,
            renew_every_s=lease_s / 3,
            send_margin_s=lease_s / 6,
            claim_every_s=min(1.0, lease_s / 6),
            **changes,
        )


class LeaseClock:
    """The deadlines of one worker's lease, as its driver's clock reads them."""

    def __init__(self, policy: LeasePolicy) -> None:
        self.policy = policy
        self.registered = False
        self.until = -math.inf
        """The lease runs out here unless renewed."""
        self.next_renew = 0.0
        self.next_claim = 0.0
        self.lapsed_at: float | None = None
        """When a renewal from the driver's own thread found the lease lapsed, until
        the next claim round counts it."""
        self.held_back = False
        """The lease was found too short to send: nothing leaves (and no request is
        planned to wake the driver) until it is renewed."""

    def start(self, now: float) -> None:
        """Registered at ``now``. The first claim round waits one interval, so that
        workers started together see each other in the census and split the work at
        once: otherwise the first would take everything and shed most of it again."""
        self.registered = True
        self.until = now + self.policy.lease_s
        self.held_back = False
        self.next_renew = now + self.policy.renew_every_s
        self.next_claim = now + self.policy.claim_every_s

    def renewed(self, now: float, *, next_renew: bool = True) -> None:
        """Renewed at ``now`` (``next_renew``: by the engine's own turn, which plans the
        next one; a heartbeat thread keeps its own rhythm)."""
        self.until = now + self.policy.lease_s
        if next_renew:
            self.next_renew = now + self.policy.renew_every_s
        self.held_back = False

    def stop(self) -> None:
        """Retired: no lease is held any more."""
        self.registered = False
        self.until = -math.inf

    def renew_due(self, now: float) -> bool:
        return now >= self.next_renew

    def claim_due(self, now: float) -> bool:
        """Whether a claim round is due at ``now``; if so, the next one is planned."""
        if now < self.next_claim:
            return False
        self.next_claim = now + self.policy.claim_every_s
        return True

    def claim_soon(self, now: float) -> None:
        """Bring the next claim round forward to ``now`` (the lease lapsed meanwhile)."""
        self.next_claim = min(self.next_claim, now)

    def valid(self, now: float) -> bool:
        """Whether a new request may leave at ``now``: the send margin is left."""
        return now < self.until - self.policy.send_margin_s

    def next_turn(self, *, external_heartbeat: bool) -> float:
        """When the engine's housekeeping has work next."""
        if external_heartbeat:
            return self.next_claim
        return min(self.next_renew, self.next_claim)


def fair_share(census: Census) -> int:
    """About ``open / live workers`` operations: what each worker should hold."""
    return math.ceil(census.open_operations / max(1, census.live_workers))


def claim_limit(census: Census, *, held: int, share: int, policy: LeasePolicy) -> int:
    """How many operations a claim round may take (0: none), holding ``held`` of a
    fair ``share``: only below the share, and at most a batch per transaction."""
    if census.claimable and held < share:
        return min(policy.claim_batch, share - held)
    return 0


def to_shed(
    held: Sequence[str],
    *,
    share: int,
    busy: Collection[str],
    wanted: Collection[str],
    policy: LeasePolicy,
) -> list[str] | None:
    """What to hand back of ``held`` (oldest first) above the share plus its slack; None:
    no surplus. The most recently taken go first: claims take the oldest, so shedding
    the oldest would hand the same operations back and forth at every change. One with
    a request in flight (``busy``) or that a caller waits on (``wanted``) is kept."""
    slack = max(SURPLUS_MIN, math.ceil(share * policy.surplus_slack))
    surplus = len(held) - share - slack
    if surplus <= 0:
        return None
    idle = [node for node in reversed(held) if node not in busy and node not in wanted]
    return idle[:surplus]


def combined(censuses: Iterable[Census]) -> Census:
    """One census of several versions' (each read for a version on its own)."""
    counted = list(censuses)
    return Census(
        open_operations=sum(c.open_operations for c in counted),
        live_workers=max((c.live_workers for c in counted), default=0),
        held=sum(c.held for c in counted),
        claimable=sum(c.claimable for c in counted),
    )


__all__ = [
    "SURPLUS_MIN",
    "LeaseClock",
    "LeasePolicy",
    "claim_limit",
    "combined",
    "fair_share",
    "to_shed",
]
