"""Task-aware TypeScript hosts against the `longcall serve` command: the MCP Inspector CLI
2.12 and the TypeScript SDK 2.x client with ext-tasks (``interop/tasks-host.mjs``), in
both task versions. The server's own task store says which calls became tasks, and in
which version.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.interop.harness import (
    CLI_LIMIT_S,
    Serve,
    inspector_argv,
    inspector_env,
    node_env,
    serve_process,
    tasks_host_argv,
)

pytestmark = pytest.mark.slow

ERA_PROTOCOL = {"legacy": "2025-11-25", "modern": "2026-07-28"}
CRAWLED = ["page0-item0", "page0-item1", "page1-item0", "page1-item1"]


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """The `longcall serve` command, for the whole module."""
    with serve_process(tmp_path_factory.mktemp("serve")) as running:
        yield running


def json_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_cli_runs_a_required_tool_as_a_task(
    era: str, serve: Serve, tmp_path: Path
) -> None:
    """Inspector --protocol-era legacy|modern on `crawl` (task-required): a task in that
    version at the server, polled to the crawl's items."""
    before = serve.tasks("crawl", ERA_PROTOCOL[era])
    argv = inspector_argv(serve.url, era, "crawl", {"pages": 2, "items_per_page": 2})
    done = subprocess.run(
        argv, env=inspector_env(tmp_path), capture_output=True, text=True, timeout=CLI_LIMIT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (printed,) = json_lines(done.stdout)
    assert printed["result"]["structuredContent"]["items"] == CRAWLED
    assert serve.tasks("crawl", ERA_PROTOCOL[era]) == before + 1


def test_the_ext_tasks_client_answers_a_2026_07_28_tasks_question(serve: Serve) -> None:
    """tasks-host.mjs on `approve`: the task asks (inputRequests), the host answers with
    tasks/update, the task completes with the decision."""
    before = serve.tasks("approve", ERA_PROTOCOL["modern"])
    events = run_tasks_host(serve, "approve", {"change": "deploy"}, "--era", "modern")
    asked = next(e["elicited"] for e in events if "elicited" in e)
    assert asked["message"] == "Approve this change? deploy"
    outcome = next(e["outcome"] for e in events if "outcome" in e)
    assert outcome["result"]["structuredContent"] == {"change": "deploy", "approved": True}
    assert serve.tasks("approve", ERA_PROTOCOL["modern"]) == before + 1


def test_the_ext_tasks_client_runs_a_2025_11_25_task(serve: Serve) -> None:
    """tasks-host.mjs --era legacy on `crawl`: a 2025-11-25 task, its result read with
    tasks/result once terminal. (Its in-task questions are not tried: ext-tasks 0.2.2
    calls tasks/result only after a terminal status, and a 2025-11-25 question travels on
    that stream, so it would wait in input_required.)"""
    before = serve.tasks("crawl", ERA_PROTOCOL["legacy"])
    arguments = {"pages": 2, "items_per_page": 2}
    events = run_tasks_host(serve, "crawl", arguments, "--era", "legacy")
    outcome = next(e["outcome"] for e in events if "outcome" in e)
    assert outcome["result"]["structuredContent"]["items"] == CRAWLED
    assert serve.tasks("crawl", ERA_PROTOCOL["legacy"]) == before + 1


def run_tasks_host(serve: Serve, tool: str, arguments: dict[str, Any], *flags: str) -> list[Any]:
    """tasks-host.mjs to its end (bounded); the JSON lines it printed."""
    argv = tasks_host_argv(serve.url, tool, arguments, *flags)
    done = subprocess.run(argv, env=node_env(), capture_output=True, text=True, timeout=CLI_LIMIT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return json_lines(done.stdout)
