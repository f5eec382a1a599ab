"""Raw JSON-RPC conformance of the 2025-11-25 experimental tasks against a real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import methods as sdk_methods
from tests.bounds import LOADED_MACHINE_S

from conftest import LegacyClient, ManualClock, ModernClient
from longcall.server import LongcallServer, running_server

pytestmark = pytest.mark.anyio

RELATED = "io.modelcontextprotocol/related-task"


def gated_server(
    store_path: str, gate: asyncio.Event, clock: ManualClock | None = None
) -> LongcallServer:
    """A server with one task tool that finishes only when the test opens ``gate``."""
    server = LongcallServer(store=store_path, clock=clock or ManualClock())

    @server.tool(task="required", ttl_ms=60_000)
    async def gated() -> dict[str, Any]:
        await gate.wait()
        return {"opened": True}

    return server


async def test_initialize_declares_task_capabilities(legacy: LegacyClient) -> None:
    """initialize advertises tasks.list, tasks.cancel and tasks.requests.tools.call."""
    result = await legacy.result(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    )
    sdk_methods.validate_server_result("initialize", "2025-11-25", result)
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"]["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    assert "dev.longcall/submissionKey" in result["capabilities"]["experimental"]


async def test_tools_declare_task_support(legacy: LegacyClient) -> None:
    """tools/list carries execution.taskSupport per tool."""
    result = await legacy.result("tools/list")
    sdk_methods.validate_server_result("tools/list", "2025-11-25", result)
    support = {tool["name"]: tool["execution"]["taskSupport"] for tool in result["tools"]}
    assert support == {
        "sleep_report": "optional",
        "crawl": "required",
        "approve": "required",
        "fail": "required",
        "echo": "forbidden",
    }


async def test_task_augmented_call_returns_nested_task(legacy: LegacyClient) -> None:
    """params.task {ttl} creates a task; the nested CreateTaskResult reports the actual ttl."""
    task = await legacy.create("crawl", {"pages": 1, "items_per_page": 2}, ttl=120_000)
    assert task["status"] == "working"
    assert task["ttl"] == 120_000
    assert isinstance(task["pollInterval"], int)
    assert "ttlMs" not in task
    final = await legacy.final(task["taskId"])
    assert final["result"]["structuredContent"]["items"] == ["page0-item0", "page0-item1"]
    assert final["result"]["_meta"][RELATED] == {"taskId": task["taskId"]}
    got = await legacy.result("tasks/get", {"taskId": task["taskId"]})
    assert got["status"] == "completed"
    assert got["ttl"] == 120_000


async def test_task_support_violations_are_32601(legacy: LegacyClient) -> None:
    """Required without params.task and forbidden with it are both -32601."""
    required = await legacy.error(
        "tools/call", {"name": "crawl", "arguments": {"pages": 0, "items_per_page": 0}}
    )
    assert required["code"] == -32601
    forbidden = await legacy.error(
        "tools/call", {"name": "echo", "arguments": {"text": "x"}, "task": {}}
    )
    assert forbidden["code"] == -32601


async def test_optional_tool_without_task_is_synchronous(legacy: LegacyClient) -> None:
    """Optional without params.task: a plain CallToolResult."""
    result = await legacy.result(
        "tools/call", {"name": "sleep_report", "arguments": {"seconds": 0, "rows": 1}}
    )
    assert result["structuredContent"] == {"rows": [{"index": 0, "value": 0}]}
    assert "task" not in result


async def test_tasks_result_blocks_until_terminal(http: httpx.AsyncClient, store_path: str) -> None:
    """tasks/result does not answer while the task works, then answers the result."""
    gate = asyncio.Event()
    async with running_server(gated_server(store_path, gate)) as url:
        client = LegacyClient(http, url)
        task = await client.create("gated", {})
        answered = anyio.Event()
        outcome: dict[str, Any] = {}

        async def wait_result() -> None:
            outcome.update(await client.final(task["taskId"]))
            answered.set()

        async with anyio.create_task_group() as group:
            group.start_soon(wait_result)
            # The server answers other requests while tasks/result is pending.
            for _ in range(3):
                assert (await client.result("tasks/get", {"taskId": task["taskId"]}))[
                    "status"
                ] == "working"
            assert not answered.is_set()
            gate.set()
            with anyio.fail_after(LOADED_MACHINE_S):
                await answered.wait()
        assert outcome["result"]["structuredContent"] == {"opened": True}


async def test_failures_keep_tool_and_protocol_errors_apart(legacy: LegacyClient) -> None:
    """Tool error: ``failed`` + isError result; protocol error: ``failed`` + the JSON-RPC error."""
    tool = await legacy.create("fail", {"kind": "tool"})
    tool_final = await legacy.final(tool["taskId"])
    assert tool_final["result"]["isError"] is True
    assert (await legacy.result("tasks/get", {"taskId": tool["taskId"]}))["status"] == "failed"
    protocol = await legacy.create("fail", {"kind": "protocol"})
    protocol_final = await legacy.final(protocol["taskId"])
    assert protocol_final["error"]["code"] == -32603
    assert protocol_final["error"]["data"] == {"kind": "protocol"}
    got = await legacy.result("tasks/get", {"taskId": protocol["taskId"]})
    assert got["status"] == "failed"
    assert got["statusMessage"]


async def test_cancel_is_cancelled_before_answering_and_32602_when_terminal(
    legacy: LegacyClient,
) -> None:
    """Cancel answers the cancelled Task; cancel again or of a completed task is -32602."""
    task = await legacy.create("sleep_report", {"seconds": 30, "rows": 0})
    cancelled = await legacy.result("tasks/cancel", {"taskId": task["taskId"]})
    assert cancelled["status"] == "cancelled"
    assert (await legacy.result("tasks/get", {"taskId": task["taskId"]}))["status"] == "cancelled"
    again = await legacy.error("tasks/cancel", {"taskId": task["taskId"]})
    assert again["code"] == -32602
    assert "cancelled" in again["message"]
    done = await legacy.create("crawl", {"pages": 0, "items_per_page": 0})
    await legacy.final(done["taskId"])
    late = await legacy.error("tasks/cancel", {"taskId": done["taskId"]})
    assert late["code"] == -32602
    assert "completed" in late["message"]
    assert (await legacy.result("tasks/get", {"taskId": done["taskId"]}))["status"] == "completed"
    final = await legacy.final(task["taskId"])
    assert final["error"]["data"] == {"status": "cancelled"}


async def test_tasks_list_shows_only_own_tasks_with_pagination(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """tasks/list pages through the caller's tasks only; a bad cursor is -32602."""
    from longcall.server import ServerOptions, build_reference_server

    server = build_reference_server(store=store_path, options=ServerOptions(list_page_size=2))
    async with running_server(server) as url:
        alice = LegacyClient(http, url, token="alice")
        bob = LegacyClient(http, url, token="bob")
        mine = [
            (await alice.create("crawl", {"pages": 0, "items_per_page": 0}))["taskId"]
            for _ in range(3)
        ]
        await bob.create("crawl", {"pages": 0, "items_per_page": 0})
        first = await alice.result("tasks/list", {})
        second = await alice.result("tasks/list", {"cursor": first["nextCursor"]})
        listed = [task["taskId"] for task in first["tasks"] + second["tasks"]]
        assert listed == mine
        assert "nextCursor" not in second
        assert (await alice.error("tasks/list", {"cursor": "nope"}))["code"] == -32602
        bobs_cursor = (await bob.result("tasks/list", {}))["tasks"][0]["taskId"]
        assert (await alice.error("tasks/list", {"cursor": bobs_cursor}))["code"] == -32602


