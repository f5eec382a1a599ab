"""The official conformance suite's ``tasks-*`` scenarios against a FastMCP app on
``LongcallTasks``, and — where fastmcp-tasks can be installed (FastMCP 4.1.x) — against
the same app on fastmcp-tasks 4.1.4, side by side (the parity the issue asks for).

Counts are asserted exactly. The one failing check is the same on both backends:
``tasks-mrtr-composition`` wants input asked by SEP-2322 rounds *before* the task is
created, and a FastMCP tool has no way to declare such questions (both backends create
the task at once and ask inside it). ``tasks-status-notifications`` is skipped by the
suite itself (its ``subscriptions/listen`` harness is pending upstream).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.interop.harness import ROOT, node_env, node_or_fail, stop

pytestmark = pytest.mark.slow

CONFORMANCE = ROOT / "interop" / "node_modules" / ".bin" / "conformance"
SCENARIO_LIMIT_S = 120.0
START_LIMIT_S = LOADED_MACHINE_S
EXPECTED = {
    "tasks-lifecycle": (9, 0),
    "tasks-capability-negotiation": (5, 0),
    "tasks-wire-fields": (4, 0),
    "tasks-request-state-removal": (3, 0),
    "tasks-mrtr-input": (4, 0),
    "tasks-request-headers": (5, 0),
    "tasks-dispatch-and-envelope": (9, 0),
    "tasks-status-notifications": (0, 0),
    "tasks-required-task-error": (3, 0),
    "tasks-mrtr-composition": (1, 1),
}
"""(passed, failed) checks per scenario, the same on both backends today."""


def serve_app(backend: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The conformance app on ``backend`` as a child process, and its URL."""
    port_file = workdir / "port"
    log = (workdir / "app.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integrations.fastmcp_conformance_app",
            backend,
            f"sqlite:///{workdir / 'tasks.db'}",
            str(port_file),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    log.close()
    deadline = time.monotonic() + START_LIMIT_S
    while not port_file.exists():  # bounded poll of a separate process's announcement
        assert process.poll() is None, (workdir / "app.log").read_text()
        assert time.monotonic() < deadline, "the app did not start"
        time.sleep(0.05)
    return process, f"http://127.0.0.1:{port_file.read_text()}/mcp"


def run_scenarios(backend: str, workdir: Path) -> dict[str, tuple[int, int]]:
    """Every tasks-* scenario against the app on ``backend``: (passed, failed) each."""
    node_or_fail()
    process, url = serve_app(backend, workdir)
    results: dict[str, tuple[int, int]] = {}
    try:
        for scenario in EXPECTED:
            out = workdir / scenario
            subprocess.run(
                [str(CONFORMANCE), "server", "--url", url, "--scenario", scenario, "-o", str(out)],
                env=node_env(),
                cwd=workdir,
                capture_output=True,
                timeout=SCENARIO_LIMIT_S,
                check=False,
            )
            (checks_file,) = out.glob("*/checks.json")
            checks = json.loads(checks_file.read_text())
            results[scenario] = (
                sum(check["status"] == "SUCCESS" for check in checks),
                sum(check["status"] == "FAILURE" for check in checks),
            )
    finally:
        stop(process)
    return results


def test_tasks_scenarios_on_longcall_tasks(tmp_path: Path) -> None:
    """Every tasks-* scenario against the FastMCP app on LongcallTasks, counts exact."""
    assert run_scenarios("longcall", tmp_path) == EXPECTED


@pytest.mark.skipif(
    importlib.util.find_spec("fastmcp_tasks") is None,
    reason="fastmcp-tasks exists only for FastMCP 4.1.x",
)
def test_same_scenarios_on_fastmcp_tasks_for_parity(tmp_path: Path) -> None:
    """The same app on fastmcp-tasks 4.1.4 (memory://) passes exactly the same checks."""
    assert run_scenarios("fastmcp-tasks", tmp_path) == EXPECTED
