"""How an engine comes to hold the operations it drives: alone, or as one of the workers.

Owns: the two ways of holding. :class:`SoleDriver` (single-process mode) takes every
open operation of its ledger over, at once and whenever one changes. :class:`Claims` (a
worker, D1) keeps the worker's row (registered once, renewed on time or found lapsed,
retired on a clean stop) and the deadlines of its lease
(:class:`~longcall.runtime.leases.LeaseClock`), and runs the claim rounds: end the
leases of workers of this host proven dead, read the census, take up to the fair share
of what no live worker holds (per adapter version the worker runs), hand a surplus back,
re-read what is held. A worker proves it lives by a lock file it holds from its
registration until it retires or dies (:mod:`longcall.ledger.owners`): another worker
that can take that lock without waiting knows its process is gone, and ends its lease
at once instead of waiting it out (docs/design/leases-and-fencing.md). The arithmetic
is the pure lease decisions' (:mod:`longcall.runtime.leases`); every read and write
goes through the ledger shell (:mod:`longcall.runtime.step`).

Must not: plan requests or keep operations: what was taken is handed to the engine
(:class:`Claimant`) to plan, what was lost to be let go, and what the engine holds is
read from it.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping
from typing import Protocol

from longcall.core import OperationRecord
from longcall.ledger import Census, Ledger, VersionSet
from longcall.ledger.owners import OwnerLocks
from longcall.runtime import leases
from longcall.runtime.leases import LeaseClock, LeasePolicy
from longcall.runtime.step import LedgerShell

logger = logging.getLogger(__name__)

OWNER_SEPARATOR = ":"
"""What follows the host name in a worker's owner id (``host:pid:token``)."""


def worker_locks(ledger: Ledger) -> OwnerLocks | None:
    """The lock files by which the workers of ``ledger`` on this host prove each other
    dead (None: this ledger has no place for them, and leases decide alone)."""
    directory = ledger.worker_locks_dir()
    return None if directory is None else OwnerLocks(directory, separator=OWNER_SEPARATOR)


class Claimant(Protocol):
    """The engine, as a way of holding sees it."""

    @property
    def records(self) -> Mapping[str, OperationRecord]:
        """The operations it drives now."""
        ...

    def runs(self, record: OperationRecord) -> bool:
        """Whether it runs the adapter version ``record`` is bound to."""
        ...

    def adopt(self, record: OperationRecord, *, now: float) -> None:
        """Take ``record`` over at a new epoch by an unowned write, and plan it."""
        ...

    def taken_over(self, record: OperationRecord, *, proven_absent: bool, now: float) -> None:
        """Plan an operation just claimed at a new epoch (L7)."""
        ...

    def changed_elsewhere(self, record: OperationRecord, *, now: float) -> None:
        """Re-plan, at the same epoch, a held operation another process wrote."""
        ...

    def let_go(self, node: str) -> None:
        """Stop driving ``node``."""
        ...

    def busy_nodes(self) -> set[str]:
        """The call nodes with a request in flight."""
        ...

    def housekeep(self, *, now: float) -> None:
        """One housekeeping turn (a worker's: :meth:`Claims.turn`)."""
        ...


