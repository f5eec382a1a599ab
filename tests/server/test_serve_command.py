"""``longcall serve`` as a user runs it: the address it announces is the one it serves."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

from conftest import ModernClient

pytestmark = pytest.mark.anyio

STARTUP_LIMIT_S = 20.0
POLL_STEP_S = 0.05


def start(argv: list[str], stdout: Path) -> subprocess.Popen[bytes]:
    """A child process writing its stdout to ``stdout``."""
    with stdout.open("wb") as out:
        return subprocess.Popen(
            argv, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=out, stderr=subprocess.DEVNULL
        )


async def announced_url(process: subprocess.Popen[bytes], stdout: Path) -> str:
    """The MCP URL ``longcall serve`` prints on stdout (bounded poll of another process)."""
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while True:
        text = await anyio.Path(stdout).read_text()
        found = re.search(r"serving MCP at (http://\S+/mcp)", text)
        if found:
            return found.group(1)
        assert process.poll() is None, text
        assert time.monotonic() < deadline, "no URL announced"
        await anyio.sleep(POLL_STEP_S)


async def test_port_zero_announces_the_port_it_chose(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """``--port 0`` binds a free port and prints that port (not 0); the server answers
    MCP there."""
    stdout = tmp_path / "stdout.txt"
    store = f"sqlite:///{tmp_path / 'serve.db'}"
    argv = [sys.executable, "-m", "longcall", "serve", "--store", store, "--port", "0"]
    process = start(argv, stdout)
    try:
        url = await announced_url(process, stdout)
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        assert port != 0
        client = ModernClient(http, url)
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            try:
                discovered = await client.result("server/discover")
                break
            except httpx.TransportError:
                assert process.poll() is None, "server exited"
                assert time.monotonic() < deadline, "server did not answer"
                await anyio.sleep(POLL_STEP_S)
        assert discovered
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=20)
