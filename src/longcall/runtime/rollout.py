"""The rollout plan at work (SPEC R1-R3, P6): which adapter version a new call uses, and
the rollback of in-flight operations to the old version.

Owns: the stable hash that puts a call node in the canary share, :func:`route` (the
version a new call of a protocol must use under the plan, or AdapterDisabled), and
:func:`rollback` (the plan rows and the rebinding of open operations, one ledger
transaction for the operations). The plan itself is stored in the ledger
(``Ledger.rollout_plan``), so every worker routes alike. Everything takes ``now``;
nothing here reads a clock or draws outside the ``rng`` it is given.

Must not: send anything, or decide an operation's state (the core machine does: a
rollback is ``ExecutionClaimed`` at a higher epoch, plus the old adapter version).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from longcall.core import OperationRecord, handle
from longcall.core import events as e
from longcall.core.record import evolve
from longcall.errors import AdapterDisabled, UsageError
from longcall.ledger import AdapterPlan, Ledger

TAKES_NEW_CALLS = ("enabled", "canary")


def canary_bucket(call_node_id: str) -> float:
    """Where a call node falls in [0, 100): the same for every worker, every time."""
    digest = hashlib.sha256(call_node_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 100.0


def route(plan: Sequence[AdapterPlan], *, protocol: str, offered: str, call_node_id: str) -> str:
    """The adapter version a new call of ``protocol`` uses (R2): the canary's for its
    stable share of call nodes, else the enabled one; ``offered`` when the plan says
    nothing about the protocol. AdapterDisabled when no version takes new calls (P6)."""
    rows = [p for p in plan if p.protocol == protocol]
    if not rows:
        return offered
    canary = next((p for p in rows if p.state == "canary"), None)
    enabled = next((p for p in rows if p.state == "enabled"), None)
    if canary is not None and canary_bucket(call_node_id) < canary.canary_percent:
        return canary.adapter_version
    if enabled is not None:
        return enabled.adapter_version
    if canary is not None:
        return canary.adapter_version
    raise AdapterDisabled(
        f"no {protocol} adapter version takes new calls "
        f"({', '.join(f'{p.adapter_version}: {p.state}' for p in rows)})"
    )


def rollback(
    ledger: Ledger,
    *,
    protocol: str,
    from_version: str,
    to_version: str,
    now: float,
    rng: random.Random,
    note: str = "",
) -> list[OperationRecord]:
    """Roll ``protocol`` back from ``from_version`` to ``to_version`` (R3): new calls go
    to the old version, and every in-flight operation of the new one is rebound to the
    old one at a higher execution epoch and let go — whoever drove it is fenced, a
    worker claims it afresh. Never "time out and call again": the same remote operation
    goes on. Returns the rebound records."""
    if from_version == to_version:
        raise UsageError("a rollback needs two different adapter versions")
    ledger.set_rollout(
        AdapterPlan(protocol=protocol, adapter_version=from_version, state="disabled", note=note)
    )
    ledger.set_rollout(
        AdapterPlan(protocol=protocol, adapter_version=to_version, state="enabled", note=note)
    )

    def decide(record: OperationRecord) -> OperationRecord:
        claim = e.ExecutionClaimed(new_epoch=record.execution_epoch + 1)
        claimed = handle(record, claim, now=now, jitter=rng.random()).record
        return evolve(claimed, adapter_version=to_version)

    return ledger.rebind_open(protocol, from_version, decide=decide)


__all__ = ["TAKES_NEW_CALLS", "canary_bucket", "rollback", "route"]
