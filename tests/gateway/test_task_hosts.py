"""Task-aware hosts built on real packages, through the gateway (G1): the MCP Inspector CLI
(2.12) and the TypeScript SDK 2.x client with its tasks requester (ext-tasks), in both task
protocol versions. Which calls became tasks is read on the gateway's side (its task
server's metrics), never from what the host says.

The Inspector CLI drives a task for every call in its modern era (2026-07-28); in its
legacy era (2025-11-25) only for a tool listed as task-`required`, and the gateway lists
every tool as `optional` (so task-unaware hosts can call them), so there it is a
task-unaware host: an early return and `next`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conftest import (
    BOUND_S,
    LEGACY,
    MODERN,
    Upstream,
    start_inspector,
    start_tasks_host,
    text_of,
)
from longcall.gateway import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def tasks_created(gw: Gateway, tool: str, protocol: str) -> int:
    """How many host tasks the gateway created for ``tool`` in ``protocol``."""
    return gw.server.metrics.created[(tool, protocol)]


async def test_the_inspector_cli_in_its_modern_era_drives_a_gateway_task(
    gateway: tuple[Gateway, str], upstream: Upstream, tmp_path: Path
) -> None:
    """Inspector --protocol-era modern: the call is a 2026-07-28 task at the gateway, open
    while the upstream runs and polled to the upstream's result; the upstream ran once."""
    gw, url = gateway
    host = await start_inspector(url, "modern", "slow", {"key": "insp-m", "n": 2}, tmp_path)
    try:
        await asyncio.wait_for(upstream.start_seen("insp-m").wait(), BOUND_S)
        assert tasks_created(gw, "slow", MODERN) == 1
        upstream.release("insp-m")
        done = await host.until("result")
        assert done["result"]["structuredContent"] == {"items": [0, 1]}
        assert gw.server.metrics.status_reads[MODERN] >= 1
        assert upstream.runs["insp-m"] == 1
    finally:
        await host.stop()


async def test_the_inspector_cli_in_its_legacy_era_follows_next_to_the_result(
    gateway: tuple[Gateway, str], upstream: Upstream, tmp_path: Path
) -> None:
    """Inspector --protocol-era legacy calls an optional tool without a task: it gets the
    early return, and a second Inspector call of what next names gets the result."""
    gw, url = gateway
    host = await start_inspector(url, "legacy", "slow", {"key": "insp-l", "n": 3}, tmp_path)
    try:
        early = (await host.until("result"))["result"]
    finally:
        await host.stop()
    assert early["structuredContent"]["state"] == "running", early
    assert "longcall_status" in text_of(early)
    assert tasks_created(gw, "slow", LEGACY) == 0
    upstream.release("insp-l")
    step = early["structuredContent"]["next"]
    host = await start_inspector(url, "legacy", step["tool"], step["arguments"], tmp_path)
    try:
        done = (await host.until("result"))["result"]
    finally:
        await host.stop()
    assert done["structuredContent"] == {"items": [0, 1, 2]}
    assert upstream.runs["insp-l"] == 1


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_the_ext_tasks_client_drives_a_task_in_both_versions(
    era: str, gateway: tuple[Gateway, str], upstream: Upstream
) -> None:
    """The TypeScript SDK 2.x client with ext-tasks requires a task: the gateway creates
    it in the version negotiated, and it ends with the upstream's result."""
    gw, url = gateway
    key = f"ext-{era}"
    host = await start_tasks_host(url, "slow", {"key": key, "n": 1}, "--era", era)
    try:
        created = await host.until("execution")
        assert created["execution"] == "task", created
        await asyncio.wait_for(upstream.start_seen(key).wait(), BOUND_S)
        upstream.release(key)
        outcome = (await host.until("outcome"))["outcome"]
    finally:
        await host.stop()
    assert outcome["status"] == "completed", outcome
    assert outcome["result"]["structuredContent"] == {"items": [0]}
    assert tasks_created(gw, "slow", MODERN if era == "modern" else LEGACY) == 1
    assert upstream.runs[key] == 1


async def test_the_ext_tasks_client_answers_the_upstream_question_in_a_2026_07_28_task(
    gateway: tuple[Gateway, str],
) -> None:
    """The upstream asks for input: the 2026-07-28 task shows it as input_required, the
    ext-tasks client answers it with tasks/update, and the task ends with the answer."""
    gw, url = gateway
    host = await start_tasks_host(url, "ask", {}, "--answer", '{"approved": true}')
    try:
        asked = await host.until("elicited")
        assert asked["elicited"]["message"] == "Approve the deploy?"
        outcome = (await host.until("outcome"))["outcome"]
    finally:
        await host.stop()
    statuses = [e["task"]["status"] for e in host.events if "task" in e]
    assert "input_required" in statuses
    assert outcome["result"]["structuredContent"] == {"approved": True}
    assert tasks_created(gw, "ask", MODERN) == 1


async def test_the_ext_tasks_clients_cancel_reaches_the_upstream(
    gateway: tuple[Gateway, str], upstream: Upstream
) -> None:
    """ext-tasks cancels its 2026-07-28 task once a poll shows the upstream's progress: the
    task ends cancelled and the upstream's run is cancelled too (it ran once)."""
    _, url = gateway
    host = await start_tasks_host(url, "slow", {"key": "ext-cancel"}, "--cancel-on", "step 1/4")
    try:
        outcome = (await host.until("outcome"))["outcome"]
    finally:
        await host.stop()
    assert outcome["status"] == "cancelled", outcome
    await asyncio.wait_for(upstream.cancel_seen("ext-cancel").wait(), BOUND_S)
    assert upstream.runs["ext-cancel"] == 1
