"""Memory and connection bounds: nothing a client opens, abandons or floods outlives it."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import anyio
import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S

from conftest import LegacyClient, ModernClient
from longcall.server import (
    LongcallServer,
    ServerOptions,
    StaticTokens,
    build_reference_server,
    running_server,
)
from longcall.server.tasks import LISTENER_BACKLOG_MAX, ChangeHub

pytestmark = pytest.mark.anyio

WAIT_LIMIT_S = LOADED_MACHINE_S


async def until(condition: Any) -> None:
    """Bounded wait for a condition the server reaches on its own (no event to await)."""
    with anyio.fail_after(WAIT_LIMIT_S):
        while True:
            if condition():
                return
            await anyio.sleep(0.01)  # bounded poll: a disconnect is noticed server-side


def test_an_unread_listener_holds_a_bounded_backlog() -> None:
    """A push stream nobody reads keeps at most one entry per task, and a bounded number."""
    hub = ChangeHub()
    with hub.listen("p") as listener:
        for _ in range(3):
            for index in range(5 * LISTENER_BACKLOG_MAX):
                hub.publish(f"t{index}", "p")
        hub.publish("other", "q")  # another principal's change never reaches it
        assert len(listener._pending) == LISTENER_BACKLOG_MAX
        assert "other" not in listener._pending
    assert hub.size == 0


async def test_waits_on_unknown_operations_leave_nothing_behind(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """``:wait`` on ids that do not exist is 404 each time and registers nothing lasting."""
    server = build_reference_server(store=store_path)
    async with running_server(server) as url:
        base = url.removesuffix("/mcp")
        for index in range(50):
            reply = await http.post(f"{base}/v1/operations/nope-{index}:wait", json={})
            assert reply.status_code == 404
        assert server.manager.hub.size == 0


async def test_idle_streams_of_others_cost_no_store_reads(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """Twenty idle GET streams of another principal read nothing when someone's task changes,
    and their listeners go away with their sockets."""
    server = build_reference_server(
        store=store_path, authenticator=StaticTokens({"a": "alice", "b": "bob"})
    )
    reads = 0
    real_get = server.store.get

    async def counting_get(task_id: str) -> Any:
        nonlocal reads
        reads += 1
        return await real_get(task_id)

    server.store.get = counting_get  # type: ignore[method-assign]
    async with running_server(server) as url:
        headers = {"accept": "text/event-stream", "authorization": "Bearer b"}
        async with OpenStreams(http, url, headers, 20):
            await until(lambda: server.manager.hub.size == 20)
            alice = ModernClient(http, url, token="a")
            task = await alice.create("sleep_report", {"seconds": 0.2, "rows": 1})
            await alice.wait_status(task["taskId"], {"completed"})
            reads_before = reads
            await alice.get(task["taskId"])
            assert reads == reads_before + 1  # only alice's own poll read the store
        await until(lambda: server.manager.hub.size == 0)


class OpenStreams:
    """Open ``count`` GET streams for the duration of an ``async with``."""

    def __init__(self, http: httpx.AsyncClient, url: str, headers: dict[str, str], count: int):
        self._http, self._url, self._headers, self._count = http, url, headers, count
        self._streams: list[Any] = []

    async def __aenter__(self) -> None:
        for _ in range(self._count):
            request = self._http.build_request("GET", self._url, headers=self._headers)
            response = await self._http.send(request, stream=True)
            assert response.status_code == 200
            self._streams.append(response)

    async def __aexit__(self, *_: object) -> None:
        for response in self._streams:
            await response.aclose()


async def test_a_progress_token_lives_with_its_task(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """2025-11-25: the creating request's progressToken is stored with the task, not in memory."""
    server = build_reference_server(store=store_path)
    async with running_server(server) as url:
        client = LegacyClient(http, url)
        params = {
            "name": "sleep_report",
            "arguments": {"seconds": 0, "rows": 0},
            "task": {},
            "_meta": {"progressToken": "pt-1"},
        }
        created = await client.result("tools/call", params)
        record = await server.store.get(created["task"]["taskId"])
    assert record is not None
    assert record.progress_token == "pt-1"
    assert not any(isinstance(value, dict) and value for value in vars(server.legacy).values())


