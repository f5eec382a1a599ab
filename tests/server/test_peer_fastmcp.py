"""The peer client: fastmcp's own client (with fastmcp-tasks) drives our 2026-07-28 tasks.

One honest gap, asserted below rather than hidden: the fastmcp-tasks 4.1.4 client sends
no ``Mcp-Name`` header on ``tasks/*`` (its request models set no ``name_param``; wire
reference §6.3 W8), and our server requires it (SEP-2663; missing counts as mismatch,
-32020). The first test shows the unmodified peer being refused. The others give the
peer's HTTP client a request hook that mirrors ``params.taskId`` into ``Mcp-Name`` — the
header the spec obliges the client to send; nothing else of the peer is changed.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from tests.bounds import LOADED_MACHINE_S

pytestmark = pytest.mark.anyio

PEER_LIMIT_S = LOADED_MACHINE_S


async def mirror_task_id_into_mcp_name(request: httpx2.Request) -> None:
    """Set ``Mcp-Name: <taskId>`` on tasks/* requests, as SEP-2663 requires of a client."""
    if not request.headers.get("mcp-method", "").startswith("tasks/"):
        return
    body = json.loads(request.content or b"{}")
    task_id = (body.get("params") or {}).get("taskId")
    if isinstance(task_id, str):
        request.headers["mcp-name"] = task_id


def header_fixing_factory(**kwargs: Any) -> httpx2.AsyncClient:
    """The peer's default HTTP client plus the Mcp-Name hook."""
    client = httpx2.AsyncClient(**kwargs)
    client.event_hooks["request"].append(mirror_task_id_into_mcp_name)
    return client


def peer(url: str, **kwargs: Any) -> Client[Any]:
    """A fastmcp client whose only change is the Mcp-Name hook."""
    transport = StreamableHttpTransport(url, httpx_client_factory=header_fixing_factory)
    return Client(transport, timeout=PEER_LIMIT_S, **kwargs)


async def test_unmodified_peer_is_refused_for_missing_mcp_name(reference_url: str) -> None:
    """The peer as shipped omits Mcp-Name on tasks/get; our server answers -32020 (SEP-2663)."""
    with anyio.fail_after(PEER_LIMIT_S):
        async with Client(reference_url, timeout=PEER_LIMIT_S) as client:
            with pytest.raises((MCPError, ToolError)) as caught:
                await client.call_tool("crawl", {"pages": 1, "items_per_page": 1})
    assert "Mcp-Name" in str(caught.value) or "-32020" in str(caught.value)


async def test_peer_drives_a_required_task_to_completion(reference_url: str) -> None:
    """The peer negotiates 2026-07-28 + tasks, gets a task and receives its structured result."""
    with anyio.fail_after(PEER_LIMIT_S):
        async with peer(reference_url) as client:
            result = await client.call_tool("crawl", {"pages": 2, "items_per_page": 1})
    assert result.structured_content == {"items": ["page0-item0", "page1-item0"], "pages": 2}
    assert result.is_error is False


async def test_peer_answers_input_through_tasks_update(reference_url: str) -> None:
    """The peer's elicitation handler answers our inputRequests; the task completes."""
    prompts: list[str] = []

    async def approve_everything(
        message: str, response_type: Any, params: Any, context: Any
    ) -> dict[str, Any]:
        prompts.append(message)
        return {"approved": True}

    with anyio.fail_after(PEER_LIMIT_S):
        async with peer(reference_url, elicitation_handler=approve_everything) as client:
            result = await client.call_tool("approve", {"change": "ship it"})
    assert prompts == ["Approve this change? ship it"]
    assert result.structured_content == {"change": "ship it", "approved": True}


async def test_peer_cancels_a_running_task(reference_url: str) -> None:
    """The peer's explicit handle cancels a working task; the server reports it cancelled."""
    with anyio.fail_after(PEER_LIMIT_S):
        async with peer(reference_url) as client:
            task = await call_tool_task(client, "sleep_report", {"seconds": 30, "rows": 1})
            assert (await task.status()).status == "working"
            await task.cancel()
            final = await task.wait(timeout=PEER_LIMIT_S)
            assert final.status == "cancelled"
            with pytest.raises(ToolError, match="cancelled"):
                await task.result()


async def test_peer_sees_tool_and_protocol_errors(reference_url: str) -> None:
    """A tool error reaches the peer as an error result; a protocol error as a raised error."""
    with anyio.fail_after(PEER_LIMIT_S):
        async with peer(reference_url) as client:
            tool = await client.call_tool("fail", {"kind": "tool"}, raise_on_error=False)
            assert tool.is_error is True
            with pytest.raises(ToolError, match="protocol error"):
                await client.call_tool("fail", {"kind": "protocol"})
