"""Our AIP-151 adapter against our AIP-151 facade, alone and under the executor (P3, X2, X5)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.protocols.conftest import run_call as shared_run_call

from longcall.adapters.aip151 import connect, request_id_for
from longcall.adapters.base import Adapter
from longcall.core import ResultKind, ServerStatus, State
from longcall.core import events as e
from longcall.server import LongcallServer, running_server
from longcall.server.aip151 import mount_aip151
from longcall.server.examples import register_reference_tools
from longcall.server.model import ProtocolVersion
from longcall.testing.faults import LoseCreateResponse

pytestmark = pytest.mark.anyio
CALL_TIMEOUT_S = LOADED_MACHINE_S


async def aip_factory(server: str, protocol: str) -> Adapter:
    return await connect(server)


@pytest.fixture
async def lossy(tmp_path: Path) -> AsyncIterator[tuple[str, LongcallServer]]:
    """A reference server whose first AIP-151 start response is dropped (task created)."""
    server = LongcallServer(store=str(tmp_path / "tasks.db"))
    register_reference_tools(server)
    mount_aip151(server)
    async with running_server(server, wrap=LoseCreateResponse) as url:
        yield url.removesuffix("/mcp") + "/v1", server


async def run_call(
    tmp_path: Path, url: str, tool: str, arguments: dict[str, Any], *, cancel: bool = False
) -> tuple[Any, bytes | None]:
    """The shared executor driver, with the AIP-151 adapter bound directly."""
    return await shared_run_call(
        tmp_path, url, tool, arguments, cancel=cancel, adapter_factory=aip_factory,
        timeout_s=CALL_TIMEOUT_S,
    )  # fmt: skip


async def test_completion_is_accepted_with_the_response(
    tmp_path: Path, reference_base: str
) -> None:
    """start → WORKING → done+response → ACCEPTED with the Struct response as payload."""
    record, payload = await run_call(
        tmp_path, reference_base + "/v1", "sleep_report", {"seconds": 0.2, "rows": 2}
    )
    assert record.state is State.ACCEPTED
    assert record.result_kind is ResultKind.VALUE
    assert record.operation_id.startswith("operations/")
    assert payload is not None
    assert b'"@type":"type.googleapis.com/google.protobuf.Struct"' in payload


async def test_tool_error_is_a_failed_tool_error(tmp_path: Path, reference_base: str) -> None:
    """done+error with an ErrorInfo TOOL_ERROR → accepted FAILED / TOOL_ERROR (X6)."""
    record, payload = await run_call(tmp_path, reference_base + "/v1", "fail", {"kind": "tool"})
    assert record.state is State.ACCEPTED
    assert record.server_status is ServerStatus.FAILED
    assert record.result_kind is ResultKind.TOOL_ERROR
    assert payload is not None
    assert b'"code":2' in payload


async def test_cancel_is_a_request_then_the_cancelled_terminal(
    tmp_path: Path, reference_base: str
) -> None:
    """cancel → CancelAcknowledged → polling finds error.code=1 → CANCELLED_ACCEPTED (X5)."""
    record, _ = await run_call(
        tmp_path,
        reference_base + "/v1",
        "sleep_report",
        {"seconds": 60, "rows": 1},
        cancel=True,
    )
    assert record.state is State.CANCELLED_ACCEPTED
    assert record.cancel_acknowledged_at is not None


async def test_lost_start_response_resolves_to_exactly_one_operation(
    tmp_path: Path, lossy: tuple[str, LongcallServer]
) -> None:
    """The start response is dropped; the same requestId is resent; one operation exists (X2)."""
    url, server = lossy
    record, _ = await run_call(tmp_path, url, "sleep_report", {"seconds": 0.1, "rows": 1})
    assert record.state is State.ACCEPTED
    assert record.submission_lookup
    assert record.last_error is not None
    operations = await server.store.list_for_principal(
        "anonymous", ProtocolVersion.AIP151, after=None, limit=10
    )
    assert [f"operations/{op.task_id}" for op in operations] == [record.operation_id]


async def test_lookup_without_cached_arguments_proves_by_request_id(
    tmp_path: Path, lossy: tuple[str, LongcallServer]
) -> None:
    """A fresh adapter (restart) finds the operation by requestId, or proves it absent."""
    url, _ = lossy
    first = await connect(url)
    binding = await first.bind("sleep_report")
    record = _record(binding.tool_name, url)
    lost = await first.submit(record, {"seconds": 30, "rows": 1})
    assert isinstance(lost.event, e.SubmitOutcomeLost)
    await first.aclose()
    fresh = await connect(url)
    found = await fresh.lookup(record)
    other = await fresh.lookup(_record(binding.tool_name, url, key="lc1-other"))
    await fresh.aclose()
    assert isinstance(found.event, e.SubmissionFound)
    assert found.event.operation_id.startswith("operations/")
    assert isinstance(other.event, e.SubmissionNeverCreated)


async def test_same_request_id_other_body_is_refused(reference_base: str) -> None:
    """AIP-155: the same requestId with other arguments → 409, mapped to a non-retryable failure."""
    adapter = await connect(reference_base + "/v1")
    await adapter.bind("sleep_report")
    record = _record("sleep_report", reference_base)
    first = await adapter.submit(record, {"seconds": 30, "rows": 1})
    again = await adapter.submit(record, {"seconds": 30, "rows": 1})
    other = await adapter.submit(record, {"seconds": 30, "rows": 2})
    await adapter.aclose()
    assert isinstance(first.event, e.SubmitAcknowledged)
    assert isinstance(again.event, e.SubmitAcknowledged)
    assert again.event.operation_id == first.event.operation_id
    assert isinstance(other.event, e.RequestFailed)
    assert "already used" in other.event.detail
    assert request_id_for(record.submission_key) == request_id_for(record.submission_key)


def _record(tool: str, url: str, *, key: str = "lc1-test") -> Any:
    from longcall.core import OperationRecord

    return OperationRecord(
        call_node_id="n",
        request_digest="d",
        tool_name=tool,
        tool_descriptor_digest="t",
        principal="anonymous",
        server=url,
        protocol="aip-151",
        adapter_version="1",
        submission_key=key,
        submission_lookup=True,
        created_at=0.0,
        updated_at=0.0,
    )
