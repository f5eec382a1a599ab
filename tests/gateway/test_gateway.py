"""The gateway end to end over Streamable HTTP: early return, handles, dedup, paging,
errors, input, cancel (a plain JSON-RPC host; the host packages are in test_hosts.py)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import BOUND_S, WINDOW_S, Host, Upstream, gateway_at, text_of
from longcall.gateway import Gateway

pytestmark = pytest.mark.anyio


async def test_tools_are_listed_under_their_own_names_with_the_gateway_tools(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient
) -> None:
    """tools/list shows every upstream tool by its upstream name, plus the four gateway tools."""
    _, url = gateway
    listed = (await Host(http, url).rpc("tools/list"))["result"]["tools"]
    names = {tool["name"] for tool in listed}
    assert {"slow", "plain", "quick", "longcall_status", "longcall_result"} <= names
    assert {"longcall_cancel", "longcall_answer"} <= names
    slow = next(tool for tool in listed if tool["name"] == "slow")
    assert slow["inputSchema"]["properties"]["key"]["type"] == "string"
    assert "outputSchema" not in slow


async def test_a_quick_call_returns_the_real_result(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """An upstream that finishes within the window: the host gets its result as is."""
    _, url = gateway
    result = await Host(http, url).call("quick", {"x": 7})
    assert result["structuredContent"] == {"x": 7, "items": [7]}
    assert not result["isError"]
    assert upstream.runs["quick-7"] == 1


async def test_a_slow_call_returns_early_and_next_leads_to_the_result(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """Past the window: a handle, a state, progress and next; following next after the
    release gives the real result; the upstream ran once."""
    gw, url = gateway
    host = Host(http, url)
    began = time.monotonic()
    early = await host.call("slow", {"key": "a", "n": 2})
    took = time.monotonic() - began
    print(f"early return after {took:.3f} s (window {WINDOW_S} s)")
    assert WINDOW_S <= took < WINDOW_S + BOUND_S
    structured = early["structuredContent"]
    assert structured["state"] == "running"
    assert structured["next"]["tool"] == "longcall_status"
    assert structured["next"]["arguments"]["handle"] == structured["handle"]
    assert "Call longcall_status with handle=" in text_of(early)
    upstream.release("a")
    result = early
    for _ in range(int(BOUND_S / WINDOW_S) + 2):
        result = await host.follow(result)
        if "handle" not in result.get("structuredContent", {}):
            break
    assert result["structuredContent"] == {"items": [0, 1]}
    assert upstream.runs["a"] == 1
    assert gw.metrics.early_returns._value.get() == 1


async def test_a_retried_call_attaches_to_the_open_one(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """The same call again while it runs (a host retry): the same handle, one upstream run."""
    gw, url = gateway
    host = Host(http, url)
    first, second = await asyncio.gather(
        host.call("slow", {"key": "b", "n": 3}), host.call("slow", {"n": 3, "key": "b"})
    )
    third = await host.call("slow", {"key": "b", "n": 3})
    handles = {r["structuredContent"]["handle"] for r in (first, second, third)}
    assert len(handles) == 1
    upstream.release("b")
    done = await host.call("longcall_status", {"handle": handles.pop(), "wait_s": WINDOW_S})
    while "handle" in done.get("structuredContent", {}):
        done = await host.follow(done)
    assert done["structuredContent"] == {"items": [0, 1, 2]}
    assert upstream.runs["b"] == 1
    assert gw.metrics.retries_attached._value.get() >= 2


async def test_a_repeat_after_the_outcome_was_delivered_runs_again(
    upstream: Upstream, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Within the grace after delivery a same call gets the same outcome; after it, it is
    a deliberate repeat: a new handle and a second upstream run."""
    async with gateway_at(upstream.url, tmp_path, repeat_grace_s=0.5) as (_, url):
        host = Host(http, url)
        upstream.release("c")
        first = await host.call("slow", {"key": "c"})
        again = await host.call("slow", {"key": "c"})
        assert first["structuredContent"] == again["structuredContent"]
        assert "the tool did not run again" in text_of(again)
        assert upstream.runs["c"] == 1
        await asyncio.sleep(1.1)  # two grace periods of wall time: the rule is about time
        await host.call("slow", {"key": "c"})
        assert upstream.runs["c"] == 2


