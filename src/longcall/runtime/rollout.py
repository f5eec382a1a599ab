"""The rollout plan at work (SPEC R1-R3, P6): which adapter version a new call uses,
the shadow copies of read-only calls, and the rollback of in-flight operations to the
old version.

Owns: the stable hash that puts a call node in the canary share, :func:`route` (the
version a new call of a protocol must use under the plan, or AdapterDisabled),
:func:`rollback` (the plan rows and the rebinding of open operations, one ledger
transaction for the operations), and the shadow rules (R1): which versions shadow a
protocol, the derived call node of a shadow, and the comparison of a shadow with its
primary once both are terminal (:func:`compare_shadow`, :func:`shadow_report`). The
plan itself is stored in the ledger (``Ledger.rollout_plan``), so every worker routes
alike. Everything takes ``now``; nothing here reads a clock or draws outside the
``rng`` it is given.

Must not: send anything, or decide an operation's state (the core machine does: a
rollback is ``ExecutionClaimed`` at a higher epoch, plus the old adapter version).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Sequence

from longcall.core import OperationRecord, TerminalReceipt, handle
from longcall.core.events import ExecutionClaimed
from longcall.core.record import evolve
from longcall.errors import AdapterDisabled, UsageError
from longcall.ledger import AdapterPlan, Ledger, ShadowComparison

TAKES_NEW_CALLS = ("enabled", "canary")
SHADOW_MARK = "~shadow-"
"""Between a primary call node and a shadow version in the shadow's call node id."""