async def test_a_slow_request_head_is_cut_off(store_path: str) -> None:
    """Slow-loris: a connection that never finishes its request head is closed by the server."""
    options = ServerOptions(header_read_timeout_s=0.3)
    async with running_server(LongcallServer(store=store_path, options=options)) as url:
        host, port = url.removeprefix("http://").removesuffix("/mcp").split(":")
        with socket.create_connection((host, int(port)), timeout=WAIT_LIMIT_S) as sock:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            closed = await asyncio.to_thread(sock.recv, 1024)
    assert closed == b""


async def test_removed_and_unknown_inputs_at_2026_07_28(modern: ModernClient) -> None:
    """``ping`` is gone at 2026-07-28 (404, -32601); unknown ``inputResponses`` keys are ignored."""
    ping = await modern.error("ping", {})
    assert (ping["code"], ping["httpStatus"]) == (-32601, 404)
    task = await modern.create("approve", {"change": "x"})
    waiting = await modern.wait_status(task["taskId"], {"input_required"})
    key = next(iter(waiting["inputRequests"]))
    responses = {
        "never-issued": {"not": "an elicit result"},
        key: {"action": "accept", "content": {"approved": True}},
    }
    ack = await modern.result(
        "tasks/update", {"taskId": task["taskId"], "inputResponses": responses}
    )
    assert ack == {"resultType": "complete"}
    done = await modern.wait_status(task["taskId"], {"completed"})
    assert done["result"]["structuredContent"] == {"change": "x", "approved": True}


async def test_stateful_mode_issues_and_checks_sessions(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """Stateful: initialize issues Mcp-Session-Id; later requests need it (400 / 404);
    DELETE ends it; another principal cannot use it; stateless (default) issues none."""
    server = build_reference_server(
        store=store_path,
        options=ServerOptions(stateful=True),
        authenticator=StaticTokens({"a": "alice", "b": "bob"}),
    )
    headers = {"accept": "application/json, text/event-stream", "authorization": "Bearer a"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    async with running_server(server) as url:
        opened = await http.post(url, json=initialize, headers=headers)
        session = opened.headers["mcp-session-id"]
        assert len(session) >= 32
        assert (await http.post(url, json=ping, headers=headers)).status_code == 400
        with_session = {**headers, "mcp-session-id": session}
        assert (await http.post(url, json=ping, headers=with_session)).status_code == 200
        bob = {**with_session, "authorization": "Bearer b"}
        assert (await http.post(url, json=ping, headers=bob)).status_code == 404
        unknown = {**headers, "mcp-session-id": "nope"}
        assert (await http.post(url, json=ping, headers=unknown)).status_code == 404
        assert (await http.delete(url, headers=with_session)).status_code == 200
        assert (await http.post(url, json=ping, headers=with_session)).status_code == 404
        # Tasks are not the session's: one created in a session outlives it.
        second = await http.post(url, json=initialize, headers=headers)
        fresh = {**headers, "mcp-session-id": second.headers["mcp-session-id"]}
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "crawl", "arguments": {"pages": 0, "items_per_page": 0}, "task": {}},
        }
        task = (await http.post(url, json=call, headers=fresh)).json()["result"]["task"]
        await http.delete(url, headers=fresh)
        third = await http.post(url, json=initialize, headers=headers)
        later = {**headers, "mcp-session-id": third.headers["mcp-session-id"]}
        get = {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tasks/get",
            "params": {"taskId": task["taskId"]},
        }
        assert (await http.post(url, json=get, headers=later)).json()["result"]["taskId"]
    async with running_server(build_reference_server(store=store_path)) as url:
        stateless = await http.post(url, json=initialize, headers=headers)
        assert "mcp-session-id" not in stateless.headers
