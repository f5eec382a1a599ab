"""Child process of the crash test: plays one scenario and SIGKILLs itself at a commit.

Usage: ``python crash_child.py DB SCENARIO COMMIT_INDEX before|after``. Commit 1 is the
record's creation; commit N is the (N-1)-th event. ``before`` dies inside the
transaction (it must roll back), ``after`` dies right after COMMIT returned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

from longcall.ledger import SQLiteLedger
from longcall.testing import scripted as walkthrough


class KillingLedger(SQLiteLedger):
    """A SQLite ledger that kills its own process at one chosen commit."""

    def __init__(self, path: str, *, kill_at: int, when: str) -> None:
        self.kill_at = kill_at
        self.when = when
        self.commits = -1  # the migration transaction at open does not count
        super().__init__(path, synchronous="full")

    @contextlib.contextmanager
    def _write(self) -> Iterator[object]:  # type: ignore[override]
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            yield self._conn
            self.commits += 1
            self._die_if("before")
            self._conn.execute("COMMIT")
            self._die_if("after")

    def _die_if(self, when: str) -> None:
        if self.commits == self.kill_at and self.when == when:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    db, scenario_name, kill_at, when = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    scenario = next(s for s in walkthrough.SCENARIOS if s.name == scenario_name)
    ledger = KillingLedger(db, kill_at=kill_at, when=when)
    walkthrough.start(ledger, "node", scenario, now=0.0)
    walkthrough.drive(ledger, "node", scenario, now=0.0)
    sys.exit(3)  # reaching the end means the kill point was never hit


if __name__ == "__main__":
    main()
