"""The three adapters against the reference server, over real HTTP on 127.0.0.1, in both
task protocol versions (P1, P2, P5; X1-X6, X10)."""

from __future__ import annotations

import dataclasses
import json
import socket
from typing import Any

import pytest

from longcall.adapters.base import Adapter, TaskSupportMissing, ToolBinding, UnknownTool
from longcall.adapters.http import HttpDriver
from longcall.adapters.mcp.client import (
    McpTasks20251125Adapter,
    McpTasks20260728Adapter,
    SyncAdapter,
    connect,
)
from longcall.adapters.mcp.modern import ModernMapping
from longcall.core import State
from longcall.core.events import (
    CancelAcknowledged,
    CancellationObserved,
    CancelRefused,
    CancelRequested,
    InputAnswered,
    InputRequestObserved,
    OperationNotFound,
    RequestFailed,
    ResultFetched,
    SubmissionFound,
    SubmissionNeverCreated,
    SubmitAcknowledged,
    SubmitOutcomeLost,
    SubmitRejected,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.keys import digest_bytes
from longcall.core.record import ResultKind, ServerStatus
from longcall.core.retry import FailureKind, RequestKind
from longcall.errors import NegotiationFailed

from .conftest import Driver, Served

pytestmark = pytest.mark.anyio

VERSIONS = ["2026-07-28", "2025-11-25"]
ADAPTER_OF = {"2026-07-28": McpTasks20260728Adapter, "2025-11-25": McpTasks20251125Adapter}


async def _driver(url: str, version: str, tool: str, arguments: dict[str, Any]) -> Driver:
    adapter = await connect(url, prefer=version)
    binding = await adapter.bind(tool)
    return Driver(adapter, binding, arguments)


async def _created(served: Served, driver: Driver) -> str:
    outcome = await driver.submit()
    assert isinstance(outcome.event, SubmitAcknowledged), outcome
    assert driver.record.state is State.WORKING
    return outcome.event.operation_id


@pytest.mark.parametrize("version", VERSIONS)
async def test_negotiation_picks_the_adapter(served: Served, version: str) -> None:
    """connect() picks P1 by default (discover + extension), P2 when 2025-11-25 is preferred."""
    adapter = await connect(served.url, prefer=None if version == VERSIONS[0] else version)
    try:
        assert type(adapter) is ADAPTER_OF[version]
        binding = await adapter.bind("sleep_report")
        assert binding.protocol == version
        assert binding.submission_lookup is True
        assert binding.idempotent is True
        assert binding.output_schema is not None
        assert binding.descriptor_digest.startswith("sha256:")
        with pytest.raises(UnknownTool):
            await adapter.bind("no_such_tool")
    finally:
        await adapter.aclose()


@pytest.mark.parametrize("version", VERSIONS)
async def test_create_poll_complete_fetch(served: Served, version: str) -> None:
    """create -> working -> completed -> fetched and verified against the output schema."""
    driver = await _driver(served.url, version, "sleep_report", {"seconds": 0.05, "rows": 3})
    try:
        task_id = await _created(served, driver)
        assert driver.record.poll_interval_s == 0.5
        await served.wait_status(task_id, {"completed"})
        terminal = await driver.poll()
        assert isinstance(terminal.event, TerminalObserved)
        fetched = await driver.fetch()
        assert isinstance(fetched.event, ResultFetched)
        assert fetched.event.result_kind is ResultKind.VALUE
        assert fetched.event.status is ServerStatus.COMPLETED
        assert fetched.event.empty is False
        assert fetched.payload is not None
        assert fetched.event.result_digest == digest_bytes(fetched.payload)
        assert json.loads(fetched.payload)["structuredContent"]["rows"][2]["value"] == 4
        assert driver.record.state is State.ACCEPTED
    finally:
        await driver.adapter.aclose()


async def test_modern_fetch_after_restart_rereads_tasks_get(served: Served) -> None:
    """A fresh P1 adapter (no cached inline result) fetches by re-reading tasks/get (X6)."""
    driver = await _driver(served.url, "2026-07-28", "sleep_report", {"seconds": 0, "rows": 1})
    fresh = await connect(served.url)
    try:
        task_id = await _created(served, driver)
        await served.wait_status(task_id, {"completed"})
        first = await driver.poll()
        assert isinstance(first.event, TerminalObserved)
        again = await fresh.fetch_result(driver.record)
        cached = await driver.adapter.fetch_result(driver.record)
        assert isinstance(again.event, ResultFetched)
        assert again.payload == cached.payload
    finally:
        await driver.adapter.aclose()
        await fresh.aclose()


@pytest.mark.parametrize("version", VERSIONS)
async def test_working_then_progress_message(served: Served, version: str) -> None:
    """A working poll is WorkingObserved; status messages reach the progress sink (X11)."""
    seen: list[tuple[str, float | None, str | None]] = []
    adapter = await connect(
        served.url, prefer=version, progress=lambda *report: seen.append(report)
    )
    binding = await adapter.bind("approve")
    driver = Driver(adapter, binding, {"change": "x"})
    try:
        task_id = await _created(served, driver)
        # approve parks on input; before that a poll may still read working
        status = await served.wait_status(task_id, {"input_required"})
        assert status == "input_required"
        outcome = await driver.poll()
        assert isinstance(outcome.event, InputRequestObserved | WorkingObserved)
    finally:
        await adapter.aclose()


@pytest.mark.parametrize("version", VERSIONS)
async def test_input_round(served: Served, version: str) -> None:
    """input_required -> InputRequestObserved(keys, schema digest) -> answer -> completed."""
    driver = await _driver(served.url, version, "approve", {"change": "drop table"})
    try:
        task_id = await _created(served, driver)
        await served.wait_status(task_id, {"input_required"})
        asked = await driver.poll()
        assert isinstance(asked.event, InputRequestObserved), asked
        assert asked.event.schema_digest is not None
        assert driver.record.state is State.INPUT_REQUIRED
        keys = asked.event.keys
        driver.apply(InputAnswered(input_round=driver.record.input_round, keys=keys))
        answers = {key: {"action": "accept", "content": {"approved": True}} for key in keys}
        assert await driver.adapter.send_input(driver.record, answers) is None
        await served.wait_status(task_id, {"completed"})
        assert isinstance((await driver.poll()).event, TerminalObserved)
        fetched = await driver.fetch()
        assert isinstance(fetched.event, ResultFetched)
        assert fetched.payload is not None
        assert json.loads(fetched.payload)["structuredContent"] == {
            "change": "drop table",
            "approved": True,
        }
    finally:
        await driver.adapter.aclose()


async def test_modern_cancel_is_an_ack_then_poll_proves_it(served: Served) -> None:
    """P1: tasks/cancel is only a request (X5); the cancelled terminal comes from a poll."""
    driver = await _driver(served.url, "2026-07-28", "sleep_report", {"seconds": 30, "rows": 1})
    try:
        task_id = await _created(served, driver)
        driver.record = driver.apply(_cancel_requested())
        ack = await driver.adapter.cancel(driver.record)
        assert ack.event == CancelAcknowledged(cancel_generation=driver.record.cancel_generation)
        driver.apply(ack)
        await served.wait_status(task_id, {"cancelled"})
        proof = await driver.poll()
        assert isinstance(proof.event, CancellationObserved)
        assert proof.payload is not None
        assert proof.event.result_digest == digest_bytes(proof.payload)
        assert driver.record.state is State.CANCELLED_ACCEPTED
    finally:
        await driver.adapter.aclose()


async def test_legacy_cancel_is_proof_and_terminal_refuses(served: Served) -> None:
    """P2: a successful tasks/cancel proves the cancelled terminal; on a terminal task it
    is refused (-32602), never rewritten as cancelled (X5)."""
    driver = await _driver(served.url, "2025-11-25", "sleep_report", {"seconds": 30, "rows": 1})
    done = await _driver(served.url, "2025-11-25", "sleep_report", {"seconds": 0, "rows": 1})
    try:
        await _created(served, driver)
        driver.apply(_cancel_requested())
        proof = await driver.adapter.cancel(driver.record)
        assert isinstance(proof.event, CancellationObserved)
        driver.apply(proof)
        assert driver.record.state is State.CANCELLED_ACCEPTED
        done_id = await _created(served, done)
        await served.wait_status(done_id, {"completed"})
        done.apply(_cancel_requested())
        refused = await done.adapter.cancel(done.record)
        assert isinstance(refused.event, CancelRefused)
        done.apply(refused)
        assert isinstance((await done.poll()).event, TerminalObserved)
    finally:
        await driver.adapter.aclose()
        await done.adapter.aclose()


@pytest.mark.parametrize("version", VERSIONS)
async def test_tool_error_and_protocol_error_stay_distinct(served: Served, version: str) -> None:
    """isError:true -> TOOL_ERROR; a JSON-RPC error as the outcome -> PROTOCOL_ERROR/FAILED."""
    results = {}
    for kind in ("tool", "protocol"):
        driver = await _driver(served.url, version, "fail", {"kind": kind})
        try:
            task_id = await _created(served, driver)
            await served.wait_status(task_id, {"completed", "failed"})
            assert isinstance((await driver.poll()).event, TerminalObserved)
            fetched = await driver.fetch()
            assert isinstance(fetched.event, ResultFetched), fetched
            results[kind] = fetched.event
        finally:
            await driver.adapter.aclose()
    assert results["tool"].result_kind is ResultKind.TOOL_ERROR
    # 2025-11-25 reports a tool error as `failed`; 2026-07-28 as `completed` (§4).
    expected = ServerStatus.COMPLETED if version == "2026-07-28" else ServerStatus.FAILED
    assert results["tool"].status is expected
    assert results["protocol"].result_kind is ResultKind.PROTOCOL_ERROR
    assert results["protocol"].status is ServerStatus.FAILED


@pytest.mark.parametrize("version", VERSIONS)
async def test_empty_result_is_flagged(served: Served, version: str) -> None:
    """A zero-item success ({"items": [], "pages": 0}) is fetched with empty=True (X6)."""
    driver = await _driver(served.url, version, "crawl", {"pages": 0, "items_per_page": 3})
    try:
        task_id = await _created(served, driver)
        await served.wait_status(task_id, {"completed"})
        await driver.poll()
        fetched = await driver.fetch()
        assert isinstance(fetched.event, ResultFetched)
        assert fetched.event.empty is True
        assert driver.record.warnings  # the core's zero-item warning (X6)
    finally:
        await driver.adapter.aclose()


@pytest.mark.parametrize("version", VERSIONS)
async def test_unknown_task_is_not_found(served: Served, version: str) -> None:
    """tasks/get of an unknown id answers -32602 -> OperationNotFound (X7)."""
    driver = await _driver(served.url, version, "sleep_report", {"seconds": 0, "rows": 0})
    try:
        await _created(served, driver)
        ghost = dataclasses.replace(driver.record, operation_id="no-such-task")
        outcome = await driver.adapter.poll(ghost)
        assert isinstance(outcome.event, OperationNotFound)
    finally:
        await driver.adapter.aclose()


@pytest.mark.parametrize("version", VERSIONS)
async def test_lost_create_response_then_lookup(lossy: Served, version: str) -> None:
    """The create's response is lost -> SubmitOutcomeLost; lookup by key finds the task (X2)."""
    driver = await _driver(lossy.url, version, "sleep_report", {"seconds": 0, "rows": 1})
    other = await _driver(lossy.url, version, "sleep_report", {"seconds": 0, "rows": 2})
    try:
        lost = await driver.submit()
        assert isinstance(lost.event, SubmitOutcomeLost), lost
        assert driver.record.state is State.SUBMISSION_UNKNOWN
        found = await driver.adapter.lookup(driver.record)
        assert isinstance(found.event, SubmissionFound), found
        driver.apply(found)
        assert driver.record.state is State.WORKING
        await lossy.wait_status(found.event.operation_id, {"completed"})
        assert isinstance((await driver.poll()).event, TerminalObserved)
        never = await other.adapter.lookup(other.record)
        assert isinstance(never.event, SubmissionNeverCreated)
    finally:
        await driver.adapter.aclose()
        await other.adapter.aclose()


@pytest.mark.parametrize("version", VERSIONS)
async def test_rejected_create(served: Served, version: str) -> None:
    """Invalid arguments are a definitive rejection: SubmitRejected with the error body."""
    driver = await _driver(served.url, version, "sleep_report", {"seconds": "soon"})
    try:
        outcome = await driver.submit()
        assert isinstance(outcome.event, SubmitRejected), outcome
        assert outcome.payload is not None
        assert json.loads(outcome.payload)["code"] == -32602
        assert outcome.event.result_digest == digest_bytes(outcome.payload)
        assert driver.record.state is State.ACCEPTED
    finally:
        await driver.adapter.aclose()


@pytest.mark.parametrize("version", VERSIONS)
async def test_forbidden_tool_answers_inline(served: Served, version: str) -> None:
    """A tool without task support answers inline through the task adapter too (X10)."""
    driver = await _driver(served.url, version, "echo", {"text": "hi"})
    try:
        outcome = await driver.submit()
        assert isinstance(outcome.event, ResultFetched), outcome
        assert outcome.payload is not None
        assert json.loads(outcome.payload)["content"][0]["text"] == "hi"
        assert driver.record.state is State.ACCEPTED
    finally:
        await driver.adapter.aclose()


@pytest.mark.parametrize("version", ["sync", "2025-11-25/sync"])
async def test_sync_adapter(served: Served, version: str) -> None:
    """P5: tools/call under a request timeout; the reply is the outcome (X10)."""
    driver = await _driver(served.url, version, "echo", {"text": "plain"})
    try:
        assert isinstance(driver.adapter, SyncAdapter)
        assert driver.binding.sync_timeout_s == 15.0
        outcome = await driver.submit()
        assert isinstance(outcome.event, ResultFetched)
        assert outcome.event.result_kind is ResultKind.VALUE
        polled = await driver.adapter.poll(driver.record)
        assert isinstance(polled.event, RequestFailed)
    finally:
        await driver.adapter.aclose()


async def test_sync_timeout_is_outcome_lost(served: Served) -> None:
    """A synchronous call that outlives its timeout is ambiguous: SubmitOutcomeLost (X10)."""
    adapter = await connect(served.url, prefer="sync", timeout_s=0.3)
    try:
        binding = await adapter.bind("sleep_report")
        driver = Driver(adapter, binding, {"seconds": 5, "rows": 1})
        outcome = await driver.submit()
        assert isinstance(outcome.event, SubmitOutcomeLost), outcome
    finally:
        await adapter.aclose()


async def test_sync_refuses_a_long_call(served: Served) -> None:
    """A call declared long at a server/tool without task support is refused (X1)."""
    adapter = await connect(served.url, prefer="sync", long_call=True)
    try:
        with pytest.raises(TaskSupportMissing):
            await adapter.bind("echo")
    finally:
        await adapter.aclose()
    legacy_sync = await connect(served.url, prefer="2025-11-25/sync")
    try:
        with pytest.raises(TaskSupportMissing):
            await legacy_sync.bind("crawl")  # taskSupport: required
    finally:
        await legacy_sync.aclose()


async def test_refused_connection_is_request_failed() -> None:
    """Nothing listens: connect refuses; a create there proves non-processing (X2, X9)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    with pytest.raises(NegotiationFailed):
        await connect(url)
    adapter: Adapter = McpTasks20260728Adapter(ModernMapping(url, discovered={}), HttpDriver(url))
    try:
        binding = ToolBinding(
            server=url,
            tool_name="t",
            protocol="2026-07-28",
            adapter_version="1",
            descriptor_digest="sha256:0",
            task_support="optional",
            idempotent=False,
            submission_lookup=False,
        )
        driver = Driver(adapter, binding, {})
        outcome = await adapter.submit(driver.record, {})
        assert outcome.event == RequestFailed(
            request=RequestKind.SUBMIT,
            failure=FailureKind.CONNECT_FAILED,
            detail=outcome.event.detail,  # type: ignore[union-attr]
        )
    finally:
        await adapter.aclose()


def _cancel_requested() -> CancelRequested:
    return CancelRequested()
