"""Ctrl-C on the servers longcall runs (``serve``, ``gateway``, ``console``) while a
client holds a connection open, as a user stops them: exit 130, one line saying what
stopped and what its store keeps, and no traceback; the tasks a server was running are
handed back to its store."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.e2e.conftest import serve

from longcall.cli.common import ExitCode
from longcall.ledger import open_ledger
from longcall.server import build_reference_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EVENT_STREAM = {"accept": "text/event-stream"}
"""A 2025-11-25 status stream: a GET the server answers with a stream that never ends."""


async def started(*args: str) -> tuple[asyncio.subprocess.Process, str]:
    """``python -m longcall ARGS`` and the first line it prints on stdout."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "longcall", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )  # fmt: skip
    assert process.stdout is not None
    async with asyncio.timeout(LOADED_MACHINE_S):
        line = (await process.stdout.readline()).decode()
    assert line, (await process.communicate())[1].decode()
    return process, line.strip()


async def interrupted(process: asyncio.subprocess.Process) -> list[str]:
    """Ctrl-C, then the lines the process printed on stderr once it ended."""
    process.send_signal(signal.SIGINT)
    async with asyncio.timeout(LOADED_MACHINE_S):
        _out, err = await process.communicate()
    return err.decode().splitlines()


LOGGED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|WARNING) ")
"""A log line of the serving process (its start, its requests): not what a stop says."""


def spoken(lines: list[str]) -> list[str]:
    """The lines of stderr a stop added: not blank, not the process's log lines."""
    return [line for line in lines if line.strip() and not LOGGED.match(line)]


@contextlib.asynccontextmanager
async def killed_if_left(process: asyncio.subprocess.Process) -> AsyncIterator[None]:
    """The process is gone at the end, whatever the test asserted before."""
    try:
        yield
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def assert_stopped_in_one_line(
    process: asyncio.subprocess.Process, lines: list[str], said: str
) -> None:
    """Exit 130, no traceback or error log, and ``said`` the only line the stop added."""
    assert process.returncode == ExitCode.INTERRUPTED, lines
    assert not any("Traceback" in line or "ERROR" in line for line in lines), lines
    assert spoken(lines) == [said]


@pytest.fixture
async def open_stream() -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client whose streams the test opens and leaves open."""
    async with httpx.AsyncClient(timeout=LOADED_MACHINE_S) as client:
        yield client


async def test_ctrl_c_on_serve_with_a_stream_open_is_one_line(
    tmp_path: Path, open_stream: httpx.AsyncClient
) -> None:
    """A running task and an open status stream: Ctrl-C ends the stream, exits 130 and
    says in one line that the running task stays in the store (its lease handed back)."""
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    server, announced = await started("serve", "--port", "0", "--store", store)
    url = announced.split(" at ", 1)[1].split(" ", 1)[0]
    async with killed_if_left(server):
        call = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "longcall", "call", url, "sleep_report",
            "--args", '{"seconds": 600, "rows": 1}', "--node", "n1", "--ledger", ledger,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(LOADED_MACHINE_S):
            _out, err = await call.communicate()
        assert call.returncode == ExitCode.OK, err.decode()  # created; it goes on
        async with open_stream.stream("GET", url, headers=EVENT_STREAM) as stream:
            assert stream.status_code == 200
            lines = await interrupted(server)
            async with asyncio.timeout(LOADED_MACHINE_S):
                with pytest.raises(httpx.RemoteProtocolError):
                    async for _chunk in stream.aiter_bytes():
                        pass
    said = (
        f"longcall: stopped serving {url}; its running task stays in the task store, for"
        " the next server on it (or one sharing it) to take over: an idempotent tool runs"
        " again, any other ends failed"
    )
    assert_stopped_in_one_line(server, lines, said)


async def test_ctrl_c_on_the_gateway_with_a_stream_open_is_one_line(
    tmp_path: Path, open_stream: httpx.AsyncClient
) -> None:
    """The gateway shares the stop: an open stream ends, exit 130, one line, no traceback."""
    upstream = build_reference_server(store=f"sqlite:///{tmp_path / 'upstream.db'}")
    async with serve(upstream.asgi_app()) as upstream_url:
        servers = tmp_path / "servers.toml"
        servers.write_text(f'[servers.up]\nurl = "{upstream_url}"\n')
        gateway, announced = await started(
            "gateway", "--servers", str(servers), "--port", "0",
            "--ledger", f"sqlite:///{tmp_path / 'ledger.db'}",
            "--task-store", f"sqlite:///{tmp_path / 'gateway-tasks.db'}",
        )  # fmt: skip
        url = announced.split(" at ", 1)[1].split(" ", 1)[0]
        async with (
            killed_if_left(gateway),
            open_stream.stream("GET", url, headers=EVENT_STREAM) as stream,
        ):
            assert stream.status_code == 200
            lines = await interrupted(gateway)
    said = f"longcall: stopped the gateway at {url}; no host call was in flight"
    assert_stopped_in_one_line(gateway, lines, said)


async def test_ctrl_c_on_the_console_with_a_browser_connected_is_one_line(
    tmp_path: Path, open_stream: httpx.AsyncClient
) -> None:
    """The console with a kept-alive browser connection: exit 130 and one line naming the
    address (never its token again), no traceback."""
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    open_ledger(ledger).close()
    console, url = await started("console", "--ledger", ledger)
    address, _, token = url.partition("?")
    async with killed_if_left(console):
        page = await open_stream.get(url, follow_redirects=True)
        assert page.status_code == 200
        lines = await interrupted(console)
    said = f"longcall: stopped the console at {address}; the ledger is as it was"
    assert_stopped_in_one_line(console, lines, said)
    assert token not in "\n".join(lines)
