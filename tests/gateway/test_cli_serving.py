"""`longcall gateway` as a process, served the way a shared deployment runs it: a bearer
token required of hosts (``--token-env``), metrics on ``--metrics-port``, and upstreams
from an ``mcpServers`` JSON servers file whose credential reaches the upstream and never
the gateway's log or ledger."""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import Host, Upstream, gateway_argv, gateway_process, upstream_server
from longcall.server import StaticTokens, running_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GATEWAY_TOKEN_VARIABLE = "LONGCALL_TEST_GATEWAY_TOKEN"
UPSTREAM_TOKEN_VARIABLE = "LONGCALL_TEST_UPSTREAM_TOKEN"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Served:
    """A gateway process and what the test knows about it."""

    url: str
    metrics_port: int
    gateway_token: str
    upstream_token: str


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Served, Upstream]]:
    """`longcall gateway --token-env … --metrics-port …` from a JSON servers file, in
    front of an upstream that refuses requests without its own token."""
    gateway_token, upstream_token = secrets.token_hex(16), secrets.token_hex(16)
    upstream = Upstream()
    guard = StaticTokens({upstream_token: "the-gateway"})
    async with running_server(upstream_server(upstream, str(tmp_path / "up.db"), guard)) as url:
        upstream.url = url
        servers = tmp_path / "servers.json"
        header = {"Authorization": f"Bearer ${{env:{UPSTREAM_TOKEN_VARIABLE}}}"}
        servers.write_text(json.dumps({"mcpServers": {"up": {"url": url, "headers": header}}}))
        metrics_port = free_port()
        argv = gateway_argv(
            tmp_path,
            servers,
            "--token-env",
            GATEWAY_TOKEN_VARIABLE,
            "--metrics-port",
            str(metrics_port),
        )
        env = {
            **os.environ,
            GATEWAY_TOKEN_VARIABLE: gateway_token,
            UPSTREAM_TOKEN_VARIABLE: upstream_token,
        }
        async with gateway_process(argv, log=tmp_path / "gateway.log", env=env) as (_, mcp):
            yield Served(mcp, metrics_port, gateway_token, upstream_token), upstream


async def test_hosts_need_the_token_the_gateway_was_given(
    served: tuple[Served, Upstream], http: httpx.AsyncClient
) -> None:
    """Without a bearer token or with a wrong one: 401; with the right one the host sees
    the upstream's tools, reached with the servers file's credential."""
    gateway, upstream = served
    for token in (None, "wrong-token"):
        headers = {} if token is None else {"authorization": f"Bearer {token}"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        refused = await http.post(gateway.url, json=body, headers=headers)
        assert refused.status_code == 401, (token, refused.text)
    host = Host(http, gateway.url, token=gateway.gateway_token)
    listed = {t["name"] for t in (await host.rpc("tools/list"))["result"]["tools"]}
    assert {"slow", "quick", "longcall_status"} <= listed
    quick = await host.call("quick", {"x": 5})
    while "next" in quick["structuredContent"]:  # a loaded machine may take the window
        quick = await host.follow(quick)
    assert quick["structuredContent"] == {"x": 5, "items": [5]}
    assert upstream.runs["quick-5"] == 1


async def test_the_metrics_port_serves_what_hosts_met_and_no_secret_is_logged(
    served: tuple[Served, Upstream], http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """--metrics-port serves the gateway's counters (a refused handle counted); neither
    token is in the gateway's log or ledger."""
    gateway, _ = served
    host = Host(http, gateway.url, token=gateway.gateway_token)
    refused = await host.call("longcall_status", {"handle": "lc-0000-00000"})
    assert refused["isError"]
    await host.call("quick", {"x": 6})  # answered: the metrics were served before /mcp
    text = (await http.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics")).text
    assert "longcall_gateway_handles_refused_total 1.0" in text
    assert "longcall_gateway_early_returns_total" in text
    assert "longcall_gateway_open_handles" in text
    log = (tmp_path / "gateway.log").read_bytes()
    assert b"HTTP Request: POST" in log  # the log is written, and holds requests
    for path in (tmp_path / "gateway.log", tmp_path / "gateway.db"):
        for secret in (gateway.gateway_token, gateway.upstream_token):
            assert secret.encode() not in path.read_bytes(), path.name