def canary_bucket(call_node_id: str) -> float:
    """Where a call node falls in [0, 100): the same for every worker, every time."""
    digest = hashlib.sha256(call_node_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 100.0


def route(plan: Sequence[AdapterPlan], *, protocol: str, offered: str, call_node_id: str) -> str:
    """The adapter version a new call of ``protocol`` uses (R2): the canary's for its
    stable share of call nodes, else the enabled one — or, with none enabled, the
    version the adapter offers unless the plan takes it out (a canary is a share, never
    all new calls); ``offered`` when the plan says nothing about the protocol.
    AdapterDisabled when no version takes new calls (P6)."""
    rows = [p for p in plan if p.protocol == protocol]
    if not rows:
        return offered
    canary = next((p for p in rows if p.state == "canary"), None)
    enabled = next((p for p in rows if p.state == "enabled"), None)
    if canary is not None and canary_bucket(call_node_id) < canary.canary_percent:
        return canary.adapter_version
    if enabled is not None:
        return enabled.adapter_version
    offered_row = next((p for p in rows if p.adapter_version == offered), None)
    if offered_row is None:
        return offered  # the plan never took the adapter's own version out
    if canary is not None:
        return canary.adapter_version
    raise AdapterDisabled(
        f"no {protocol} adapter version takes new calls "
        f"({', '.join(f'{p.adapter_version}: {p.state}' for p in rows)})"
    )


def new_calls_to(plan: AdapterPlan) -> bool:
    """Whether a plan row sends new calls to its version: enabled, or a canary with a
    share above nothing."""
    return plan.state == "enabled" or (plan.state == "canary" and plan.canary_percent > 0)


def uncarried_target(plan: AdapterPlan, carried: frozenset[tuple[str, str]]) -> str | None:
    """Why setting ``plan`` would route new calls to a version no worker of this build
    runs (``carried``: the versions this build's adapters bind), or None when it would
    not. Such calls wait for a worker of another build, and a caller of this build is
    refused them, so the plan is refused unless the operator says such workers exist."""
    if not new_calls_to(plan) or (plan.protocol, plan.adapter_version) in carried:
        return None
    ours = sorted(v for p, v in carried if p == plan.protocol)
    runs = f"runs {plan.protocol} {', '.join(ours)}" if ours else f"has no {plan.protocol} adapter"
    return (
        f"no worker of this build runs {plan.protocol} {plan.adapter_version} (this build"
        f" {runs}), so new calls routed there would wait for a worker of another build and"
        " callers of this build would be refused them"
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
        claim = ExecutionClaimed(new_epoch=record.execution_epoch + 1)
        claimed = handle(record, claim, now=now, jitter=rng.random()).record
        return evolve(claimed, adapter_version=to_version)

    return ledger.rebind_open(protocol, from_version, decide=decide)


def shadow_versions(plan: Sequence[AdapterPlan], *, protocol: str) -> list[str]:
    """The versions of ``protocol`` in the ``shadow`` state: each gets a copy of every
    new call of a read-only tool (R1)."""
    return [p.adapter_version for p in plan if p.protocol == protocol and p.state == "shadow"]


def shadow_call_node(call_node_id: str, version: str) -> str:
    """The call node of the shadow of ``call_node_id`` through ``version``: derived, so
    a retried call or another worker names the same shadow (one remote operation)."""
    return f"{call_node_id}{SHADOW_MARK}{version}"


def differences(
    primary: OperationRecord,
    primary_receipt: TerminalReceipt | None,
    shadow: OperationRecord,
    shadow_receipt: TerminalReceipt | None,
) -> list[str]:
    """What differs between two terminal operations' outcomes: state, the server's
    terminal status, the kind of result and its digest (empty: they match)."""
    pairs = (
        ("state", primary.state.value, shadow.state.value),
        (
            "status",
            primary_receipt.terminal_status.value if primary_receipt else None,
            shadow_receipt.terminal_status.value if shadow_receipt else None,
        ),
        (
            "result kind",
            primary.result_kind.value if primary.result_kind else None,
            shadow.result_kind.value if shadow.result_kind else None,
        ),
        (
            "result digest",
            primary_receipt.result_digest if primary_receipt else primary.result_digest,
            shadow_receipt.result_digest if shadow_receipt else shadow.result_digest,
        ),
    )
    return [f"{name}: {a} (primary) != {b} (shadow)" for name, a, b in pairs if a != b]


def compare_shadow(ledger: Ledger, shadow_node: str) -> ShadowComparison | None:
    """Compare a shadow with its primary and record the comparison, once both are
    terminal (R1); None while either is still open (or ``shadow_node`` is no shadow).
    A pair is compared once: a second call records nothing new."""
    shadow = ledger.find(shadow_node)
    if shadow is None or shadow.shadow_of is None or not shadow.is_terminal:
        return None
    primary = ledger.find(shadow.shadow_of)
    if primary is None or not primary.is_terminal:
        return None
    found = differences(
        primary, ledger.receipt(primary.call_node_id), shadow, ledger.receipt(shadow_node)
    )
    comparison = ShadowComparison(
        shadow_node=shadow_node,
        primary_node=primary.call_node_id,
        protocol=shadow.protocol,
        adapter_version=shadow.adapter_version,
        verdict="differ" if found else "match",
        detail="; ".join(found),
    )
    ledger.put_shadow_comparison(comparison)
    return comparison


@dataclasses.dataclass(slots=True, kw_only=True)
class ShadowTally:
    """The shadow pairs of one (protocol, shadow version)."""

    protocol: str
    adapter_version: str
    matched: int = 0
    differed: list[ShadowComparison] = dataclasses.field(default_factory=list)
    pending: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(shadow call node, primary call node) of the pairs not both terminal yet."""

    def to_json(self) -> dict[str, object]:
        return {
            "protocol": self.protocol,
            "adapter_version": self.adapter_version,
            "matched": self.matched,
            "differed": [
                {"shadow": c.shadow_node, "primary": c.primary_node, "detail": c.detail}
                for c in self.differed
            ],
            "pending": [{"shadow": s, "primary": p} for s, p in self.pending],
        }


def shadow_report(ledger: Ledger) -> list[ShadowTally]:
    """Per (protocol, shadow version): how many shadow pairs matched, which differed
    (call nodes and what differed) and which are still pending. Pairs that became
    terminal without a comparison (their last acceptance was in a process that had no
    reason to compare, or stopped first) are compared and recorded now."""
    compared = {c.shadow_node: c for c in ledger.shadow_comparisons()}
    tallies: dict[tuple[str, str], ShadowTally] = {}
    for shadow_node, primary_node in ledger.shadow_pairs():
        comparison = compared.get(shadow_node) or compare_shadow(ledger, shadow_node)
        if comparison is not None:
            key = (comparison.protocol, comparison.adapter_version)
        else:
            record = ledger.get(shadow_node)
            key = (record.protocol, record.adapter_version)
        tally = tallies.setdefault(key, ShadowTally(protocol=key[0], adapter_version=key[1]))
        if comparison is None:
            tally.pending.append((shadow_node, primary_node))
        elif comparison.verdict == "match":
            tally.matched += 1
        else:
            tally.differed.append(comparison)
    return [tallies[key] for key in sorted(tallies)]


__all__ = [
    "SHADOW_MARK",
    "TAKES_NEW_CALLS",
    "ShadowTally",
    "canary_bucket",
    "compare_shadow",
    "differences",
    "new_calls_to",
    "rollback",
    "route",
    "shadow_call_node",
    "shadow_report",
    "shadow_versions",
    "uncarried_target",
]
