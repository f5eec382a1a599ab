"""``new_operation`` drafts its record as ``evolve`` does: it must be exactly the
record the dataclass constructor makes from the same fields, and as frozen."""

from __future__ import annotations

import dataclasses

import pytest

from longcall.core import OperationRecord, new_operation
from longcall.core.keys import derive_submission_key


@pytest.mark.parametrize("budget_s", [None, 30.0])
def test_new_operation_is_the_constructed_record(budget_s: float | None) -> None:
    made = new_operation(
        call_node_id="node-1",
        request_digest="sha256:req",
        tool_name="t",
        tool_descriptor_digest="sha256:tool",
        principal="alice",
        server="http://127.0.0.1:1/mcp",
        protocol="test",
        adapter_version="1",
        now=10.0,
        step_index=2,
        submission_lookup=True,
        tool_idempotent=True,
        budget_s=budget_s,
        execution_epoch=3,
        caller_key=b"k",
        server_store_id="store",
    ).record
    constructed = OperationRecord(
        call_node_id="node-1",
        request_digest="sha256:req",
        tool_name="t",
        tool_descriptor_digest="sha256:tool",
        principal="alice",
        server="http://127.0.0.1:1/mcp",
        protocol="test",
        adapter_version="1",
        submission_key=derive_submission_key("node-1", 2, caller_key=b"k"),
        step_index=2,
        submission_lookup=True,
        tool_idempotent=True,
        server_store_id="store",
        execution_epoch=3,
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