class SoleDriver:
    """Single-process mode: this engine is the only driver of its ledger, with no lease;
    every open operation (of a version it runs) is its to take over."""

    last_census: Census | None = None
    held_back = False

    def __init__(self, shell: LedgerShell) -> None:
        self.shell = shell

    def turn(self, now: float, claimant: Claimant, *, external_heartbeat: bool) -> None:
        """No lease to keep."""

    def next_turn(self, *, external_heartbeat: bool) -> float | None:
        return None

    def heartbeat(self, now: float) -> None:
        """No lease to renew."""

    def retire(self, claimant: Claimant) -> int:
        return 0

    def hold_back(self, now: float) -> bool:
        """Nothing holds a request back: there is no lease to run out."""
        return False

    def started(self, node: str, *, now: float) -> None:
        """A call made here is held from its creation on."""

    def take(self, record: OperationRecord, claimant: Claimant, *, now: float) -> None:
        """Take a stored open operation over at once (an unowned write)."""
        claimant.adopt(record, now=now)

    def resume(self, claimant: Claimant, *, now: float) -> int:
        """Take every open operation over, at once; how many."""
        count = 0
        for record in self.shell.open_records():
            if claimant.runs(record):
                claimant.adopt(record, now=now)
                count += 1
        return count

    def reread(self, claimant: Claimant, *, now: float, adopt_new: bool = True) -> int:
        """Take over again what another process wrote since (``adopt_new``: and what is
        open and not held yet); let go what is no longer open. How many changed."""
        changed = 0
        versions = self.shell.open_versions()
        for node, version in versions.items():
            known = claimant.records.get(node)
            if known is None and not adopt_new:
                continue
            if known is None or known.version != version:
                record = self.shell.get(node)
                if not claimant.runs(record):
                    claimant.let_go(node)  # bound to a version this engine does not run
                    continue
                changed += 1
                claimant.adopt(record, now=now)
        for node in [n for n in claimant.records if n not in versions]:
            claimant.let_go(node)
        return changed


