"""Raw JSON-RPC conformance of the 2026-07-28 tasks extension (SEP-2663) against a real server."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import methods as sdk_methods
from tests.bounds import LOADED_MACHINE_S

from conftest import TASKS_EXTENSION, ManualClock, ModernClient, envelope
from longcall.server import LongcallServer, TaskContext, running_server

pytestmark = pytest.mark.anyio

SUBMISSION_KEY = "dev.longcall/submissionKey"


async def test_discover_advertises_tasks_and_submission_key(modern: ModernClient) -> None:
    """server/discover names 2026-07-28, the tasks extension and our submission-key extension."""
    result = await modern.result("server/discover")
    sdk_methods.validate_server_result("server/discover", "2026-07-28", result)
    assert result["supportedVersions"] == ["2026-07-28"]
    extensions = result["capabilities"]["extensions"]
    assert extensions[TASKS_EXTENSION] == {}
    assert extensions[SUBMISSION_KEY]["lookupMethod"] == "longcall/tasks/lookup"
    assert "tasks" not in result["capabilities"]


async def test_tools_list_has_no_execution_field(modern: ModernClient) -> None:
    """The 2026-07-28 Tool has no ``execution``; the list validates against the SDK schema."""
    result = await modern.result("tools/list")
    sdk_methods.validate_server_result("tools/list", "2026-07-28", result)
    names = {tool["name"] for tool in result["tools"]}
    assert names == {"sleep_report", "crawl", "approve", "fail", "echo"}
    assert all("execution" not in tool for tool in result["tools"])


async def test_optional_tool_with_consent_creates_a_flat_task(modern: ModernClient) -> None:
    """Optional + consent: a flat CreateTaskResult (resultType task, integer ttlMs, poll)."""
    task = await modern.create("sleep_report", {"seconds": 0, "rows": 2})
    assert set(task) >= {
        "taskId",
        "status",
        "createdAt",
        "lastUpdatedAt",
        "ttlMs",
        "pollIntervalMs",
    }
    assert task["status"] == "working"
    assert isinstance(task["ttlMs"], int)
    assert isinstance(task["pollIntervalMs"], int)
    assert not {"task", "ttl", "pollInterval", "requestState"} & set(task)
    assert len(task["taskId"]) >= 32
    done = await modern.wait_status(task["taskId"], {"completed"})
    assert done["result"]["structuredContent"] == {
        "rows": [{"index": 0, "value": 0}, {"index": 1, "value": 1}]
    }
    assert done["result"]["resultType"] == "complete"


async def test_optional_tool_without_consent_answers_synchronously(modern: ModernClient) -> None:
    """Optional without consent: a plain CallToolResult, never a task."""
    result = await modern.result(
        "tools/call",
        {"name": "sleep_report", "arguments": {"seconds": 0, "rows": 1}},
        consent=False,
    )
    sdk_methods.validate_server_result("tools/call", "2026-07-28", result)
    assert result["resultType"] == "complete"
    assert result["structuredContent"] == {"rows": [{"index": 0, "value": 0}]}


async def test_required_tool_without_consent_is_32021(modern: ModernClient) -> None:
    """Required without consent: -32021 + data.requiredCapabilities, HTTP 400, and no task."""
    error = await modern.error(
        "tools/call",
        {"name": "crawl", "arguments": {"pages": 1, "items_per_page": 1}},
        consent=False,
        meta={SUBMISSION_KEY: "never-created"},
    )
    assert error["code"] == -32021
    assert error["httpStatus"] == 400
    assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    lookup = await modern.result("longcall/tasks/lookup", {"submissionKey": "never-created"})
    assert lookup["found"] is False


async def test_forbidden_tool_with_consent_answers_synchronously(modern: ModernClient) -> None:
    """Forbidden + consent: plain result."""
    result = await modern.result("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "hi"}]


async def test_legacy_task_param_is_tolerated_and_ignored(modern: ModernClient) -> None:
    """``params.task`` is ignored: without consent an optional tool stays synchronous."""
    sync = await modern.result(
        "tools/call",
        {"name": "sleep_report", "arguments": {"seconds": 0, "rows": 0}, "task": {"ttl": 1000}},
        consent=False,
    )
    assert sync["resultType"] == "complete"
    task = await modern.result(
        "tools/call",
        {"name": "sleep_report", "arguments": {"seconds": 0, "rows": 0}, "task": {"ttl": 1000}},
    )
    assert task["resultType"] == "task"
    assert task["ttlMs"] != 1000


async def test_required_task_completes_with_zero_items(modern: ModernClient) -> None:
    """crawl with zero pages completes with an empty item list (a zero-item success)."""
    task = await modern.create("crawl", {"pages": 0, "items_per_page": 5})
    done = await modern.wait_status(task["taskId"], {"completed", "failed"})
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"items": [], "pages": 0}
    assert done["result"]["isError"] is False


async def test_tool_error_is_completed_with_is_error(modern: ModernClient) -> None:
    """A tool error ends ``completed`` with ``result.isError`` (never ``failed``)."""
    task = await modern.create("fail", {"kind": "tool"})
    done = await modern.wait_status(task["taskId"], {"completed", "failed"})
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert "error" not in done


async def test_protocol_error_is_failed_with_error(modern: ModernClient) -> None:
    """A JSON-RPC error ends ``failed`` with the inlined ``error`` and a statusMessage."""
    task = await modern.create("fail", {"kind": "protocol"})
    done = await modern.wait_status(task["taskId"], {"completed", "failed"})
    assert done["status"] == "failed"
    assert done["error"]["code"] == -32603
    assert done["error"]["data"] == {"kind": "protocol"}
    assert done["statusMessage"]
    assert "result" not in done


async def test_input_required_update_flow(modern: ModernClient) -> None:
    """input_required lists outstanding requests; unknown keys ignored; answers idempotent."""
    task = await modern.create("approve", {"change": "drop table"})
    waiting = await modern.wait_status(task["taskId"], {"input_required"})
    (key, request), *rest = waiting["inputRequests"].items()
    assert not rest
    assert request["method"] == "elicitation/create"
    assert request["params"]["requestedSchema"]["properties"]["approved"]["type"] == "boolean"
    ack = await modern.result(
        "tasks/update",
        {
            "taskId": task["taskId"],
            "inputResponses": {"bogus": {"action": "accept", "content": {}}},
        },
    )
    assert ack == {"resultType": "complete"}
    assert (await modern.get(task["taskId"]))["status"] == "input_required"
    answer = {key: {"action": "accept", "content": {"approved": True}}}
    await modern.result("tasks/update", {"taskId": task["taskId"], "inputResponses": answer})
    done = await modern.wait_status(task["taskId"], {"completed"})
    assert done["result"]["structuredContent"] == {"change": "drop table", "approved": True}
    again = {key: {"action": "accept", "content": {"approved": False}}}
    await modern.result("tasks/update", {"taskId": task["taskId"], "inputResponses": again})
    assert (await modern.get(task["taskId"]))["result"]["structuredContent"]["approved"] is True


async def test_update_rejects_non_object_and_malformed_answers(modern: ModernClient) -> None:
    """A non-object inputResponses or a malformed answer is -32602 and changes nothing."""
    task = await modern.create("approve", {"change": "x"})
    waiting = await modern.wait_status(task["taskId"], {"input_required"})
    key = next(iter(waiting["inputRequests"]))
    for bad in (["list"], "text", None):
        error = await modern.error(
            "tasks/update", {"taskId": task["taskId"], "inputResponses": bad}
        )
        assert error["code"] == -32602
    malformed = {key: {"bogusfield": 1}}
    error = await modern.error(
        "tasks/update", {"taskId": task["taskId"], "inputResponses": malformed}
    )
    assert error["code"] == -32602
    after = await modern.get(task["taskId"])
    assert after["status"] == "input_required"
    assert after["inputRequests"] == waiting["inputRequests"]


async def test_cancel_acks_and_cancels_a_working_task(modern: ModernClient) -> None:
    """tasks/cancel acks; a working task ends cancelled and stays so."""
    task = await modern.create("sleep_report", {"seconds": 30, "rows": 1})
    ack = await modern.result("tasks/cancel", {"taskId": task["taskId"]})
    assert ack == {"resultType": "complete"}
    after = await modern.get(task["taskId"])
    assert after["status"] == "cancelled"
    assert "result" not in after


async def test_cancel_of_a_terminal_task_acks_and_changes_nothing(modern: ModernClient) -> None:
    """Cancel of a completed task: the same ack, and the task stays completed."""
    task = await modern.create("crawl", {"pages": 1, "items_per_page": 1})
    done = await modern.wait_status(task["taskId"], {"completed"})
    ack = await modern.result("tasks/cancel", {"taskId": task["taskId"]})
    assert ack == {"resultType": "complete"}
    assert await modern.get(task["taskId"]) == done


@pytest.mark.parametrize("method", ["tasks/result", "tasks/list"])
async def test_removed_methods_are_32601(modern: ModernClient, method: str) -> None:
    """tasks/result and tasks/list do not exist at 2026-07-28: -32601, HTTP 404."""
    error = await modern.error(method, {"taskId": "x"}, headers={"mcp-name": "x"})
    assert error["code"] == -32601
    assert error["httpStatus"] == 404


@pytest.mark.parametrize("method", ["tasks/get", "tasks/cancel", "tasks/update"])
async def test_tasks_methods_without_consent_are_32021(modern: ModernClient, method: str) -> None:
    """Every tasks/* from a non-declaring request gets -32021."""
    task = await modern.create("sleep_report", {"seconds": 30, "rows": 0})
    params: dict[str, Any] = {"taskId": task["taskId"], "inputResponses": {}}
    error = await modern.error(method, params, consent=False)
    assert error["code"] == -32021
    assert error["data"]["requiredCapabilities"]["extensions"] == {TASKS_EXTENSION: {}}
    await modern.result("tasks/cancel", {"taskId": task["taskId"]})


async def test_mcp_name_is_required_and_checked(modern: ModernClient) -> None:
    """tasks/* without Mcp-Name, or with another value, is -32020 (HTTP 400)."""
    task = await modern.create("crawl", {"pages": 0, "items_per_page": 0})
    missing = await modern.error(
        "tasks/get", {"taskId": task["taskId"]}, drop_headers=("mcp-name",)
    )
    assert missing["code"] == -32020
    assert missing["httpStatus"] == 400
    wrong = await modern.error(
        "tasks/get", {"taskId": task["taskId"]}, headers={"mcp-name": "other"}
    )
    assert wrong["code"] == -32020
    tool_wrong = await modern.error(
        "tools/call", {"name": "echo", "arguments": {"text": "x"}}, headers={"mcp-name": "crawl"}
    )
    assert tool_wrong["code"] == -32020


async def test_another_principals_task_looks_unknown(
    http: httpx.AsyncClient, reference_url: str
) -> None:
    """Another principal's id answers exactly like an unknown id (get, update, cancel; S5)."""
    alice = ModernClient(http, reference_url, token="alice-token")
    bob = ModernClient(http, reference_url, token="bob-token")
    task = await alice.create("sleep_report", {"seconds": 30, "rows": 0})
    unknown_id = "A" * len(task["taskId"])
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        foreign = await bob.error(method, {"taskId": task["taskId"], "inputResponses": {}})
        unknown = await bob.error(method, {"taskId": unknown_id, "inputResponses": {}})
        assert foreign["code"] == unknown["code"] == -32602
        assert foreign["message"].replace(task["taskId"], "ID") == unknown["message"].replace(
            unknown_id, "ID"
        )
    assert (await alice.get(task["taskId"]))["status"] == "working"
    anonymous = ModernClient(http, reference_url)
    assert (await anonymous.error("tasks/get", {"taskId": task["taskId"]}))["code"] == -32602
    await alice.result("tasks/cancel", {"taskId": task["taskId"]})


async def test_last_updated_at_is_real(modern: ModernClient) -> None:
    """lastUpdatedAt moves with changes and stays put between them; createdAt never moves."""
    task = await modern.create("crawl", {"pages": 1, "items_per_page": 1})
    done = await modern.wait_status(task["taskId"], {"completed"})
    again = await modern.get(task["taskId"])
    assert done["createdAt"] == task["createdAt"] == again["createdAt"]
    assert done["lastUpdatedAt"] > task["lastUpdatedAt"]
    assert again["lastUpdatedAt"] == done["lastUpdatedAt"]


async def test_expired_task_is_not_found_and_ttl_is_honoured(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """A task is answerable (even input_required) until its ttl, then -32602 like unknown."""
    clock = ManualClock()
    server = LongcallServer(store=store_path, clock=clock)

    @server.tool(task="required", ttl_ms=60_000)
    async def ask(ctx: TaskContext) -> str:
        answer = await ctx.elicit("name?", {"type": "object", "properties": {}})
        return str(answer)

    async with running_server(server) as url:
        client = ModernClient(http, url)
        task = await client.create("ask", {})
        assert task["ttlMs"] == 60_000
        await client.wait_status(task["taskId"], {"input_required"})
        clock.advance(59.9)
        assert (await client.get(task["taskId"]))["status"] == "input_required"
        clock.advance(0.2)
        error = await client.error("tasks/get", {"taskId": task["taskId"]})
        assert error["code"] == -32602


async def test_submission_key_returns_the_same_task(modern: ModernClient) -> None:
    """Same key + arguments -> same task; other arguments -> -32602; lookup finds it (S3)."""
    meta = {SUBMISSION_KEY: "order-42"}
    first = await modern.create("sleep_report", {"seconds": 30, "rows": 1}, meta=meta)
    second = await modern.create("sleep_report", {"rows": 1, "seconds": 30}, meta=meta)
    assert second["taskId"] == first["taskId"]
    conflict = await modern.error(
        "tools/call", {"name": "sleep_report", "arguments": {"seconds": 30, "rows": 2}}, meta=meta
    )
    assert conflict["code"] == -32602
    assert "submission key" in conflict["message"]
    discover = await modern.result("server/discover")
    store_id = discover["capabilities"]["extensions"][SUBMISSION_KEY]["storeId"]
    found = await modern.result("longcall/tasks/lookup", {"submissionKey": "order-42"})
    assert found == {
        "found": True,
        "taskId": first["taskId"],
        "expired": False,
        "storeId": store_id,
        "resultType": "complete",
    }
    missing = await modern.result("longcall/tasks/lookup", {"submissionKey": "order-43"})
    assert missing == {"found": False, "storeId": store_id, "resultType": "complete"}
    await modern.result("tasks/cancel", {"taskId": first["taskId"]})


async def test_submission_key_is_scoped_to_the_principal(
    http: httpx.AsyncClient, reference_url: str
) -> None:
    """Another principal neither finds nor reuses someone else's key (S5)."""
    alice = ModernClient(http, reference_url, token="alice")
    bob = ModernClient(http, reference_url, token="bob")
    meta = {SUBMISSION_KEY: "shared-key"}
    mine = await alice.create("crawl", {"pages": 0, "items_per_page": 0}, meta=meta)
    assert (await bob.result("longcall/tasks/lookup", {"submissionKey": "shared-key"}))[
        "found"
    ] is False
    theirs = await bob.create("crawl", {"pages": 0, "items_per_page": 0}, meta=meta)
    assert theirs["taskId"] != mine["taskId"]


async def test_dropped_create_response_is_recoverable_by_key(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """The create-drop fault loses the response of the Nth creation; the task exists (lookup)."""
    from longcall.server import build_reference_server
    from longcall.testing.faults import LoseCreateResponse

    server = build_reference_server(store=store_path)
    second = functools.partial(LoseCreateResponse, nth=2)
    async with running_server(server, wrap=second) as url:
        client = ModernClient(http, url)
        await client.create("crawl", {"pages": 0, "items_per_page": 0})
        meta = {SUBMISSION_KEY: "lost-response"}
        with pytest.raises(httpx.TransportError):
            await client.post(
                "tools/call",
                {"name": "crawl", "arguments": {"pages": 1, "items_per_page": 1}},
                meta=meta,
            )
        found = await client.result("longcall/tasks/lookup", {"submissionKey": "lost-response"})
        assert found["found"] is True
        retried = await client.create("crawl", {"pages": 1, "items_per_page": 1}, meta=meta)
        assert retried["taskId"] == found["taskId"]


async def test_subscription_pushes_task_notifications(
    http: httpx.AsyncClient, reference_url: str
) -> None:
    """subscriptions/listen acks only the caller's ids and pushes notifications/tasks."""
    alice = ModernClient(http, reference_url, token="alice")
    bob = ModernClient(http, reference_url, token="bob")
    mine = await alice.create("sleep_report", {"seconds": 0.2, "rows": 1})
    theirs = await bob.create("sleep_report", {"seconds": 30, "rows": 0})
    body = {
        "jsonrpc": "2.0",
        "id": "listen-1",
        "method": "subscriptions/listen",
        "params": {
            "notifications": {"taskIds": [mine["taskId"], theirs["taskId"]]},
            "_meta": envelope(),
        },
    }
    async with http.stream(
        "POST", reference_url, json=body, headers=alice.headers("subscriptions/listen", None)
    ) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        messages = [
            json.loads(line[5:]) async for line in stream.aiter_lines() if line[:5] == "data:"
        ]
    ack, *notes, end = messages
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"]["taskIds"] == [mine["taskId"]]
    assert all(note["method"] == "notifications/tasks" for note in notes)
    assert {note["params"]["taskId"] for note in notes} == {mine["taskId"]}
    assert notes[-1]["params"]["status"] == "completed"
    assert "result" in notes[-1]["params"]
    assert end["id"] == "listen-1"
    assert end["result"]["resultType"] == "complete"
    await bob.result("tasks/cancel", {"taskId": theirs["taskId"]})


async def test_no_input_request_without_the_elicitation_capability(modern: ModernClient) -> None:
    """A client that did not declare elicitation is never sent an input request (S6)."""
    meta = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    task = await modern.create("approve", {"change": "x"}, meta=meta)
    done = await modern.wait_status(task["taskId"], {"completed", "input_required"})
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert "elicitation" in done["result"]["content"][0]["text"]


TEXT_FORM = {"type": "object", "properties": {"v": {"type": "string"}}}


async def both_questions_open(client: ModernClient, tool: str) -> tuple[str, dict[str, str]]:
    """Create a task of ``tool`` (which asks "first?" and "second?" at once) and wait until
    both requests are open: the task id and each request's key by its question."""
    task = await client.create(tool, {})
    with anyio.fail_after(LOADED_MACHINE_S):  # both are issued in one loop turn; bounded anyway
        both = await client.wait_status(task["taskId"], {"input_required"})
        while len(both["inputRequests"]) < 2:
            both = await client.get(task["taskId"])
    keys = {req["params"]["message"]: key for key, req in both["inputRequests"].items()}
    return task["taskId"], keys


async def accept(client: ModernClient, task_id: str, key: str, value: str) -> None:
    """Answer the input request ``key`` of ``task_id`` with ``{"v": value}``."""
    responses = {key: {"action": "accept", "content": {"v": value}}}
    await client.result("tasks/update", {"taskId": task_id, "inputResponses": responses})


async def test_partial_answers_keep_the_task_waiting(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """Two outstanding requests: one answer leaves input_required with the other key only."""
    server = LongcallServer(store=store_path)

    @server.tool(task="required")
    async def two_questions(ctx: TaskContext) -> dict[str, Any]:
        first, second = await asyncio.gather(
            ctx.elicit("first?", TEXT_FORM), ctx.elicit("second?", TEXT_FORM)
        )
        return {"first": first["content"]["v"], "second": second["content"]["v"]}

    async with running_server(server) as url:
        client = ModernClient(http, url)
        task_id, keys = await both_questions_open(client, "two_questions")
        await accept(client, task_id, keys["first?"], "a")
        partial = await client.get(task_id)
        assert partial["status"] == "input_required"
        assert list(partial["inputRequests"]) == [keys["second?"]]
        await accept(client, task_id, keys["second?"], "b")
        done = await client.wait_status(task_id, {"completed"})
        assert done["result"]["structuredContent"] == {"first": "a", "second": "b"}
        assert len(set(keys.values())) == 2


async def test_a_question_answered_while_another_waits_leaves_the_task_waiting(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """The run has the first answer back in hand and the second question is still open:
    the task stays input_required (the run's wait for the first answer must not move it
    back to working while another wait of the same run is parked). The history holds one
    stay in input_required: a move back to working between the answers, undone by the
    other wait a moment later, was seen by a client that read the task in between."""
    server = LongcallServer(store=store_path)
    first_back = asyncio.Event()

    @server.tool(task="required")
    async def two_questions(ctx: TaskContext) -> dict[str, Any]:
        second = asyncio.ensure_future(ctx.elicit("second?", TEXT_FORM, key="second"))
        first = await ctx.elicit("first?", TEXT_FORM, key="first")
        first_back.set()
        return {"first": first["content"]["v"], "second": (await second)["content"]["v"]}

    async with running_server(server) as url:
        client = ModernClient(http, url)
        task_id, keys = await both_questions_open(client, "two_questions")
        await accept(client, task_id, keys["first?"], "a")
        with anyio.fail_after(LOADED_MACHINE_S):
            await first_back.wait()
        partial = await client.get(task_id)
        assert partial["status"] == "input_required"
        assert list(partial["inputRequests"]) == [keys["second?"]]
        await accept(client, task_id, keys["second?"], "b")
        done = await client.wait_status(task_id, {"completed"})
        assert done["result"]["structuredContent"] == {"first": "a", "second": "b"}
        history = await server.store.history(task_id)
    assert [change.status.value for change in history] == [
        "working",
        "input_required",
        "working",
        "completed",
    ]
