"""Which workers a claim round proves dead: only those of this host and boot whose lock
is free (D1; the real processes are in tests/e2e/test_dead_worker.py).

A lock file here is written by hand and left unlocked, as a dead process leaves it; one
of another boot or host, or a missing one, proves nothing and the lease keeps running.
"""

from __future__ import annotations

import collections
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from longcall.ledger import WORKER, SQLiteLedger
from longcall.ledger.owners import OwnerLocks, boot_id
from longcall.runtime.claims import Claims, worker_locks
from longcall.runtime.leases import LeasePolicy
from longcall.runtime.step import LedgerShell

LEASE_S = 300.0
NOW = 1_000.0
HOST = socket.gethostname()


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SQLiteLedger]:
    with SQLiteLedger(tmp_path / "ledger.db") as found:
        yield found


def _claims(ledger: SQLiteLedger) -> Claims:
    locks = worker_locks(ledger)
    assert locks is not None
    return Claims(
        LedgerShell(ledger),
        owner=f"{HOST}:1:claimer",
        kind=WORKER,
        versions=None,
        policy=LeasePolicy.of(LEASE_S),
        claim_all=True,
        stats=collections.Counter(),
        locks=locks,
    )


def _left_behind(ledger: SQLiteLedger, locks: OwnerLocks, owner: str, *, boot: str) -> None:
    """A worker row whose lease runs, and its lock file as its process left it."""
    ledger.register_worker(owner, kind=WORKER, now=NOW, lease_s=LEASE_S)
    locks.directory.mkdir(parents=True, exist_ok=True)
    locks.path_of(owner).write_text(f"{owner}\n{boot}\n")


def _leases(ledger: SQLiteLedger) -> dict[str, float]:
    return {w.owner: w.lease_until for w in ledger.workers()}


def test_a_free_lock_of_this_host_and_boot_ends_the_lease(ledger: SQLiteLedger) -> None:
    claims = _claims(ledger)
    assert claims.locks is not None
    claims.ensure_registered(NOW)
    dead = f"{HOST}:2:dead"
    _left_behind(ledger, claims.locks, dead, boot=boot_id())
    assert claims.end_dead_leases(NOW + 1) == [dead]
    assert _leases(ledger)[dead] == NOW + 1
    assert claims.stats["proven_dead"] == 1
    claims.locks.close()


@pytest.mark.parametrize(
    ("owner", "boot"),
    [
        (f"{HOST}:2:rebooted", "another-boot"),
        (f"elsewhere-{HOST}:2:remote", None),
        (f"{HOST}:2:nofile", ""),
    ],
    ids=["another boot", "another host", "no file"],
)
def test_what_this_kernel_cannot_judge_proves_nothing(
    ledger: SQLiteLedger, owner: str, boot: str | None
) -> None:
    claims = _claims(ledger)
    assert claims.locks is not None
    claims.ensure_registered(NOW)
    _left_behind(ledger, claims.locks, owner, boot=boot_id() if boot is None else boot)
    if boot == "":
        claims.locks.path_of(owner).unlink()
    assert claims.end_dead_leases(NOW + 1) == []
    assert _leases(ledger)[owner] == NOW + LEASE_S
    assert claims.stats["proven_dead"] == 0
    claims.locks.close()


def test_a_held_lock_proves_nothing(ledger: SQLiteLedger) -> None:
    """Another worker's lock, held (by another open file: flock is per open file), is life."""
    claims = _claims(ledger)
    assert claims.locks is not None
    claims.ensure_registered(NOW)
    alive = f"{HOST}:3:alive"
    other = worker_locks(ledger)
    assert other is not None
    other.hold(alive, lambda _owner: True)
    ledger.register_worker(alive, kind=WORKER, now=NOW, lease_s=LEASE_S)
    assert claims.end_dead_leases(NOW + 1) == []
    assert _leases(ledger)[alive] == NOW + LEASE_S
    other.close()
    claims.locks.close()
