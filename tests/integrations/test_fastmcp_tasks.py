"""``LongcallTasks`` on a FastMCP app: tasks, results, errors, input, progress, keys.

The app (``fastmcp_app.py``) is what a FastMCP user writes (``task=TaskConfig(...)``,
``ctx.report_progress``, the guard pattern, ``ctx.elicit``) with the one-line swap;
it runs as a child process on a real SQLite store and is driven over HTTP.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from tests.integrations.conftest import SUBMISSION_KEY, WAIT_LIMIT_S, App, RawClient, running

pytestmark = pytest.mark.anyio


def client(http: httpx.AsyncClient, app: App, token: str | None = None) -> RawClient:
    return RawClient(http, app.url, token)


async def test_discover_advertises_tasks_and_the_submission_key(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """server/discover names the tasks extension and the key lookup with the store's id."""
    result = await client(http, shared_app).result("server/discover")
    extensions = result["capabilities"]["extensions"]
    assert extensions["io.modelcontextprotocol/tasks"] == {}
    keys = extensions[SUBMISSION_KEY]
    assert keys["lookupMethod"] == "longcall/tasks/lookup"
    assert len(keys["storeId"]) == 32


async def test_required_task_completes_with_its_structured_result(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """A task=TaskConfig(mode="required") tool returns a task that completes with its result."""
    rpc = client(http, shared_app)
    created = await rpc.create("add", {"a": 2, "b": 3})
    assert created["status"] == "working"
    assert created["pollIntervalMs"] == 100
    assert created["ttlMs"] == 24 * 3600 * 1000
    done = await rpc.wait_for(created["taskId"], {"completed", "failed"})
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"sum": 5}
    assert done["result"]["isError"] is False


