"""SQLite's update sets only the derived columns that changed since the row this ledger
last wrote (SPEC L4): the columns always match the record, and a row changed behind the
ledger's back is written in full, never trusted."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from longcall.core import OperationRecord
from longcall.ledger import SQLiteLedger
from longcall.ledger.sql import failing_flag, person_deadline
from longcall.testing import scripted

COLUMNS = "state, operation_id, execution_epoch, failing, person_deadline"


def stored(path: Path, node: str) -> tuple[object, ...]:
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            f"SELECT {COLUMNS} FROM operations WHERE call_node_id = ?", (node,)
        ).fetchone()
    assert row is not None
    return tuple(row)


def expected(record: OperationRecord) -> tuple[object, ...]:
    return (record.state.value, record.operation_id, record.execution_epoch,
            failing_flag(record), person_deadline(record))  # fmt: skip


def test_every_step_leaves_the_columns_of_its_record(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    seen: list[tuple[object, ...]] = []
    with SQLiteLedger(path) as ledger:
        created = scripted.start(ledger, "n", scripted.COMPLETED, now=0.0)
        seen.append(expected(created))

        def check(record: OperationRecord) -> None:
            if not record.is_terminal:
                assert stored(path, "n") == expected(record)
                seen.append(expected(record))

        scripted.drive(ledger, "n", scripted.COMPLETED, now=0.0, record=created, on_step=check)
    # The walk moved each derived column the lean statement may leave out or set.
    assert len({values[0] for values in seen}) >= 3  # state
    assert {values[1] for values in seen} == {None, "op-n"}  # the operation id, once
    assert any(values[4] is not None for values in seen)  # a person's deadline, then none
    assert seen[-1][4] is None


def test_a_row_changed_behind_the_ledger_is_written_in_full(tmp_path: Path) -> None:
    """The remembered columns are checked by the statement itself: a column another
    writer changed at the same version (here by hand) is set again from the record."""
    path = tmp_path / "l.db"
    with SQLiteLedger(path) as ledger:
        record = scripted.start(ledger, "n", scripted.COMPLETED, now=0.0)
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE operations SET failing = 1, operation_id = 'other'")
        step = scripted.next_event(record, scripted.COMPLETED)
        assert step is not None
        after = scripted.apply_event(ledger, record, step[0], now=0.0, jitter=0.5).record
        assert stored(path, "n") == expected(after)
