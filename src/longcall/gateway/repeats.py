"""When a host call is the same call as an earlier one, and when it is a new run (G1).

Owns: the one rule (:func:`joins`) that says whether a host call attaches to the newest
earlier call node of the same (principal, tool, arguments), and the defaults it runs
with. Pure: the caller reads the node's state and times from the ledger. Must not: read
the clock, the ledger or anything else.

A same call joins an earlier node while it is open; after it ended, while its outcome
has not reached a host and it ended less than ``undelivered_s`` ago, or while its outcome
was last given to a host less than ``grace_s`` ago. The grace is longer than any host's
own timeout plus a retry (Claude Desktop gives up at about 4 minutes), so a response
lost in flight and retried after the host's timeout still finds its outcome, however
often that repeats; a call made later than that is a deliberate repeat and runs the tool
again.

Deliveries are kept as write-once marks, one per grace period (:func:`delivery_period`):
the last delivery is known to lie in the newest period marked, and is taken to be as
late as that period allows (:func:`last_delivery`), so a retry is never cut off early.

Both windows count only the gateway's uptime (:func:`uptime_since`): a span in which no
gateway process was alive (a downtime, from the ledger) is taken out of the time since
the end or the delivery, so a host whose retry could not reach a gateway that was down
still finds its outcome when the gateway is back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from longcall.gateway.handles import HostCall, handle_for, node_for

REPEATS_MAX = 10_000

DEFAULT_GRACE_S = 300.0
"""After an outcome reached a host: longer than a host's timeout plus its retry."""
DEFAULT_UNDELIVERED_S = 600.0
"""An ended call whose outcome never reached a host is joined this long."""

Span = tuple[float, float]
"""(start, end) of a downtime: no gateway process was alive."""


def uptime_since(then: float, now: float, downtimes: Sequence[Span] = ()) -> float:
    """The time from ``then`` to ``now`` that a gateway was up: the elapsed time minus
    its overlap with the downtimes (which may overlap each other)."""
    up = now - then
    covered = then
    for start, end in sorted(downtimes):
        start, end = max(start, covered), min(end, now)
        if end > start:
            up -= end - start
            covered = end
    return up


def joins(
    *,
    is_open: bool,
    ended_at: float,
    delivered_at: float | None,
    ever_delivered: bool,
    now: float,
    grace_s: float = DEFAULT_GRACE_S,
    undelivered_s: float = DEFAULT_UNDELIVERED_S,
    downtimes: Sequence[Span] = (),
) -> bool:
    """Whether a same call made at ``now`` attaches to this earlier call node; the time
    since its end or its delivery counts the gateway's uptime only."""
    if is_open:
        return True
    if delivered_at is not None and uptime_since(delivered_at, now, downtimes) < grace_s:
        return True
    return not ever_delivered and uptime_since(ended_at, now, downtimes) < undelivered_s


def delivery_period(now: float, grace_s: float = DEFAULT_GRACE_S) -> int:
    """The grace period ``now`` falls in: deliveries are marked once per period."""
    return int(now // grace_s)


def last_delivery(
    marked: Callable[[int], bool],
    now: float,
    grace_s: float = DEFAULT_GRACE_S,
    downtimes: Sequence[Span] = (),
) -> float | None:
    """The latest time an outcome may have been given, from the marks of this period
    back to the newest one that can still make a call join (this one and the one before,
    and one more for each grace period of downtime since); None: not given lately, or
    never."""
    newest = delivery_period(now, grace_s)
    period = newest
    while True:
        latest = now if period == newest else (period + 1) * grace_s
        if uptime_since(latest, now, downtimes) >= grace_s:
            return None
        if marked(period):
            return latest
        period -= 1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Earlier:
    """What the ledger holds of an earlier call node: open or not, and since when ended."""

    is_open: bool
    ended_at: float
    delivered_at: float | None
    """From :func:`last_delivery`."""
    ever_delivered: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """The call node a host call resolves to."""

    repeat: int
    handle: str
    node: str
    joined: bool
    """An earlier node of the same call (attach to it); False: a new node (run it)."""


def resolve(
    call: HostCall,
    *,
    key: bytes,
    find: Callable[[str], Earlier | None],
    now: float,
    grace_s: float = DEFAULT_GRACE_S,
    undelivered_s: float = DEFAULT_UNDELIVERED_S,
    downtimes: Sequence[Span] = (),
) -> Resolution:
    """The first node, by repeat counter, that the call joins or that does not exist yet.

    ``find(node)`` reads what the ledger holds of a node (None: no such node);
    ``downtimes``: the gateway's downtimes that may overlap the windows."""
    for repeat in range(REPEATS_MAX):
        handle = handle_for(key, call, repeat)
        node = node_for(call.principal, handle)
        earlier = find(node)
        if earlier is None:
            return Resolution(repeat=repeat, handle=handle, node=node, joined=False)
        if joins(
            is_open=earlier.is_open,
            ended_at=earlier.ended_at,
            delivered_at=earlier.delivered_at,
            ever_delivered=earlier.ever_delivered,
            now=now,
            grace_s=grace_s,
            undelivered_s=undelivered_s,
            downtimes=downtimes,
        ):
            return Resolution(repeat=repeat, handle=handle, node=node, joined=True)
    raise ValueError(f"the same call was repeated more than {REPEATS_MAX} times")
