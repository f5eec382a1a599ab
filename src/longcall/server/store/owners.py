"""Proof that a server process of this host is gone: the task store's side (D1).

Owns: the server's use of the shared lock files (:mod:`longcall.ledger.owners`, which
the caller's workers use too): the same locks, under the server's directory names, with
a lock file that cannot be made or taken reported as the store's error. Must not: judge
a death itself; that is the shared module's, so both sides prove it the same way.
"""

from __future__ import annotations

from pathlib import Path

from longcall.errors import OwnerLockError
from longcall.ledger import owners as shared
from longcall.ledger.owners import HoldsTasks, boot_id
from longcall.server.errors import StoreError


def shared_locks_dir(store_id: str) -> Path | None:
    """The lock directory of a task store shared beyond one file (PostgreSQL)."""
    return shared.shared_locks_dir(store_id, shared.SERVER_LOCKS)


class OwnerLocks(shared.OwnerLocks):
    """The lock files of one task store's server processes on this host."""

    def hold(self, owner: str, holds_tasks: HoldsTasks) -> None:
        try:
            super().hold(owner, holds_tasks)
        except OwnerLockError as exc:
            raise StoreError(str(exc)) from exc


__all__ = ["HoldsTasks", "OwnerLocks", "boot_id", "shared_locks_dir"]
