"""Upstreams the gateway must serve, each a real server as its users run it (G1): the
`longcall serve` command (its task tools, a `task="required"` one among them, and its
Apify-style facade at /apify/mcp) and the TypeScript SDK task server
(`interop/task-peer.mjs`, 2025-11-25 tasks). One gateway in front of all three; the
upstreams' own records (the task store of `longcall serve`, the peer's execution log)
count the runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.interop.harness import NODE, ROOT, Serve, TsPeer, node_or_fail, serve_process, ts_peer

from conftest import (
    BOUND_S,
    Host,
    gateway_at,
    start_host,
    text_of,
)
from longcall.adapters.servers import ServerConfig, ServersConfig
from longcall.gateway import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TS_HOST = ROOT / "interop" / "gateway-host.mjs"


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """The `longcall serve` command on a free 127.0.0.1 port, for the whole module."""
    with serve_process(tmp_path_factory.mktemp("serve")) as running:
        yield running


@pytest.fixture(scope="module")
def task_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TsPeer]:
    """The TypeScript SDK task server (stateful), for the whole module."""
    with ts_peer(tmp_path_factory.mktemp("ts-peer")) as peer:
        yield peer


@pytest.fixture
async def gateway(
    serve: Serve, task_peer: TsPeer, tmp_path: Path
) -> AsyncIterator[tuple[Gateway, str]]:
    """One gateway in front of `longcall serve`, its Apify-style facade and the TS peer."""
    servers = ServersConfig(
        servers={
            "serve": ServerConfig(name="serve", url=serve.url),
            "apify": ServerConfig(name="apify", url=serve.apify_url),
            "ts": ServerConfig(name="ts", url=task_peer.url),
        }
    )
    async with gateway_at("", tmp_path, servers=servers) as pair:
        yield pair


async def until_result(host: Host, reply: dict[str, Any]) -> dict[str, Any]:
    """Follow ``next`` while it names ``longcall_status`` (bounded)."""
    for _ in range(int(BOUND_S)):
        step = reply.get("structuredContent", {}).get("next")
        if step is None or step["tool"] != "longcall_status":
            return reply
        reply = await host.follow(reply)
    raise AssertionError(f"no result after following next: {reply}")


async def early_then_outcome(host: Host, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A call past the window: it returns early (asserted), and next leads to its outcome."""
    early = await host.call(tool, arguments)
    assert early["structuredContent"]["state"] == "running", early
    return await until_result(host, early)


async def test_every_upstreams_tools_are_listed_the_apify_facade_without_its_helpers(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient
) -> None:
    """The tools of all three upstreams under their own names; the Apify-style facade's
    Actor tools, but not the run helpers the gateway's own tools stand in for."""
    _, url = gateway
    listed = {t["name"]: t for t in (await Host(http, url).rpc("tools/list"))["result"]["tools"]}
    assert {"sleep_report", "crawl", "approve", "slow_add", "ask_name"} <= set(listed)
    assert {"longcall--sleep-report", "longcall--crawl"} <= set(listed)
    assert not {"get-actor-run", "get-dataset-items", "abort-actor-run"} & set(listed)
    assert listed["crawl"]["execution"] == {"taskSupport": "optional"}


async def test_a_required_tool_a_task_unaware_host_is_refused_works_through_the_gateway(
    gateway: tuple[Gateway, str], serve: Serve
) -> None:
    """The TypeScript SDK client (no tasks) is refused `crawl` (task="required") by
    `longcall serve` itself; through the gateway the same call gets the crawl's items."""
    node_or_fail()
    _, url = gateway
    arguments = '{"pages": 2, "items_per_page": 2}'
    direct = await start_host(NODE, TS_HOST, "once", serve.url, "crawl", arguments)
    try:
        refused = await direct.until("error")
    finally:
        await direct.stop()
    assert "requires task-augmented execution" in refused["error"]
    before = serve.tasks("crawl", "2026-07-28")
    host = await start_host(NODE, TS_HOST, "once", url, "crawl", arguments)
    try:
        done = (await host.until("result"))["result"]
    finally:
        await host.stop()
    assert done["structuredContent"]["items"] == [
        "page0-item0",
        "page0-item1",
        "page1-item0",
        "page1-item1",
    ]
    assert serve.tasks("crawl", "2026-07-28") == before + 1