async def test_tool_error_completes_with_is_error_and_mcp_error_fails(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """ToolError → completed + isError (as FastMCP answers inline); MCPError → failed."""
    rpc = client(http, shared_app)
    tool_error = await rpc.create("tool_error", {})
    done = await rpc.wait_for(tool_error["taskId"], {"completed", "failed"})
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert done["result"]["content"][0]["text"] == "bad input (tool-level)"
    protocol_error = await rpc.create("protocol_error", {})
    failed = await rpc.wait_for(protocol_error["taskId"], {"completed", "failed"})
    assert failed["status"] == "failed"
    assert failed["error"] == {
        "code": -32603,
        "message": "upstream rate limit",
        "data": {"retryAfter": 5},
    }


async def test_required_tool_without_consent_is_refused(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """A required task tool called without the tasks extension in _meta answers -32021."""
    error = await client(http, shared_app).error(
        "tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}, consent=False
    )
    assert error["code"] == -32021
    assert error["data"]["requiredCapabilities"]["extensions"] == {
        "io.modelcontextprotocol/tasks": {}
    }


async def test_optional_tool_is_a_task_with_consent_and_inline_without(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """task=True (optional): a task when the request consents, a plain result otherwise."""
    rpc = client(http, shared_app)
    inline = await rpc.result(
        "tools/call", {"name": "optional_double", "arguments": {"x": 4}}, consent=False
    )
    assert inline["resultType"] == "complete"
    assert inline["content"][0]["text"] == "8"
    created = await rpc.create("optional_double", {"x": 5})
    done = await rpc.wait_for(created["taskId"], {"completed"})
    assert done["result"]["content"][0]["text"] == "10"
    plain = await rpc.result("tools/call", {"name": "shout", "arguments": {"text": "hi"}})
    assert plain["content"][0]["text"] == "HI"


async def test_input_rounds_before_any_task_work_unchanged(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """An optional tool called without consent asks in SEP-2322 rounds (FastMCP's own
    path, untouched by the extension): input_required, then the retry's answer."""
    rpc = client(http, shared_app)
    params = {"name": "optional_greet", "arguments": {}}
    asked = await rpc.result("tools/call", params, consent=False)
    assert asked["resultType"] == "input_required"
    (key,) = asked["inputRequests"]
    answered = await rpc.result(
        "tools/call",
        {
            **params,
            "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
            "requestState": asked["requestState"],
        },
        consent=False,
    )
    assert answered["resultType"] == "complete"
    assert answered["content"][0]["text"] == "Hi, Ada (round-1)"


async def test_missing_argument_is_refused_before_any_task(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """A call missing a required argument creates no task: -32602 naming it."""
    error = await client(http, shared_app).error(
        "tools/call", {"name": "add", "arguments": {"a": 1}}
    )
    assert error["code"] == -32602
    assert "missing b" in error["message"]


async def test_guard_pattern_parks_for_input_and_reruns_with_the_answers(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """A body returning InputRequiredResult → input_required; tasks/update → re-run, done."""
    rpc = client(http, shared_app)
    created = await rpc.create("ask_name", {})
    parked = await rpc.wait_for(created["taskId"], {"input_required"})
    (key, request) = next(iter(parked["inputRequests"].items()))
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Please enter your name."
    await rpc.result(
        "tasks/update",
        {
            "taskId": created["taskId"],
            "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
        },
    )
    done = await rpc.wait_for(created["taskId"], {"completed", "failed"})
    assert done["result"]["content"][0]["text"] == "Hello, Ada! (asked-once)"


async def test_ctx_elicit_inside_a_running_task_asks_through_the_task(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """ctx.elicit in a task body (FastMCP's own Context refuses it) waits for tasks/update."""
    rpc = client(http, shared_app)
    created = await rpc.create("ask_colour", {})
    parked = await rpc.wait_for(created["taskId"], {"input_required"})
    (key, request) = next(iter(parked["inputRequests"].items()))
    assert request["params"]["message"] == "Favourite colour?"
    await rpc.result(
        "tasks/update",
        {
            "taskId": created["taskId"],
            "inputResponses": {key: {"action": "accept", "content": {"value": "blue"}}},
        },
    )
    done = await rpc.wait_for(created["taskId"], {"completed", "failed"})
    assert done["result"]["content"][0]["text"] == "colour: blue"


async def test_progress_is_the_status_message_and_last_updated_at_moves(
    http: httpx.AsyncClient, shared_app: App, tmp_path: Path
) -> None:
    """ctx.report_progress(message=...) is statusMessage; lastUpdatedAt moves only on change."""
    rpc = client(http, shared_app)
    gate = tmp_path / "gate"
    created = await rpc.create("steps", {"gate": str(gate)})
    task_id = created["taskId"]
    with anyio.fail_after(WAIT_LIMIT_S):
        while (step := await rpc.get(task_id))["statusMessage"] != "step 1 of 2":  # noqa: ASYNC110
            await anyio.sleep(0.05)
    assert step["lastUpdatedAt"] > created["lastUpdatedAt"]
    again = await rpc.get(task_id)
    assert again["lastUpdatedAt"] == step["lastUpdatedAt"]  # a read changes nothing
    gate.touch()
    done = await rpc.wait_for(task_id, {"completed"})
    assert done["lastUpdatedAt"] > step["lastUpdatedAt"]


async def test_submission_key_returns_the_same_task_and_the_lookup_finds_it(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """A retried create with the same key is the same task; the lookup recovers its id."""
    rpc = client(http, shared_app)
    key = {SUBMISSION_KEY: "node-7:step-1"}
    first = await rpc.create("add", {"a": 1, "b": 2}, meta=key)
    second = await rpc.create("add", {"b": 2, "a": 1}, meta=key)
    assert second["taskId"] == first["taskId"]
    conflict = await rpc.error(
        "tools/call", {"name": "add", "arguments": {"a": 9, "b": 9}}, meta=key
    )
    assert conflict["code"] == -32602
    assert conflict["data"] == {"submissionKey": "node-7:step-1"}
    store_id = (await rpc.result("server/discover"))["capabilities"]["extensions"][SUBMISSION_KEY][
        "storeId"
    ]
    found = await rpc.result("longcall/tasks/lookup", {"submissionKey": "node-7:step-1"})
    assert found["found"] is True
    assert found["taskId"] == first["taskId"]
    assert found["storeId"] == store_id
    never = await rpc.result("longcall/tasks/lookup", {"submissionKey": "never-sent"})
    assert never == {"found": False, "storeId": store_id, "resultType": "complete", **_meta(never)}


def _meta(result: dict[str, object]) -> dict[str, object]:
    return {"_meta": result["_meta"]} if "_meta" in result else {}


async def test_cancel_ends_a_running_task_and_unknown_ids_are_not_found(
    http: httpx.AsyncClient, shared_app: App, tmp_path: Path
) -> None:
    """tasks/cancel acks and the task is cancelled; an unknown id is -32602 not found."""
    rpc = client(http, shared_app)
    created = await rpc.create("steps", {"gate": str(tmp_path / "never")})
    await rpc.result("tasks/cancel", {"taskId": created["taskId"]})
    cancelled = await rpc.get(created["taskId"])
    assert cancelled["status"] == "cancelled"
    missing = await rpc.error("tasks/get", {"taskId": "no-such-task"})
    assert missing["code"] == -32602


async def test_mcp_name_that_disagrees_with_the_task_id_is_refused(
    http: httpx.AsyncClient, shared_app: App
) -> None:
    """An Mcp-Name header naming another task is -32020 (a missing one is accepted)."""
    rpc = client(http, shared_app)
    created = await rpc.create("add", {"a": 1, "b": 1})
    error = await rpc.error("tasks/get", {"taskId": created["taskId"]}, name="another-task")
    assert error["code"] == -32020


async def test_ttl_is_configurable_and_an_expired_task_is_not_found(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """LongcallTasks(ttl=...) sets ttlMs; past it, tasks/get answers as for an unknown id."""
    async with running(f"sqlite:///{tmp_path / 't.db'}", tmp_path, "--ttl-s", "1") as app:
        rpc = client(http, app)
        created = await rpc.create("add", {"a": 1, "b": 1})
        assert created["ttlMs"] == 1000
        with anyio.fail_after(WAIT_LIMIT_S):
            while "result" in (await rpc.post("tasks/get", {"taskId": created["taskId"]})).json():  # noqa: ASYNC110
                await anyio.sleep(0.1)
        error = await rpc.error("tasks/get", {"taskId": created["taskId"]})
        assert error["code"] == -32602
