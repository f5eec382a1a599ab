"""``longcall worker --webhook-listen``: the receiver served by a worker process on
127.0.0.1, its key from the environment, and its refusals at start."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from longcall.adapters.webhooks import new_hmac_key, sign
from longcall.cli.common import ExitCode

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TIMEOUT_S = 120.0
KEY = new_hmac_key(bytes(range(32)))


def env_for(tmp_path: Path, secret: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGCALL_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    if secret is not None:
        env["LONGCALL_WEBHOOK_SECRET"] = secret
    return env


async def start_worker(
    tmp_path: Path, secret: str | None, listen: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "longcall", "worker", "--ledger",
        f"sqlite:///{tmp_path / 'ledger.db'}", "--webhook-listen", listen,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env_for(tmp_path, secret),
    )  # fmt: skip


async def test_the_worker_serves_the_receiver_with_the_key_from_the_environment(
    tmp_path: Path,
) -> None:
    """A signed delivery is answered 202, a forged one 401, by the running worker."""
    worker = await start_worker(tmp_path, KEY.encoded(), "127.0.0.1:0")
    assert worker.stderr is not None
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                line = (await worker.stderr.readline()).decode()
                assert line, "the worker ended before serving webhooks"
                found = re.search(r"webhooks at (http://\S+/webhooks)", line)
                if found:
                    url = found.group(1)
                    break
            body = json.dumps({"type": "task.status", "data": {"taskId": "t-9"}}).encode()
            headers = sign([KEY], msg_id="evt_1", timestamp=int(time.time()), body=body)
            forged = sign(
                [new_hmac_key(b"\x01" * 32)], msg_id="evt_2", timestamp=int(time.time()), body=body
            )
            async with httpx.AsyncClient(timeout=10) as http:
                assert (await http.post(url, headers=headers, content=body)).status_code == 202
                assert (await http.post(url, headers=forged, content=body)).status_code == 401
                # The same id again: 200 (the sender may retry a lost 2xx), nothing woken.
                assert (await http.post(url, headers=headers, content=body)).status_code == 200
    finally:
        if worker.returncode is None:
            worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(TIMEOUT_S):
            assert await worker.wait() == ExitCode.OK


@pytest.mark.parametrize(
    ("secret", "listen", "says"),
    [
        (None, "127.0.0.1:0", "LONGCALL_WEBHOOK_SECRET"),
        ("whsec_short", "127.0.0.1:0", "whsec_"),
        (KEY.encoded(), "nowhere", "HOST:PORT"),
    ],
)
async def test_the_worker_refuses_to_start_without_a_usable_key_or_address(
    tmp_path: Path, secret: str | None, listen: str, says: str
) -> None:
    """No key, an unreadable key or no HOST:PORT: the worker stops at once and says why."""
    worker = await start_worker(tmp_path, secret, listen)
    async with asyncio.timeout(TIMEOUT_S):
        _out, err = await worker.communicate()
    assert worker.returncode not in (None, 0)
    assert says in err.decode()
    if secret is not None and secret != KEY.encoded():
        assert secret.removeprefix("whsec_") not in err.decode()


async def test_call_wait_serves_the_receiver_while_it_waits(tmp_path: Path) -> None:
    """``longcall call --wait --webhook-listen``: while the call waits, its receiver
    answers a signed delivery 202 and a forged one 401; the call ends accepted."""
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    env = env_for(tmp_path, KEY.encoded())
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "longcall", "serve", "--store", store, "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env,
    )  # fmt: skip
    assert server.stdout is not None
    call = None
    try:
        async with asyncio.timeout(TIMEOUT_S):
            line = (await server.stdout.readline()).decode()
        found = re.search(r"serving MCP at (http://\S+/mcp)", line)
        assert found, line
        call = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "longcall", "call", found.group(1), "sleep_report",
            "--args", '{"seconds": 3, "rows": 1}', "--wait", "--quiet",
            "--ledger", f"sqlite:///{tmp_path / 'ledger.db'}",
            "--webhook-listen", "127.0.0.1:0",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        assert call.stderr is not None
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                text = (await call.stderr.readline()).decode()
                assert text, "the call ended before serving webhooks"
                served = re.search(r"webhooks at (http://\S+/webhooks)", text)
                if served:
                    break
        body = json.dumps({"type": "task.status", "data": {"taskId": "t-1"}}).encode()
        now = int(time.time())
        signed = sign([KEY], msg_id="evt_call", timestamp=now, body=body)
        forged = sign([new_hmac_key(b"\x02" * 32)], msg_id="evt_f", timestamp=now, body=body)
        async with httpx.AsyncClient(timeout=10) as http:
            assert (
                await http.post(served.group(1), headers=signed, content=body)
            ).status_code == 202
            assert (
                await http.post(served.group(1), headers=forged, content=body)
            ).status_code == 401
        async with asyncio.timeout(TIMEOUT_S):
            await call.communicate()
        assert call.returncode == ExitCode.OK
    finally:
        for process in (call, server):
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()


async def test_call_webhook_listen_needs_wait(tmp_path: Path) -> None:
    call = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "longcall", "call", "http://127.0.0.1:9/mcp", "echo",
        "--webhook-listen", "127.0.0.1:0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env_for(tmp_path, KEY.encoded()),
    )  # fmt: skip
    async with asyncio.timeout(TIMEOUT_S):
        _out, err = await call.communicate()
    assert call.returncode == 2
    assert "--wait" in err.decode()
