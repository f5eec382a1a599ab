"""When a host call is the same call as an earlier one, and when it is a new run (G1).

Owns: the one rule (:func:`joins`) that says whether a host call attaches to the newest
earlier call node of the same (principal, tool, arguments), and the defaults it runs
with. Pure: the caller reads the node's state and times from the ledger. Must not: read
the clock, the ledger or anything else.

A same call joins an earlier node while it is open; after it ended, while its outcome
has not reached a host and it ended less than ``undelivered_s`` ago, or while its outcome
reached a host less than ``grace_s`` ago. The grace is longer than any host's own
timeout plus a retry (Claude Desktop gives up at about 4 minutes), so a response lost
in flight and retried after the host's timeout still finds its outcome; a call made
later than that is a deliberate repeat and runs the tool again.
"""

from __future__ import annotations

DEFAULT_GRACE_S = 300.0
"""After an outcome reached a host: longer than a host's timeout plus its retry."""
DEFAULT_UNDELIVERED_S = 600.0
"""An ended call whose outcome never reached a host is joined this long."""


def joins(
    *,
    is_open: bool,
    ended_at: float,
    delivered_at: float | None,
    now: float,
    grace_s: float = DEFAULT_GRACE_S,
    undelivered_s: float = DEFAULT_UNDELIVERED_S,
) -> bool:
    """Whether a same call made at ``now`` attaches to this earlier call node."""
    if is_open:
        return True
    if delivered_at is None:
        return now - ended_at < undelivered_s
    return now - delivered_at < grace_s
