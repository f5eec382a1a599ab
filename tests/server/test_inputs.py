"""Input before a task exists (SEP-2322 rounds) and the open-task quota, over HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conftest import ModernClient
from longcall.server import (
    LongcallServer,
    ServerOptions,
    TaskContext,
    build_reference_server,
    running_server,
)
from longcall.server.inputs import elicitation, sampling

pytestmark = pytest.mark.anyio

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def rounds_server(store: str) -> LongcallServer:
    """A two-round synchronous tool, a sampling tool, and a task tool with an ask-first."""
    server = LongcallServer(store=store)

    @server.tool(task="forbidden")
    async def two_rounds(ctx: TaskContext, greeting: str = "Hello") -> str:
        first = await ctx.elicit("First name?", NAME, key="first")
        last = await ctx.elicit("Last name?", NAME, key="last")
        return f"{greeting}, {first['content']['name']} {last['content']['name']}"

    @server.tool(task="forbidden")
    async def needs_model(ctx: TaskContext) -> str:
        messages = [{"role": "user", "content": {"type": "text", "text": "hi"}}]
        await ctx.request_inputs({"ask": sampling(messages, 10)})
        return "sampled"

    @server.tool(task="required", ask_first={"who": elicitation("Who?", NAME)})
    async def greet_later(ctx: TaskContext) -> str:
        answer = await ctx.elicit("Who?", NAME, key="who")
        return f"Hello, {answer['content']['name']}"

    return server


def accept(name: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": name}}


async def test_rounds_carry_answers_in_a_signed_state(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """Round 1 asks ``first``, round 2 (only ``last`` new) completes from the state; a changed
    state, argument or principal is -32602; an unknown key is ignored."""
    async with running_server(rounds_server(store_path)) as url:
        client = ModernClient(http, url)
        call: dict[str, Any] = {"name": "two_rounds", "arguments": {}}
        one = await client.result("tools/call", call, consent=False)
        assert one["resultType"] == "input_required"
        assert set(one["inputRequests"]) == {"first"}
        two = await client.result(
            "tools/call",
            {
                **call,
                "inputResponses": {"first": accept("Ada")},
                "requestState": one["requestState"],
            },
            consent=False,
        )
        assert set(two["inputRequests"]) == {"last"}
        done = await client.result(
            "tools/call",
            {
                **call,
                "inputResponses": {"last": accept("Lovelace"), "never-asked": accept("x")},
                "requestState": two["requestState"],
            },
            consent=False,
        )
        assert done["resultType"] == "complete"
        assert done["content"][0]["text"] == "Hello, Ada Lovelace"
        mac, body = two["requestState"].split(".")
        forged = f"{mac}.{body[:-2]}AA"
        for variant in (
            {**call, "requestState": forged},
            {**call, "arguments": {"greeting": "Hi"}, "requestState": two["requestState"]},
            {**call, "inputResponses": {"first": {"action": "maybe"}}},
        ):
            error = await client.error("tools/call", variant, consent=False)
            assert error["code"] == -32602, variant
        other = ModernClient(http, url, token="someone-else")
        stolen = await other.error(
            "tools/call", {**call, "requestState": two["requestState"]}, consent=False
        )
        assert stolen["code"] == -32602


async def test_undeclared_input_is_refused_not_sent(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """A tool asking the model of a client that declared no sampling gets -32021 for it."""
    async with running_server(rounds_server(store_path)) as url:
        client = ModernClient(http, url)
        error = await client.error(
            "tools/call", {"name": "needs_model", "arguments": {}}, consent=False
        )
    assert error["code"] == -32021
    assert error["data"] == {"requiredCapabilities": {"sampling": {}}}


async def test_ask_first_is_settled_before_the_task_exists(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """Round 1 is input_required with no task; round 2 creates the task with the answer."""
    server = rounds_server(store_path)
    async with running_server(server) as url:
        client = ModernClient(http, url)
        call: dict[str, Any] = {"name": "greet_later", "arguments": {}}
        one = await client.result("tools/call", call)
        assert one["resultType"] == "input_required"
        assert "taskId" not in one
        created = await client.result(
            "tools/call",
            {
                **call,
                "inputResponses": {"who": accept("Grace")},
                "requestState": one["requestState"],
            },
        )
        assert created["resultType"] == "task"
        assert "requestState" not in created
        done = await client.wait_status(created["taskId"], {"completed"})
    assert done["result"]["content"][0]["text"] == "Hello, Grace"


async def test_open_task_quota_is_429(http: httpx.AsyncClient, store_path: str) -> None:
    """Past the open-task limit a creation is refused (429 on /mcp, RESOURCE_EXHAUSTED on /v1)
    and nothing is created; other principals are not affected."""
    options = ServerOptions(max_open_tasks_per_principal=2)
    async with running_server(build_reference_server(store=store_path, options=options)) as url:
        alice = ModernClient(http, url, token="alice")
        for _ in range(2):
            await alice.create("sleep_report", {"seconds": 60, "rows": 0})
        refused = await alice.post(
            "tools/call", {"name": "sleep_report", "arguments": {"seconds": 60, "rows": 0}}
        )
        assert refused.status_code == 429
        assert refused.json()["error"]["data"] == {"limit": 2}
        v1 = await http.post(
            f"{url.removesuffix('/mcp')}/v1/tools/sleep_report:start",
            json={"arguments": {"seconds": 60, "rows": 0}},
            headers={"authorization": "Bearer alice"},
        )
        assert v1.status_code == 429
        assert v1.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        bob = ModernClient(http, url, token="bob")
        await bob.create("sleep_report", {"seconds": 0, "rows": 0})