async def test_input_through_the_tasks_result_side_channel(legacy: LegacyClient) -> None:
    """tasks/result streams elicitation/create (related-task _meta); the answer completes it."""
    task = await legacy.create("approve", {"change": "rotate keys"})
    body = {
        "jsonrpc": "2.0",
        "id": "result-1",
        "method": "tasks/result",
        "params": {"taskId": task["taskId"]},
    }
    final: dict[str, Any] = {}
    with anyio.fail_after(LOADED_MACHINE_S):
        async with legacy.http.stream(
            "POST", legacy.url, json=body, headers=legacy.headers()
        ) as stream:
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("method") == "elicitation/create":
                    assert message["params"]["_meta"][RELATED] == {"taskId": task["taskId"]}
                    status = await legacy.result("tasks/get", {"taskId": task["taskId"]})
                    assert status["status"] == "input_required"
                    reply = {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {
                            "action": "accept",
                            "content": {"approved": True},
                            "_meta": {RELATED: {"taskId": task["taskId"]}},
                        },
                    }
                    answer = await legacy.http.post(
                        legacy.url, json=reply, headers=legacy.headers()
                    )
                    assert answer.status_code == 202
                elif message.get("id") == "result-1":
                    final = message
    assert final["result"]["structuredContent"] == {"change": "rotate keys", "approved": True}
    assert final["result"]["_meta"][RELATED] == {"taskId": task["taskId"]}


