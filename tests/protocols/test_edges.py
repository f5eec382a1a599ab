"""Edges of both facades and adapters: principals, wait, expiry, KV records, cancel races."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from longcall.adapters import aip151, apify
from longcall.core import OperationRecord
from longcall.core import events as e
from longcall.server import LongcallServer, running_server
from longcall.server.aip151 import mount_aip151
from longcall.server.apify import mount_apify
from longcall.server.examples import register_reference_tools

pytestmark = pytest.mark.anyio
SCALE = 0.01


class ManualClock:
    """A wall clock the test moves by hand (expiry without waiting for it)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
async def base(tmp_path: Path) -> AsyncIterator[str]:
    """Reference tools on both facades (time-scaled Apify)."""
    server = LongcallServer(store=str(tmp_path / "tasks.db"))
    register_reference_tools(server)
    mount_aip151(server)
    mount_apify(server, time_scale=SCALE)
    async with running_server(server) as url:
        yield url.removesuffix("/mcp")


def _record(op: str | None, *, tool: str = "sleep_report", protocol: str = "aip-151") -> Any:
    return OperationRecord(
        call_node_id="n",
        request_digest="d",
        tool_name=tool,
        tool_descriptor_digest="t",
        principal="anonymous",
        server="s",
        protocol=protocol,
        adapter_version="1",
        submission_key="lc1-edge",
        operation_id=op,
        created_at=0.0,
        updated_at=0.0,
    )


async def test_other_principal_reads_not_found_and_wait_is_bounded(base: str) -> None:
    """S5: another principal's operation is 404; :wait returns the done operation."""
    async with httpx.AsyncClient(timeout=10) as http:
        started = await http.post(
            f"{base}/v1/tools/sleep_report:start",
            json={"requestId": str(uuid.uuid4()), "arguments": {"seconds": 0.1, "rows": 1}},
        )
        name = started.json()["name"]
        other = await http.get(f"{base}/v1/{name}", headers={"authorization": "Bearer x"})
        waited = await http.post(f"{base}/v1/{name}:wait", json={"timeout": "10s"})
        bad = await http.post(
            f"{base}/v1/tools/sleep_report:start", json={"requestId": "not-a-uuid"}
        )
    assert other.status_code == 404
    assert other.json()["error"]["status"] == "NOT_FOUND"
    assert waited.json()["done"] is True
    assert "response" in waited.json()
    assert bad.status_code == 400
    assert bad.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_expired_operation_polls_as_not_found(tmp_path: Path) -> None:
    """X7: after its ttl the operation reads 404 → OperationNotFound for the core to classify."""
    clock = ManualClock()
    server = LongcallServer(store=str(tmp_path / "expiry.db"), clock=clock)

    @server.tool(task="required", ttl_ms=300, poll_interval_ms=50)
    async def brief(text: str) -> dict[str, Any]:
        """Return at once; the operation expires 300 ms after its creation."""
        await asyncio.sleep(0)
        return {"text": text}

    mount_aip151(server)
    async with running_server(server) as url:
        adapter = await aip151.connect(url.removesuffix("/mcp") + "/v1")
        await adapter.bind("brief")
        started = await adapter.submit(_record(None, tool="brief"), {"text": "hi"})
        assert isinstance(started.event, e.SubmitAcknowledged)
        record = _record(started.event.operation_id, tool="brief")
        before = await adapter.poll(record)
        assert not isinstance(before.event, e.OperationNotFound)
        clock.advance(0.301)  # past the ttl, without waiting for it
        after = await adapter.poll(record)
        await adapter.aclose()
    assert isinstance(after.event, e.OperationNotFound)


async def test_key_value_store_record_and_unknown_storages(base: str) -> None:
    """get-key-value-store-record reads INPUT/OUTPUT; unknown stores answer isError."""
    adapter = await apify.connect(base + "/apify/mcp", wait_secs=45)
    await adapter.bind("longcall--sleep-report")
    started = await adapter.call_tool(
        "longcall--sleep-report", {"seconds": 0.1, "rows": 2, "waitSecs": 45}
    )
    run = (started.result or {})["structuredContent"]
    assert run["status"] == "SUCCEEDED"
    store = run["storages"]["keyValueStores"]["default"]
    assert store["keys"] == ["INPUT", "OUTPUT"]
    got = await adapter.call_tool(
        "get-key-value-store-record", {"keyValueStoreId": store["id"], "recordKey": "INPUT"}
    )
    missing = await adapter.call_tool("get-dataset-items", {"datasetId": "dataset-nope"})
    await adapter.aclose()
    assert (got.result or {})["structuredContent"]["value"] == {"seconds": 0.1, "rows": 2}
    assert (missing.result or {})["isError"] is True


async def test_abort_after_success_is_a_refused_cancel(base: str) -> None:
    """Cancel racing completion: the run SUCCEEDED first → CancelRefused, never cancelled (X5)."""
    adapter = await apify.connect(base + "/apify/mcp", wait_secs=45)
    await adapter.bind("longcall--sleep-report")
    started = await adapter.submit(
        _record(None, tool="longcall--sleep-report", protocol="apify"), {"seconds": 0, "rows": 1}
    )
    assert isinstance(started.event, e.SubmitAcknowledged)
    record = _record(started.event.operation_id, tool="longcall--sleep-report", protocol="apify")
    polled = await adapter.poll(record)
    refused = await adapter.cancel(record)
    await adapter.aclose()
    assert isinstance(polled.event, e.TerminalObserved)
    assert isinstance(refused.event, e.CancelRefused)


async def test_apify_resend_with_the_same_key_returns_the_same_run(base: str) -> None:
    """S3 via the advertised submission-key capability: a resent start finds the same run."""
    adapter = await apify.connect(base + "/apify/mcp", wait_secs=0)
    binding = await adapter.bind("longcall--sleep-report")
    record = _record(None, tool="longcall--sleep-report", protocol="apify")
    first = await adapter.submit(record, {"seconds": 30, "rows": 1})
    second = await adapter.submit(record, {"seconds": 30, "rows": 1})
    await adapter.aclose()
    assert binding.idempotent
    assert isinstance(first.event, e.SubmitAcknowledged)
    assert isinstance(second.event, e.SubmitAcknowledged)
    assert first.event.operation_id == second.event.operation_id


@pytest.mark.parametrize(
    ("path", "prefer", "tool"),
    [
        ("/mcp", "2026-07-28", "sleep_report"),
        ("/mcp", "2025-11-25", "sleep_report"),
        ("/mcp", "2025-11-25/sync", "sleep_report"),
        ("/v1", None, "sleep_report"),
        ("/apify/mcp", None, "longcall--sleep-report"),
    ],
    ids=["mcp-2026", "mcp-2025", "mcp-sync", "aip-151", "apify"],
)
async def test_every_binding_names_a_version_the_build_carries(
    base: str, path: str, prefer: str | None, tool: str
) -> None:
    """What a real adapter binds a tool to is among ``carried_versions()``: the set a
    worker of this build drives when it names none (else its own operations would be
    left to nobody)."""
    from longcall.adapters.routing import carried_versions, connect_any

    adapter = await connect_any(base + path, prefer)
    try:
        binding = await adapter.bind(tool)
    finally:
        await adapter.aclose()
    assert (binding.protocol, binding.adapter_version) in carried_versions()