async def test_mistyped_truncated_invented_and_foreign_handles_are_refused(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """Every corruption of a handle is refused with the caller's recent handles; another
    principal's handle is "not found" too."""
    gw, url = gateway
    host = Host(http, url, token="alice")
    early = await host.call("slow", {"key": "d"})
    handle = early["structuredContent"]["handle"]
    body = handle.replace("-", "")[2:]
    from longcall.gateway.handles import ALPHABET

    tried: list[str] = []
    for i, char in enumerate(body):
        for other in ALPHABET:
            if other != char:
                wrong = body[:i] + other + body[i + 1 :]
                tried.append(f"lc-{wrong[:4]}-{wrong[4:]}")
    for i in range(len(body) - 1):
        swapped = body[:i] + body[i + 1] + body[i] + body[i + 2 :]
        if swapped != body:
            tried.append(f"lc-{swapped[:4]}-{swapped[4:]}")
    tried += [handle[:-1], handle[:8], "lc-0000-00000", "task-123", "", handle + "x"]
    refused = 0
    for bad in tried:
        reply = await host.call("longcall_status", {"handle": bad})
        assert reply["isError"], bad
        assert handle in text_of(reply)  # the way back
        refused += 1
    mallory = Host(http, url, token="mallory")
    foreign = await mallory.call("longcall_status", {"handle": handle})
    assert foreign["isError"]
    assert "No call has the handle" in text_of(foreign)
    assert "You have no recent calls" in text_of(foreign)
    assert gw.metrics.handles_refused._value.get() == refused + 1 == len(tried) + 1
    print(f"handles refused: {refused} of {len(tried)} mistyped, cut short or invented")
    upstream.release("d")


async def test_an_anonymous_caller_over_http_is_never_shown_recent_handles(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """Callers without a token share one principal: a bad handle lists none of its handles."""
    _, url = gateway
    host = Host(http, url)
    early = await host.call("slow", {"key": "anon"})
    handle = early["structuredContent"]["handle"]
    reply = await host.call("longcall_status", {"handle": "lc-0000-00000"})
    assert reply["isError"]
    assert handle not in text_of(reply)
    assert "not listed to callers without a token" in text_of(reply)
    upstream.release("anon")


async def test_a_large_result_comes_in_pages(
    upstream: Upstream, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """A result over a page: page 1 says page/pages and names the next page; every page
    together is the whole text."""
    async with gateway_at(upstream.url, tmp_path, page_chars=1000) as (_, url):
        host = Host(http, url)
        first = await host.call("big", {"chars": 2500})
        assert first["structuredContent"]["pages"] == 3
        text = first["content"][0]["text"]
        reply = first
        while "next" in reply["structuredContent"]:
            reply = await host.follow(reply)
            text += reply["content"][0]["text"]
        assert text == "".join(str(i % 10) for i in range(2500))
        over = await host.call(
            "longcall_result", {"handle": first["structuredContent"]["handle"], "page": 4}
        )
        assert over["isError"]
        assert "has 3 page(s)" in text_of(over)


async def test_zero_items_carry_a_warning_and_a_protocol_error_is_not_a_tool_error(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient
) -> None:
    """An empty success says so; an upstream -32602 reaches the host as a JSON-RPC error."""
    _, url = gateway
    host = Host(http, url)
    empty = await host.call("empty")
    assert "zero items" in text_of(empty)
    assert not empty["isError"]
    refused = await host.rpc("tools/call", {"name": "refuse", "arguments": {}})
    assert "result" not in refused
    assert refused["error"]["code"] == -32602
    assert "Protocol error -32602" in refused["error"]["message"]
    assert "not an error the tool reported" in refused["error"]["message"]


async def test_input_required_shows_the_question_and_the_answer_call(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient
) -> None:
    """The upstream's question, its form and the exact longcall_answer call; answering it
    finishes the call."""
    _, url = gateway
    host = Host(http, url)
    asked = await host.call("ask")
    for _ in range(5):
        if asked["structuredContent"]["state"] == "input_required":
            break
        asked = await host.follow(asked)
    structured = asked["structuredContent"]
    assert structured["state"] == "input_required"
    assert structured["questions"][0]["message"] == "Approve the deploy?"
    assert structured["questions"][0]["form"]["required"] == ["approved"]
    assert structured["next"]["tool"] == "longcall_answer"
    assert "longcall_answer" in text_of(asked)
    done = await host.follow(asked)
    while "handle" in done.get("structuredContent", {}):
        done = await host.follow(done)
    assert done["structuredContent"] == {"approved": True}


async def test_cancel_is_a_request_confirmed_by_the_upstream(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """longcall_cancel sends the cancel upstream and says whether the upstream confirmed it."""
    _, url = gateway
    host = Host(http, url)
    early = await host.call("slow", {"key": "e"})
    handle = early["structuredContent"]["handle"]
    reply = await host.call("longcall_cancel", {"handle": handle})
    text = text_of(reply)
    assert reply["structuredContent"]["cancel"] in ("requested", "cancelled")
    if reply["structuredContent"]["state"] == "cancelled":
        assert text.startswith("CANCELLED: the upstream confirmed")
    else:
        assert text.startswith("CANCEL REQUESTED")
        final = await host.call("longcall_status", {"handle": handle, "wait_s": WINDOW_S})
        assert "CANCELLED" in text_of(final)
    assert upstream.runs["e"] == 1


async def test_the_metrics_count_what_hosts_met(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """/metrics shows early returns, retries attached, handles refused and open handles."""
    gw, url = gateway
    port = gw.metrics.serve(0)
    host = Host(http, url)
    await asyncio.gather(host.call("slow", {"key": "m"}), host.call("slow", {"key": "m"}))
    await host.call("longcall_status", {"handle": "lc-0000-00000"})
    text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    assert "longcall_gateway_early_returns_total 2.0" in text
    assert "longcall_gateway_retries_attached_total 1.0" in text
    assert "longcall_gateway_handles_refused_total 1.0" in text
    assert "longcall_gateway_open_handles 1.0" in text
    upstream.release("m")


MODERN = "2026-07-28"


def modern_request(method: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 body and headers with the tasks extension consented to."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {"form": {}},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        },
        "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "0"},
    }
    name = params.get("name") if method == "tools/call" else params.get("taskId")
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
        "mcp-name": str(name),
    }
    if name is None:
        del headers["mcp-name"]
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    return body, headers


async def modern_rpc(
    http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any]
) -> dict[str, Any]:
    """One 2026-07-28 request, its result."""
    body, headers = modern_request(method, params)
    answer = await http.post(url, json=body, headers=headers, timeout=BOUND_S)
    payload: dict[str, Any] = answer.json()
    assert "result" in payload, payload
    result: dict[str, Any] = payload["result"]
    return result


async def test_a_2026_07_28_task_aware_host_gets_a_task_and_its_input_passed_through(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """The tasks extension: tools/call is a task at the gateway; the upstream's question
    appears as the task's inputRequests; answered with tasks/update, the task completes
    with the upstream's result."""
    _, url = gateway
    created = await modern_rpc(http, url, "tools/call", {"name": "ask", "arguments": {}})
    assert created["resultType"] == "task"
    task_id = created["taskId"]
    await status_pushed(http, url, task_id, {"input_required"})
    task = await modern_rpc(http, url, "tasks/get", {"taskId": task_id})
    (key, request), *_ = task["inputRequests"].items()
    assert request["params"]["message"] == "Approve the deploy?"
    answer = {key: {"action": "accept", "content": {"approved": True}}}
    await modern_rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": answer})
    await status_pushed(http, url, task_id, {"completed"})
    task = await modern_rpc(http, url, "tasks/get", {"taskId": task_id})
    assert task["result"]["structuredContent"] == {"approved": True}


async def status_pushed(
    http: httpx.AsyncClient, url: str, task_id: str, statuses: set[str]
) -> None:
    """Wait (bounded) for one of ``statuses`` on a ``subscriptions/listen`` stream."""
    body, headers = modern_request(
        "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}
    )
    async with (
        asyncio.timeout(BOUND_S),
        http.stream("POST", url, json=body, headers=headers, timeout=BOUND_S) as stream,
    ):
        async for line in stream.aiter_lines():
            if line.startswith("data:"):
                message = json.loads(line[len("data:") :])
                pushed = message.get("method") == "notifications/tasks"
                if pushed and message["params"]["status"] in statuses:
                    return
    raise AssertionError(f"the stream of {task_id} ended before any of {statuses}")


async def test_a_task_aware_hosts_cancel_is_sent_upstream(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """tasks/cancel of a host task (2025-11-25) cancels the upstream call it stands for."""
    _, url = gateway
    host = Host(http, url)
    created = await host.rpc(
        "tools/call", {"name": "slow", "arguments": {"key": "tc"}, "task": {"ttl": 600_000}}
    )
    task_id = created["result"]["task"]["taskId"]
    await asyncio.wait_for(upstream.start_seen("tc").wait(), BOUND_S)
    cancelled = await host.rpc("tasks/cancel", {"taskId": task_id})
    assert cancelled["result"]["status"] == "cancelled"
    await asyncio.wait_for(upstream.cancel_seen("tc").wait(), BOUND_S)
    assert upstream.runs["tc"] == 1
