"""The webhook outbox survives SIGKILL: a real ``longcall serve`` killed while its
deliveries are being retried, restarted on the same store, delivers every event once."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from standardwebhooks import Webhook
from test_restart import ServerProcess, free_port
from tests.webhook_peer import HookReceiver

from conftest import ModernClient

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKS = 3


def serve_argv(store: str, port: int) -> list[str]:
    return [
        "-m", "longcall", "serve", "--store", store, "--port", str(port),
        "--webhooks", "--webhook-allow-loopback",
        "--webhook-retry-base", "0.1", "--webhook-retry-max", "0.3", "--webhook-timeout", "2",
    ]  # fmt: skip


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
                for _ in range(TASKS):
                    await mcp.create("sleep_report", {"seconds": 0, "rows": 1})
                # Every event attempted, and some of them more than once: mid-retry.
                refused = await hooks.wait_for(
                    lambda got: len({r.msg_id for r in got}) == 2 * TASKS and len(got) >= 4 * TASKS
                )
                first.kill()
            events = {r.msg_id for r in refused}
            hooks.answer = lambda _n, _h, _b: (204, {})
            port = free_port()
            second = ServerProcess(store, port, serve_argv(store, port))
            second.start()
            try:
                await hooks.wait_for(lambda _got: {r.msg_id for r in hooks.accepted()} == events)
                async with httpx.AsyncClient(timeout=60) as http:
                    listed = await http.get(
                        second.url.removesuffix("/mcp") + "/webhooks/deliveries"
                    )
            finally:
                second.stop()
        finally:
            first.stop()
    accepted = hooks.accepted()
    assert sorted(r.msg_id for r in accepted) == sorted(events)  # each once
    for request in accepted:
        Webhook(secret).verify(request.body, request.headers)
    deliveries = listed.json()["deliveries"]
    assert {d["state"] for d in deliveries} == {"delivered"}
    assert all(d["attempts"] >= 2 for d in deliveries)  # 503s before, 204 after the restart
