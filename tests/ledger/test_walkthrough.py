"""The scripted server's answers made beforehand play the same lifecycle as asking it
step by step (the ledger benchmark times the former, the demo and crash tests the
latter)."""

from __future__ import annotations

import pytest

from longcall.ledger import SQLiteLedger
from longcall.testing import scripted as walkthrough

STAMP = "2026-01-01T00:00:00.000000+00:00"
TABLES = ("operations", "history", "receipts", "results", "outbox")


def _rows(script: bool, scenario: walkthrough.Scenario) -> list[list[tuple[object, ...]]]:
    with SQLiteLedger(":memory:", utc_now=lambda: STAMP) as ledger:
        for node in ("a", "b"):
            created = walkthrough.start(ledger, node, scenario, now=0.0)
            answers = walkthrough.answers(node, scenario, now=0.0) if script else None
            walkthrough.drive(ledger, node, scenario, now=0.0, record=created, script=answers)
        return [ledger._read(f"SELECT * FROM {table} ORDER BY 1, 2") for table in TABLES]


@pytest.mark.parametrize("scenario", walkthrough.SCENARIOS, ids=lambda s: s.name)
def test_answers_made_beforehand_write_the_rows_of_answers_asked_for(
    scenario: walkthrough.Scenario,
) -> None:
    asked = _rows(False, scenario)
    assert all(asked)  # every table has rows: the lifecycle ran to its receipt
    assert _rows(True, scenario) == asked