class Claims:
    """The lease and claim rounds of one worker (``owner``) on one ledger."""

    def __init__(
        self,
        shell: LedgerShell,
        *,
        owner: str,
        kind: str,
        versions: VersionSet | None,
        policy: LeasePolicy,
        claim_all: bool,
        stats: collections.Counter[str],
        locks: OwnerLocks | None = None,
    ) -> None:
        self.shell = shell
        self.locks = locks
        """This host's proofs of life and death of the ledger's workers (None: none
        are made, and leases decide alone, as in the simulator)."""
        self.owner = owner
        self.kind = kind
        self.versions = versions
        self.policy = policy
        self.claim_all = claim_all
        self.stats = stats
        self.clock = LeaseClock(policy)
        self.next_turn = self.clock.next_turn
        """When the engine's housekeeping has work next: the clock's own answer, asked
        at every turn of the driver's loop (no call in between)."""
        self.last_census: Census | None = None
        """What the last claim round saw of the whole ledger."""
        self.wanted: set[str] = set()
        """Call nodes a caller waits on: claimed when free, never shed."""

    # --- the lease ---------------------------------------------------------------------

    def ensure_registered(self, now: float) -> None:
        if self.clock.registered:
            return
        if self.locks is not None:
            # Held before the row exists, so no claimer ever sees this worker's lease
            # running while its lock is free.
            self.locks.hold(self.owner, self.shell.is_leaseholder)
        self.shell.register(
            self.owner,
            kind=self.kind,
            now=now,
            lease_s=self.policy.lease_s,
            versions=self.versions,
        )
        self.clock.start(now)

    def heartbeat(self, now: float) -> None:
        """Renew from the driver's own thread, which keeps its own rhythm: a lapse found
        here is counted at the next turn."""
        if not self.clock.registered:
            return
        if not self._renewed(now):
            self.clock.lapsed_at = now
        self.clock.renewed(now, next_renew=False)

    def retire(self, claimant: Claimant) -> int:
        """Hand everything back at once and forget this worker; how many it held."""
        if not self.clock.registered:
            return 0
        released = self.shell.retire(self.owner)
        for node in list(claimant.records):
            claimant.let_go(node)
        self.clock.stop()
        if self.locks is not None:
            self.locks.close()  # after the row is gone: no lease runs unlocked
        return released

    @property
    def held_back(self) -> bool:
        """The lease was found too short to send at the last :meth:`hold_back`."""
        return self.clock.held_back

    def hold_back(self, now: float) -> bool:
        """Whether nothing may leave at ``now``: the lease is within its send margin."""
        self.clock.held_back = not self.clock.valid(now)
        return self.clock.held_back

    def started(self, node: str, *, now: float) -> None:
        """A call created here: registered as a worker first, and wanted by its caller."""
        self.ensure_registered(now)
        self.wanted.add(node)

    def take(self, record: OperationRecord, claimant: Claimant, *, now: float) -> None:
        """A caller waits on ``record``: claimed only if nobody live holds it (or its
        holder's lease lapsed), now or at a later claim round; until then the caller
        waits on the ledger."""
        self.wanted.add(record.call_node_id)
        self.claim_nodes([record.call_node_id], claimant, now=now)

    def resume(self, claimant: Claimant, *, now: float) -> int:
        """Register and take a first housekeeping turn: claims come in rounds, the first
        one claim interval later, up to the fair share. How many were taken."""
        held = len(claimant.records)
        claimant.housekeep(now=now)
        return len(claimant.records) - held

    def _renewed(self, now: float) -> bool:
        return self.shell.renew(
            self.owner,
            kind=self.kind,
            now=now,
            lease_s=self.policy.lease_s,
            versions=self.versions,
        )

    # --- one turn ----------------------------------------------------------------------

    def turn(self, now: float, claimant: Claimant, *, external_heartbeat: bool) -> None:
        """Renew when due; at each claim round, take a fair share of what nobody live
        holds (a caller: only its wanted call nodes), shed a surplus, and re-read what
        is held (another worker's takeover, an operator's write)."""
        self.ensure_registered(now)
        if self.clock.lapsed_at is not None:
            # The driver's heartbeat found the lease lapsed (this process was paused
            # or cut off): count it; what others took is found at the claim round's
            # re-read, or by the database refusing the write (Fenced).
            self.clock.lapsed_at = None
            self.stats["lease_lapses"] += 1
            self.clock.claim_soon(now)
        elif not external_heartbeat and self.clock.renew_due(now):
            if not self._renewed(now):
                # Lapsed (paused, cut off): others may have taken some of ours. What we
                # still hold is read back at once; a stale write would be fenced anyway.
                self.stats["lease_lapses"] += 1
                self.reread(claimant, now=now)
            self.clock.renewed(now)
        if self.clock.claim_due(now):
            proven = self.end_dead_leases(now)
            try:
                if self.claim_all:
                    self.share_round(now, claimant)
                else:
                    missing = [n for n in self.wanted if n not in claimant.records]
                    if missing:
                        self.claim_nodes(missing, claimant, now=now)
                self.reread(claimant, now=now)
            except BaseException:
                self._proofs_done(proven, committed=False)
                raise
            self._proofs_done(proven, committed=True)

    def _proofs_done(self, proven: list[str], *, committed: bool) -> None:
        """Let the proven holders' locks go after the round. A proven holder's file goes
        once it holds nothing (its row gone, ``committed``: the round's claim read it);
        one with operations left keeps it, its lease already ended in the ledger."""
        if self.locks is not None and proven:
            self.locks.done(proven, self.shell.is_leaseholder, committed=committed)

    def end_dead_leases(self, now: float) -> list[str]:
        """End, in the ledger, the running leases of workers of this host proven dead
        (their lock free), so this round's claim takes their operations over as any
        lapsed holder's; the owners whose locks are now held until the round ends. A
        worker whose lock is held (alive, even if paused) or cannot be judged (another
        host or boot) keeps its lease until it runs out."""
        if self.locks is None:
            return []
        proven: list[str] = []
        try:
            running = self.shell.running_leases(self.owner, now=now)
            for other, lease_until in sorted(running.items()):
                if not self.locks.prove_dead(other):
                    continue
                proven.append(other)
                if self.shell.end_lease(other, lease_until=lease_until, now=now):
                    self.stats["proven_dead"] += 1
                    logger.warning(
                        "worker %s is gone (its lock was free): its lease ended %.1f s"
                        " early, its operations are taken over now",
                        other,
                        lease_until - now,
                    )
        except BaseException:
            self._proofs_done(proven, committed=False)
            raise
        return proven

    def reread(self, claimant: Claimant, *, now: float, adopt_new: bool = True) -> int:
        """Re-read what this worker holds: let go what it no longer holds (accepted,
        released, taken over), hand back to be re-planned at the same epoch what another
        process (an operator) changed. How many changed. (``adopt_new`` does not apply:
        a worker takes new operations in claim rounds only.)"""
        held = self.shell.held_versions(self.owner)
        busy = claimant.busy_nodes()
        changed = 0
        for node, known in list(claimant.records.items()):
            if node in busy:
                continue  # its reply's write decides: applied, or refused as Fenced (D1)
            version = held.get(node)
            if version is None:
                claimant.let_go(node)  # accepted, released, or taken over by another worker
                continue
            if version != known.version:
                record = self.shell.find(node)
                if record is None or record.is_terminal:
                    claimant.let_go(node)
                    continue
                changed += 1
                claimant.changed_elsewhere(record, now=now)
        return changed

    def share_round(self, now: float, claimant: Claimant) -> None:
        """Hold about ``open / live workers`` operations: claim up to that, shed above
        it (plus the slack) what has no request in flight. With :attr:`versions`, the
        share is taken per (protocol, adapter version) this worker runs, among the
        workers that run it: a version only some workers run is shared by those. One
        census read serves every version."""
        if self.versions is None:
            census = self.shell.census(self.owner, now=now)
            self._take_share(census, list(claimant.records), None, claimant, now=now)
            self.last_census = census
            return
        by_version = self.shell.census_by_version(self.owner, now=now, versions=self.versions)
        held: dict[tuple[str, str], list[str]] = {}
        for node, record in claimant.records.items():
            held.setdefault((record.protocol, record.adapter_version), []).append(node)
        for pair in sorted(self.versions):
            census = by_version[pair]
            self._take_share(census, held.get(pair, []), frozenset({pair}), claimant, now=now)
        self.last_census = leases.combined(by_version.values())

    def _take_share(
        self,
        census: Census,
        held: list[str],
        versions: VersionSet | None,
        claimant: Claimant,
        *,
        now: float,
    ) -> None:
        """Claim up to the share ``census`` gives of ``versions`` (None: every version),
        or shed above it; ``held``: the nodes of those versions held now, oldest first."""
        share = leases.fair_share(census)
        limit = leases.claim_limit(census, held=len(held), share=share, policy=self.policy)
        if limit and self._claim(claimant, now=now, limit=limit, versions=versions):
            held = [
                node
                for node, r in claimant.records.items()
                if versions is None or (r.protocol, r.adapter_version) in versions
            ]
        release = leases.to_shed(
            held,
            share=share,
            busy=claimant.busy_nodes(),
            wanted=self.wanted,
            policy=self.policy,
        )
        if release is not None:
            self.shell.release(self.owner, release)
            self.stats["released"] += len(release)
            for node in release:
                claimant.let_go(node)

    def claim_nodes(self, nodes: list[str], claimant: Claimant, *, now: float) -> None:
        """Claim these call nodes if no live worker holds them (a caller's own)."""
        self.ensure_registered(now)
        self._claim(claimant, now=now, limit=len(nodes), nodes=nodes)

    def _claim(
        self,
        claimant: Claimant,
        *,
        now: float,
        limit: int,
        nodes: list[str] | None = None,
        versions: VersionSet | None = None,
    ) -> int:
        """Claim up to ``limit`` operations (of ``nodes``, or any due); how many it took."""
        versions = self.versions if versions is None else versions
        taken = 0
        for claimed in self.shell.claim(
            self.owner, now=now, limit=limit, nodes=nodes, versions=versions
        ):
            record = claimed.record
            self.stats["claimed"] += 1
            if claimed.taken_from is not None:
                self.stats["takeovers"] += 1  # its holder's lease had lapsed
            if record.execution_epoch > 1:
                self.stats["recoveries"] += 1  # driven before, by a process now gone
            proven_absent = self.shell.reconciled_as_absent(record, claimed=True)
            claimant.taken_over(record, proven_absent=proven_absent, now=now)
            taken += 1
        return taken


__all__ = ["Claimant", "Claims", "SoleDriver"]