async def test_status_notifications_on_the_get_stream(legacy: LegacyClient) -> None:
    """The standalone GET stream pushes notifications/tasks/status for the caller's tasks."""
    headers = {**legacy.headers(), "accept": "text/event-stream"}
    statuses: list[str] = []
    with anyio.fail_after(LOADED_MACHINE_S):
        async with legacy.http.stream("GET", legacy.url, headers=headers) as stream:
            task = await legacy.create("crawl", {"pages": 1, "items_per_page": 1})
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                assert message["method"] == "notifications/tasks/status"
                assert message["params"]["taskId"] == task["taskId"]
                statuses.append(message["params"]["status"])
                if statuses[-1] == "completed":
                    break
    assert statuses[-1] == "completed"


async def test_another_principals_task_looks_unknown(
    http: httpx.AsyncClient, reference_url: str
) -> None:
    """tasks/get, result and cancel on another principal's id answer like an unknown id (S5)."""
    alice = LegacyClient(http, reference_url, token="alice")
    bob = LegacyClient(http, reference_url, token="bob")
    task = await alice.create("sleep_report", {"seconds": 30, "rows": 0})
    unknown = "B" * len(task["taskId"])
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        foreign = await bob.error(method, {"taskId": task["taskId"]})
        missing = await bob.error(method, {"taskId": unknown})
        assert foreign["code"] == missing["code"] == -32602
        assert foreign["message"].replace(task["taskId"], "ID") == missing["message"].replace(
            unknown, "ID"
        )
    assert (await alice.result("tasks/get", {"taskId": task["taskId"]}))["status"] == "working"
    await alice.result("tasks/cancel", {"taskId": task["taskId"]})


async def test_expired_task_is_not_found(http: httpx.AsyncClient, store_path: str) -> None:
    """After its (requested, lowered) ttl a task answers -32602 like an unknown id."""
    clock = ManualClock()
    gate = asyncio.Event()
    async with running_server(gated_server(store_path, gate, clock)) as url:
        client = LegacyClient(http, url)
        task = await client.create("gated", {}, ttl=5_000)
        assert task["ttl"] == 5_000
        clock.advance(4.9)
        assert (await client.result("tasks/get", {"taskId": task["taskId"]}))["status"] == "working"
        clock.advance(0.2)
        assert (await client.error("tasks/get", {"taskId": task["taskId"]}))["code"] == -32602
        gate.set()


async def test_versions_do_not_share_tasks(http: httpx.AsyncClient, reference_url: str) -> None:
    """A task created at 2026-07-28 is unknown at 2025-11-25 (rendered in its own version only)."""
    modern = ModernClient(http, reference_url)
    legacy = LegacyClient(http, reference_url)
    task = await modern.create("crawl", {"pages": 0, "items_per_page": 0})
    assert (await legacy.error("tasks/get", {"taskId": task["taskId"]}))["code"] == -32602


async def test_progress_token_outlives_the_create(legacy: LegacyClient) -> None:
    """A task created with a progressToken gets notifications/progress on the GET stream (§2.7)."""
    headers = {**legacy.headers(), "accept": "text/event-stream"}
    progress: list[dict[str, Any]] = []
    params = {
        "name": "sleep_report",
        "arguments": {"seconds": 0.3, "rows": 1},
        "task": {},
        "_meta": {"progressToken": "p-1"},
    }
    with anyio.fail_after(LOADED_MACHINE_S):
        async with legacy.http.stream("GET", legacy.url, headers=headers) as stream:
            task = (await legacy.result("tools/call", params))["task"]
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                if message["method"] == "notifications/progress":
                    progress.append(message["params"])
                elif message["params"]["status"] == "completed":
                    break
    assert progress
    assert {note["progressToken"] for note in progress} == {"p-1"}
    assert all(note["_meta"][RELATED] == {"taskId": task["taskId"]} for note in progress)
    assert progress[-1]["progress"] <= progress[-1]["total"]
