"""What ``LongcallTasks`` adds over fastmcp-tasks: restarts answered honestly, tasks bound
to FastMCP's authenticated caller.

After a restart (graceful, or the process SIGKILLed mid-task) an idempotent tool
(``annotations={"idempotentHint": True}``) is re-run, any other tool's task fails saying
the process stopped, a task waiting for input keeps the key the client saw, and a
finished task still answers its result.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.integrations.conftest import SUBMISSION_KEY, App, RawClient, running

pytestmark = pytest.mark.anyio


async def wait_for_lines(path: Path, count: int, limit_s: float = LOADED_MACHINE_S) -> None:
    """Until ``path`` has ``count`` lines (a tool run writes one when it starts)."""
    with anyio.fail_after(limit_s):
        # The tool runs in another process: its log is the only sign it started.
        while len(await lines(path)) < count:  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def lines(path: Path) -> list[str]:
    """The lines of ``path`` (none while it does not exist)."""
    target = anyio.Path(path)
    return (await target.read_text()).splitlines() if await target.exists() else []


async def restart_scenario(http: httpx.AsyncClient, tmp_path: Path, *, kill: bool) -> None:
    app = App(f"sqlite:///{tmp_path / 'tasks.db'}", tmp_path, "--lease-s", "1.5")
    await app.start()
    try:
        rpc = RawClient(http, app.url)
        gate = tmp_path / "gate"
        runs, charges = tmp_path / "runs.log", tmp_path / "charges.log"
        finished = await rpc.create("add", {"a": 20, "b": 22})
        await rpc.wait_for(finished["taskId"], {"completed"})
        idempotent = await rpc.create("count_runs", {"log": str(runs), "gate": str(gate)})
        charge = await rpc.create("charge", {"log": str(charges), "gate": str(gate)})
        asking = await rpc.create("ask_then_wait", {"gate": str(gate)})
        parked = await rpc.wait_for(asking["taskId"], {"input_required"})
        key_before = set(parked["inputRequests"])
        await wait_for_lines(runs, 1)
        await wait_for_lines(charges, 1)
        app.kill() if kill else app.stop()
        await app.start()
        rpc = RawClient(http, app.url)
        failed = await rpc.wait_for(charge["taskId"], {"failed", "completed"})
        assert failed["status"] == "failed"
        assert "stopped" in failed["error"]["message"]
        assert "not declared idempotent" in failed["error"]["message"]
        await wait_for_lines(runs, 2)  # the idempotent tool runs again, once
        still_asking = await rpc.wait_for(asking["taskId"], {"input_required"})
        assert set(still_asking["inputRequests"]) == key_before
        (key,) = key_before
        await rpc.result(
            "tasks/update",
            {
                "taskId": asking["taskId"],
                "inputResponses": {key: {"action": "accept", "content": {"ok": True}}},
            },
        )
        gate.touch()
        rerun = await rpc.wait_for(idempotent["taskId"], {"completed", "failed"})
        assert rerun["result"]["content"][0]["text"] == "runs: 2"
        answered = await rpc.wait_for(asking["taskId"], {"completed", "failed"})
        assert answered["result"]["content"][0]["text"] == "proceeded"
        kept = await rpc.get(finished["taskId"])
        assert kept["result"]["structuredContent"] == {"sum": 42}
        assert charges.read_text().splitlines() == ["charged"]  # never charged twice
    finally:
        app.stop()


async def test_graceful_restart_reruns_idempotent_fails_others_keeps_input_keys(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """SIGTERM then start again: each kind of task is answered as restart semantics say."""
    await restart_scenario(http, tmp_path, kill=False)


async def test_sigkill_mid_task_is_taken_over_after_the_lease(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """SIGKILL mid-task, start again: once the dead lease lapses the same answers follow."""
    await restart_scenario(http, tmp_path, kill=True)


async def test_submission_key_survives_a_restart(http: httpx.AsyncClient, tmp_path: Path) -> None:
    """A create retried after a restart with the same key gets the task made before it."""
    app = App(f"sqlite:///{tmp_path / 'tasks.db'}", tmp_path)
    await app.start()
    try:
        first = await RawClient(http, app.url).create(
            "add", {"a": 1, "b": 1}, meta={SUBMISSION_KEY: "lost-response"}
        )
        app.stop()
        await app.start()
        rpc = RawClient(http, app.url)
        again = await rpc.create("add", {"a": 1, "b": 1}, meta={SUBMISSION_KEY: "lost-response"})
        assert again["taskId"] == first["taskId"]
        found = await rpc.result("longcall/tasks/lookup", {"submissionKey": "lost-response"})
        assert found["taskId"] == first["taskId"]
    finally:
        app.stop()


async def test_tasks_belong_to_the_authenticated_caller(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Alice's task: her other token sees it; Bob gets "not found", and her key is unknown
    to him (no existence leak); no token at all is HTTP 401 before MCP."""
    async with running(f"sqlite:///{tmp_path / 't.db'}", tmp_path, "--auth") as app:
        alice = RawClient(http, app.url, "token-alice")
        created = await alice.create("add", {"a": 3, "b": 4}, meta={SUBMISSION_KEY: "alice-1"})
        task_id = created["taskId"]
        await alice.wait_for(task_id, {"completed"})
        same_user = await RawClient(http, app.url, "token-alice-2").get(task_id)
        assert same_user["result"]["structuredContent"] == {"sum": 7}
        bob = RawClient(http, app.url, "token-bob")
        for method, params in (
            ("tasks/get", {"taskId": task_id}),
            ("tasks/cancel", {"taskId": task_id}),
            ("tasks/update", {"taskId": task_id, "inputResponses": {}}),
        ):
            error = await bob.error(method, params)
            assert error["code"] == -32602, (method, error)
            assert task_id in error["message"]
            unknown = await bob.error(method, {**params, "taskId": "never-issued-id"})
            assert unknown["message"] == error["message"].replace(task_id, "never-issued-id")
        lookup = await bob.result("longcall/tasks/lookup", {"submissionKey": "alice-1"})
        assert lookup["found"] is False
        bobs_own = await bob.create("add", {"a": 3, "b": 4}, meta={SUBMISSION_KEY: "alice-1"})
        assert bobs_own["taskId"] != task_id  # keys are per principal
        anonymous = await RawClient(http, app.url).post("tasks/get", {"taskId": task_id})
        assert anonymous.status_code == 401
