"""``evolve``: the machine's copy-with-changes of a record, generated once per field."""

from __future__ import annotations

import dataclasses

import pytest

from longcall.core.record import evolve
from longcall.core.states import State

from .builders import new_record


def test_evolve_equals_dataclasses_replace_field_for_field() -> None:
    """Every field is copied and every change applied, exactly as ``replace`` does."""
    record = new_record()
    changes = {"state": State.WORKING, "operation_id": "op-9", "poll_count": 4, "warnings": ("w",)}
    assert evolve(record, **changes) == dataclasses.replace(record, **changes)  # type: ignore[arg-type]
    for field in dataclasses.fields(record):
        assert getattr(evolve(record), field.name) == getattr(record, field.name)


def test_evolve_returns_a_new_record_and_leaves_the_old_one() -> None:
    record = new_record()
    changed = evolve(record, poll_count=7)
    assert changed is not record
    assert record.poll_count == 0
    assert changed.poll_count == 7


def test_evolve_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="colour"):
        evolve(new_record(), colour="red")
