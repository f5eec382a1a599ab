"""longcall's own caller (the ``longcall`` command, separate processes on one ledger)
against a FastMCP app on ``LongcallTasks``: a call to its receipt, a caller killed
mid-task that another caller process finishes without a second run, a worker killed
mid-task that the next worker follows without a second run, and a server restarted
under a waiting caller."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.integrations.conftest import App
from tests.integrations.test_fastmcp_durability import wait_for_lines
from tests.interop.harness import Caller, call_args, finish, stop, view_of
from tests.interop.test_ts_sdk_peer import WORKER_EXIT_GRACE_S, run_worker_until_settled

from longcall.ledger import SQLiteLedger

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER_LEASE_S = "1"
"""A killed worker's lease lapses within a second, and the next worker takes the call over."""


@pytest.fixture
def caller(tmp_path: Path) -> Caller:
    """The longcall command on a ledger of this test alone."""
    return Caller(f"sqlite:///{tmp_path / 'ledger.db'}")


async def test_call_wait_reaches_the_receipt(shared_app: App, caller: Caller) -> None:
    """`longcall call --wait` negotiates 2026-07-28 tasks and accepts the tool's value."""
    code, view, stderr = await anyio.to_thread.run_sync(
        lambda: caller.call(shared_app.url, "add", {"a": 2, "b": 3}, "n-add", "--wait")
    )
    assert (view["state"], view["result_kind"], view["protocol"]) == (
        "accepted",
        "value",
        "2026-07-28",
    ), stderr
    assert code == 0
    assert view["result"]["structuredContent"] == {"sum": 5}


async def test_a_caller_killed_mid_task_is_finished_by_another_without_a_rerun(
    shared_app: App, caller: Caller, tmp_path: Path
) -> None:
    """SIGKILL the waiting caller while the tool runs; a second `call --wait` on the same
    node attaches to the same task (no second create), and the tool ran once."""
    runs, gate = tmp_path / "runs.log", tmp_path / "gate"
    arguments = {"log": str(runs), "gate": str(gate)}
    first = caller.start(*call_args(shared_app.url, "count_runs", arguments, "n-kill", "--wait"))
    try:
        await wait_for_lines(runs, 1)
    finally:
        first.kill()
        first.wait(timeout=10)
    gate.touch()
    _, view, stderr = await anyio.to_thread.run_sync(
        lambda: caller.call(shared_app.url, "count_runs", arguments, "n-kill", "--wait")
    )
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), stderr
    assert view["result"]["content"][0]["text"] == "runs: 1"
    assert runs.read_text().splitlines() == ["run"]


async def test_server_restarted_under_a_waiting_caller(
    http: httpx.AsyncClient, caller: Caller, tmp_path: Path
) -> None:
    """The app stops mid-task and starts again on its store: the waiting caller keeps
    polling the same task id and accepts the idempotent tool's re-run result."""
    app = App(f"sqlite:///{tmp_path / 'tasks.db'}", tmp_path)
    await app.start()
    runs, gate = tmp_path / "runs.log", tmp_path / "gate"
    arguments = {"log": str(runs), "gate": str(gate)}
    waiting = caller.start(*call_args(app.url, "count_runs", arguments, "n-restart", "--wait"))
    try:
        await wait_for_lines(runs, 1)
        url = app.url
        app.stop()
        # The same port: the caller's operation names the server by URL.
        await app.start_on(url)
        await wait_for_lines(runs, 2)
        gate.touch()
        code, out, err = await anyio.to_thread.run_sync(lambda: finish(waiting))
        view = view_of(out, err)
        assert (view["state"], view["result_kind"]) == ("accepted", "value"), err
        assert view["result"]["content"][0]["text"] == "runs: 2"
        assert code == 0
    finally:
        stop(waiting)
        app.stop()


async def test_a_worker_killed_mid_task_is_followed_by_another_without_a_rerun(
    shared_app: App, caller: Caller, tmp_path: Path
) -> None:
    """`longcall call` creates the task and exits; a `longcall worker` polls it and is
    SIGKILLed; the next worker carries the same task to its receipt: the tool ran once."""
    runs, gate = tmp_path / "runs.log", tmp_path / "gate"
    arguments = {"log": str(runs), "gate": str(gate)}
    code, view, stderr = await anyio.to_thread.run_sync(
        lambda: caller.call(shared_app.url, "count_runs", arguments, "n-worker")
    )
    assert (code, view["state"]) == (0, "working"), stderr
    task_id = view["operation_id"]
    await wait_for_lines(runs, 1)
    worker = caller.start("worker", "--lease", WORKER_LEASE_S)
    try:
        await anyio.to_thread.run_sync(lambda: polled(tmp_path / "ledger.db", "n-worker"))
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(timeout=WORKER_EXIT_GRACE_S) == -signal.SIGKILL
    finally:
        stop(worker)
    gate.touch()  # only now may the tool end: the next worker must resume the task
    view, worker_exit = await anyio.to_thread.run_sync(
        lambda: run_worker_until_settled(caller, tmp_path / "ledger.db", "n-worker")
    )
    assert (view["state"], view["result_kind"]) == ("accepted", "value"), view
    assert view["operation_id"] == task_id
    assert view["result"]["content"][0]["text"] == "runs: 1"
    assert runs.read_text().splitlines() == ["run"]
    assert worker_exit == 0


def polled(ledger_path: Path, node: str) -> None:
    """Return once the ledger records a poll of ``node`` (bounded polling of a file
    another process writes)."""
    deadline = time.monotonic() + LOADED_MACHINE_S
    while time.monotonic() < deadline:
        with SQLiteLedger(ledger_path) as ledger:
            if ledger.get(node).poll_count >= 1:
                return
        time.sleep(0.05)
    pytest.fail(f"no worker polled {node} within {LOADED_MACHINE_S:g} s")
