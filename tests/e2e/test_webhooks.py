"""A signed webhook delivery only wakes the poll of the operation it names (X3, S7):
real server, real executor, the receiver over HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.e2e.conftest import Fault, FaultLayer, serve

from longcall.adapters.webhooks import HmacKey, Verifier, new_hmac_key, sign
from longcall.core import State
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor
from longcall.runtime.webhooks import WebhookReceiver, listen_socket
from longcall.runtime.webhooks import serve as serve_receiver
from longcall.server import LongcallServer, TaskContext

pytestmark = pytest.mark.anyio

POLL_INTERVAL_MS = 1_800_000
"""Half an hour, far beyond the wait's bound: an acceptance within it can only come from
the delivery."""
WAIT_LIMIT_S = LOADED_MACHINE_S
KEY = new_hmac_key(bytes(range(32)))


@dataclass
class HookWorld:
    """A server with one tool that waits to be released, an executor, its receiver."""

    server: LongcallServer
    url: str
    faults: FaultLayer
    executor: Executor
    ledger: SQLiteLedger
    receiver: WebhookReceiver
    hook_url: str
    release: asyncio.Event
    changed: asyncio.Event


@pytest.fixture
async def hook_world(tmp_path: Path) -> AsyncIterator[HookWorld]:
    """The reference server (push refused, so only polls and webhooks remain) and a
    receiver served on a free port of 127.0.0.1."""
    server = LongcallServer(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    release = asyncio.Event()

    @server.tool(task="optional", poll_interval_ms=POLL_INTERVAL_MS)
    async def held_job(ctx: TaskContext) -> dict[str, Any]:
        """Finish when the test releases it."""
        await release.wait()
        return {"done": True}

    faults = FaultLayer(server.asgi_app())
    faults.faults.append(
        Fault(method="subscriptions/listen", nth=tuple(range(1, 1000)), status=503)
    )
    changed = asyncio.Event()
    async with serve(faults) as url:
        with SQLiteLedger(tmp_path / "ledger.db", synchronous="normal") as ledger:
            executor = Executor(
                ledger, refresh_interval_s=0.2, on_change=lambda _node: changed.set()
            )
            receiver = WebhookReceiver(executor, Verifier([KEY]))
            sock = listen_socket("127.0.0.1", 0)
            hook_url = f"http://127.0.0.1:{sock.getsockname()[1]}/webhooks"
            serving = asyncio.create_task(serve_receiver(receiver, sock))
            stop = asyncio.Event()
            runner = None
            try:
                world = HookWorld(
                    server=server, url=url, faults=faults, executor=executor, ledger=ledger,
                    receiver=receiver, hook_url=hook_url, release=release, changed=changed,
                )  # fmt: skip
                runner = asyncio.create_task(executor.run(stop=stop))
                yield world
            finally:
                release.set()
                stop.set()
                if runner is not None:
                    await runner
                serving.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await serving
                await executor.aclose()


async def started(world: HookWorld) -> str:
    """Call the tool; the server's operation id once the create reply is in."""
    binding = await world.executor.bind(world.url, "held_job", protocol="2026-07-28")
    world.executor.call(CallSpec(call_node_id="n", binding=binding, arguments={}))
    async with asyncio.timeout(WAIT_LIMIT_S):
        while (operation_id := world.executor.engine.records["n"].operation_id) is None:
            world.changed.clear()
            await world.changed.wait()
    return operation_id


async def terminal_at_server(world: HookWorld, task_id: str) -> None:
    """Wait (on the server's own change events) until the task is terminal there."""
    manager = world.server.manager
    async with asyncio.timeout(WAIT_LIMIT_S):
        while True:
            with manager.hub.watch(task_id) as changed:
                record = await manager.store.get(task_id)
                if record is not None and record.status.is_terminal:
                    return
                await changed.wait()


def delivery(
    task_id: str, *, msg_id: str, keys: list[HmacKey] | None = None, at: int | None = None
) -> tuple[dict[str, str], bytes]:
    body = json.dumps(
        {"type": "task.status", "data": {"taskId": task_id, "status": "completed"}}
    ).encode()
    stamp = int(time.time()) if at is None else at
    headers = sign(keys or [KEY], msg_id=msg_id, timestamp=stamp, body=body)
    return {**headers, "content-type": "application/json"}, body


def polls(world: HookWorld) -> int:
    return world.faults.counts.get("tasks/get", 0)


async def post(headers: dict[str, str], body: bytes, url: str) -> int:
    async with httpx.AsyncClient(timeout=10) as http:
        return (await http.post(url, headers=headers, content=body)).status_code


async def test_a_signed_delivery_gets_a_completed_task_accepted_long_before_the_poll(
    hook_world: HookWorld,
) -> None:
    """With a one-minute poll interval, a signed delivery after completion makes the
    next poll come at once; the terminal is still the poll's (X3)."""
    world = hook_world
    task_id = await started(world)
    world.release.set()
    await terminal_at_server(world, task_id)
    loop = asyncio.get_running_loop()
    headers, body = delivery(task_id, msg_id="evt_done")
    async with httpx.AsyncClient(timeout=10) as http:  # made first: its set-up is not timed
        sent = loop.time()
        answered = await http.post(world.hook_url, headers=headers, content=body)
        answered_after = loop.time() - sent
        assert answered.status_code == 202
        async with asyncio.timeout(WAIT_LIMIT_S):
            record = await world.executor.wait_terminal("n")
        elapsed = loop.time() - sent
    print(f"receiver answered after {answered_after * 1000:.0f} ms")
    print(f"delivery to acceptance: {elapsed * 1000:.0f} ms")
    assert record.state is State.ACCEPTED
    assert elapsed < POLL_INTERVAL_MS / 1000 / 4, elapsed
    assert polls(world) == 1
    assert "TerminalObserved" in [h.event for h in world.ledger.history("n")]
    assert world.receiver.counts["hinted"] == 1


