"""Our Apify-style adapter and facade, and what a model reads from the facade (P4, S8, O4)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.protocols.conftest import run_call as shared_run_call

from longcall.adapters.apify import connect, model_text
from longcall.core import ResultKind, ServerStatus, State
from longcall.server import LongcallServer, running_server
from longcall.server.apify import ApifyFacade, mount_apify
from longcall.server.examples import register_reference_tools

pytestmark = pytest.mark.anyio
SCALE = 0.01
"""Real seconds per facade second: a 30 s waitSecs window takes 0.3 s."""
CALL_TIMEOUT_S = LOADED_MACHINE_S
SLEEP = "longcall--sleep-report"


@pytest.fixture
async def apify(tmp_path: Path) -> AsyncIterator[tuple[str, ApifyFacade]]:
    """The reference tools served Apify-style (time-scaled) at /apify/mcp on 127.0.0.1."""
    server = LongcallServer(store=str(tmp_path / "tasks.db"))
    register_reference_tools(server)
    facade = mount_apify(server, time_scale=SCALE)
    async with running_server(server) as url:
        yield url.removesuffix("/mcp") + "/apify/mcp", facade


@pytest.fixture
async def lossy_pages(tmp_path: Path) -> AsyncIterator[str]:
    """As ``apify``, but the 2nd get-dataset-items page loses an item it still counts."""
    server = LongcallServer(store=str(tmp_path / "tasks.db"))
    register_reference_tools(server)
    mount_apify(server, time_scale=SCALE, truncate_dataset_page_at=2)
    async with running_server(server) as url:
        yield url.removesuffix("/mcp") + "/apify/mcp"


class Model:
    """A plain MCP client, the way a model's host calls tools (no longcall logic)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ids = itertools.count(1)

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        body = {
            "jsonrpc": "2.0",
            "id": next(self.ids),
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        async with httpx.AsyncClient(timeout=30) as http:
            reply = await http.post(self.url, json=body)
        message: dict[str, Any] = reply.json()
        return message


async def run_call(
    tmp_path: Path, url: str, tool: str, arguments: dict[str, Any], *, cancel: bool = False
) -> tuple[Any, bytes | None]:
    """The shared executor driver (the protocol is routed from the URL)."""
    return await shared_run_call(
        tmp_path, url, tool, arguments, cancel=cancel, timeout_s=CALL_TIMEOUT_S
    )


async def test_early_return_then_the_text_part_names_each_next_call(
    apify: tuple[str, ApifyFacade],
) -> None:
    """A model following only the text part polls several windows, then fetches the items."""
    url, _ = apify
    model = Model(url)
    # 2.0 s in 8 steps: the first progress (0.25 s) lands inside the first 0.3 s window.
    start = (await model.call(SLEEP, {"seconds": 2.0, "rows": 3, "ignored": 1}))["result"]
    run = start["structuredContent"]
    assert start["isError"] is False
    assert run["status"] == "RUNNING"
    assert run["storages"]["datasets"]["default"]["itemCount"] == 0
    assert re.fullmatch(r"RUNNING for 3[0-9]s\. Actor status: \"step \d+/\d+\"\.", run["summary"])
    text = model_text(start)
    assert text == f"{run['summary']}\n{run['nextStep']}"
    assert run["nextStep"] == (
        f"Use get-actor-run with runId={run['runId']} and waitSecs=30 to poll for completion."
    )
    assert "com.apify/ActorRun" in start["_meta"]
    windows = 1
    while True:
        match = re.search(r"Use (\S+) with runId=(\S+) and waitSecs=(\d+)", text)
        assert match is not None, text
        tool, run_id, wait = match.groups()
        reply = (await model.call(tool, {"runId": run_id, "waitSecs": wait}))["result"]
        text = model_text(reply)
        windows += 1
        if reply["structuredContent"]["status"] != "RUNNING":
            break
        assert windows < 10
    assert windows >= 3
    assert reply["structuredContent"]["status"] == "SUCCEEDED"
    assert text.startswith("SUCCEEDED in ")
    match = re.search(r"Use (get-dataset-items) with datasetId=(\S+) and limit", text)
    assert match is not None
    page = (await model.call(match.group(1), {"datasetId": match.group(2), "limit": 2}))["result"]
    assert page["structuredContent"]["items"] == [
        {"index": 0, "value": 0},
        {"index": 1, "value": 1},
    ]
    assert model_text(page) == (
        "Fetched 2 of 3 items (offset=0).\n"
        "Call get-dataset-items again with offset=2 to fetch the next page."
    )


async def test_wait_secs_over_45_is_a_jsonrpc_invalid_params(
    apify: tuple[str, ApifyFacade],
) -> None:
    """get-actor-run with waitSecs=46 → -32602 in the reference's message shape (not isError)."""
    url, _ = apify
    reply = await Model(url).call("get-actor-run", {"runId": "x", "waitSecs": 46})
    assert reply["error"] == {
        "code": -32602,
        "message": 'MCP error -32602: Invalid arguments for tool "get-actor-run".\n'
        "Validation errors: /waitSecs: must be <= 45.\n"
        "Please check the tool's input schema using fetch-actor-details tool and ensure all"
        " required parameters are provided with correct types and values.",
    }


async def test_run_statuses_and_is_error_false_on_run_failures(
    apify: tuple[str, ApifyFacade],
) -> None:
    """READY, ABORTING→ABORTED, FAILED, TIMING-OUT→TIMED-OUT: all with isError false."""
    url, _ = apify
    model = Model(url)
    ready = (await model.call(SLEEP, {"seconds": 30, "rows": 1, "waitSecs": 0}))["result"]
    assert ready["structuredContent"]["status"] == "READY"
    run_id = ready["structuredContent"]["runId"]
    aborting = (await model.call("abort-actor-run", {"runId": run_id, "gracefully": True}))[
        "result"
    ]
    assert aborting["structuredContent"]["status"] == "ABORTING"
    assert "_meta" not in aborting
    aborted = (await model.call("get-actor-run", {"runId": run_id, "waitSecs": 45}))["result"]
    assert aborted["structuredContent"]["status"] == "ABORTED"
    assert aborted["isError"] is False
    failed = (await model.call("longcall--fail", {"kind": "tool"}))["result"]
    if failed["structuredContent"]["status"] == "RUNNING":
        # The call's wait window (0.3 s at this time scale) can pass before the failing
        # run ends on a loaded machine: a client then reads the run, as the hint says.
        run = {"runId": failed["structuredContent"]["runId"], "waitSecs": 45}
        failed = (await model.call("get-actor-run", run))["result"]
    assert failed["structuredContent"]["status"] == "FAILED"
    assert failed["isError"] is False
    timing = (
        await model.call(SLEEP, {"seconds": 30, "rows": 1, "timeoutSecs": 20, "waitSecs": 21})
    )["result"]
    assert timing["structuredContent"]["status"] == "TIMING-OUT"
    timed_out = (
        await model.call("get-actor-run", {"runId": timing["structuredContent"]["runId"]})
    )["result"]
    assert timed_out["structuredContent"]["status"] == "TIMED-OUT"
    assert timed_out["isError"] is False
    missing = (await model.call("get-actor-run", {"runId": "nope", "waitSecs": 0}))["result"]
    assert missing == {
        "content": [{"type": "text", "text": "Run with ID 'nope' not found."}],
        "isError": True,
    }


async def test_adapter_polls_many_windows_and_pages_1000_items(
    tmp_path: Path, apify: tuple[str, ApifyFacade]
) -> None:
    """Early return → get-actor-run windows → 10 pages of 100 → accepted with usage kept."""
    url, facade = apify
    record, payload = await run_call(tmp_path, url, SLEEP, {"seconds": 1.0, "rows": 1000})
    assert record.state is State.ACCEPTED
    assert record.result_kind is ResultKind.VALUE
    assert record.poll_count >= 2
    assert record.warnings == ()
    assert facade._dataset_calls == 10
    assert payload is not None
    body = json.loads(payload)
    assert len(body["items"]) == 1000
    assert body["items"][999] == {"index": 999, "value": 999 * 999}
    assert body["usage"]["usageTotalUsd"] > 0
    assert body["run"]["status"] == "SUCCEEDED"


async def test_zero_items_is_accepted_with_the_empty_result_warning(
    tmp_path: Path, apify: tuple[str, ApifyFacade]
) -> None:
    """SUCCEEDED with zero items → accepted, warning ``empty_result`` (X6)."""
    url, _ = apify
    record, _ = await run_call(tmp_path, url, SLEEP, {"seconds": 0.1, "rows": 0})
    assert record.state is State.ACCEPTED
    assert record.warnings == ("empty_result",)


async def test_run_failure_is_a_failed_tool_error(
    tmp_path: Path, apify: tuple[str, ApifyFacade]
) -> None:
    """FAILED (isError false on the wire) → accepted FAILED / TOOL_ERROR."""
    url, _ = apify
    record, _ = await run_call(tmp_path, url, "longcall--fail", {"kind": "tool"})
    assert record.state is State.ACCEPTED
    assert record.server_status is ServerStatus.FAILED
    assert record.result_kind is ResultKind.TOOL_ERROR


async def test_abort_mid_run_is_accepted_as_cancelled(
    tmp_path: Path, apify: tuple[str, ApifyFacade]
) -> None:
    """cancel → abort-actor-run → ABORTED → CANCELLED_ACCEPTED (X5)."""
    url, _ = apify
    record, _ = await run_call(tmp_path, url, SLEEP, {"seconds": 60, "rows": 1}, cancel=True)
    assert record.state is State.CANCELLED_ACCEPTED


async def test_page_contradicting_its_count_goes_to_reconciliation(
    tmp_path: Path, lossy_pages: str
) -> None:
    """A page missing an item it counts → ResultFetchFailed → reconciliation, no receipt."""
    record, payload = await run_call(tmp_path, lossy_pages, SLEEP, {"seconds": 0.1, "rows": 250})
    assert record.state is State.RECONCILIATION_REQUIRED
    assert "itemCount=100" in (record.reconciliation_reason or "")
    assert payload is None


async def test_adapter_direct_start_maps_run_id(apify: tuple[str, ApifyFacade]) -> None:
    """The early return's runId becomes the operation id; waitSecs stays within the cap."""
    url, _ = apify
    adapter = await connect(url, wait_secs=45, start_wait_secs=1)
    binding = await adapter.bind(SLEEP)
    assert binding.idempotent
    await adapter.aclose()
    with pytest.raises(Exception, match="wait_secs"):
        await connect(url, wait_secs=46)
