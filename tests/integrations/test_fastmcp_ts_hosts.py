"""TypeScript hosts nobody here wrote against the FastMCP app on ``LongcallTasks``: the
TypeScript SDK 2.x client with its tasks requester (``@modelcontextprotocol/ext-tasks``,
``interop/tasks-host.mjs``) and the MCP Inspector CLI 2.12, which drives tasks with it.

At 2026-07-28 both create tasks (read back from the app's own task store) and poll them to
the tool's outcome — input, errors and cancel included. At 2025-11-25 neither can: FastMCP
leaves no seam to serve those tasks (docs/design/fastmcp.md), and a task-required tool
is refused with the reason.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.integrations.conftest import MODERN, App
from tests.interop.harness import inspector_argv, inspector_env, node_env, tasks_host_argv

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HOST_LIMIT_S = 120.0


def lines_of(stream: str) -> list[dict[str, Any]]:
    """The JSON lines a host printed."""
    events = []
    for line in stream.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


async def run_host(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One host process to its end (bounded: killed past HOST_LIMIT_S)."""
    return await anyio.to_thread.run_sync(
        lambda: subprocess.run(argv, env=env, capture_output=True, text=True, timeout=HOST_LIMIT_S)
    )


async def tasks_host(app: App, tool: str, arguments: dict[str, Any], *flags: str) -> dict[str, Any]:
    """Run tasks-host.mjs; its events, keyed by kind (the last of each kind)."""
    done = await run_host(tasks_host_argv(app.url, tool, arguments, *flags), node_env())
    events: dict[str, Any] = {}
    for event in lines_of(done.stdout):
        for kind, value in event.items():
            events.setdefault(f"all-{kind}", []).append(value)
            events[kind] = value
    assert "outcome" in events or "error" in events, done.stdout + done.stderr
    return events


def stored(app: App, task_id: str) -> tuple[str, str]:
    """(protocol, status) of a task in the app's SQLite task store."""
    path = app.store.removeprefix("sqlite:///")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        row = db.execute("SELECT protocol, status FROM tasks WHERE task_id = ?", (task_id,))
        found = row.fetchone()
    assert found is not None, f"no task {task_id} in the app's store"
    return str(found[0]), str(found[1])


def stored_for_arguments(app: App, tool: str, marker: str) -> list[tuple[str, str]]:
    """(protocol, status) of every stored task of ``tool`` whose arguments hold ``marker``."""
    path = app.store.removeprefix("sqlite:///")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT protocol, status FROM tasks WHERE tool_name = ? AND instr(arguments, ?) > 0",
            (tool, marker),
        ).fetchall()
    return [(str(protocol), str(status)) for protocol, status in rows]


@pytest.mark.parametrize(
    ("tool", "arguments", "answer", "expected"),
    [
        ("add", {"a": 20, "b": 22}, None, {"structuredContent": {"sum": 42}}),
        ("ask_name", {}, {"name": "Ada"}, {"text": "Hello, Ada! (asked-once)"}),
        ("ask_colour", {}, {"value": "green"}, {"text": "colour: green"}),
    ],
)
async def test_the_ext_tasks_client_drives_2026_07_28_tasks_to_their_result(
    shared_app: App,
    tool: str,
    arguments: dict[str, Any],
    answer: dict[str, Any] | None,
    expected: dict[str, Any],
) -> None:
    """A result, a guard-pattern question and a ctx.elicit question: each call is a task
    in the store (2026-07-28, completed); the questions are answered with tasks/update."""
    flags = ("--answer", json.dumps(answer)) if answer is not None else ()
    events = await tasks_host(shared_app, tool, arguments, *flags)
    assert events["execution"] == "task", events
    outcome = events["outcome"]
    assert outcome["status"] == "completed", events
    if "structuredContent" in expected:
        assert outcome["result"]["structuredContent"] == expected["structuredContent"]
    else:
        assert outcome["result"]["content"][0]["text"] == expected["text"]
    assert ("elicited" in events) is (answer is not None)
    statuses = {task["status"] for task in events["all-task"]}
    assert ("input_required" in statuses) is (answer is not None)
    assert stored(shared_app, events["taskId"]) == (MODERN, "completed")


async def test_the_ext_tasks_client_tells_a_tool_error_from_a_failed_task(
    shared_app: App,
) -> None:
    """A ToolError is a completed task whose result is isError; an MCPError fails the task
    with the JSON-RPC error's code."""
    tool_error = (await tasks_host(shared_app, "tool_error", {}))["outcome"]
    assert tool_error["status"] == "completed"
    assert tool_error["result"]["isError"] is True
    failed = (await tasks_host(shared_app, "protocol_error", {}))["outcome"]
    assert failed["status"] == "failed"
    assert failed["code"] == -32603
    assert "upstream rate limit" in failed["error"]


async def test_the_ext_tasks_clients_cancel_ends_the_task_cancelled(
    shared_app: App, tmp_path: Path
) -> None:
    """Cancelled once a poll shows the body's progress message: the task ends cancelled."""
    events = await tasks_host(
        shared_app, "steps", {"gate": str(tmp_path / "never")}, "--cancel-on", "step 1 of 2"
    )
    assert events.get("cancelSent") is True, events
    assert events["outcome"]["status"] == "cancelled"
    assert stored(shared_app, events["taskId"]) == (MODERN, "cancelled")


async def test_the_ext_tasks_client_at_2025_11_25_finds_no_tasks(shared_app: App) -> None:
    """At 2025-11-25 the app advertises no tasks capability (no FastMCP seam for it): a
    client that requires a task is told task execution is unavailable; nothing is stored."""
    events = await tasks_host(shared_app, "add", {"a": 1, "b": 9_111}, "--era", "legacy")
    assert "Task execution was required but is unavailable" in events["error"]
    assert stored_for_arguments(shared_app, "add", "9111") == []


async def test_the_inspector_cli_modern_era_runs_a_task(shared_app: App, tmp_path: Path) -> None:
    """Inspector --protocol-era modern: the call is a 2026-07-28 task, polled to its result."""
    argv = inspector_argv(shared_app.url, "modern", "add", {"a": 4_321, "b": 1})
    done = await run_host(argv, inspector_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = lines_of(done.stdout)
    assert result["result"]["structuredContent"] == {"sum": 4_322}
    assert stored_for_arguments(shared_app, "add", "4321") == [(MODERN, "completed")]


async def test_the_inspector_cli_legacy_era_is_refused_a_required_tool(
    shared_app: App, tmp_path: Path
) -> None:
    """Inspector --protocol-era legacy sees `add` task-required but no tasks capability,
    calls it plainly, and is refused with the reason (-32021); no task is stored."""
    argv = inspector_argv(shared_app.url, "legacy", "add", {"a": 8_642, "b": 1})
    done = await run_host(argv, inspector_env(tmp_path))
    assert done.returncode != 0
    assert "requires the tasks extension" in done.stderr
    assert stored_for_arguments(shared_app, "add", "8642") == []
