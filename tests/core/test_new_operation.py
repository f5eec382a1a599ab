"""``new_operation`` drafts its record as ``evolve`` does: it must be exactly the
record the dataclass constructor makes from the same fields, and as frozen."""

from __future__ import annotations

import dataclasses

import pytest

from longcall.core import OperationRecord, new_operation
from longcall.core.keys import derive_submission_key

SHARED = {
    "call_node_id": "node-1",
    "request_digest": "sha256:req",
    "tool_name": "t",
    "tool_descriptor_digest": "sha256:tool",
    "principal": "alice",
    "server": "http://127.0.0.1:1/mcp",
    "protocol": "test",
    "adapter_version": "1",
    "step_index": 2,
    "submission_lookup": True,
    "tool_idempotent": True,
    "execution_epoch": 3,
    "server_store_id": "store",
}
"""The fields both ways of making the record are given alike."""


@pytest.mark.parametrize("budget_s", [None, 30.0])
def test_new_operation_is_the_constructed_record(budget_s: float | None) -> None:
    made = new_operation(**SHARED, now=10.0, budget_s=budget_s, caller_key=b"k").record  # type: ignore[arg-type]
    constructed = OperationRecord(
        **SHARED,  # type: ignore[arg-type]
        submission_key=derive_submission_key("node-1", 2, caller_key=b"k"),
        created_at=10.0,
        updated_at=10.0,
        deadline_at=None if budget_s is None else 10.0 + budget_s,
    )
    assert type(made) is OperationRecord
    assert made == constructed
    for field in dataclasses.fields(OperationRecord):
        assert getattr(made, field.name) == getattr(constructed, field.name), field.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.poll_count = 1  # type: ignore[misc]