async def test_forged_and_malformed_deliveries_are_refused_and_change_nothing(
    hook_world: HookWorld,
) -> None:
    """Wrong secret, tampered body, stale, future, malformed: each a 4xx; a duplicate 200;
    typed, and the operation is neither polled nor changed."""
    world = hook_world
    task_id = await started(world)
    world.release.set()
    await terminal_at_server(world, task_id)
    before = world.ledger.get("n")
    polled = polls(world)
    other = new_hmac_key(b"\x09" * 32)
    now = int(time.time())
    good_headers, good_body = delivery(task_id, msg_id="evt_ok")
    # The first real delivery is taken at the receiver (not yet sent): hold its id.
    world.receiver.verifier.seen.add("evt_dup", now=now)
    cases = {
        "WebhookBadSignature": [
            delivery(task_id, msg_id="evt_wrong", keys=[other]),
            (good_headers, good_body.replace(b"completed", b"failed")),
            ({**good_headers, "webhook-id": "evt_other"}, good_body),
        ],
        "WebhookStale": [delivery(task_id, msg_id="evt_old", at=now - 3600)],
        "WebhookFromFuture": [delivery(task_id, msg_id="evt_new", at=now + 3600)],
        "WebhookMalformed": [
            ({**good_headers, "webhook-signature": "v1,not base64!"}, good_body),
            ({k: v for k, v in good_headers.items() if k != "webhook-timestamp"}, good_body),
        ],
        "WebhookDuplicate": [delivery(task_id, msg_id="evt_dup")],
    }
    for name, attempts in cases.items():
        for headers, body in attempts:
            status = await post(headers, body, world.hook_url)
            # A verified duplicate is 200 (its sender stops retrying), all else a 4xx.
            assert status == 200 if name == "WebhookDuplicate" else 400 <= status < 500, (
                name,
                status,
            )
        assert world.receiver.counts[name] == len(attempts), name
    assert world.receiver.counts["hinted"] == 0
    # The executor was never asked (no hint), nothing polled, nothing written.
    assert polls(world) == polled
    after = world.ledger.get("n")
    assert after is not None
    assert before is not None
    assert after.version == before.version
    assert after.state is before.state


async def test_a_verified_delivery_naming_nothing_of_ours_is_2xx_and_wakes_nothing(
    hook_world: HookWorld,
) -> None:
    """A verified delivery about an unknown task is answered 2xx and moves no poll."""
    world = hook_world
    await started(world)
    headers, body = delivery("not-our-task", msg_id="evt_stranger")
    answer = world.receiver.answer(headers, body)
    assert answer.status == 202
    assert answer.woken is not None
    assert await asyncio.wrap_future(answer.woken) == []
    headers, body = delivery("not-our-task", msg_id="evt_stranger_http")
    assert await post(headers, body, world.hook_url) == 202
    assert polls(world) == 0


async def test_a_verified_but_unreadable_payload_is_refused(hook_world: HookWorld) -> None:
    """A signed body that names no operation in the shape taken is a 400."""
    world = hook_world
    body = base64.b64encode(b"not json")
    headers = sign([KEY], msg_id="evt_junk", timestamp=int(time.time()), body=body)
    assert world.receiver.handle(headers, body)[0] == 400
    assert world.receiver.counts["WebhookMalformed"] == 1


async def test_a_verified_delivery_that_lies_moves_only_the_poll_and_only_once(
    hook_world: HookWorld,
) -> None:
    """A signed "completed" for a task still working: one poll comes at once and finds
    it working (nothing accepted); a second at once is floored by the interval (X3)."""
    world = hook_world
    task_id = await started(world)
    first = world.receiver.answer(*delivery(task_id, msg_id="evt_lie_1"))
    assert first.status == 202
    assert first.woken is not None
    assert await asyncio.wrap_future(first.woken) == ["n"]
    async with asyncio.timeout(WAIT_LIMIT_S):
        while world.executor.engine.records["n"].poll_count < 1:  # the poll's reply applied
            world.changed.clear()
            await world.changed.wait()
    assert polls(world) == 1
    second = world.receiver.answer(*delivery(task_id, msg_id="evt_lie_2"))
    assert second.woken is not None
    await asyncio.wrap_future(second.woken)
    planned = world.executor.engine.next_wakeup()
    # The next poll stays about a minute after the woken one: no second early poll.
    assert planned is not None
    assert planned - time.time() > POLL_INTERVAL_MS / 1000 / 2
    record = world.ledger.get("n")
    assert record is not None
    assert not record.is_terminal
    assert world.ledger.receipts() == []
    assert polls(world) == 1