async def test_a_long_task_of_longcall_serve_returns_early_then_its_rows(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, serve: Serve
) -> None:
    """sleep_report past the window: an early return, next followed to its rows, and one
    task at the server for the whole chain."""
    _, url = gateway
    host = Host(http, url)
    before = serve.tasks("sleep_report", "2026-07-28")
    done = await early_then_outcome(host, "sleep_report", {"seconds": 4, "rows": 3})
    assert [row["index"] for row in done["structuredContent"]["rows"]] == [0, 1, 2]
    assert serve.tasks("sleep_report", "2026-07-28") == before + 1


async def test_an_apify_style_run_returns_early_then_its_items(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, serve: Serve
) -> None:
    """An Actor tool of the Apify-style facade past the window: an early return, then the
    run's dataset items and the run itself; one run at the server."""
    _, url = gateway
    host = Host(http, url)
    before = serve.tasks("sleep_report", "apify")
    done = await early_then_outcome(host, "longcall--sleep-report", {"seconds": 4, "rows": 2})
    structured = done["structuredContent"]
    assert structured["items"] == [{"index": 0, "value": 0}, {"index": 1, "value": 1}]
    assert structured["run"]["status"] == "SUCCEEDED"
    assert "zero items" not in text_of(done)
    assert serve.tasks("sleep_report", "apify") == before + 1


async def test_an_apify_style_run_with_no_items_carries_the_warning(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient
) -> None:
    """A run that succeeds with an empty dataset is a success with the zero-items warning."""
    _, url = gateway
    host = Host(http, url)
    done = await until_result(
        host, await host.call("longcall--crawl", {"pages": 0, "items_per_page": 1})
    )
    assert done["structuredContent"]["items"] == [], done
    assert not done["isError"]
    assert "zero items" in text_of(done)


async def test_a_typescript_sdk_task_server_upstream_runs_once_per_call_chain(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, task_peer: TsPeer
) -> None:
    """slow_add on the TS peer (2025-11-25 tasks) past the window, called twice (a host
    retry): one handle, the sum, and one execution at the peer."""
    _, url = gateway
    host = Host(http, url)
    arguments = {"a": 2, "b": 3, "ms": 4_000, "tag": "gw-retry"}
    early = await host.call("slow_add", arguments)
    retried = await host.call("slow_add", arguments)
    assert retried["structuredContent"]["handle"] == early["structuredContent"]["handle"]
    done = await until_result(host, retried)
    assert done["structuredContent"] == {"sum": 5}
    assert len(task_peer.executions("gw-retry")) == 1


async def test_a_typescript_sdk_task_servers_question_is_answered_through_the_gateway(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient
) -> None:
    """ask_name elicits on the TS peer's tasks/result side channel: the host sees the
    question and the longcall_answer call, answers it, and gets the greeting."""
    _, url = gateway
    host = Host(http, url)
    asked = await host.call("ask_name", {"tag": "gw-ask"})
    with contextlib.suppress(KeyError):
        for _ in range(int(BOUND_S)):
            if asked["structuredContent"]["state"] == "input_required":
                break
            asked = await host.follow(asked)
    assert asked["structuredContent"]["state"] == "input_required", asked
    assert asked["structuredContent"]["questions"][0]["message"] == "Please enter your name."
    step = asked["structuredContent"]["next"]
    assert step["tool"] == "longcall_answer"
    answered = await host.call(step["tool"], {**step["arguments"], "answers": {"name": "Ada"}})
    done = await until_result(host, answered)
    assert text_of(done).startswith("Hello, Ada!")


async def test_an_aip151_upstreams_operation_returns_early_then_its_result(
    serve: Serve, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """The AIP-151 facade of `longcall serve` as an upstream: its tools are listed (from
    the tool listing its adapter binds with), a long one returns early, next leads to
    the operation's response, and the server made one operation for the chain."""
    v1 = serve.url.removesuffix("/mcp") + "/v1"
    servers = ServersConfig(servers={"ops": ServerConfig(name="ops", url=v1)})
    async with gateway_at("", tmp_path, servers=servers) as (_, url):
        host = Host(http, url)
        listed = {t["name"] for t in (await host.rpc("tools/list"))["result"]["tools"]}
        assert {"sleep_report", "crawl"} <= listed
        before = serve.tasks("sleep_report", "aip-151")
        done = await early_then_outcome(host, "sleep_report", {"seconds": 4, "rows": 2})
        # The operation's response as the server packed it (an Any holding a Struct).
        response = done["structuredContent"]
        assert response["@type"] == "type.googleapis.com/google.protobuf.Struct"
        assert [row["index"] for row in response["value"]["rows"]] == [0, 1]
        assert serve.tasks("sleep_report", "aip-151") == before + 1
