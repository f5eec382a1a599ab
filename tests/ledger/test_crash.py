"""Durability under SIGKILL at every commit point of full lifecycles (SPEC L7, first part).

For each scenario (completed through an input round; cancel wins; create response
lost then resolved by key) and each commit of its lifecycle, a child process plays
the scenario against a file ledger and is killed just before or just after that
commit. The parent reopens the file and checks that nothing was lost or doubled and
that the operation can be driven to its end.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.bounds import LOADED_MACHINE_S

from longcall.core import TERMINAL_STATES, TRANSITIONS, State
from longcall.core.keys import digest_bytes
from longcall.ledger import SQLiteLedger
from longcall.testing import scripted as walkthrough

CHILD = Path(__file__).with_name("crash_child.py")


def lifecycle_commits(scenario: walkthrough.Scenario, tmp_path: Path) -> int:
    """How many commits one uninterrupted run of ``scenario`` makes."""
    with SQLiteLedger(tmp_path / f"count-{scenario.name}.db", synchronous="off") as ledger:
        walkthrough.start(ledger, "node", scenario, now=0.0)
        record = walkthrough.drive(ledger, "node", scenario, now=0.0)
        return record.version


CASES = [
    (scenario, commit, when)
    for scenario, commits in (
        (s, 8 if s is not walkthrough.CANCELLED else 5) for s in walkthrough.SCENARIOS
    )
    for commit in range(1, commits + 1)
    for when in ("before", "after")
]


def test_case_list_covers_every_commit(tmp_path: Path) -> None:
    """The parametrisation below lists every commit point of every scenario."""
    for scenario in walkthrough.SCENARIOS:
        commits = {c for s, c, _ in CASES if s is scenario}
        assert commits == set(range(1, lifecycle_commits(scenario, tmp_path) + 1))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "commit", "when"),
    CASES,
    ids=[f"{s.name}-{c}-{w}" for s, c, w in CASES],
)
def test_sigkill_at_commit_point(
    tmp_path: Path, scenario: walkthrough.Scenario, commit: int, when: str
) -> None:
    """Killed at this commit, the ledger reopens consistent and the operation finishes once."""
    db = tmp_path / "ledger.db"
    child = subprocess.run(
        [sys.executable, str(CHILD), str(db), scenario.name, str(commit), when],
        capture_output=True,
        timeout=LOADED_MACHINE_S,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()

    with SQLiteLedger(db) as ledger:
        record = ledger.find("node")
        committed = commit if when == "after" else commit - 1
        if committed == 0:
            # Killed before the create committed: nothing exists and nothing was sent (X2).
            assert record is None
            assert ledger.receipts() == []
            assert ledger.outbox() == []
            walkthrough.start(ledger, "node", scenario, now=100.0)
            record = ledger.get("node")
        assert record.version == max(1, committed)
        check_consistent(ledger, record.state)

        walkthrough.restart(ledger, "node", now=100.0)
        final = walkthrough.drive(ledger, "node", scenario, now=100.0)

        assert final.state in TERMINAL_STATES
        (receipt,) = ledger.receipts()
        (outbox_row,) = ledger.outbox()
        assert outbox_row.call_node_id == receipt.call_node_id == "node"
        payload = ledger.result_payload("node")
        assert payload is not None
        assert digest_bytes(payload) == receipt.result_digest
        check_consistent(ledger, final.state)


def check_consistent(ledger: SQLiteLedger, state: State) -> None:
    """The stored state is one the table allows, reached by allowed steps, with at most
    one receipt and one outbox row, and receipts only for terminal records."""
    history = ledger.history("node")
    assert [h.version for h in history] == list(range(1, len(history) + 1))
    assert history[0].state is State.SUBMITTING
    for before, after in itertools.pairwise(history):
        assert after.state in TRANSITIONS[(before.state, after.event)]
    assert history[-1].state is state
    receipts, outbox = ledger.receipts(), ledger.outbox()
    assert len(receipts) <= 1
    assert len(outbox) <= 1
    assert (len(receipts) == 1) == (state in TERMINAL_STATES) == (len(outbox) == 1)
