"""The webhook outbox survives SIGKILL: a real ``longcall serve`` killed while its
deliveries are being retried, restarted on the same store, delivers every event once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from standardwebhooks import Webhook
from test_restart import ServerProcess, free_port
from tests.bounds import LOADED_MACHINE_S
from tests.webhook_peer import HookReceiver

from conftest import POLL_STEP_S, ModernClient

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKS = 3
ENDED = {"completed", "failed", "cancelled"}


def serve_argv(store: str, port: int) -> list[str]:
    return [
        "-m", "longcall", "serve", "--store", store, "--port", str(port),
        "--webhooks", "--webhook-allow-loopback",
        "--webhook-retry-base", "0.1", "--webhook-retry-max", "0.3", "--webhook-timeout", "2",
    ]  # fmt: skip


async def outbox_events(http: httpx.AsyncClient, base: str) -> set[str]:
    listed = await http.get(base + "/webhooks/deliveries")
    assert listed.status_code == 200, listed.text
    return {delivery["eventId"] for delivery in listed.json()["deliveries"]}


async def settled_deliveries(http: httpx.AsyncClient, base: str) -> list[dict[str, Any]]:
    """The outbox once no delivery is pending: the server records an answer after the
    receiver has sent it, so the receiver's count can be ahead of the listing."""
    with anyio.fail_after(LOADED_MACHINE_S):
        while True:
            listed = await http.get(base + "/webhooks/deliveries")
            assert listed.status_code == 200, listed.text
            deliveries: list[dict[str, Any]] = listed.json()["deliveries"]
            if all(d["state"] != "pending" for d in deliveries):
                return deliveries
            await anyio.sleep(POLL_STEP_S)


async def test_the_outbox_resumes_after_sigkill_mid_retry(tmp_path: Path) -> None:
    """The receiver answers 503 while the first server retries every event; the server is
    SIGKILLed; the receiver comes back; a new server on the same store sends each event,
    once, signed with the endpoint's key."""
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    port = free_port()
    first = ServerProcess(store, port, serve_argv(store, port))
    async with HookReceiver(lambda _n, _h, _b: (503, {})) as hooks:
        try:
            first.start()
            async with httpx.AsyncClient(timeout=60) as http:
                await first.wait_ready(http)
                base = first.url.removesuffix("/mcp")
                made = await http.post(base + "/webhooks/endpoints", json={"url": hooks.url})
                assert made.status_code == 201, made.text
                secret = made.json()["secret"]
                mcp = ModernClient(http, first.url)
                tasks = [
                    (await mcp.create("sleep_report", {"seconds": 0, "rows": 1}))["taskId"]
                    for _ in range(TASKS)
                ]
                for task in tasks:
                    await mcp.wait_status(task, ENDED, limit_s=LOADED_MACHINE_S)
                # How many status changes a task makes (a progress note may be one) is the
                # server's business: its outbox says which events there are to deliver.
                events = await outbox_events(http, base)
                # Every event attempted more than once: the server is mid-retry.
                await hooks.wait_for(
                    lambda got: all(sum(r.msg_id == event for r in got) >= 2 for event in events)
                )
                first.kill()
            # An attempt the first server sent just before it died can reach the
            # receiver after this point: answering it 2xx would deliver an event the
            # dead server can never record, which the second then rightly sends again
            # (at least once). Attempts are signed when sent, in whole seconds: only
            # those signed after the death are answered 2xx (the second server's first
            # ones, in the same second, are refused and retried within 0.3 s).
            died_at = int(time.time())
            hooks.answer = lambda _n, headers, _b: (
                (204, {}) if int(headers["webhook-timestamp"]) > died_at else (503, {})
            )
            port = free_port()
            second = ServerProcess(store, port, serve_argv(store, port))
            second.start()
            try:
                await hooks.wait_for(lambda _got: {r.msg_id for r in hooks.accepted()} == events)
                async with httpx.AsyncClient(timeout=60) as http:
                    deliveries = await settled_deliveries(http, second.url.removesuffix("/mcp"))
            finally:
                second.stop()
        finally:
            first.stop()
    accepted = hooks.accepted()
    assert sorted(r.msg_id for r in accepted) == sorted(events)  # each once
    for request in accepted:
        Webhook(secret).verify(request.body, request.headers)
    assert {d["state"] for d in deliveries} == {"delivered"}
    assert all(d["attempts"] >= 2 for d in deliveries)  # 503s before, 204 after the restart
